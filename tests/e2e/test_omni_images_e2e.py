"""A bad image fails its response with a clear reason, and the session goes on (`qwen3_omni`).

The real realtime server on the session's real tritonserver (tiny random Qwen3-Omni weights),
over a real WebSocket. The protocol (rule 7) takes any inline base64 `data:image/...` URL; what
the bytes hold is the model's business: the Thinker decodes each image (PNG or JPEG only) and
refuses one it cannot read with an error that names the image.

Rules guarded:
- Rule 8: a model's error about a request ends that response `failed`, with the model's reason
  (here the Thinker's, naming the image) in `status_details.error`, and exactly one
  `response.done`; the endpoint is not marked down for it.
- The session stays usable: once the client deletes the bad image item, the next response on
  the same session completes with text and audio, and a good image in its place is seen (its
  placeholders are in the prompt the Thinker journaled).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from orchestrator.service.serve import BackgroundServer
from orchestrator.service.sessions.actor import pipeline_request_id
from orchestrator.triton import TritonServer
from tests.e2e.realtime_client import ENDED, RawSession, raw_session
from turntaker_models.omni.prompt_journal import read_entries


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, format="PNG")
    return out.getvalue()


def _url(raw: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(raw).decode()


BAD_IMAGES = {
    # Valid base64, so the protocol takes it; not an image at all.
    "not_an_image": (_url(b"this is plain text, not a picture"), "not a PNG or JPEG"),
    # A real PNG cut short: its header reads, its pixels do not.
    "truncated": (_url(_png(64, 48)[:60]), "truncated or corrupt"),
    # A GIF is an image, but not one the Thinker takes.
    "gif": (_url(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif"), "not a PNG or JPEG"),
}


def _item(session: RawSession, item: dict[str, Any]) -> None:
    since = len(session.events)
    session.send({"type": "conversation.item.create", "item": item})
    session.first("conversation.item.done", since, 10, lambda e: e["item"]["id"] == item["id"])


def _user(item_id: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "user", "content": [part]}


def _respond(session: RawSession) -> dict[str, Any]:
    since = len(session.events)
    session.send({"type": "response.create", "response": {"max_output_tokens": 6}})
    created = session.first("response.created", since, 30)
    rid = created["response"]["id"]
    done = session.first("response.done", since, 90, lambda e: e["response"]["id"] == rid)
    session.drain(0.3)
    terminals = [e for e in session.of("response.done") if e["response"]["id"] == rid]
    assert len(terminals) == 1, f"rule 3: response {rid} has {len(terminals)} terminals"
    response: dict[str, Any] = done["response"]
    return response


def _journal(triton_server: TritonServer, request_id: str) -> dict[str, Any]:
    path = triton_server.config.prompt_log
    assert isinstance(path, Path)
    mine = read_entries(path, request_id)
    assert len(mine) == 1, f"the Thinker journaled {len(mine)} prompts for {request_id}"
    entry: dict[str, Any] = mine[0]
    return entry


@pytest.mark.parametrize("case", sorted(BAD_IMAGES))
def test_bad_image_fails_its_response_and_the_session_goes_on(
    case: str, omni_realtime_server: BackgroundServer, triton_server: TritonServer
) -> None:
    url, reason = BAD_IMAGES[case]
    with raw_session(omni_realtime_server.url) as session:
        _item(session, _user("img_bad", {"type": "input_image", "image_url": url}))
        _item(session, _user("ask", {"type": "input_text", "text": "What is in the picture?"}))

        failed = _respond(session)
        assert failed["status"] == "failed", f"rule 8: a bad image must fail: {failed}"
        message = failed["status_details"]["error"]["message"]
        assert "image 0" in message and reason in message, (
            f"rule 8: the reason must name the image and what is wrong with it: {message!r}"
        )

        # The client removes the bad image and puts a good one in its place.
        since = len(session.events)
        session.send({"type": "conversation.item.delete", "item_id": "img_bad"})
        session.first("conversation.item.deleted", since, 10)
        _item(
            session,
            _user(
                "img_good",
                {"type": "input_image", "image_url": _url(_png(64, 48))},
            ),
        )
        answered = _respond(session)
        assert answered["status"] in ENDED, f"the session must go on after a bad image: {answered}"
        rid = answered["id"]
        audio = [e for e in session.of("response.output_audio.delta") if e["response_id"] == rid]
        text = "".join(
            e["delta"]
            for e in session.of("response.output_audio_transcript.delta")
            if e["response_id"] == rid
        )
        assert audio and text.strip(), "the next response must have audio and text"

        prompt = _journal(triton_server, pipeline_request_id(omni_realtime_server.config, rid))
        parts = [p for m in prompt["messages"] for p in m["parts"]]
        images = [p for p in parts if p["type"] == "image"]
        assert len(images) == 1 and images[0]["tokens"] > 0, (
            f"the good image must reach the Thinker as image placeholders: {prompt}"
        )
