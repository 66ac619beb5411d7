"""The page's turn-taking timeline in real Chromium: a barge-in draws the cut where it was heard.

The real server on the `null` pipeline (answers of fixed length streamed at real time) and the
fake microphone: a question, then a sentence in another voice while the answer plays. In the
default (immediate) mode the page cuts the answer at speech onset. The timeline is read as a
screen reader reads it (the list that stands for the canvas) and compared with the player's own
record of when the worklet went silent; the canvas is checked to hold the cut's colour on the
assistant lane.

`pytest -m readme tests/browser/test_timeline.py` runs a second one, deselected otherwise: it
refreshes the README's picture (docs/screenshot.png), the same barge-in on the pipeline that
really talks.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonServer
from tests.browser.conftest import write_wav
from tests.browser.page_wait import wait as _wait
from tests.conftest import REPO_ROOT, free_port
from tests.e2e.realtime_client import flite_speech, silence

Opener = Callable[..., Any]
ANSWER_TOKENS = 100  # 8 s of answer on `null`: long enough to speak over
GAP_S = 3.0  # the answer is being heard when the user speaks again
TOLERANCE_MS = 100
CUT_RGB = (0xCF, 0x22, 0x2E)  # timeline.js COLORS.cut
LONG_ANSWERS = "Answer every message with a long story of at least six sentences."

SPAN = re.compile(r"^(user|assistant) (\S+) from ([\d.]+) s(?:, ongoing| to ([\d.]+) s)")
MARK = re.compile(r"^(user|assistant) (\S+) at ([\d.]+) s(?:: (.*))?$")


@pytest.fixture(scope="module")
def null_server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    config = ServiceConfig(port=free_port(), triton_urls=(triton_server.grpc_url,), pipeline="null")
    with BackgroundServer(config) as server:
        yield server


def _listed(page: Any) -> list[str]:
    """The timeline as a screen reader reads it (timeline.js rule 3)."""
    lines: list[str] = page.eval_on_selector_all(
        "#timeline-list li", "els => els.map(e => e.textContent)"
    )
    return lines


def _spans(lines: list[str], lane: str, kind: str) -> list[tuple[float, float | None]]:
    found = [SPAN.match(line) for line in lines]
    return [
        (float(m[3]) * 1000, float(m[4]) * 1000 if m[4] else None)
        for m in found
        if m and m[1] == lane and m[2] == kind
    ]


def _marks(lines: list[str], lane: str, kind: str) -> list[tuple[float, str]]:
    found = [MARK.match(line) for line in lines]
    return [(float(m[3]) * 1000, m[4] or "") for m in found if m and m[1] == lane and m[2] == kind]


def _barge_in(
    open_page: Opener, server: BackgroundServer, tmp_path: Path, session: str, gap_s: float = GAP_S
) -> Any:
    """A question, then a sentence over its answer; returns the page once the sentence is the
    next turn and its answer has begun."""
    question = flite_speech("Tell me a long story about a dragon.")
    sentence = flite_speech("Stop. What is the capital of France?", voice="kal")
    wav = write_wav(
        tmp_path / "mic.wav",
        np.concatenate([silence(0.5), question, silence(gap_s), sentence, silence(6)]),
    )
    page = open_page(wav, server.http_url + "/")
    page.click("#connect")
    page.wait_for_function("window.turntaker.state === 'connected'", timeout=10_000)
    page.evaluate(
        "window.turntaker.send({type: 'session.update', "
        f"session: {{type: 'realtime', {session}}}}})"
    )
    _wait(
        page,
        "Object.values(window.turntaker.clears).some(c => c.t_silent !== null)",
        "the sentence cuts the answer off where it is heard",
        40,
    )
    _wait(
        page,
        "window.turntaker.events.filter(e => e.type === 'input_audio_buffer.committed')"
        ".length >= 2",
        "the interrupting sentence is the next turn",
        20,
    )
    _wait(
        page,
        "Object.values(window.turntaker.playedBy).filter(v => v > 0).length >= 2",
        "its answer is heard",
        40,
    )
    time.sleep(1.5)
    return page


def test_a_barge_in_draws_the_cut_where_the_playback_stopped(
    null_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    page = _barge_in(open_page, null_server, tmp_path, f"max_output_tokens: {ANSWER_TOKENS}")
    tt = page.evaluate("window.turntaker")
    clear = next(c for c in tt["clears"].values() if c["t_silent"] is not None)
    assert clear["trigger"] == "speech_started", clear
    assert clear["played"] > 0, f"the sentence came before any answer was heard: {clear}"
    lines = _listed(page)
    print("\n" + "\n".join(lines))

    (cut,) = _marks(lines, "assistant", "cut")
    assert abs(cut[0] - clear["t_silent"]) <= TOLERANCE_MS, (
        f"the cut is drawn where the playback stopped: {cut} vs t_silent {clear['t_silent']}"
    )
    assert cut[1].startswith(f"cut at {clear['played'] / 24000:.2f} s of the answer"), cut
    # The answer's audio up to the cut: one span, or several where its queue starved.
    before = [span for span in _spans(lines, "assistant", "audio") if span[0] < cut[0]]
    audio = [(start, end) for start, end in before if end is not None]
    assert audio and len(audio) == len(before), f"the answer's audio is over at the cut: {before}"
    assert cut[0] - TOLERANCE_MS <= audio[-1][1] <= cut[0], (
        f"the answer's audio ends at the cut: {audio}"
    )
    heard = sum(end - start for start, end in audio)
    assert abs(heard - clear["played"] / 24) <= TOLERANCE_MS, (
        f"the spans are as long as what was heard ({clear['played'] / 24:.0f} ms): {audio}"
    )
    (barge_in,) = _spans(lines, "user", "barge-in")
    assert barge_in[0] < cut[0] and (barge_in[1] is None or barge_in[1] > cut[0]), (
        f"the user's speech overlaps the cut: {barge_in}, cut at {cut[0]}"
    )
    (first_turn, *_) = _spans(lines, "user", "speech")
    assert first_turn[1] is not None and first_turn[1] < audio[0][0], first_turn
    eots = _marks(lines, "user", "end-of-turn")
    assert [e[1] for e in eots] == ["end of turn: silence 500 ms"] * 2, eots

    # And the canvas draws it: the cut's red on the assistant lane.
    red = page.evaluate(
        """([r, g, b]) => {
          const c = document.getElementById('timeline');
          const dpr = c.width / c.clientWidth;
          const y0 = Math.round(84 * dpr), y1 = Math.round(112 * dpr);
          const d = c.getContext('2d').getImageData(0, y0, c.width, y1 - y0).data;
          let n = 0;
          for (let i = 0; i < d.length; i += 4) {
            const near = (k, v) => Math.abs(d[i + k] - v) < 8;
            if (near(0, r) && near(1, g) && near(2, b)) n++;
          }
          return n;
        }""",
        list(CUT_RGB),
    )
    assert red > 20, f"no cut drawn on the canvas's assistant lane ({red} red pixels)"


@pytest.mark.readme
def test_readme_screenshot_of_a_barge_in(
    realtime_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    """The README's picture: the page after a barge-in on the pipeline that really talks (both
    transcripts shown), taken on request only."""
    page = _barge_in(
        open_page,
        realtime_server,
        tmp_path,
        f"instructions: '{LONG_ANSWERS}', max_output_tokens: 160",
        gap_s=9.0,  # on CPU the pipeline that talks takes seconds to its first audio
    )
    shot = REPO_ROOT / "docs" / "screenshot.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
