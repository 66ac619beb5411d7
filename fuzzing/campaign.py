"""A fuzz campaign: Hypothesis draws scripts and a runner judges each, session after session.

Rules:
- `strict` (CI): the first failing session fails the campaign, after Hypothesis shrinks it to
  a short one (cheap in memory, slow but worth it over sockets); the exception's message is
  the shrunk failure's report.
- Not strict (the long run): no shrinking; every failure is kept in the runner's stats and the
  campaign goes on.
- Derandomized unless a seed is given, so a CI failure reproduces on the next run; a seed
  explores elsewhere and is printed with any failure (Hypothesis's blob).
- `check` runs after each session (e.g. "the server logged no error"); an AssertionError there
  counts as that session's failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded
from hypothesis import strategies as st

from fuzzing.inputs import Script
from fuzzing.results import Failure


class Runner(Protocol):
    def run(self, script: Script) -> list[Failure]: ...


def campaign(
    runner: Runner,
    strategy: st.SearchStrategy[Script],
    sessions: int,
    *,
    seed: int | None = None,
    strict: bool = True,
    check: Callable[[], None] | None = None,
) -> None:
    """Run `sessions` drawn scripts through `runner` (AssertionError on failure if strict)."""
    phases = (Phase.explicit, Phase.generate, Phase.shrink) if strict else (Phase.generate,)

    @settings(
        max_examples=sessions,
        derandomize=seed is None,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=seed is not None,
    )
    @given(strategy)
    def one_session(script: Script) -> None:
        failures = runner.run(script)
        if strict:
            assert not failures, failures[0].report()
        if check is not None:
            check()

    if seed is not None:
        seeded(seed)(one_session)
    one_session()
