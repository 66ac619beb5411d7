"""Tolerant input, nothing lost, end to end on the real server (docs/protocol.md rule 7).

- A message over `max_message_bytes` (15 MiB) and up to at least twice it is answered with an
  `error` `message_too_large` carrying its `event_id`, text or binary, and the same session
  then goes on answering: nothing it held is lost.
- Only a message beyond the transport limit (twice ours plus a margin) closes the socket, with
  1009 and a reason; that limit counts UTF-8 bytes, not characters, and nothing of a message
  beyond it is kept in memory. Other sessions and new ones are not affected.
- `playback.ack` (the extension) takes fractional `played_ms` / `committed_ms`, floored, against
  a real response: a client counting samples sends `samples / 24` and its reply enters the
  history once the ACK covers all of its audio.

Big messages travel over loopback uncompressed: each test takes well under a second of its
own (the ACK test waits for one short response).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from wsproto.events import BytesMessage, TextMessage

from orchestrator.service.serve import BackgroundServer
from orchestrator.service.ws_transport import _BoundedBuffer, hyper_ws, transport_max_message_bytes
from tests.e2e.realtime_client import ENDED

MiB = 1024 * 1024


@contextmanager
def _session(server: BackgroundServer) -> Iterator[ClientConnection]:
    # No compression: the bytes on the wire are the message's, as a big client's would be.
    with connect(server.url, max_size=None, compression=None, open_timeout=10) as ws:
        assert _recv(ws)["type"] == "session.created"
        yield ws


def _recv(ws: ClientConnection, timeout_s: float = 10.0) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(ws.recv(timeout=timeout_s))
    return event


def _until(ws: ClientConnection, kind: str, timeout_s: float = 30.0) -> dict[str, Any]:
    while True:
        event = _recv(ws, timeout_s)
        if event["type"] == kind:
            return event


def _send(ws: ClientConnection, event: dict[str, Any]) -> None:
    ws.send(json.dumps(event))


def _append_of(size: int, event_id: str) -> str:
    """An `input_audio_buffer.append` of exactly `size` bytes (valid base64 silence)."""
    head = f'{{"event_id":"{event_id}","type":"input_audio_buffer.append","audio":"'
    tail = '"}'
    body = size - len(head) - len(tail)
    # Whole base64 quanta, padded with JSON whitespace: only the size is wrong.
    quanta = body - body % 4
    return head + "A" * quanta + tail + " " * (body - quanta)


def _still_answers(ws: ClientConnection, item_id: str) -> None:
    """The session goes on: an item created now can be retrieved, whole."""
    text = f"still here ({item_id})"
    _send(
        ws,
        {
            "type": "conversation.item.create",
            "item": {
                "id": item_id,
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
        },
    )
    _send(ws, {"type": "conversation.item.retrieve", "item_id": item_id, "event_id": "ret"})
    got = _until(ws, "conversation.item.retrieved")
    assert got["item"]["id"] == item_id
    assert got["item"]["content"][0]["text"] == text


def _expect_too_large(ws: ClientConnection, event_id: str | None) -> None:
    event = _recv(ws)
    assert event["type"] == "error", event
    assert event["error"]["code"] == "message_too_large"
    assert event["error"]["type"] == "invalid_request_error"
    assert event["error"]["event_id"] == event_id


def _expect_1009(ws: ClientConnection) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            _recv(ws)
    rcvd = closed.value.rcvd
    assert rcvd is not None, "the server sent no close frame"
    return rcvd.code, rcvd.reason


def test_rule7_message_up_to_twice_the_limit_is_message_too_large_and_session_goes_on(
    realtime_server: BackgroundServer,
) -> None:
    """Rule 7: 20 MiB and exactly twice the 15 MiB limit (30 MiB) get `message_too_large`
    with their event_id; what the session held before is still there after."""
    limit = realtime_server.config.max_message_bytes
    assert limit == 15 * MiB
    with _session(realtime_server) as ws:
        _still_answers(ws, "item_before")
        for size, event_id in ((20 * MiB, "big_20"), (2 * limit, "big_2x")):
            ws.send(_append_of(size, event_id))
            _expect_too_large(ws, event_id)
        _still_answers(ws, "item_after")
        _send(ws, {"type": "conversation.item.retrieve", "item_id": "item_before"})
        assert _until(ws, "conversation.item.retrieved")["item"]["id"] == "item_before"


def test_rule7_oversize_binary_and_non_utf8_text_are_answered_too(
    realtime_server: BackgroundServer,
) -> None:
    """Rule 7: a binary message over the limit, and a text one whose UTF-8 bytes (not its
    characters) are over it, are answered like any other, and the session goes on."""
    with _session(realtime_server) as ws:
        ws.send(_append_of(20 * MiB, "big_bin").encode())
        _expect_too_large(ws, "big_bin")
        # 10 Mi characters, 20 MiB of UTF-8: over our limit, under the transport's.
        instructions = "é" * (10 * MiB)
        update = {"type": "session.update", "event_id": "big_utf8", "session": {}}
        update["session"] = {"instructions": instructions}
        ws.send(json.dumps(update, ensure_ascii=False))  # raw UTF-8, not \u escapes
        _expect_too_large(ws, "big_utf8")
        _still_answers(ws, "item_after_binary")


def test_rule7_message_beyond_the_transport_limit_closes_1009_with_a_reason(
    realtime_server: BackgroundServer,
) -> None:
    """Rule 7: beyond the transport limit (> 2x ours) the socket is closed with 1009 (message
    too big) and a reason naming the limit, also when the client goes on sending long after
    the close (its close reply then shares a read with the message's end: hypercorn alone
    never read it and hung); other sessions and new ones go on."""
    transport = transport_max_message_bytes(realtime_server.config)
    assert transport >= 2 * realtime_server.config.max_message_bytes + MiB
    with _session(realtime_server) as bystander, _session(realtime_server) as ws:
        try:
            ws.send("x" * (2 * transport))
        except ConnectionClosed:
            pass  # the close may arrive while the message is still being written
        code, reason = _expect_1009(ws)
        assert code == 1009
        assert "transport limit" in reason and str(transport) in reason
        _still_answers(bystander, "item_bystander")
    with _session(realtime_server) as fresh:
        _still_answers(fresh, "item_fresh")


def test_rule7_transport_limit_counts_utf8_bytes_not_characters(
    realtime_server: BackgroundServer,
) -> None:
    """Rule 7: a text message under the transport limit in characters but over it in UTF-8
    bytes is over it (what the limit bounds is memory, and binary counts bytes too)."""
    transport = transport_max_message_bytes(realtime_server.config)
    chars = transport // 2 + 1  # two bytes each in UTF-8
    assert chars < transport < 2 * chars
    with _session(realtime_server) as ws:
        try:
            ws.send("é" * chars)
        except ConnectionClosed:
            pass
        code, _ = _expect_1009(ws)
        assert code == 1009


def test_playback_ack_fractional_ms_are_floored_against_a_real_response(
    realtime_server: BackgroundServer,
) -> None:
    """playback.ack extension (rule 5 with it): `played_ms` / `committed_ms` counted as
    `samples / 24` are floored; an ACK covering all the audio puts the reply into history."""
    with _session(realtime_server) as ws:
        _send(
            ws,
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "output_modalities": ["audio"],
                    "max_output_tokens": 8,
                    "audio": {"input": {"turn_detection": None}},
                },
            },
        )
        _until(ws, "session.updated")
        _send(
            ws,
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Say hello."}],
                },
            },
        )
        _send(ws, {"type": "response.create"})
        rid = _until(ws, "response.created")["response"]["id"]
        samples = 0
        while True:
            event = _recv(ws, 60)
            if event["type"] == "response.output_audio.delta":
                samples += len(base64.b64decode(event["delta"])) // 2
            elif event["type"] == "response.done":
                assert event["response"]["status"] in ENDED, event
                break
        assert samples > 48, "the response produced audio"
        # About half of it, ending half-way through a ms (k + 0.5 ms).
        part = (samples // 2) // 24 * 24 + 12  # x.5 ms
        _send(ws, {"type": "playback.ack", "response_id": rid, "played_ms": part / 24})
        ack = _until(ws, "playback.acknowledged")
        assert ack["played_ms"] == part // 24 and isinstance(ack["played_ms"], int)
        assert ack["history_committed"] is False
        # All of it, as a sample-counting client reports it.
        _send(
            ws,
            {
                "type": "playback.ack",
                "event_id": "ack_all",
                "response_id": rid,
                "played_ms": samples / 24,
                "committed_ms": samples / 24,
            },
        )
        ack = _until(ws, "playback.acknowledged")
        assert ack["history_committed"] is True
        assert ack["played_ms"] <= samples // 24
        # A negative cursor is still an error naming the field, and the session goes on.
        _send(
            ws, {"type": "playback.ack", "event_id": "neg", "response_id": rid, "played_ms": -0.5}
        )
        err = _until(ws, "error")["error"]
        assert (err["code"], err["param"], err["event_id"]) == ("invalid_value", "played_ms", "neg")
        _send(ws, {"type": "conversation.context.retrieve"})
        context = _until(ws, "conversation.context")
        roles = [item["role"] for item in context["items"]]
        assert roles[-1] == "assistant"
        assert context["items"][-1]["content"], "the heard reply is in the model's history"


def test_rule7_transport_buffer_keeps_nothing_past_the_limit() -> None:
    """Rule 7's transport limit bounds memory: once a message is over it, what was buffered
    is freed and the rest of that message is dropped as it arrives (hypercorn alone keeps
    appending it), so a client streaming a huge message costs at most the limit."""
    buffer = _BoundedBuffer(10)
    buffer.extend(TextMessage(data="é" * 5, message_finished=False))  # 10 bytes: kept
    with pytest.raises(hyper_ws.FrameTooLargeError):
        # 6 characters, 12 bytes: over (hypercorn's own buffer counts characters)
        buffer.extend(TextMessage(data="é", message_finished=False))
    assert buffer.value is None
    for _ in range(3):
        with pytest.raises(hyper_ws.FrameTooLargeError):
            buffer.extend(TextMessage(data="x" * 1000, message_finished=False))
        assert buffer.value is None
    buffer.clear()
    buffer.extend(BytesMessage(data=b"0123456789", message_finished=True))  # exactly the limit
    assert buffer.to_message()["bytes"] == b"0123456789"
