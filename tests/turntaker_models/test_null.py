"""The `null` model's scheduler without a server (turntaker_models/null.py): pacing and order,
chunk count and content, cancels through the board and the stream, the speed multiplier, the
stream cap, bad input; a voice (a recording) instead of the tone; plus the TURNTAKER_NULL_SPEED
and TURNTAKER_NULL_AUDIO settings that carry the speed and the voice."""

from __future__ import annotations

import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import OUTPUT_SAMPLE_RATE, GenerationParameters, encode
from turntaker_models.null import (
    STAGE,
    Audio,
    NullStreams,
    Pacing,
    Voice,
    max_streams_from_config,
    tone,
)
from turntaker_models.settings import (
    NULL_AUDIO_ENV,
    NULL_AUDIO_LOOP_ENV,
    NULL_SPEED_ENV,
    ModelSettings,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingSink:
    """Records (kind, payload, clock time); `log`, when shared, keeps the order across sinks."""

    def __init__(
        self,
        name: str = "",
        clock: Clock | None = None,
        log: list[tuple[str, str, float]] | None = None,
        fail_after: int | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.log = [] if log is None else log
        self.texts: list[bytes] = []
        self.audio: list[Audio] = []
        self.errors: list[str] = []
        self.finals = 0
        self.stream_cancelled = False
        self.fail_after = fail_after
        self.done = threading.Event()

    def _note(self, kind: str) -> None:
        self.log.append((self.name, kind, self.clock() if self.clock else time.monotonic()))

    def chunk(self, text: bytes, audio: Audio) -> None:
        if self.fail_after is not None and len(self.texts) >= self.fail_after:
            raise RuntimeError("stream gone")
        self.texts.append(text)
        self.audio.append(audio)
        self._note("chunk")

    def error(self, message: str) -> None:
        self.errors.append(message)
        self._note("error")
        self.done.set()

    def final(self) -> None:
        self.finals += 1
        self._note("final")
        self.done.set()

    def cancelled(self) -> bool:
        return self.stream_cancelled


@pytest.fixture
def board(tmp_path: Path) -> Iterator[CancelBoard]:
    with CancelBoard.open(tmp_path / "board") as b:
        yield b


def params(max_tokens: int = 3, audio: bool = True) -> bytes:
    return encode(GenerationParameters(max_tokens=max_tokens, audio=audio))


def drain(streams: NullStreams, clock: Clock, until: float = float("inf")) -> None:
    """Run the scheduler by hand, jumping the clock to each due time, up to `until`."""
    while (due := streams.next_due()) is not None and due <= until:
        clock.now = max(clock.now, due)
        streams.run_due()


def test_chunks_follow_the_pacing_in_due_order(board: CancelBoard) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    log: list[tuple[str, str, float]] = []
    streams.submit("a", params(3), RecordingSink("a", clock, log))
    clock.now = 0.1
    streams.submit("b", params(2), RecordingSink("b", clock, log))
    streams.run_due(0.2)
    assert log == [], "nothing may go out before FIRST_CHUNK_MS"
    drain(streams, clock)
    got = [(name, kind, round(t, 3)) for name, kind, t in log]
    assert got == [
        ("a", "chunk", 0.234),
        ("a", "chunk", 0.314),
        ("b", "chunk", 0.334),
        ("a", "chunk", 0.394),
        ("a", "final", 0.394),
        ("b", "chunk", 0.414),
        ("b", "final", 0.414),
    ]
    assert streams.active == 0 and streams.next_due() is None


def test_chunk_count_text_and_audio(board: CancelBoard) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    sink = RecordingSink(clock=clock)
    streams.submit("r", params(5), sink)
    drain(streams, clock)
    assert sink.texts == [b"tok0 ", b"tok1 ", b"tok2 ", b"tok3 ", b"tok4 "]
    assert sink.finals == 1 and not sink.errors
    for audio in sink.audio:
        assert audio.dtype == np.float32 and audio.shape == (80 * OUTPUT_SAMPLE_RATE // 1000,)
        assert float(np.abs(audio).max()) <= 1.0
        # The one tone computed at start-up, not a chunk computed per response.
        assert audio is streams.audio


def test_text_only_sends_zero_size_audio(board: CancelBoard) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    sink = RecordingSink(clock=clock)
    streams.submit("r", params(3, audio=False), sink)
    drain(streams, clock)
    assert len(sink.texts) == 3 and [a.size for a in sink.audio] == [0, 0, 0]
    assert sink.finals == 1


def test_tone_is_quiet_read_only_and_seamless() -> None:
    audio = tone(1920)
    assert 0.04 < float(np.abs(audio).max()) <= 0.051
    assert not audio.flags.writeable
    # A whole number of cycles per chunk: back to back, the seam is no bigger a step than any
    # step inside the chunk.
    seam = abs(float(audio[0]) - float(audio[-1]))
    assert seam <= float(np.abs(np.diff(audio)).max()) + 1e-7


@pytest.mark.parametrize("how", ["board", "stream"])
def test_cancel_stops_before_the_next_chunk_and_records_a_stop(
    board: CancelBoard, how: str
) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    sink = RecordingSink(clock=clock)
    other = RecordingSink(clock=clock)
    streams.submit("r", params(100), sink)
    streams.submit("other", params(4), other)
    drain(streams, clock, until=0.314)
    assert len(sink.texts) == 2
    if how == "board":
        board.cancel("r")
    else:
        sink.stream_cancelled = True
    drain(streams, clock)
    assert len(sink.texts) == 2, "a chunk went out after the cancel"
    assert sink.finals == 1 and not sink.errors
    assert [s.stage for s in board.stops("r")] == [STAGE]
    # The other stream is untouched and the cancelled one is forgotten.
    assert len(other.texts) == 4 and other.finals == 1 and not board.stops("other")
    assert streams.active == 0 and streams.next_due() is None


def test_speed_divides_the_delays_not_the_chunk_size(board: CancelBoard) -> None:
    pacing = Pacing(speed=1000.0)
    assert pacing.first_delay_s == pytest.approx(0.000234)
    assert pacing.interval_s == pytest.approx(0.00008)
    assert pacing.chunk_samples == 1920
    clock = Clock()
    clock.now = 10.0
    streams = NullStreams(board, pacing, clock=clock)
    log: list[tuple[str, str, float]] = []
    streams.submit("r", params(3), RecordingSink("r", clock, log))
    drain(streams, clock)
    times = [t - 10.0 for _, kind, t in log if kind == "chunk"]
    assert times == pytest.approx([0.000234, 0.000314, 0.000394])


def test_a_late_scheduler_does_not_burst(board: CancelBoard) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    sink = RecordingSink(clock=clock)
    streams.submit("r", params(3), sink)
    # The scheduler wakes a whole second late: one chunk now, the next a full interval on.
    clock.now = 1.234
    streams.run_due()
    assert len(sink.texts) == 1
    assert streams.next_due() == pytest.approx(1.234)
    streams.run_due()
    assert len(sink.texts) == 2
    assert streams.next_due() == pytest.approx(1.314)


@pytest.mark.parametrize(
    ("request_id", "raw", "message"),
    [
        ("r", b"{not json", "PARAMETERS"),
        ("r", b'{"max_tokens": "many"}', "PARAMETERS"),
        ("r", b'{"max_tokens": 0}', "max_tokens must be at least 1"),
        ("", params(3), "REQUEST_ID must be a non-empty id"),
    ],
)
def test_bad_input_is_one_clear_error(
    board: CancelBoard, request_id: str, raw: bytes, message: str
) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    sink = RecordingSink(clock=clock)
    streams.submit(request_id, raw, sink)
    assert len(sink.errors) == 1 and message in sink.errors[0], sink.errors
    assert sink.errors[0].startswith("null: ")
    assert sink.finals == 0 and streams.active == 0 and streams.next_due() is None


def test_empty_parameters_mean_the_contract_defaults(board: CancelBoard) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    sink = RecordingSink(clock=clock)
    streams.submit("r", b"", sink)
    drain(streams, clock)
    assert len(sink.texts) == GenerationParameters().max_tokens and sink.finals == 1


def test_streams_beyond_the_cap_are_refused(board: CancelBoard) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), max_streams=2, clock=clock)
    sinks = [RecordingSink(clock=clock) for _ in range(3)]
    for i, sink in enumerate(sinks):
        streams.submit(f"r{i}", params(1), sink)
    assert sinks[2].errors and "busy" in sinks[2].errors[0]
    assert streams.active == 2
    drain(streams, clock)
    assert streams.active == 0
    late = RecordingSink(clock=clock)
    streams.submit("r3", params(1), late)
    drain(streams, clock)
    assert late.texts == [b"tok0 "] and late.finals == 1


def test_a_failing_sink_ends_its_stream_only(board: CancelBoard) -> None:
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock)
    broken = RecordingSink(clock=clock, fail_after=1)
    fine = RecordingSink(clock=clock)
    streams.submit("broken", params(5), broken)
    streams.submit("fine", params(5), fine)
    drain(streams, clock)
    assert len(broken.texts) == 1 and broken.finals == 1
    # Not a cancel: no stop record.
    assert not board.stops("broken")
    assert len(fine.texts) == 5 and fine.finals == 1
    assert streams.active == 0


@pytest.mark.parametrize("speed", [0.0, -1.0, float("nan"), float("inf")])
def test_a_speed_of_zero_or_less_is_refused(speed: float) -> None:
    with pytest.raises(ValueError, match="null speed must be a finite number above 0"):
        Pacing(speed=speed)


def test_pacing_from_config() -> None:
    pacing = Pacing.from_config(
        {"FIRST_CHUNK_MS": "100", "CHUNK_MS": "40", "INTERVAL_MS": "", "MAX_STREAMS": "8"}, 2.0
    )
    assert pacing == Pacing(first_chunk_ms=100.0, chunk_ms=40.0, interval_ms=80.0, speed=2.0)
    assert pacing.first_delay_s == pytest.approx(0.05) and pacing.chunk_samples == 960
    assert Pacing.from_config({}) == Pacing()
    assert max_streams_from_config({"MAX_STREAMS": "8"}) == 8
    assert max_streams_from_config({}) == 4096
    with pytest.raises(ValueError, match="CHUNK_MS must be a number"):
        Pacing.from_config({"CHUNK_MS": "eighty"})
    with pytest.raises(ValueError, match="CHUNK_MS must give at least one sample"):
        Pacing.from_config({"CHUNK_MS": "0"})
    with pytest.raises(ValueError, match="INTERVAL_MS must be finite and >= 0"):
        Pacing.from_config({"INTERVAL_MS": "-1"})
    with pytest.raises(ValueError, match="MAX_STREAMS"):
        max_streams_from_config({"MAX_STREAMS": "0"})


def test_one_thread_paces_many_streams_and_close_stops_it(board: CancelBoard) -> None:
    streams = NullStreams(board, Pacing(speed=100.0))
    streams.start()
    before = threading.active_count()
    sinks = [RecordingSink(f"s{i}") for i in range(200)]
    try:
        for i, sink in enumerate(sinks):
            streams.submit(f"s{i}", params(5), sink)
        # Registering 200 streams started no thread.
        assert threading.active_count() == before
        for sink in sinks:
            assert sink.done.wait(10.0)
        assert all(len(s.texts) == 5 and s.finals == 1 for s in sinks)
        # In order, and the final flag after the last chunk.
        for sink in sinks:
            assert sink.texts == [f"tok{i} ".encode() for i in range(5)]
            assert [kind for _, kind, _ in sink.log] == ["chunk"] * 5 + ["final"]
        assert streams.active == 0
        # A long stream still running when the model unloads gets its final flag.
        long = RecordingSink("long")
        streams.submit("long", params(10_000), long)
    finally:
        streams.close()
    assert streams._thread is not None and not streams._thread.is_alive()
    assert long.finals == 1 and streams.active == 0
    refused = RecordingSink()
    streams.submit("after", params(1), refused)
    assert refused.errors and "unloading" in refused.errors[0]


def test_null_speed_setting_from_the_environment(tmp_path: Path) -> None:
    base = {"TURNTAKER_CANCEL_BOARD": str(tmp_path / "b")}
    assert ModelSettings.from_env(base).null_speed == 1.0
    settings = ModelSettings.from_env({**base, NULL_SPEED_ENV: "1000"})
    assert settings.null_speed == 1000.0
    # The launcher hands it on through the environment, exactly.
    assert ModelSettings.from_env(settings.environment()) == settings
    odd = ModelSettings(tmp_path, tmp_path, None, 1, null_speed=0.1 + 0.2)
    assert ModelSettings.from_env(odd.environment()).null_speed == 0.1 + 0.2
    for bad in ("0", "-5", "nan"):
        with pytest.raises(ValueError, match="above 0"):
            ModelSettings.from_env({**base, NULL_SPEED_ENV: bad})
    with pytest.raises(ValueError, match=f"{NULL_SPEED_ENV} must be a number above 0"):
        ModelSettings.from_env({**base, NULL_SPEED_ENV: "fast"})


CHUNK = Pacing().chunk_samples


def write_wav(path: Path, audio: Audio, rate: int = OUTPUT_SAMPLE_RATE, channels: int = 1) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def ramp(samples: int) -> Audio:
    """A recording whose every sample says where it came from."""
    return (np.arange(samples, dtype=np.float32) % 1000) / 2000.0


def test_a_voice_plays_from_its_start_in_every_response_and_ends_with_it(
    board: CancelBoard, tmp_path: Path
) -> None:
    recording = ramp(2 * CHUNK + CHUNK // 2)
    voice = Voice.from_wav(write_wav(tmp_path / "v.wav", recording), CHUNK)
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock, voice=voice)
    first, second, short = RecordingSink(clock=clock), RecordingSink(clock=clock), RecordingSink()
    streams.submit("a", params(50), first)
    streams.submit("b", params(50), second)
    streams.submit("c", params(2), short)
    drain(streams, clock)
    for sink in (first, second):
        assert [a.size for a in sink.audio] == [CHUNK, CHUNK, CHUNK // 2], "ends with it"
        played = np.concatenate(sink.audio)
        # 16-bit on disk: within a few quantisation steps of the recording.
        assert np.abs(played - recording).max() <= 4 / 32768
        assert sink.finals == 1 and len(sink.texts) == 3
    assert len(short.audio) == 2, "max_tokens still bounds a response"
    text_only = RecordingSink(clock=clock)
    streams.submit("d", params(5, audio=False), text_only)
    drain(streams, clock)
    assert len(text_only.texts) == 5 and all(a.size == 0 for a in text_only.audio)


def test_a_looped_voice_repeats_whole_chunks_until_max_tokens(board: CancelBoard) -> None:
    recording = ramp(CHUNK + 10)
    voice = Voice.from_audio(recording, CHUNK, loop=True)
    assert len(voice.chunks) == 2 and voice.chunks[1][10:].max() == 0.0, "zero-padded seam"
    clock = Clock()
    streams = NullStreams(board, Pacing(), clock=clock, voice=voice)
    sink = RecordingSink(clock=clock)
    streams.submit("r", params(5), sink)
    drain(streams, clock)
    assert len(sink.audio) == 5 and all(a.size == CHUNK for a in sink.audio)
    assert sink.audio[0] is voice.chunks[0] and sink.audio[2] is voice.chunks[0], "no copies"
    assert not sink.audio[0].flags.writeable


@pytest.mark.parametrize(
    ("rate", "channels", "problem"),
    [(16000, 1, "16000 Hz"), (OUTPUT_SAMPLE_RATE, 2, "2 channel")],
)
def test_a_voice_of_another_rate_or_layout_is_refused_by_name(
    tmp_path: Path, rate: int, channels: int, problem: str
) -> None:
    path = write_wav(tmp_path / "wrong.wav", np.zeros(100 * channels, np.float32), rate, channels)
    with pytest.raises(ValueError, match=f"wrong.wav.*{problem}"):
        Voice.from_wav(path, CHUNK)
    with pytest.raises(ValueError, match="cannot read the voice"):
        Voice.from_wav(tmp_path / "missing.wav", CHUNK)
    with pytest.raises(ValueError, match="no samples"):
        Voice.from_wav(write_wav(tmp_path / "empty.wav", np.zeros(0, np.float32)), CHUNK)


def test_null_audio_setting_from_the_environment(tmp_path: Path) -> None:
    base = {"TURNTAKER_CANCEL_BOARD": str(tmp_path / "b")}
    plain = ModelSettings.from_env(base)
    assert plain.null_audio is None and not plain.null_audio_loop
    assert NULL_AUDIO_ENV not in plain.environment()
    voiced = ModelSettings.from_env({**base, NULL_AUDIO_ENV: "/v.wav", NULL_AUDIO_LOOP_ENV: "1"})
    assert voiced.null_audio == Path("/v.wav") and voiced.null_audio_loop
    # The launcher hands it on through the environment, exactly.
    assert ModelSettings.from_env(voiced.environment()) == voiced
    once = ModelSettings.from_env({**base, NULL_AUDIO_ENV: "/v.wav", NULL_AUDIO_LOOP_ENV: "off"})
    assert not once.null_audio_loop
