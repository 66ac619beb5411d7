"""The `tts` stage without a server (turntaker_models/cascade/tts.py): the worker's protocol, order,
cancels, calls and end reasons, and the rule that text rides with the chunk where its audio ends
(docs/protocol.md rule 5). flite's own part is test_speech.py's; held text test_held_text.py's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.triton.tts_client import llm_steps, loud_runs
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.cascade.tts import (
    SWEEP_S,
    Audio,
    Speaker,
    SpeechJob,
)
from turntaker_models.contract import (
    OUTPUT_SAMPLE_RATE,
    GenerationParameters,
    ToolCallDelta,
    encode,
)


class RecordingSink:
    def __init__(
        self, cancel_after: int | None = None, log: list[tuple[str, object]] | None = None
    ) -> None:
        self.events: list[tuple[str, object]] = [] if log is None else log
        self.done = threading.Event()
        self.cancel_after = cancel_after
        self.sent = 0

    def text(self, text: bytes, final: bool) -> None:
        self.events.append(("text", text))
        if final:
            self.final()

    def chunk(self, audio: Audio, text: bytes = b"") -> None:
        self.sent += 1
        self.events.append(("chunk", (audio, text)))

    def tool_call(self, call: bytes, final: bool) -> None:
        self.events.append(("call", call))
        if final:
            self.final()

    def end(self, reason: bytes, final: bool) -> None:
        self.events.append(("end", reason))
        if final:
            self.final()

    def error(self, message: str) -> None:
        # The error response carries the final flag: the request ends here.
        self.events.append(("error", message))
        self.done.set()

    def final(self) -> None:
        self.events.append(("final", None))
        self.done.set()

    def cancelled(self) -> bool:
        return self.cancel_after is not None and self.sent >= self.cancel_after

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


@pytest.fixture
def board(tmp_path: Path) -> Iterator[CancelBoard]:
    with CancelBoard.open(tmp_path / "board") as b:
        yield b


@pytest.fixture
def speaker(board: CancelBoard) -> Iterator[Speaker]:
    s = Speaker(board, workers=2)
    yield s
    s.close()


def _job(
    request_id: str,
    sentence: str,
    audio: bool = True,
    text: str = "",
    call: bytes = b"",
    end: bytes = b"",
) -> SpeechJob:
    params = encode(GenerationParameters(audio=audio))
    return SpeechJob(request_id, sentence.encode(), params, text.encode(), call, end)


def _speak_reply(speaker: Speaker, request_id: str, reply: str) -> list[tuple[str, object]]:
    """Feeds `reply` through the speaker the way `cascade` does; the shared event log."""
    log: list[tuple[str, object]] = []
    sinks = []
    for delta, sentence in llm_steps(reply):
        sink = RecordingSink(log=log)
        sinks.append(sink)
        speaker.submit(_job(request_id, sentence, text=delta), sink)
    assert all(sink.done.wait(20) for sink in sinks)
    return log


def _timeline(log: list[tuple[str, object]]) -> tuple[Audio, list[tuple[int, int, str]]]:
    """The audio, and (chunk index, cumulative end sample, text) of every text sent."""
    audio: list[Audio] = []
    texts: list[tuple[int, int, str]] = []
    total = 0
    for kind, payload in log:
        if kind == "chunk":
            assert isinstance(payload, tuple)
            samples, text = payload
            audio.append(samples)
            total += samples.shape[0]
            if text:
                texts.append((len(audio) - 1, total, text.decode()))
        elif kind == "text":
            assert isinstance(payload, bytes)
            texts.append((len(audio), total, payload.decode()))
    return np.concatenate(audio), texts


def test_reply_text_comes_out_whole_and_in_order(speaker: Speaker) -> None:
    """Rule: all text of a spoken reply comes out, in order, exactly as the llm wrote it."""
    reply = "Hi there, friend. It is 42 degrees!\nA caf\u00e9 \u2014 or a\u00a8b... Bye. "
    log = _speak_reply(speaker, "whole", reply)
    _, texts = _timeline(log)
    assert "".join(text for _, _, text in texts) == reply
    assert len(speaker.held) == 0, "a finished reply leaves nothing held"


def test_word_text_rides_on_the_chunk_where_its_audio_ends(speaker: Speaker) -> None:
    """Rule 5, the pipeline side: each word is sent with the chunk in which its audio ends,
    never an earlier one; the words of a clause are not all sent with its first chunk."""
    first, second = "Good morning to you, and to your whole family.", "The sun is out today."
    log = _speak_reply(speaker, "words", f"{first} {second}")
    audio, texts = _timeline(log)
    runs = loud_runs(audio)
    # The clause seam (comma) and the sentence seam are pauses flite makes: sound runs end
    # there, so the word before each must ride on a chunk ending at or after that sound.
    by_word = {text.strip(): (index, end) for index, end, text in texts if text.strip()}
    you_end, family_end = by_word["you,"][1], by_word["family."][1]
    run_ends = [end for _, end in runs]
    assert any(abs(end - you_end) < 0.25 * OUTPUT_SAMPLE_RATE for end in run_ends)
    assert you_end >= min(end for end in run_ends if end > 0.2 * OUTPUT_SAMPLE_RATE)
    first_sentence_sound = max(end for end in run_ends if end <= family_end + 1)
    assert family_end >= first_sentence_sound
    # Not per sentence: the first word left long before the sentence's audio ended, and no
    # word of the second sentence left before the first sentence was over.
    assert by_word["Good"][1] < 0.3 * family_end
    assert by_word["Good"][0] > 0, "a word longer than the first 50 ms chunk left with it"
    assert all(end > family_end for word, (_, end) in by_word.items() if word in second.split())


def test_text_that_does_not_line_up_rides_on_the_last_chunk(speaker: Speaker) -> None:
    """A caller whose text is not the sentence's words (not `cascade`): the text goes out
    whole with the sentence's last chunk, never before its audio ends."""
    sink = RecordingSink()
    speaker.submit(_job("t", "Hello there, my friend.", text=" my friend."), sink)
    assert sink.done.wait(10)
    kinds = sink.kinds()
    assert kinds[-1] == "final" and set(kinds[:-1]) == {"chunk"}
    texts = [payload[1] for kind, payload in sink.events if kind == "chunk"]  # type: ignore[index]
    assert texts[-1] == b" my friend." and not any(texts[:-1])


def test_unspeakable_sentence_text_goes_out_alone_after_the_audio(speaker: Speaker) -> None:
    log = _speak_reply(speaker, "dots", "Yes. ... ")
    assert "".join(t for _, _, t in _timeline(log)[1]) == "Yes. ... "
    last_chunk = max(i for i, (kind, _) in enumerate(log) if kind == "chunk")
    texts = [i for i, (kind, payload) in enumerate(log) if kind == "text" and payload]
    assert texts and min(texts) > last_chunk


def test_speaker_streams_then_final(speaker: Speaker) -> None:
    sink = RecordingSink()
    speaker.submit(_job("a", "Hello there, friend."), sink)
    assert sink.done.wait(10)
    kinds = sink.kinds()
    assert kinds[-1] == "final" and set(kinds[:-1]) == {"chunk"} and len(kinds) > 3


@pytest.mark.parametrize(("sentence", "audio"), [("", True), ("Hello.", False)])
def test_speaker_sends_only_final_for_no_audio(
    speaker: Speaker, sentence: str, audio: bool
) -> None:
    sink = RecordingSink()
    speaker.submit(_job("a", sentence, audio=audio), sink)
    assert sink.done.wait(10) and sink.kinds() == ["final"]


def test_speaker_one_final_error_and_lives_on(speaker: Speaker) -> None:
    bad = RecordingSink()
    speaker.submit(SpeechJob("a", b"Hello.", b"{oops"), bad)
    no_id = RecordingSink()
    speaker.submit(SpeechJob("", b"Hello.", b"{}"), no_id)
    assert bad.done.wait(10) and no_id.done.wait(10)
    assert bad.kinds() == ["error"] and "PARAMETERS" in str(bad.events[0][1])
    assert no_id.kinds() == ["error"] and "REQUEST_ID" in str(no_id.events[0][1])
    good = RecordingSink()
    speaker.submit(_job("a", "Hello."), good)
    assert good.done.wait(10) and good.kinds()[0] == "chunk"


def test_board_cancel_stops_and_records_once(speaker: Speaker, board: CancelBoard) -> None:
    board.cancel("gone")
    sinks = [RecordingSink() for _ in range(3)]
    for sink in sinks:
        speaker.submit(_job("gone", "This will never be spoken."), sink)
    for sink in sinks:
        assert sink.done.wait(10) and sink.kinds() == ["final"]
    assert [r.stage for r in board.stops("gone")] == ["tts"]


def test_stream_cancel_stops_mid_sentence_and_drops_held_text(
    speaker: Speaker, board: CancelBoard
) -> None:
    sentence = "One, two, three, four, five, six, seven, eight."
    sink = RecordingSink(cancel_after=2)
    speaker.submit(_job("b", sentence, text=sentence), sink)
    assert sink.done.wait(10)
    assert sink.kinds() == ["chunk", "chunk", "final"]
    assert [r.stage for r in board.stops("b")] == ["tts"]
    assert len(speaker.held) == 0, "a cancelled id keeps no text"


def test_a_cancel_between_sentences_drops_the_held_text_and_records_the_stop(
    speaker: Speaker, board: CancelBoard
) -> None:
    """Rule (cancellable): the voice ran ahead of the llm, so no sentence of the id is queued
    when the cancel lands, and none ever comes (the llm stops). An idle worker still drops the
    id's held text and records the stop, within a sweep or two of SWEEP_S."""
    first = RecordingSink()
    speaker.submit(_job("ahead", "Hello there.", text="Hello there."), first)
    assert first.done.wait(10)
    waiting = RecordingSink()
    speaker.submit(_job("ahead", "", text=" And then"), waiting)
    assert waiting.kinds() == ["final"] and len(speaker.held) == 1, "the next words are held"
    time.sleep(3 * SWEEP_S)
    assert len(speaker.held) == 1 and not board.stops("ahead"), "nothing stops without a cancel"
    board.cancel("ahead")
    deadline = time.monotonic() + 2.0
    while (len(speaker.held) or not board.stops("ahead")) and time.monotonic() < deadline:
        time.sleep(SWEEP_S / 5)
    assert len(speaker.held) == 0, "a cancelled id keeps no text"
    assert [r.stage for r in board.stops("ahead")] == ["tts"]


def test_a_busy_worker_still_sweeps_a_cancelled_id_s_held_text(board: CancelBoard) -> None:
    """Rule (cancellable): was: only a worker idle for SWEEP_S swept, so one kept busy by
    other streams' sentences back to back held a cancelled id's text until eviction. One
    worker: an id's text is held, another id's twelve sentences keep the worker busy, and the
    cancel is seen while they still play."""
    speaker = Speaker(board, workers=1)
    try:
        first = RecordingSink()
        speaker.submit(_job("held", "Hello there.", text="Hello there."), first)
        assert first.done.wait(10)
        speaker.submit(_job("held", "", text=" And then"), RecordingSink())
        assert len(speaker.held) == 1, "the next words are held"
        busy = [RecordingSink() for _ in range(12)]
        for sink in busy:
            speaker.submit(_job("busy", "This sentence keeps the only worker busy."), sink)
        board.cancel("held")
        deadline = time.monotonic() + 10.0
        while not board.stops("held") and time.monotonic() < deadline:
            time.sleep(SWEEP_S / 5)
        playing = sum(not sink.done.is_set() for sink in busy)
        assert board.stops("held"), "the cancelled id's stop was never recorded"
        assert playing >= 6, f"the sweep waited for the worker to idle ({playing} left)"
        assert all(sink.done.wait(30) for sink in busy)
        assert len(speaker.held) == 0, "a cancelled id keeps no text"
    finally:
        speaker.close()


def test_one_request_keeps_order_across_sentences(speaker: Speaker) -> None:
    order: list[int] = []
    done = threading.Event()

    class Tagged(RecordingSink):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def chunk(self, audio: Audio, text: bytes = b"") -> None:
            order.append(self.index)

        def final(self) -> None:
            if self.index == 2:
                done.set()

    texts = ["A much longer first sentence, with a clause or two, to take time.", "Two.", "Three."]
    for i, text in enumerate(texts):
        speaker.submit(_job("same", text), Tagged(i))
    assert done.wait(10)
    assert order == sorted(order) and set(order) == {0, 1, 2}


def test_text_waits_for_its_sentence(speaker: Speaker) -> None:
    """A delta without its sentence ends its request at once and is sent later, with audio."""
    sink = RecordingSink()
    speaker.submit(_job("w", "", text="Hel"), sink)
    assert sink.done.is_set() and sink.kinds() == ["final"]
    later = RecordingSink()
    speaker.submit(_job("w", "Hello.", text="lo."), later)
    assert later.done.wait(10)
    texts = [p[1] for k, p in later.events if k == "chunk"]  # type: ignore[index]
    assert b"".join(texts) == b"Hello." and not texts[0]


@pytest.mark.parametrize(
    ("request_id", "audio", "text"), [("t", False, "Hel"), ("", True, "Hel"), ("t", True, " \n")]
)
def test_text_with_no_audio_coming_passes_at_once(
    speaker: Speaker, request_id: str, audio: bool, text: str
) -> None:
    """audio=false, no REQUEST_ID to hold it under, or whitespace with nothing held: the text
    is answered in submit() itself, not by a worker."""
    sink = RecordingSink()
    speaker.submit(_job(request_id, "", audio=audio, text=text), sink)
    assert sink.done.is_set() and sink.kinds() == ["text", "final"]
    assert sink.events[0][1] == text.encode()


def test_cancelled_id_passes_no_text(speaker: Speaker, board: CancelBoard) -> None:
    board.cancel("gone")
    sink = RecordingSink()
    speaker.submit(_job("gone", "", text="late"), sink)
    assert sink.kinds() == ["final"]
    assert len(speaker.held) == 0


CALL_DELTAS = [
    encode(ToolCallDelta(arguments="", name="get_weather")),
    encode(ToolCallDelta(arguments='{"city": ')),
    encode(ToolCallDelta(arguments='"Paris"}')),
]


def test_a_call_goes_out_unspoken_after_the_audio_before_it(speaker: Speaker) -> None:
    """The llm's spoken words, then its call: every call delta is its own response, after the
    last chunk of the words before it, and nothing of it is spoken or sent as text."""
    log: list[tuple[str, object]] = []
    sinks = []
    reply = "Let me look that up, one moment. "
    for delta, sentence in llm_steps(reply):
        sinks.append(RecordingSink(log=log))
        speaker.submit(_job("caller", sentence, text=delta), sinks[-1])
    for call in CALL_DELTAS:
        sinks.append(RecordingSink(log=log))
        speaker.submit(_job("caller", "", call=call), sinks[-1])
    assert all(sink.done.wait(20) for sink in sinks)
    _, texts = _timeline(log)
    assert "".join(t for _, _, t in texts) == reply
    calls = [i for i, (kind, _) in enumerate(log) if kind == "call"]
    last_chunk = max(i for i, (kind, _) in enumerate(log) if kind == "chunk")
    assert [log[i][1] for i in calls] == CALL_DELTAS
    assert min(calls) > last_chunk
    # Each call delta's request: the call, then its final flag.
    assert all(log[i + 1] == ("final", None) for i in calls)
    assert len(speaker.held) == 0


def test_text_held_when_the_call_comes_goes_out_just_before_it(speaker: Speaker) -> None:
    # Text no sentence will speak (a caller that sends no sentence for it): not lost.
    first = RecordingSink()
    speaker.submit(_job("held", "", text="Hmm"), first)
    assert first.kinds() == ["final"]
    sink = RecordingSink()
    speaker.submit(_job("held", "", call=CALL_DELTAS[0]), sink)
    assert sink.done.wait(10)
    assert sink.events == [("text", b"Hmm"), ("call", CALL_DELTAS[0]), ("final", None)]


@pytest.mark.parametrize(("request_id", "audio"), [("t", False), ("", True)])
def test_a_call_with_no_audio_coming_passes_at_once(
    speaker: Speaker, request_id: str, audio: bool
) -> None:
    sink = RecordingSink()
    speaker.submit(_job(request_id, "", audio=audio, text="ok", call=CALL_DELTAS[1]), sink)
    assert sink.done.is_set()
    assert sink.events == [("text", b"ok"), ("call", CALL_DELTAS[1]), ("final", None)]


def test_a_cancelled_id_passes_no_call(speaker: Speaker, board: CancelBoard) -> None:
    board.cancel("gone-call")
    for audio in (True, False):
        sink = RecordingSink()
        speaker.submit(_job("gone-call", "", audio=audio, call=CALL_DELTAS[0]), sink)
        assert sink.done.wait(10) and sink.kinds() == ["final"]


END = b"max_output_tokens"


def test_an_end_reason_goes_out_after_the_audio_and_text_before_it(speaker: Speaker) -> None:
    """Was: the llm's END_REASON (max_tokens cut its answer) had no way through tts. Now, as a
    call does, it is its own response after the last chunk of the words before it, with the
    text still held just before it: the id's last word."""
    log = _speak_reply(speaker, "cut", "Once upon a time, there was a")
    held = RecordingSink(log=log)
    speaker.submit(_job("cut", "", text=" dragon"), held)  # no sentence will speak it
    sink = RecordingSink(log=log)
    speaker.submit(_job("cut", "", end=END), sink)
    assert sink.done.wait(20)
    last_chunk = max(i for i, (kind, _) in enumerate(log) if kind == "chunk")
    after = log[last_chunk + 1 :]
    assert after[-3:] == [("text", b" dragon"), ("end", END), ("final", None)]
    assert all(event == ("final", None) for event in after[:-3])
    assert len(speaker.held) == 0


@pytest.mark.parametrize(("request_id", "audio"), [("t", False), ("", True)])
def test_an_end_reason_with_no_audio_coming_passes_at_once(
    speaker: Speaker, request_id: str, audio: bool
) -> None:
    sink = RecordingSink()
    speaker.submit(_job(request_id, "", audio=audio, end=END), sink)
    assert sink.done.is_set() and sink.events == [("end", END), ("final", None)]


def test_a_cancelled_id_passes_no_end_reason(speaker: Speaker, board: CancelBoard) -> None:
    board.cancel("gone-end")
    for audio in (True, False):
        sink = RecordingSink()
        speaker.submit(_job("gone-end", "", audio=audio, end=END), sink)
        assert sink.done.wait(10) and sink.kinds() == ["final"]


def test_the_reply_sink_sends_every_output(board: CancelBoard) -> None:
    """In `cascade` every tts response carries TEXT_DELTA, AUDIO_CHUNK, TOOL_CALL and
    END_REASON."""
    from turntaker_models.cascade.tts import ReplySink

    sent: list[dict[str, Any]] = []

    class Reply:
        def send(self, outputs: Mapping[str, Any], final: bool = False) -> None:
            sent.append(dict(outputs))

        def close(self) -> None: ...

        def fail(self, message: str) -> None: ...

        def is_cancelled(self) -> bool:
            return False

    sink = ReplySink(Reply(), tool_calls=True, end_reasons=True)
    sink.text(b"hi", final=False)
    sink.chunk(np.zeros(4, np.float32), b"")
    sink.tool_call(CALL_DELTAS[0], final=False)
    sink.end(END, final=True)
    assert all(set(o) == {"TEXT_DELTA", "AUDIO_CHUNK", "TOOL_CALL", "END_REASON"} for o in sent)
    assert sent[2]["TOOL_CALL"][0] == CALL_DELTAS[0]
    assert sent[3]["END_REASON"][0] == END
    assert [o["END_REASON"][0] for o in sent[:3]] == [b"", b"", b""]
