"""The page at `/` in a real headless Chromium against the real server.

The fake microphone plays flite speech; the page's playback worklet plays the answer, telling the
server its cursor as it plays (progress `playback.ack`s). Barge-in is checked where it is heard:
the worklet stops within 200 ms of `output_audio_buffer.cleared`, the response's final
`playback.ack` equals what the worklet rendered of it, and nothing of it plays afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.service.config import load_config
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonServer
from tests.browser import acks as page_acks
from tests.browser.conftest import sync_api, write_wav
from tests.conftest import free_port
from tests.e2e.realtime_client import flite_speech, silence

Opener = Callable[[Path, str], "sync_api.Page"]

PAGE_KEY = "sk-page-0123456789"
LONG_ANSWERS = "Answer every message with a long story of at least six sentences."


def _connect(page: Any) -> None:
    page.click("#connect")
    page.wait_for_function("window.turntaker.state === 'connected'", timeout=10_000)


def test_page_plays_an_answer(
    realtime_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    question = flite_speech("What is the capital of France?")
    wav = write_wav(tmp_path / "mic.wav", np.concatenate([silence(0.5), question, silence(3)]))
    page = open_page(wav, realtime_server.http_url + "/")
    started = time.monotonic()
    _connect(page)
    page.wait_for_function("window.turntaker.played_ms > 0", timeout=30_000)
    first_audio_s = time.monotonic() - started
    # Let the answer play to its end: the page acknowledges the full played length.
    page.wait_for_function("window.turntaker.playbackState === 'finished'", timeout=30_000)
    tt = page.evaluate("window.turntaker")
    rid = tt["acks"][-1]["response_id"]
    ack = page_acks.final(tt, rid)
    assert ack["samples"] == tt["received"][rid] > 0, (ack, tt["received"])
    assert ack["played_ms"] == ack["samples"] * 1000 // 24000
    assert ack["item_id"], ack
    # Without echo cancellation too the page says its cursor as it plays (player.js rule 6):
    # about every 250 ms of its audio clock (five worklet reports), never more often.
    progress = page_acks.of(tt, rid)[:-1]
    assert len(progress) >= ack["played_ms"] // 300, f"too few progress ACKs: {progress}"
    assert all(a["item_id"] == ack["item_id"] and "input_ms" in a for a in progress), progress
    steps = np.diff([a["input_ms"] for a in progress])
    assert np.all(steps > page_acks.PROGRESS_STEP_MS - 0.01), steps
    if len(steps) >= 3:
        assert abs(np.median(steps) - page_acks.PROGRESS_STEP_MS) < 0.01, steps
    types = [e["type"] for e in tt["events"]]
    assert "playback.acknowledged" in types or _wait_type(page, "playback.acknowledged")
    assert "conversation.item.input_audio_transcription.completed" in types
    print(
        f"\nfirst answer audio heard {first_audio_s:.2f} s after connect; "
        f"answer played {ack['played_ms']} ms, {len(progress)} progress ACKs "
        f"(input steps {steps.tolist()} ms)"
    )
    # The page renders whole (the README's picture, of a barge-in, is test_timeline's).
    shot = tmp_path / "screenshot.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def _wait_type(page: Any, kind: str) -> bool:
    page.wait_for_function(
        f"window.turntaker.events.some(e => e.type === '{kind}')", timeout=10_000
    )
    return True


def test_barge_in_stops_playback_where_it_is_heard(
    realtime_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    question = flite_speech("Tell me a long story about a dragon and a knight.")
    interruption = flite_speech("Stop. What is the capital of France?", voice="kal")
    wav = write_wav(
        tmp_path / "mic.wav",
        np.concatenate([silence(0.5), question, silence(GAP_S), interruption, silence(3)]),
    )
    page = open_page(wav, realtime_server.http_url + "/")
    _connect(page)
    page.evaluate(
        "window.turntaker.send({type: 'session.update', session: {type: 'realtime', "
        f"instructions: '{LONG_ANSWERS}', max_output_tokens: 160}}}})"
    )
    page.wait_for_function(
        "Object.values(window.turntaker.clears).some(c => c.t_silent !== null && "
        "c.t_cleared_msg !== null)",
        timeout=40_000,
    )
    tt = page.evaluate("window.turntaker")
    rid, clear = next((k, c) for k, c in tt["clears"].items() if c["t_silent"] is not None)
    assert clear["played"] > 0, f"the interruption came before any answer was heard: {clear}"
    # Wait for the next answer to be heard, then look at the whole record.
    page.wait_for_function(
        f"Object.entries(window.turntaker.playedBy).some(([k, v]) => k !== '{rid}' && v > 0)",
        timeout=40_000,
    )
    time.sleep(0.5)
    tt = page.evaluate("window.turntaker")
    clear = tt["clears"][rid]
    silence_after_cleared_ms = clear["t_silent"] - clear["t_cleared_msg"]
    silence_after_trigger_ms = clear["t_silent"] - clear["t_trigger"]
    print(
        f"\nbarge-in on {rid}: trigger {clear['trigger']}, played {clear['played']} samples, "
        f"dropped {clear['dropped']}; silent {silence_after_trigger_ms:.1f} ms after the "
        f"trigger, {silence_after_cleared_ms:.1f} ms after output_audio_buffer.cleared"
    )
    assert silence_after_cleared_ms < 200
    ack = page_acks.final_of_cut(tt, rid, clear["t_trigger"])
    assert ack["samples"] == clear["played"]
    assert ack["played_ms"] == clear["played"] * 1000 // 24000
    # Nothing of the interrupted response played after the clear.
    later = [s for s in tt["statsLog"] if s["rid"] == rid and s["t"] > clear["t_silent"]]
    assert all(s["played"] == clear["played"] for s in later), later[-3:]
    assert tt["playedBy"][rid] * 24 == pytest.approx(clear["played"])
    # And the server saw the barge-in: the cleared event names that response.
    cleared = [e for e in tt["events"] if e["type"] == "output_audio_buffer.cleared"]
    assert any(e.get("response_id") == rid for e in cleared)


def test_output_audio_buffer_cleared_silences_the_worklet(
    realtime_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    """The clear comes from the server alone (asked for with `output_audio_buffer.clear`): the
    time from the `output_audio_buffer.cleared` message to silence in the worklet."""
    question = flite_speech("Tell me a long story about a dragon and a knight.")
    wav = write_wav(tmp_path / "mic.wav", np.concatenate([silence(0.5), question, silence(3)]))
    page = open_page(wav, realtime_server.http_url + "/")
    _connect(page)
    page.evaluate(
        "window.turntaker.send({type: 'session.update', session: {type: 'realtime', "
        f"instructions: '{LONG_ANSWERS}', max_output_tokens: 160}}}})"
    )
    page.wait_for_function("window.turntaker.played_ms > 300", timeout=30_000)
    page.evaluate(
        "(() => { const s = window.turntaker.statsLog;"
        " window.turntaker.send({type: 'output_audio_buffer.clear',"
        " response_id: s[s.length - 1].rid}); })()"
    )
    page.wait_for_function(
        "Object.values(window.turntaker.clears).some(c => c.t_silent !== null && "
        "c.t_cleared_msg !== null)",
        timeout=10_000,
    )
    time.sleep(0.5)
    tt = page.evaluate("window.turntaker")
    rid, clear = next((k, c) for k, c in tt["clears"].items() if c["t_silent"] is not None)
    assert clear["trigger"] == "output_audio_buffer.cleared"
    silence_ms = clear["t_silent"] - clear["t_cleared_msg"]
    print(
        f"\noutput_audio_buffer.cleared -> worklet silent: {silence_ms:.1f} ms "
        f"(played {clear['played']} samples, dropped {clear['dropped']})"
    )
    assert 0 <= silence_ms < 200
    assert page_acks.final_of_cut(tt, rid, clear["t_trigger"])["samples"] == clear["played"]
    later = [s for s in tt["statsLog"] if s["rid"] == rid and s["t"] > clear["t_silent"]]
    assert all(s["played"] == clear["played"] for s in later), later[-3:]


# Long enough after the question that the answer is being heard when the user speaks again.
GAP_S = 5.0


@pytest.fixture
def keyed_server(triton_server: TritonServer, tmp_path: Path) -> Iterator[BackgroundServer]:
    keys = tmp_path / "keys"
    keys.write_text(f"page:{PAGE_KEY}\n")
    config = load_config(
        env={},
        overrides={
            "port": free_port(),
            "triton_urls": (triton_server.grpc_url,),
            "api_keys_file": keys,
        },
    )
    with BackgroundServer(config) as server:
        yield server


def test_the_page_connects_with_an_api_key_and_shows_why_a_wrong_one_is_refused(
    keyed_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "mic.wav", silence(2))
    page = open_page(wav, keyed_server.http_url + "/")
    page.fill("#key", PAGE_KEY + "x")
    page.click("#connect")
    page.wait_for_function("window.turntaker.state.startsWith('disconnected (')", timeout=10_000)
    assert page.evaluate("window.turntaker.state") == "disconnected (1008: invalid API key)"
    page.fill("#key", PAGE_KEY)
    _connect(page)
    page.wait_for_function(
        "window.turntaker.events.some(e => e.type === 'session.updated')", timeout=10_000
    )


def test_the_page_asks_for_semantic_vad_with_preemptive_responses_and_is_answered(
    realtime_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    """The page offers the turn-end type, eagerness and preemptive responses: a user who picks
    the model (semantic_vad) gets it from the server, and the answer plays as before."""
    question = flite_speech("What is the weather like in Paris today?")
    wav = write_wav(tmp_path / "mic.wav", np.concatenate([silence(0.8), question, silence(3)]))
    page = open_page(wav, realtime_server.http_url + "/")
    page.select_option("#turn-type", "semantic_vad")
    page.select_option("#eagerness", "high")
    page.check("#preemptive")
    assert page.is_disabled("#silence") and not page.is_disabled("#eagerness")
    _connect(page)
    page.wait_for_function(
        "window.turntaker.events.some(e => e.type === 'session.updated' && "
        "e.turn_detection.type === 'semantic_vad')",
        timeout=10_000,
    )
    page.wait_for_function("window.turntaker.acks.length > 0", timeout=40_000)
    tt = page.evaluate("window.turntaker")
    [updated] = [e for e in tt["events"] if e["type"] == "session.updated"]
    assert updated["turn_detection"]["eagerness"] == "high"
    assert updated["turn_detection"]["preemptive_response"] is True
    types = [e["type"] for e in tt["events"]]
    assert types.index("input_audio_buffer.committed") < types.index("response.created")
    assert tt["acks"][0]["played_ms"] > 0


def test_with_echo_cancellation_the_page_acknowledges_as_it_plays_where_its_input_stood(
    realtime_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    """player.js rule 6 over input-position.js: with the server's echo cancellation on, the page
    acknowledges the answer about every 100 ms of playback, each ACK with `input_ms`, so the
    server can place the echo's reference exactly (docs/protocol.md, "playback.ack"). The mic
    and the player run on one audio clock: between two ACKs the input moves by exactly two
    worklet reports' frames, and never less than the playback did (an answer may starve, the
    input never does)."""
    question = flite_speech("What is the capital of France?")
    wav = write_wav(tmp_path / "mic.wav", np.concatenate([silence(0.5), question, silence(5)]))
    page = open_page(wav, realtime_server.http_url + "/")
    page.check("#echo")
    _connect(page)
    page.wait_for_function(
        "window.turntaker.acks.filter(a => a.input_ms !== undefined).length >= 6", timeout=40_000
    )
    tt = page.evaluate("window.turntaker")
    rid = tt["acks"][0]["response_id"]
    acks = [a for a in tt["acks"] if a["response_id"] == rid]
    assert len(acks) >= 6 and all("input_ms" in a for a in acks), acks
    played = [a["samples"] * 1000 / 24000 for a in acks]
    heard = [a["input_ms"] for a in acks]
    # Two worklet reports each: 50 ms of frames rounded up to whole 128-frame render quanta,
    # 2 x 1280 frames = 106.7 ms (more after a report where the answer starved); the last may
    # be the ACK of its end, which comes when it ends.
    steps = np.diff(heard)
    assert abs(np.median(steps) - 2 * 1280 / 24) < 0.01, f"one ACK per ~100 ms of audio: {steps}"
    assert np.all(steps[:-1] > 2 * 1280 / 24 - 0.01), steps
    lead = np.diff(np.array(heard) - np.array(played))
    assert np.all(lead > -0.01), f"playback ran ahead of the audio clock: {lead}"
    assert 0 < heard[0] < 10_000, heard[0]
    answered = [e for e in tt["events"] if e["type"] == "playback.acknowledged"]
    assert answered, "the server answers the progress ACKs"
    assert not [e for e in tt["events"] if e["type"] == "error"], tt["events"]
