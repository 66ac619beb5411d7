"""The far-end reference's rules (far_end.py): output audio placed on the input timeline."""

from __future__ import annotations

import numpy as np

from orchestrator.session.echo.far_end import FarEnd, Pcm

RATE = 24000


def ramp(start: int, n: int) -> Pcm:
    """Samples whose values say which sample of the response they are (1-based)."""
    return np.arange(start + 1, start + n + 1, dtype=np.int16)


def test_rule1_silence_where_nothing_plays_and_the_input_is_the_clock() -> None:
    far = FarEnd(max_ahead=RATE)
    assert far.take(480).tolist() == [0] * 480
    assert far.position == 480


def test_rule2_audio_plays_from_where_it_was_sent_at_real_time() -> None:
    far = FarEnd(max_ahead=RATE)
    far.take(100)
    far.sent("r1", ramp(0, 300), 0)
    far.sent("r1", ramp(300, 300), 300)  # sent ahead of playback: queued behind
    out = np.concatenate([far.take(250), far.take(250), far.take(250)])
    assert out[:600].tolist() == list(range(1, 601))
    assert out[600:].tolist() == [0] * 150


def test_rule2_an_underrun_waits_and_the_next_audio_starts_where_it_is_sent() -> None:
    far = FarEnd(max_ahead=RATE)
    far.sent("r1", ramp(0, 100), 0)
    assert far.take(160).tolist() == list(range(1, 101)) + [0] * 60
    far.take(40)  # the backend is late: nothing plays
    far.sent("r1", ramp(100, 50), 100)
    assert far.take(80).tolist() == list(range(101, 151)) + [0] * 30


def test_rule3_a_pause_holds_the_sample_and_a_resume_plays_on_from_it() -> None:
    far = FarEnd(max_ahead=RATE)
    far.sent("r1", ramp(0, 400), 0)
    first = far.take(100)
    far.pause()
    held = far.take(200)
    far.resume()
    after = far.take(100)
    assert first.tolist() == list(range(1, 101))
    assert held.tolist() == [0] * 200
    assert after.tolist() == list(range(101, 201))


def test_rule4_a_clear_silences_the_reference_at_once() -> None:
    far = FarEnd(max_ahead=RATE)
    far.sent("r1", ramp(0, 1000), 0)
    far.take(100)
    far.clear()
    assert far.take(500).tolist() == [0] * 500
    assert far.queued == 0
    far.sent("r2", ramp(0, 10), 0)
    assert far.take(10).tolist() == list(range(1, 11))


def test_rule4_a_clear_of_a_reply_no_longer_playing_drops_nothing() -> None:
    far = FarEnd(max_ahead=RATE)
    far.sent("r1", ramp(0, 100), 0)
    far.take(100)  # r1 has played out
    far.sent("r2", ramp(0, 500), 0)
    far.clear("r1")  # a late truncate of r1
    assert far.take(100).tolist() == list(range(1, 101))
    far.clear("r2")  # r2's own clear stops it at once
    assert far.take(100).tolist() == [0] * 100 and far.queued == 0


def test_rule1_a_far_end_made_mid_session_starts_at_the_input_s_position() -> None:
    far = FarEnd(max_ahead=RATE, position=48_000)
    far.sent("r1", ramp(0, 10), 0, at=48_000)
    assert far.take(10).tolist() == list(range(1, 11))
    assert far.position == 48_010


def test_rule5_a_client_ahead_skips_what_it_has_played() -> None:
    far = FarEnd(max_ahead=RATE)
    far.sent("r1", ramp(0, 1000), 0)
    far.take(100)  # the reference is at sample 100
    far.played("r1", 10, RATE)  # the client says 240 samples (10 ms at 24 kHz)
    assert far.take(5).tolist() == list(range(241, 246))


def test_rule5_a_client_behind_delays_the_rest() -> None:
    far = FarEnd(max_ahead=RATE)
    far.sent("r1", ramp(0, 1000), 0)
    far.take(480)  # the reference is at sample 480
    far.played("r1", 10, RATE)  # the client has played 240
    out = far.take(300)
    assert out[:240].tolist() == [0] * 240, "what was handed out early is not handed again"
    assert out[240:].tolist() == list(range(481, 541))


def test_rule5_the_last_move_is_kept_where_and_by_how_much() -> None:
    far = FarEnd(max_ahead=RATE, tolerance=480)
    far.sent("r1", ramp(0, 4000), 0)
    far.take(1000)
    far.played("r1", 30, RATE)  # within the tolerance: no move
    assert far.moved_at is None and far.moved_by == 0
    far.played("r1", 10, RATE)  # the client has played 240 of the 1000: 760 later
    assert (far.moved_at, far.moved_by) == (1000, 760)
    far.take(1000)
    far.played("r1", 100, RATE, at=2100)  # 2400 played; the reference says 1240 + 100
    assert (far.moved_at, far.moved_by) == (2100, -1060)


def test_rule5_an_ack_of_another_response_changes_nothing() -> None:
    far = FarEnd(max_ahead=RATE)
    far.sent("r2", ramp(0, 100), 0)
    far.played("r1", 1000, RATE)
    assert far.take(3).tolist() == [1, 2, 3]


def test_rule6_bounded_what_waits_to_be_played() -> None:
    far = FarEnd(max_ahead=1000)
    for i in range(10):
        far.sent("r1", ramp(i * 400, 400), i * 400)
    assert far.queued == 1000
    out = far.take(2000)
    assert out[:1000].tolist() == list(range(1, 1001))
    assert out[1000:].tolist() == [0] * 1000


def test_rule5_a_small_difference_is_left_to_the_canceller() -> None:
    far = FarEnd(max_ahead=RATE, tolerance=480)
    far.sent("r1", ramp(0, 2000), 0)
    far.take(1000)
    far.played("r1", 30, RATE)  # 720 samples: 280 behind, within the tolerance
    assert far.take(3).tolist() == [1001, 1002, 1003]
    far.played("r1", 10, RATE)  # 240 samples: 763 behind, beyond it
    assert far.take(763).tolist() == [0] * 763
    assert far.take(2).tolist() == [1004, 1005]


def test_rule2_a_delta_late_within_the_slack_plays_in_step_with_the_client() -> None:
    far = FarEnd(max_ahead=RATE, slack=50)
    far.sent("r1", ramp(0, 100), 0)
    assert far.take(100).tolist() == list(range(1, 101))
    far.take(30)  # the next delta is 30 samples late: the client plays on from its buffer
    far.sent("r1", ramp(100, 100), 100)
    # Its first 30 samples were due while it was late: skipped, the rest in step.
    assert far.take(70).tolist() == list(range(131, 201))


def test_rule2_a_delta_later_than_the_slack_starts_where_it_is_sent() -> None:
    far = FarEnd(max_ahead=RATE, slack=50)
    far.sent("r1", ramp(0, 100), 0)
    far.take(100)
    far.take(80)  # a real underrun: the client ran dry too
    far.sent("r1", ramp(100, 100), 100)
    assert far.take(100).tolist() == list(range(101, 201))


def test_rule2_after_a_clear_there_is_nothing_to_play_on_from() -> None:
    far = FarEnd(max_ahead=RATE, slack=50)
    far.sent("r1", ramp(0, 100), 0)
    far.take(100)
    far.clear()
    far.take(30)
    far.sent("r2", ramp(0, 100), 0)
    assert far.take(100).tolist() == list(range(1, 101)), "a new answer starts from its first"


def test_rule1_a_delta_starts_where_the_client_stood_when_it_went_out() -> None:
    far = FarEnd(max_ahead=RATE)
    far.take(100)
    # The client's input was already at sample 160 (its appends still on their way).
    far.sent("r1", ramp(0, 100), 0, at=160)
    assert far.take(100).tolist() == [0] * 60 + list(range(1, 41))
    far.sent("r1", ramp(100, 100), 100, at=50)  # never before the position
    assert far.take(60).tolist() == list(range(41, 101))


def test_rule5_an_ack_is_read_at_where_the_client_stood_not_at_the_samples_processed() -> None:
    far = FarEnd(max_ahead=RATE, tolerance=20)
    far.sent("r1", ramp(0, 1000), 0)
    far.take(100)
    # The client's input was at sample 300 when it had played 300: in step, though only 100
    # of its samples have been processed yet (the rest wait in the mailbox).
    far.played("r1", 300 * 1000 // RATE, RATE, at=300)
    assert far.take(100).tolist() == list(range(101, 201))


def test_rule5_frequent_acks_correct_a_small_difference_sparse_ones_do_not() -> None:
    ms = RATE // 1000

    def after_stall(gap_ms: int) -> list[int]:
        far = FarEnd(max_ahead=RATE, tolerance=40 * ms, fine_tolerance=10 * ms, frequent=250 * ms)
        far.sent("r1", ramp(0, RATE), 0)
        far.take(100 * ms)
        far.played("r1", 100, RATE, 100 * ms, exact=True)  # in step
        far.take(gap_ms * ms)
        # The client's player stalled for one 20 ms tick: it is 20 ms behind.
        far.played("r1", 100 + gap_ms - 20, RATE, (100 + gap_ms) * ms, exact=True)
        return far.take(30 * ms).tolist()

    # Often: the reference waits out the client's stall (what it handed out meanwhile cannot
    # be handed out again) and plays on in step with it.
    played = (100 + 100) * ms
    assert after_stall(100) == [0] * 20 * ms + list(range(played + 1, played + 10 * ms + 1))
    played = (100 + 500) * ms
    assert after_stall(500) == list(range(played + 1, played + 30 * ms + 1)), "sparse"
