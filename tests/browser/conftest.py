"""Headless Chromium (Debian's build, driven by Playwright) with a wav file as the microphone."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from playwright import sync_api
from scipy.io import wavfile

from bench.echo_page import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.realtime_client import RATE, Audio, pcm16


def write_wav(path: Path, audio: Audio) -> Path:
    wavfile.write(path, RATE, np.frombuffer(pcm16(audio), "<i2"))
    return path


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[sync_api.Playwright]:
    # Missing parts fail loudly: `make test` installs both with apt.
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    assert shutil.which("flite"), "flite is missing: apt-get install flite"
    with sync_api.sync_playwright() as driver:
        yield driver


@pytest.fixture
def open_page(
    playwright_driver: sync_api.Playwright,
) -> Iterator[Callable[[Path, str], sync_api.Page]]:
    """Launch a browser whose microphone plays `wav` once, and open `url` in it."""
    browsers: list[sync_api.Browser] = []

    def opener(wav: Path, url: str) -> sync_api.Page:
        # The page bench's browser and flags (bench/ may not import from tests/), without the
        # autoplay flag it adds to its own sessions.
        browser = playwright_driver.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={wav.resolve()}%noloop"],
        )
        browsers.append(browser)
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        page.goto(url)
        return page

    yield opener
    for browser in browsers:
        browser.close()
