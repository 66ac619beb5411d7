"""History holds only what was heard, to the word: docs/protocol.md rule 5, end to end.

Rule 5 (amended): text counts as heard only where all of the audio it accompanies was played;
a cut in the middle of a sentence keeps at most the words whose audio ends before the cut,
never the rest of that sentence. The real realtime server on the real `cascade` (SmolLM2,
greedy, so every session gets the same two-sentence answer and the same audio) says two
sentences; the client reads, from the audio deltas and the transcript deltas that follow
them, the cumulative ms at which each sentence's text has arrived, and cuts in the middle of
the second sentence three ways:
- a barge-in: server VAD hears speech while the answer's audio is still unacknowledged, after
  a playback ACK at the cut point;
- `output_audio_buffer.clear` after a playback ACK at the cut point;
- `conversation.item.truncate` with `audio_end_ms` at the cut point.
Each must leave in `conversation.context`'s assistant item exactly the first sentence plus the
words of the second whose chunks ended by the cut: never the whole second sentence.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from orchestrator.service.serve import BackgroundServer
from tests.e2e.realtime_client import ENDED, RawSession, flite_speech, raw_session, silence
from turntaker_models.cascade.llm import SentenceCutter

QUESTION = "Tell me about dogs."
MAX_TOKENS = 48
# pcm16 at 24 kHz: 48 bytes per ms; the server's ledger floors each chunk to whole ms, and so
# does this client.
BYTES_PER_MS = 48


@dataclass(frozen=True)
class Answer:
    rid: str
    item_id: str
    transcript: str
    # (cumulative ms of audio up to and including the chunk, the text that rode with it)
    marks: tuple[tuple[int, str], ...]
    audio_ms: int

    def ms_when_text_reaches(self, chars: int) -> int:
        """The cumulative ms of the chunk with which the transcript reached `chars` chars."""
        seen = 0
        for end_ms, text in self.marks:
            seen += len(text)
            if seen >= chars:
                return end_ms
        raise AssertionError(f"the transcript never reached {chars} characters")

    def heard_until(self, cut_ms: int) -> str:
        """What the client heard with its text, cut at `cut_ms`: the text of chunks ended by
        then (the client's own reading of the rule, from what it was sent)."""
        return "".join(text for end_ms, text in self.marks if end_ms <= cut_ms)


def _configure(session: RawSession, vad: bool) -> None:
    turn_detection: dict[str, Any] | None = (
        {
            "type": "server_vad",
            "silence_duration_ms": 400,
            "prefix_padding_ms": 200,
            # The interruption only interrupts: the test reads the history, not a new answer.
            "create_response": False,
            "interrupt_response": True,
        }
        if vad
        else None
    )
    session.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                "max_output_tokens": MAX_TOKENS,
                "audio": {"input": {"turn_detection": turn_detection}},
            },
        }
    )
    session.until("session.updated", timeout_s=10)


def _answer(session: RawSession) -> Answer:
    session.send(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": QUESTION}],
            },
        }
    )
    session.send({"type": "response.create"})
    rid = session.until("response.created", timeout_s=30)["response"]["id"]
    done = session.until("response.done", timeout_s=120)
    assert done["response"]["id"] == rid and done["response"]["status"] in ENDED, done
    item_id = done["response"]["output"][0]["id"]
    marks: list[tuple[int, str]] = []
    total_ms = 0
    for event in session.events:
        if event.get("response_id") != rid:
            continue
        if event["type"] == "response.output_audio.delta":
            total_ms += len(base64.b64decode(event["delta"])) // BYTES_PER_MS
            marks.append((total_ms, ""))
        elif event["type"] == "response.output_audio_transcript.delta":
            # The transcript delta follows the audio delta it rode with.
            assert marks, "transcript before any audio"
            end_ms, text = marks[-1]
            marks[-1] = (end_ms, text + event["delta"])
    transcript = "".join(text for _, text in marks)
    return Answer(rid, item_id, transcript, tuple(marks), total_ms)


@dataclass(frozen=True)
class Cut:
    first: str
    second: str
    cut_ms: int
    expected: str


def _middle_of_second_sentence(answer: Answer) -> Cut:
    cutter = SentenceCutter()
    sentences = [s for s in [*cutter.feed(answer.transcript), cutter.flush()] if s]
    assert len(sentences) >= 2, f"the answer has fewer than two sentences: {answer.transcript!r}"
    first, second = sentences[0], sentences[1]
    first_end = answer.transcript.index(first) + len(first)
    second_end = answer.transcript.index(second, first_end) + len(second)
    first_ms = answer.ms_when_text_reaches(first_end)
    second_ms = answer.ms_when_text_reaches(second_end)
    # The old pipeline sent a sentence's text with its FIRST chunk: then the second sentence's
    # end came right after the first's, not a whole sentence of audio later.
    assert second_ms - first_ms >= 500, (first_ms, second_ms, answer.marks)
    cut_ms = (first_ms + second_ms) // 2
    expected = answer.heard_until(cut_ms)
    assert expected.strip().startswith(first)
    assert second not in expected, "the client's own reading kept all of sentence 2"
    return Cut(first, second, cut_ms, expected)


def _assistant_transcript(session: RawSession, item_id: str) -> str:
    session.send({"type": "conversation.context.retrieve"})
    context = session.until("conversation.context", timeout_s=10)
    (item,) = [i for i in context["items"] if i["id"] == item_id]
    assert item["role"] == "assistant"
    assert item["content"], f"the reply became an empty boundary: {item}"
    return "".join(
        str(part.get("transcript") or part.get("text") or "") for part in item["content"]
    )


def _check(heard: str, cut: Cut) -> None:
    """Exactly sentence 1 plus the played words of sentence 2, never the rest of it."""
    assert heard.strip() == cut.expected.strip(), (heard, cut)
    assert heard.strip().startswith(cut.first)
    rest = heard.strip()[len(cut.first) :].split()
    assert rest == cut.second.split()[: len(rest)], "not a prefix of sentence 2's words"
    assert len(rest) < len(cut.second.split()), "the whole second sentence was kept"


def _ack(session: RawSession, answer: Answer, played_ms: int) -> None:
    session.send(
        {
            "type": "playback.ack",
            "response_id": answer.rid,
            "item_id": answer.item_id,
            "played_ms": played_ms,
        }
    )
    ack = session.until("playback.acknowledged", timeout_s=10)
    assert ack["played_ms"] == played_ms and ack["history_committed"] is False, ack


@pytest.mark.parametrize("how", ["barge_in", "clear", "truncate"])
def test_rule5_a_cut_in_the_middle_of_sentence_two_keeps_only_heard_words(
    realtime_server: BackgroundServer, how: str
) -> None:
    with raw_session(realtime_server.url) as session:
        _configure(session, vad=how == "barge_in")
        answer = _answer(session)
        cut = _middle_of_second_sentence(answer)
        if how == "barge_in":
            _ack(session, answer, cut.cut_ms)
            speech = flite_speech("Wait, stop please.", voice="kal")
            session.append(np.concatenate([silence(0.3), speech, silence(0.8)]))
            session.until("input_audio_buffer.speech_started", timeout_s=30)
            cleared = session.until("output_audio_buffer.cleared", timeout_s=30)
            assert cleared["response_id"] == answer.rid
        elif how == "clear":
            _ack(session, answer, cut.cut_ms)
            session.send({"type": "output_audio_buffer.clear", "response_id": answer.rid})
            cleared = session.until("output_audio_buffer.cleared", timeout_s=10)
            assert cleared["response_id"] == answer.rid
        else:
            session.send(
                {
                    "type": "conversation.item.truncate",
                    "item_id": answer.item_id,
                    "content_index": 0,
                    "audio_end_ms": cut.cut_ms,
                }
            )
            truncated = session.until("conversation.item.truncated", timeout_s=10)
            assert truncated["audio_end_ms"] == cut.cut_ms
        heard = _assistant_transcript(session, answer.item_id)
    print(f"{how}: cut at {cut.cut_ms} of {answer.audio_ms} ms; heard {heard!r}")
    _check(heard, cut)
