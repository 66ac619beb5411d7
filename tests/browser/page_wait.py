"""Waiting on the page in the Chromium tests: one helper, so a timeout reads the same in each."""

from __future__ import annotations

from typing import Any

from playwright import sync_api


def wait(page: Any, condition: str, rule: str, timeout_s: float) -> None:
    """Wait for a JS condition; a timeout fails with the rule it guards, the page's connection
    state and its log (without the streams of deltas: what happened, in order)."""
    try:
        page.wait_for_function(condition, timeout=timeout_s * 1000)
    except sync_api.TimeoutError:
        lines = [x for x in page.inner_text("#log").splitlines() if ".delta" not in x]
        log = "\n".join(lines[-40:])
        state = page.evaluate("window.turntaker && window.turntaker.state")
        raise AssertionError(
            f"{rule}: not within {timeout_s} s (state {state!r}). Page log:\n{log}"
        ) from None
