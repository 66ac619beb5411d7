"""The `tts` work without a server: voices, clause pieces, chunking, the worker's protocol."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import OUTPUT_SAMPLE_RATE, GenerationParameters, encode
from turntaker_models.tts import (
    DEFAULT_VOICE,
    Audio,
    Speaker,
    SpeechJob,
    chunks,
    flite_voice,
    pieces,
    synthesize,
    trim_silence,
)


class RecordingSink:
    def __init__(self, cancel_after: int | None = None) -> None:
        self.events: list[tuple[str, object]] = []
        self.done = threading.Event()
        self.cancel_after = cancel_after

    def text(self, text: bytes, final: bool) -> None:
        self.events.append(("text", text))
        if final:
            self.final()

    def chunk(self, audio: Audio) -> None:
        self.events.append(("chunk", audio))

    def error(self, message: str) -> None:
        # The error response carries the final flag: the request ends here.
        self.events.append(("error", message))
        self.done.set()

    def final(self) -> None:
        self.events.append(("final", None))
        self.done.set()

    def cancelled(self) -> bool:
        sent = sum(1 for kind, _ in self.events if kind == "chunk")
        return self.cancel_after is not None and sent >= self.cancel_after

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


def _job(request_id: str, sentence: str, audio: bool = True, text: str = "") -> SpeechJob:
    params = encode(GenerationParameters(audio=audio))
    return SpeechJob(request_id, sentence.encode(), params, text.encode())


def test_voice_names_map_to_flite_voices() -> None:
    assert flite_voice("awb") == "awb"
    assert flite_voice(" RMS ") == "rms"
    assert flite_voice("alloy") == "slt"
    assert flite_voice("echo") == "rms"
    assert flite_voice("default") == DEFAULT_VOICE
    assert flite_voice("--help") == DEFAULT_VOICE


def test_sentence_is_cut_at_clauses_and_word_limit() -> None:
    assert pieces("Well, hello there; how are you?") == ["Well,", "hello there;", "how are you?"]
    assert pieces("one two three four five", max_words=2) == ["one two", "three four", "five"]
    assert pieces("  ... -- !  ") == []
    assert pieces("Caf\u00e9 cr\u00e8me \u2014 tr\u00e8s bien.") == ["Cafe creme tres bien."]


def test_chunks_start_small_and_cover_everything() -> None:
    audio = np.arange(10_000, dtype=np.float32)
    parts = list(chunks(audio, first=1000, size=4000))
    assert [p.shape[0] for p in parts] == [1000, 4000, 4000, 1000]
    np.testing.assert_array_equal(np.concatenate(parts), audio)


def test_trim_silence_keeps_the_sound_and_short_margins() -> None:
    rate = 16000
    tone = np.sin(np.arange(rate) / 5).astype(np.float32)
    padded = np.concatenate([np.zeros(rate, np.float32), tone, np.zeros(rate, np.float32)])
    trimmed = trim_silence(padded, rate, lead_s=0.02, trail_s=0.1)
    assert rate <= trimmed.shape[0] <= rate + int(0.13 * rate)
    assert trim_silence(np.zeros(rate, np.float32), rate).shape[0] == 0


def test_synthesize_gives_24khz_float_speech_and_reads_dashes_as_text() -> None:
    audio = synthesize("--help me", "slt")
    assert audio.dtype == np.float32 and np.isfinite(audio).all()
    assert 0.3 < audio.shape[0] / OUTPUT_SAMPLE_RATE < 2.0
    assert np.abs(audio).max() > 0.05


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


def test_stream_cancel_stops_mid_sentence(speaker: Speaker, board: CancelBoard) -> None:
    sink = RecordingSink(cancel_after=2)
    speaker.submit(_job("b", "One, two, three, four, five, six, seven, eight."), sink)
    assert sink.done.wait(10)
    assert sink.kinds() == ["chunk", "chunk", "final"]
    assert [r.stage for r in board.stops("b")] == ["tts"]


def test_one_request_keeps_order_across_sentences(speaker: Speaker) -> None:
    order: list[int] = []
    done = threading.Event()

    class Tagged(RecordingSink):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def chunk(self, audio: Audio) -> None:
            order.append(self.index)

        def final(self) -> None:
            if self.index == 2:
                done.set()

    texts = ["A much longer first sentence, with a clause or two, to take time.", "Two.", "Three."]
    for i, text in enumerate(texts):
        speaker.submit(_job("same", text), Tagged(i))
    assert done.wait(10)
    assert order == sorted(order) and set(order) == {0, 1, 2}


def test_text_passes_on_first_then_the_sentence_is_spoken(speaker: Speaker) -> None:
    sink = RecordingSink()
    speaker.submit(_job("t", "Hello there.", text=" there."), sink)
    assert sink.done.wait(10)
    kinds = sink.kinds()
    assert kinds[0] == "text" and sink.events[0][1] == b" there."
    assert kinds[-1] == "final" and set(kinds[1:-1]) == {"chunk"}


@pytest.mark.parametrize(("sentence", "audio"), [("", True), ("Hello.", False)])
def test_text_alone_ends_at_once_with_the_text(
    speaker: Speaker, sentence: str, audio: bool
) -> None:
    sink = RecordingSink()
    speaker.submit(_job("t", sentence, audio=audio, text="Hel"), sink)
    # Answered in submit() itself, not by a worker.
    assert sink.done.is_set() and sink.kinds() == ["text", "final"]


def test_text_overtakes_queued_audio_but_keeps_its_order(speaker: Speaker) -> None:
    log: list[tuple[str, int]] = []

    class Tagged(RecordingSink):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def text(self, text: bytes, final: bool) -> None:
            log.append(("text", self.index))
            super().text(text, final)

        def chunk(self, audio: Audio) -> None:
            log.append(("chunk", self.index))

    long = "A much longer first sentence, with a clause or two, to take some time."
    jobs = [(long, "a"), ("", "b"), ("Two.", "c"), ("", "d")]
    sinks = [Tagged(i) for i in range(len(jobs))]
    for sink, (sentence, text) in zip(sinks, jobs, strict=True):
        speaker.submit(_job("same", sentence, text=text), sink)
    assert all(sink.done.wait(10) for sink in sinks)
    texts = [i for kind, i in log if kind == "text"]
    chunks_ = [i for kind, i in log if kind == "chunk"]
    assert texts == [0, 1, 2, 3]
    assert chunks_ == sorted(chunks_) and set(chunks_) == {0, 2}
    # All text went out before the first sentence's audio ended.
    assert log.index(("text", 3)) < max(i for i, e in enumerate(log) if e == ("chunk", 0))


def test_cancelled_id_passes_no_text(speaker: Speaker, board: CancelBoard) -> None:
    board.cancel("gone")
    sink = RecordingSink()
    speaker.submit(_job("gone", "", text="late"), sink)
    assert sink.kinds() == ["final"]
