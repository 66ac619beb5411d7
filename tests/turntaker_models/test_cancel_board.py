"""The cancel board's rules (turntaker_models/cancel_board.py)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from turntaker_models.cancel_board import CANCEL_SLOTS, SIZE, CancelBoard


def test_rule1_board_is_one_fixed_size_file_that_never_grows(tmp_path: Path) -> None:
    path = tmp_path / "board"
    with CancelBoard.open(path) as board:
        for i in range(3 * CANCEL_SLOTS):
            board.cancel(f"r{i}")
            board.record_stop(f"r{i}", "llm")
    assert path.stat().st_size == SIZE


def test_rule1_oldest_cancel_is_evicted_after_a_full_ring(tmp_path: Path) -> None:
    with CancelBoard.open(tmp_path / "board") as board:
        board.cancel("old")
        for i in range(CANCEL_SLOTS - 1):
            board.cancel(f"r{i}")
        assert board.cancelled("old"), "a full ring minus one must still hold the first id"
        board.cancel("one-more")
        assert not board.cancelled("old")
        assert board.cancelled("one-more")


def test_rule3_only_the_cancelled_id_reads_cancelled(tmp_path: Path) -> None:
    with CancelBoard.open(tmp_path / "board") as board:
        board.cancel("resp_1")
        assert board.cancelled("resp_1")
        assert not board.cancelled("resp_2")
        assert not board.cancelled("resp_1 ")
        assert board.cancelled_at("resp_2") is None


def _cancel_in_child(path: str, request_id: str) -> None:
    with CancelBoard.open(Path(path)) as board:
        board.cancel(request_id)
        board.record_stop(request_id, "talker")


def test_rule4_a_cancel_written_by_another_process_is_seen_with_its_stop_times(
    tmp_path: Path,
) -> None:
    path = tmp_path / "board"
    with CancelBoard.open(path) as board:
        before = time.monotonic_ns()
        child = multiprocessing.get_context("spawn").Process(
            target=_cancel_in_child, args=(str(path), "resp_9")
        )
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert board.cancelled("resp_9")
        at = board.cancelled_at("resp_9")
        assert at is not None and at >= before
        stops = board.stops("resp_9")
        assert [s.stage for s in stops] == ["talker"]
        assert stops[0].t_ns >= at


def test_reopening_keeps_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "board"
    with CancelBoard.open(path) as board:
        board.cancel("kept")
    with CancelBoard.open(path) as board:
        assert board.cancelled("kept")


def test_a_file_that_is_not_a_board_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "board"
    path.write_bytes(b"x" * SIZE)
    with pytest.raises(ValueError, match="not a cancel board"):
        CancelBoard.open(path)


def test_rule1_concurrent_writer_threads_never_lose_a_record(tmp_path: Path) -> None:
    import threading

    with CancelBoard.open(tmp_path / "board") as board:

        def write(prefix: str) -> None:
            for i in range(200):
                board.record_stop(f"{prefix}{i}", "llm")

        threads = [threading.Thread(target=write, args=(f"t{n}-",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(board.stops(f"t{n}-{i}") for n in range(4) for i in range(200))
