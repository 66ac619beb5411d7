"""Batched Code2Wav (code2wav.py, rules 1-4): streams decoded together sound as each alone.

Tolerance: the tiny weights' signal is very quiet (~1e-7), so audio is compared relative to
its scale: max |together - alone| <= 1e-5 of the stream's max |sample|. Measured: ~4e-7
(float32 rounding of kernels that block differently per batch size), never bit-exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.turntaker_models.omni.conftest import Tiny
from tests.turntaker_models.omni.test_stages import FakeReply
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.omni import wire
from turntaker_models.omni.audio_stages import Code2WavStage
from turntaker_models.omni.code2wav import (
    BatchedDecoder,
    Code2WavStream,
    Decoder,
    WindowPlan,
    decode,
    decode_batch,
    pick_oldest_length,
    trim_samples,
    warm_up,
)
from turntaker_models.omni.sampling import Cancelled
from turntaker_models.settings import ModelSettings

RELATIVE_TOLERANCE = 1e-5
PLAN = WindowPlan()  # Qwen's: first chunk 2 frames, then 8, 25 of left context


def _codes(tiny: Tiny, frames: int, seed: int) -> npt.NDArray[np.int64]:
    groups = tiny.config.code2wav_config.num_quantizers
    size = tiny.config.code2wav_config.codebook_size
    return np.random.default_rng(seed).integers(0, size, (groups, frames), dtype=np.int64)


def _alone(tiny: Tiny, codes: npt.NDArray[np.int64]) -> list[npt.NDArray[np.float32]]:
    stream = Code2WavStream(tiny.code2wav, PLAN, trim_samples(tiny.code2wav), lambda: False)
    chunks = [stream.push(codes[:, i]) for i in range(codes.shape[1])]
    chunks.append(stream.flush())
    return [c for c in chunks if c is not None]


def _assert_same_audio(
    got: list[npt.NDArray[np.float32]], want: list[npt.NDArray[np.float32]]
) -> float:
    """Same chunks (count and lengths), samples equal to the tolerance; the relative error."""
    assert [c.shape for c in got] == [c.shape for c in want]
    scale = max(float(np.abs(c).max()) for c in want)
    assert scale > 0
    error = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True)) / scale
    assert error <= RELATIVE_TOLERANCE
    return error


@dataclass
class _Run:
    """One stream pushed from its own thread, starting `offset` frames after the others."""

    codes: npt.NDArray[np.int64]
    offset: int
    cancel_after_chunks: int | None = None
    chunks: list[npt.NDArray[np.float32]] = field(default_factory=list)
    cancelled: bool = False
    stopped: bool = False


def _together(tiny: Tiny, runs: list[_Run], batched: BatchedDecoder) -> None:
    """Every stream in its own thread; a barrier per frame keeps them in step, so windows of
    several streams (and of several lengths, from the offsets) wait for the batcher at once."""
    trim = trim_samples(tiny.code2wav)
    steps = max(r.offset + r.codes.shape[1] for r in runs) + 1
    barrier = threading.Barrier(len(runs))
    errors: list[BaseException] = []

    def push(run: _Run) -> None:
        member = object()
        stream = Code2WavStream(
            tiny.code2wav, PLAN, trim, lambda: run.cancelled, batched.decoder(member)
        )
        frames = run.codes.shape[1]
        try:
            for step in range(steps):
                barrier.wait(timeout=60)
                i = step - run.offset
                if run.stopped or i < 0 or i > frames:
                    continue
                try:
                    chunk = stream.push(run.codes[:, i]) if i < frames else stream.flush()
                except Cancelled:
                    run.stopped = True
                    batched.leave(member)
                    continue
                if chunk is not None:
                    run.chunks.append(chunk)
                    if len(run.chunks) == run.cancel_after_chunks:
                        run.cancelled = True
                if i == frames:
                    batched.leave(member)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=push, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors


@dataclass(frozen=True)
class _Slow:
    """The model with each forward 20 ms slower: the windows of one frame step (the barrier
    lets them go within a millisecond) all queue up while a round runs, so they share the
    next one whatever the machine's load (the test asserts they share forwards)."""

    model: Any
    delay_s: float = 0.02

    @property
    def device(self) -> Any:
        return self.model.device

    def __call__(self, codes: Any) -> Any:
        time.sleep(self.delay_s)
        return self.model(codes)


@pytest.fixture(scope="module")
def warm(tiny: Tiny) -> Tiny:
    warm_up(tiny.code2wav, PLAN)
    return tiny


def test_a_batched_row_equals_its_own_forward(warm: Tiny) -> None:
    """Rule 1: no mixing across rows; rule 2: windows of several lengths in one call."""
    windows = [_codes(warm, n, seed) for seed, n in enumerate([2, 33, 2, 10, 33, 33, 2])]
    together = decode_batch(warm.code2wav, windows)
    for window, got in zip(windows, together, strict=True):
        assert isinstance(got, np.ndarray)
        _assert_same_audio([got], [decode(warm.code2wav, window)])


def test_a_failed_length_fails_only_its_windows(warm: Tiny) -> None:
    good = _codes(warm, 10, seed=1)
    bad = np.zeros((good.shape[0] + 1, 2), np.int64)  # one code group too many
    results = decode_batch(warm.code2wav, [bad, good, bad])
    assert isinstance(results[0], ValueError) and isinstance(results[2], ValueError)
    assert isinstance(results[1], np.ndarray)
    _assert_same_audio([results[1]], [decode(warm.code2wav, good)])


def test_a_round_runs_the_oldest_windows_length() -> None:
    windows = [np.zeros((2, n), np.int64) for n in (10, 33, 10, 2, 10)]
    assert pick_oldest_length(windows) == [0, 2, 4]
    assert pick_oldest_length([]) == []


def test_streams_decoded_together_equal_each_alone(warm: Tiny) -> None:
    """First 2-frame chunks, full and partial chunks, flushes: all as each stream alone."""
    # Offsets 0, 8 and 16 put windows of several lengths in the queue at once (2 next to 10, 10
    # next to 18, ...); offset 3 is out of step with all.
    lengths_offsets = [(40, 0), (2, 0), (17, 0), (60, 8), (9, 8), (33, 16), (26, 3)]
    runs = [
        _Run(_codes(warm, n, seed=10 + k), offset) for k, (n, offset) in enumerate(lengths_offsets)
    ]
    batched = BatchedDecoder(_Slow(warm.code2wav), max_batch=32)
    try:
        _together(warm, runs, batched)
        rounds, jobs = batched.batcher.rounds, batched.batcher.jobs
    finally:
        batched.close()
    errors = [_assert_same_audio(run.chunks, _alone(warm, run.codes)) for run in runs]
    print(f"\ncode2wav batched: {jobs} windows in {rounds} forwards, error {max(errors):.1e}")
    # The first chunk is 2 frames' worth; a 2-frame stream is that chunk only.
    assert all(run.chunks[0].shape[0] == 2 * 1920 - 555 for run in runs)
    assert jobs == sum(len(run.chunks) for run in runs)
    assert rounds < jobs  # windows really shared forwards


def test_a_cancelled_stream_stops_and_the_others_are_unchanged(warm: Tiny) -> None:
    runs = [
        _Run(_codes(warm, 40, seed=20), 0),
        _Run(_codes(warm, 40, seed=21), 0, cancel_after_chunks=2),
        _Run(_codes(warm, 25, seed=22), 2),
    ]
    batched = BatchedDecoder(warm.code2wav, max_batch=32)
    try:
        _together(warm, runs, batched)
    finally:
        batched.close()
    cancelled = runs[1]
    assert cancelled.stopped and len(cancelled.chunks) == 2
    _assert_same_audio(cancelled.chunks, _alone(warm, cancelled.codes)[:2])
    for run in (runs[0], runs[2]):
        assert not run.stopped
        _assert_same_audio(run.chunks, _alone(warm, run.codes))


def test_cancel_while_waiting_for_a_round_emits_nothing(warm: Tiny) -> None:
    """Rule 4: checked when the audio comes back, not only before the window goes."""
    flag = {"cancelled": False}

    def slow_round(window: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        flag["cancelled"] = True  # the cancel lands while the window waits for its round
        return decode(warm.code2wav, window)

    decoder: Decoder = slow_round
    stream = Code2WavStream(warm.code2wav, PLAN, 555, lambda: flag["cancelled"], decoder)
    codes = _codes(warm, 2, seed=3)
    assert stream.push(codes[:, 0]) is None
    with pytest.raises(Cancelled):
        stream.push(codes[:, 1])


# The stage: Triton's code2wav model without Triton.


def _settings(tiny: Tiny, root: Path, batching: bool) -> ModelSettings:
    return ModelSettings(
        board_path=root / "board",
        cache_dir=root,
        omni_weights=tiny.path,
        threads=1,
        omni_batching=batching,
    )


def _message(
    request_id: str, kind: int, seq: int, codes: npt.NDArray[np.int64] | None = None
) -> dict[str, npt.NDArray[Any]]:
    return {
        "C_TEXT": wire.text_tensor(b""),
        "C_TOOL_CALL": wire.text_tensor(b""),
        "C_REQUEST_ID": wire.text_tensor(request_id),
        "C_KIND": wire.int_tensor(kind),
        "C_SEQ": wire.int_tensor(seq),
        "C_CODES": np.asarray(codes if codes is not None else [], np.int64),
    }


def _speak(
    stage: Code2WavStage,
    streams: dict[str, npt.NDArray[np.int64]],
    cancel: tuple[CancelBoard, str, int] | None = None,
) -> tuple[dict[str, list[npt.NDArray[np.float32]]], list[FakeReply]]:
    """Every stream's frames then END, interleaved frame by frame; each stream's audio.

    `cancel` (board, id, frame): before that frame, once the stream has sent its first chunk,
    the board cancels it."""
    audio: dict[str, list[npt.NDArray[np.float32]]] = {k: [] for k in streams}
    replies: list[FakeReply] = []
    lock = threading.Lock()

    def collect(request_id: str) -> Callable[[Mapping[str, npt.NDArray[Any]]], None]:
        def on_send(outputs: Mapping[str, npt.NDArray[Any]]) -> None:
            with lock:
                audio[request_id].append(np.array(outputs["AUDIO_CHUNK"], np.float32))

        return on_send

    for i in range(max(c.shape[1] for c in streams.values()) + 1):
        if cancel is not None and i == cancel[2]:
            board, target, _ = cancel
            deadline = time.monotonic() + 30
            while not audio[target] and time.monotonic() < deadline:
                time.sleep(0.002)
            board.cancel(target)
        for request_id, codes in streams.items():
            if i > codes.shape[1]:
                continue
            reply = FakeReply(collect(request_id))
            replies.append(reply)
            if i < codes.shape[1]:
                stage.submit(_message(request_id, wire.FRAME, i, codes[:, i]), reply)
            else:
                stage.submit(_message(request_id, wire.END, i), reply)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        stage.workers.active() or not all(r.closed for r in replies)
    ):
        time.sleep(0.005)
    assert stage.workers.active() == 0
    assert all(r.closed and r.error is None for r in replies)
    return audio, replies


@pytest.mark.parametrize("batching", [True, False])
def test_stage_streams_sound_as_each_alone_batching_on_or_off(
    tiny: Tiny, tmp_path: Path, batching: bool
) -> None:
    streams = {f"s{k}": _codes(tiny, n, seed=30 + k) for k, n in enumerate([2, 19, 41])}
    stage = Code2WavStage(_settings(tiny, tmp_path, batching))
    try:
        assert (stage.batched is not None) == batching
        audio, _ = _speak(stage, streams)
        for request_id, codes in streams.items():
            _assert_same_audio(audio[request_id], _alone(tiny, codes))
        if stage.batched is not None:
            assert stage.batched.batcher.jobs == sum(len(a) for a in audio.values())
    finally:
        stage.close()


def test_stage_cancel_stops_that_stream_only(tiny: Tiny, tmp_path: Path) -> None:
    settings = _settings(tiny, tmp_path, batching=True)
    streams = {"keep": _codes(tiny, 30, seed=40), "cancel-me": _codes(tiny, 30, seed=41)}
    stage = Code2WavStage(settings)
    board = CancelBoard.open(settings.board_path)
    try:
        audio, _ = _speak(stage, streams, cancel=(board, "cancel-me", 12))
        assert [r.stage for r in board.stops("cancel-me")] == ["code2wav"]
    finally:
        stage.close()
        board.close()
    _assert_same_audio(audio["keep"], _alone(tiny, streams["keep"]))
    # Cancelled after its first chunk, before frame 12: the 10-frame chunk may have gone out
    # too, nothing after.
    want = _alone(tiny, streams["cancel-me"])
    got = audio["cancel-me"]
    assert 1 <= len(got) <= 2
    _assert_same_audio(got, want[: len(got)])
