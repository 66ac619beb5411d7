"""The page's `playback.ack`s of a response, as the Chromium tests read them (`turntaker.acks`).

player.js makes two kinds: progress ACKs while the response plays (rule 6: every 250 ms, every
100 ms with the server's echo cancellation; never while paused, cut off or heard in full), and,
last, the one final ACK of rule 3, made when the worklet reports the response cleared or played to
its end. The page's record does not say which is which; order and time tell them apart.
"""

from __future__ import annotations

from typing import Any

RATE = 24000
# Five worklet reports of 1200 frames, each rounded up to whole 128-frame render quanta: the
# input's move between two progress ACKs without echo cancellation (player.js rule 6).
PROGRESS_STEP_MS = 5 * 1280 * 1000 / RATE


def of(tt: dict[str, Any], rid: str) -> list[dict[str, Any]]:
    """Every ACK the page made of `rid`, in order."""
    return [a for a in tt["acks"] if a["response_id"] == rid]


def final(tt: dict[str, Any], rid: str) -> dict[str, Any]:
    """`rid`'s final ACK, once the worklet has reported it cleared or finished: its last one. What
    every ACK of it must be is checked on the way: each says its cursor in whole ms of the samples
    it counts, and the cursors only move forward (progress, then the final word)."""
    acks = of(tt, rid)
    assert acks, f"no playback.ack of {rid}"
    samples = [a["samples"] for a in acks]
    assert samples == sorted(samples), f"an ACK of {rid} moved its cursor backwards: {samples}"
    assert all(a["played_ms"] == a["samples"] * 1000 // RATE for a in acks), acks
    # At most one progress ACK can say as much as the final one: a report of all the audio
    # before the page knew the response was over (it starved at its end, or paused there).
    assert samples.count(samples[-1]) <= 2, f"{rid} was acknowledged again after its end: {acks}"
    return acks[-1]


def final_of_cut(tt: dict[str, Any], rid: str, since: float) -> dict[str, Any]:
    """`rid`'s final ACK when the page stopped playing it at page time `since` (it cut it off or
    paused it there, then it was cleared): that ACK came with the worklet's report of the clear,
    and no progress ACK came after `since`."""
    ack = final(tt, rid)
    clear = tt["clears"][rid]
    assert clear["t_silent"] is not None and ack["t"] >= clear["t_silent"], (
        f"the last ACK of {rid} came before the worklet cleared it: {ack} {clear}"
    )
    progress = of(tt, rid)[:-1]
    assert all(a["t"] <= since for a in progress), (
        f"a progress ACK of {rid} after it stopped playing at {since}: {progress}"
    )
    return ack


def answered_js(rid: str) -> str:
    """JS: the server has answered the last ACK the page made of `rid` (playback.acknowledged)."""
    return (
        "(() => { const t = window.turntaker;"
        f" const mine = t.acks.filter(a => a.response_id === '{rid}');"
        " return mine.length > 0 && t.acknowledged.some(a =>"
        f" a.response_id === '{rid}' && a.played_ms === mine[mine.length - 1].played_ms); }})()"
    )


def held(tt: dict[str, Any], rid: str) -> dict[str, Any]:
    """What the server holds of `rid`: its answer to the page's last ACK of it (the server answers
    each ACK, in order)."""
    answers: list[dict[str, Any]] = [a for a in tt["acknowledged"] if a["response_id"] == rid]
    assert answers, f"the server answered no ACK of {rid}"
    return answers[-1]
