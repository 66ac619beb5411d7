"""Clear addressing, history after ACKs, and a client that leaves mid-response, end to end.

Rule 4: a clear naming an older response is answered but never interrupts the newer one.
Rules 5/6: the history holds what was heard, pruned by whole turns, with empty boundaries.
A client that disconnects mid-response: its Triton stream is cancelled (the models record
the stop on the cancel board).
"""

from __future__ import annotations

import base64
import time
from typing import Any

from orchestrator.service.serve import BackgroundServer
from orchestrator.service.sessions.actor import pipeline_request_id
from orchestrator.triton import TritonServer
from tests.e2e.realtime_client import ENDED, RawSession, b64, flite_speech, pcm16, raw_session

QUESTIONS = [
    "What is the capital of France?",
    "Name a large animal.",
    "What color is the sky?",
    "Say a number.",
    "What do cats eat?",
    "Name a fruit.",
]


def _manual(session: RawSession, max_tokens: int = 24) -> None:
    session.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                "max_output_tokens": max_tokens,
                "audio": {"input": {"turn_detection": None}},
            },
        }
    )
    session.until("session.updated", timeout_s=10)


def _ask_text(session: RawSession, text: str) -> str:
    session.send(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
        }
    )
    session.send({"type": "response.create"})
    created: dict[str, Any] = session.until("response.created", timeout_s=30)
    return str(created["response"]["id"])


def _ask_audio(session: RawSession, text: str) -> str:
    audio = pcm16(flite_speech(text))
    session.send(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_audio", "audio": b64(audio)}],
            },
        }
    )
    session.send({"type": "response.create"})
    created: dict[str, Any] = session.until("response.created", timeout_s=30)
    return str(created["response"]["id"])


def _audio_ms(session: RawSession, rid: str) -> int:
    total = sum(
        len(base64.b64decode(e["delta"]))
        for e in session.of("response.output_audio.delta")
        if e["response_id"] == rid
    )
    return total // 48


def test_rule4_a_clear_naming_an_older_response_never_interrupts_the_newer_one(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        _manual(session, max_tokens=48)
        old = _ask_text(session, "Say hello.")
        done = session.until("response.done", timeout_s=60)
        assert done["response"]["id"] == old
        new = _ask_text(session, "Tell me about the moon in three sentences.")
        session.until("response.output_audio.delta", response_id=new, timeout_s=60)
        session.send({"type": "output_audio_buffer.clear", "response_id": old})
        cleared = session.until("output_audio_buffer.cleared", timeout_s=10)
        assert cleared["response_id"] == old
        session.send({"type": "response.cancel", "response_id": old})
        final = session.until("response.done", timeout_s=90)
        assert final["response"]["id"] == new
        assert final["response"]["status"] in ENDED, final["response"]
        cleared_at = next(
            i for i, e in enumerate(session.events) if e["type"] == "output_audio_buffer.cleared"
        )
        later = [
            e
            for e in session.events[cleared_at:]
            if e["type"] == "response.output_audio.delta" and e["response_id"] == new
        ]
        assert later, "the newer response stopped streaming after a clear of the older one"
        assert not [
            e
            for e in session.events
            if e["type"] == "output_audio_buffer.cleared" and e.get("response_id") == new
        ]


def _context(session: RawSession) -> dict[str, Any]:
    session.send({"type": "conversation.context.retrieve"})
    return session.until("conversation.context", timeout_s=10)


def test_rules5_6_six_audio_turns_with_full_then_partial_acks(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        _manual(session)
        full_items = []
        for question in QUESTIONS:
            rid = _ask_audio(session, question)
            done = session.until("response.done", timeout_s=90)
            assert done["response"]["status"] in ENDED, done["response"]
            item_id = done["response"]["output"][0]["id"]
            session.send(
                {
                    "type": "playback.ack",
                    "response_id": rid,
                    "item_id": item_id,
                    "played_ms": _audio_ms(session, rid),
                }
            )
            ack = session.until("playback.acknowledged", timeout_s=10)
            assert ack["history_committed"] is True, ack
            full_items.append(item_id)
        context = _context(session)
        items = context["items"]
        # max_audio_inputs is 4: the two oldest turns went whole, reply included.
        assert context["audio_inputs"] == 4
        assert [i["id"] for i in items if i["role"] == "assistant"] == full_items[2:]
        assert [i["role"] for i in items] == ["user", "assistant"] * 4
        assert all(i["content"] for i in items if i["role"] == "assistant"), items

        partial_items = []
        for question in QUESTIONS[:3]:
            rid = _ask_audio(session, question)
            done = session.until("response.done", timeout_s=90)
            item_id = done["response"]["output"][0]["id"]
            heard = max(1, _audio_ms(session, rid) // 2)
            session.send({"type": "playback.ack", "response_id": rid, "played_ms": heard})
            ack = session.until("playback.acknowledged", timeout_s=10)
            assert ack["history_committed"] is False, ack
            partial_items.append(item_id)
        items = _context(session)["items"]
    assert [i["role"] for i in items] == ["user", "assistant"] * 4
    replies = {i["id"]: i for i in items if i["role"] == "assistant"}
    # Half-heard replies are empty boundaries in their own slots; the full ones keep content.
    for item_id in partial_items:
        assert replies[item_id]["content"] == [], replies[item_id]
    assert replies[full_items[-1]]["content"], "the last fully heard reply lost its content"


def test_a_client_that_disconnects_mid_response_has_its_triton_stream_cancelled(
    realtime_server: BackgroundServer, triton_server: TritonServer
) -> None:
    with raw_session(realtime_server.url) as session:
        _manual(session, max_tokens=200)
        rid = _ask_text(session, "Tell me a very long story about the sea.")
        session.until("response.output_audio.delta", response_id=rid, timeout_s=60)
    # The socket is closed here, mid-response.
    request_id = pipeline_request_id(realtime_server.config, rid)
    deadline = time.monotonic() + 10
    with triton_server.board() as board:
        # tts stops within a few ms; the llm at its next token (tens of ms).
        while time.monotonic() < deadline and "llm" not in {
            s.stage for s in board.stops(request_id)
        }:
            time.sleep(0.05)
        stages = {s.stage for s in board.stops(request_id)}
        assert board.cancelled(request_id), "the orchestrator never cancelled the stream"
    assert "llm" in stages, f"the llm did not stop for the cancel: stop records {stages}"
