"""A preemptive response's held output: the bounds of `Preemption.hold`."""

from __future__ import annotations

from orchestrator.session.actions import InferenceRequest, StartBackend
from orchestrator.session.inputs import BackendAudio, BackendDone, BackendEvent, BackendText
from orchestrator.session.turns.preemption import Preemption

OVERHEAD = 64  # what every held event counts besides its payload


def preemption(max_events: int = 100, max_bytes: int = 1 << 20) -> Preemption:
    request = InferenceRequest(
        instructions="", items=(), output_modalities=("audio",), max_output_tokens=None
    )
    return Preemption(
        start=StartBackend(response_id="resp_1", seq=7, request=request),
        item_id="item_1",
        max_events=max_events,
        max_bytes=max_bytes,
    )


def audio(n: int, text: str = "") -> BackendAudio:
    return BackendAudio("resp_1", 7, bytes(n), text)


def test_response_id_and_seq_are_the_start_s() -> None:
    """Rule: it runs under the response id and fence number it keeps if adopted."""
    p = preemption()
    assert (p.response_id, p.seq) == ("resp_1", 7)


def test_hold_keeps_everything_in_order() -> None:
    """Rule: everything its stream says is held here, in order."""
    p = preemption()
    events: list[BackendEvent] = [
        BackendText("resp_1", 7, "Hel"),
        audio(960, "lo"),
        BackendText("resp_1", 7, " there"),
        audio(480),
        BackendDone("resp_1", 7, output_tokens=3),
    ]
    assert all(p.hold(e) for e in events)
    assert list(p.held) == events
    assert p.held_bytes == 5 * OVERHEAD + 3 + 960 + 2 + 6 + 480


def test_hold_refuses_past_max_events_and_adds_nothing() -> None:
    """Rule: bounded by `max_events`: `hold` returns False once over it, and keeps nothing
    of the refused event."""
    p = preemption(max_events=3)
    first = [BackendText("resp_1", 7, str(i)) for i in range(3)]
    assert all(p.hold(e) for e in first)  # exactly max_events fit
    size = p.held_bytes
    assert p.hold(BackendText("resp_1", 7, "x")) is False
    assert list(p.held) == first and p.held_bytes == size


def test_hold_refuses_past_max_bytes_and_adds_nothing() -> None:
    """Rule: bounded by `max_bytes`: an event that would pass it is refused and not held; one
    that reaches it exactly is held."""
    p = preemption(max_bytes=2 * OVERHEAD + 1000)
    assert p.hold(audio(500))
    assert p.hold(audio(500))  # exactly max_bytes
    assert p.held_bytes == 2 * OVERHEAD + 1000
    assert p.hold(BackendDone("resp_1", 7)) is False  # even the bare overhead
    assert p.hold(audio(1)) is False
    assert len(p.held) == 2 and p.held_bytes == 2 * OVERHEAD + 1000


def test_hold_counts_text_towards_max_bytes() -> None:
    """Rule: the text an event carries counts towards `max_bytes`, audio's and text's."""
    p = preemption(max_bytes=OVERHEAD + 10)
    assert p.hold(BackendText("resp_1", 7, "x" * 11)) is False
    assert p.hold(audio(5, "y" * 6)) is False
    assert p.hold(audio(4, "y" * 6)) is True
    assert p.held_bytes == OVERHEAD + 10


def test_a_single_event_over_max_bytes_is_refused() -> None:
    """Rule: the bound holds for the first event too: nothing is held past it."""
    p = preemption(max_bytes=1000)
    assert p.hold(audio(2000)) is False
    assert not p.held and p.held_bytes == 0


def test_take_held_returns_in_order_and_empties() -> None:
    """Rule: adopted, the held output is replayed in order; after it nothing is held and the
    bounds start over."""
    p = preemption(max_events=2, max_bytes=2 * OVERHEAD + 200)
    events: list[BackendEvent] = [audio(100), audio(100)]
    assert all(p.hold(e) for e in events)
    assert p.hold(audio(1)) is False
    assert p.take_held() == events
    assert not p.held and p.held_bytes == 0
    assert p.take_held() == []
    assert all(p.hold(e) for e in events)  # the full bounds again
