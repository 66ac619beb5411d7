"""Barge-in on one running server, 20 times during generation and 20 times after it.

Rule 1 (barge-in): the user's speech stops the response at once: `output_audio_buffer.cleared`
right after `speech_started`, `response.done` cancelled/turn_detected if it was generating.
Rule 2 (fencing): no delta of an interrupted response after its clear.
Rule 3: every `response.created` gets exactly one `response.done`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from orchestrator.service.serve import BackgroundServer
from tests.e2e.realtime_client import ENDED, RawSession, flite_speech, raw_session, silence

ROUNDS = 20


LONG_ANSWERS = "Answer every message with a long story of at least six sentences."


def _configure(session: RawSession, max_tokens: int, instructions: str = "") -> None:
    session.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "instructions": instructions,
                "output_modalities": ["audio"],
                "max_output_tokens": max_tokens,
                "audio": {
                    "input": {
                        "turn_detection": {
                            "type": "server_vad",
                            "silence_duration_ms": 400,
                            "prefix_padding_ms": 200,
                        }
                    }
                },
            },
        }
    )
    session.until("session.updated", timeout_s=10)


def _acknowledging(session: RawSession, rid: str) -> None:
    """Be a client that acknowledges playback (rule 5 as written; docs/protocol.md "History
    without acknowledgements"), having played nothing yet: from now on a reply's audio is
    pending until acknowledged, whatever the time, so every barge-in below has audio to clear."""
    session.send({"type": "playback.ack", "response_id": rid, "played_ms": 0})
    session.until("playback.acknowledged", timeout_s=10)


def _check_fencing_and_terminals(events: list[dict[str, Any]], interrupted: list[str]) -> None:
    created = [e["response"]["id"] for e in events if e["type"] == "response.created"]
    done = [e["response"]["id"] for e in events if e["type"] == "response.done"]
    for rid in created:
        assert done.count(rid) <= 1, f"rule 3: {rid} has {done.count(rid)} response.done"
    for rid in interrupted:
        assert done.count(rid) == 1, f"rule 3: interrupted {rid} has no response.done"
        cleared_at = next(
            i
            for i, e in enumerate(events)
            if e["type"] == "output_audio_buffer.cleared" and e["response_id"] == rid
        )
        late = [
            e["type"]
            for e in events[cleared_at + 1 :]
            if e.get("response_id") == rid and e["type"].endswith(".delta")
        ]
        assert not late, f"rule 2: {len(late)} deltas of {rid} after its clear: {late[:3]}"


def _assert_stops_at_once(events: list[dict[str, Any]], rid: str) -> None:
    started = max(
        i for i, e in enumerate(events) if e["type"] == "input_audio_buffer.speech_started"
    )
    cleared = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "output_audio_buffer.cleared" and e["response_id"] == rid
    )
    between = [e["type"] for e in events[started + 1 : cleared]]
    # The clear is decided with the speech start itself: nothing of the old answer in between.
    assert cleared > started and not any(t.endswith(".delta") for t in between), between


def test_twenty_barge_ins_during_generation_each_stop_at_once(
    realtime_server: BackgroundServer,
) -> None:
    question = flite_speech("Tell me a long story about a dragon and a knight.")
    interruption = np.concatenate(
        [
            flite_speech("Tell me a long story about a dragon and a knight.", voice="kal"),
            silence(0.6),
        ]
    )
    interrupted: list[str] = []
    live = attempts = 0
    with raw_session(realtime_server.url) as session:
        _configure(session, max_tokens=160, instructions=LONG_ANSWERS)
        session.append(np.concatenate([silence(0.3), question, silence(0.6)]))
        rid = session.until("response.created")["response"]["id"]
        _acknowledging(session, rid)
        # Half the rounds speak once the answer's audio flows, half as soon as the response
        # starts. A short answer can finish before the interruption is heard; such a round
        # counts as "after generation" (covered below), so run until 20 were interrupted live.
        while live < ROUNDS and attempts < ROUNDS + 10:
            attempts += 1
            if attempts % 2:
                session.until("response.output_audio.delta", response_id=rid)
            session.append(interruption)
            cleared = session.until("output_audio_buffer.cleared", timeout_s=30)
            assert cleared["response_id"] == rid
            _assert_stops_at_once(session.events, rid)
            interrupted.append(rid)
            nxt = session.until("response.created")
            terminal = [e for e in session.of("response.done") if e["response"]["id"] == rid]
            assert len(terminal) == 1, f"rule 3: {rid}"
            status = terminal[0]["response"]
            if status["status"] == "cancelled":
                live += 1
                assert status["status_details"]["reason"] == "turn_detected"
            rid = nxt["response"]["id"]
        session.until("response.done", timeout_s=90)
        session.drain()
        assert live == ROUNDS, f"only {live} of {attempts} barge-ins came while generating"
        _check_fencing_and_terminals(session.events, interrupted)
        session.send({"type": "conversation.context.retrieve"})
        context = session.until("conversation.context", timeout_s=10)
    replies = [i for i in context["items"] if i["role"] == "assistant"]
    # Nothing was acknowledged as played: every interrupted reply is an empty boundary.
    assert replies and all(not r["content"] for r in replies[:-1]), replies


def test_twenty_barge_ins_after_generation_with_audio_unacknowledged(
    realtime_server: BackgroundServer,
) -> None:
    question = flite_speech("What is the capital of France?")
    interruption = np.concatenate(
        [flite_speech("And what about Spain?", voice="kal"), silence(0.6)]
    )
    interrupted: list[str] = []
    with raw_session(realtime_server.url) as session:
        _configure(session, max_tokens=16)
        session.append(np.concatenate([silence(0.3), question, silence(0.6)]))
        rid = session.until("response.created")["response"]["id"]
        _acknowledging(session, rid)
        for _ in range(ROUNDS):
            done = session.until("response.done", timeout_s=90)
            assert done["response"]["id"] == rid
            assert done["response"]["status"] in ENDED, done["response"]
            # The client has not acknowledged the audio: it is still "playing".
            session.append(interruption)
            cleared = session.until("output_audio_buffer.cleared", timeout_s=30)
            assert cleared["response_id"] == rid
            _assert_stops_at_once(session.events, rid)
            interrupted.append(rid)
            rid = session.until("response.created")["response"]["id"]
        session.until("response.done", timeout_s=90)
        session.drain()
        _check_fencing_and_terminals(session.events, interrupted)
        # A response that ended on its own already had its terminal: the barge-in adds none.
        for old in interrupted:
            statuses = [
                e["response"]["status"]
                for e in session.of("response.done")
                if e["response"]["id"] == old
            ]
            assert len(statuses) == 1 and statuses[0] in ENDED, (old, statuses)
