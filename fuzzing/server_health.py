"""What a live server says about itself during a fuzz run: its error logs, /metrics, /healthz.

Rules:
- The server runs in this process (`BackgroundServer`), so every record it logs at ERROR or
  above is caught (`capture_server_errors`), with the exceptions inside exception groups and
  where each was raised; any one is a failure of the run.
- After a run `/healthz` must be ok and the active-session gauge back where it was; sessions
  end a moment after their sockets close, so the gauge is polled (`wait_for_metric`).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from fuzzing.inputs import Json


class ServerErrors(logging.Handler):
    """Log records at ERROR or above from the server running in this process."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += " (" + "; ".join(_leaves(record.exc_info[1])) + ")"
        self.records.append(f"{record.name}: {text}")


def _leaves(error: BaseException) -> list[str]:
    """The exceptions inside (nested) exception groups, each with where it was raised."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    where = ""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
    return [f"{type(error).__name__}: {error}{where}"]


@contextmanager
def capture_server_errors() -> Iterator[ServerErrors]:
    handler = ServerErrors()
    loggers = [logging.getLogger(), logging.getLogger("hypercorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def metric_value(http_url: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """One sample of the server's /metrics (None when absent)."""
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in (labels or {}).items())
    prefix = f"{name}{{{want}}} " if want else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


def healthz(http_url: str) -> Json:
    with urllib.request.urlopen(f"{http_url}/healthz", timeout=10) as response:
        return json.loads(response.read())


def wait_for_metric(http_url: str, name: str, want: float, timeout_s: float = 10.0) -> float | None:
    """Poll until the metric equals `want` (sessions close a moment after their sockets)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = metric_value(http_url, name)
        if value == want or time.monotonic() > deadline:
            return value
        time.sleep(0.1)
