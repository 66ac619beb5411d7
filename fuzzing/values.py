"""The values the fuzzer's strategies are made of: text, ids, audio, JSON, references.

Rules:
- Audio is whole 16-bit samples, at most 320 bytes: under every input format it stays well
  below the 100 ms that would make Whisper transcribe a committed turn (the live models are
  slow; the fuzzer is not a load test).
- Huge strings (up to 1 MiB) come from two small draws (Hypothesis cannot draw a megabyte).
- References (`ITEM_REFS`, `RESPONSE_REFS`) mix placeholders for what the session made with
  ids it may or may not hold; the runners fill the placeholders in (`fuzzing.inputs`).
- Hypothesis starts from, and leans towards, the ends of a range and the first branch of a
  `one_of`: `one_in` and `weighted` say how often a choice really comes up.
"""

from __future__ import annotations

import base64
import string
from functools import cache
from typing import Any, Final, TypeVar

from hypothesis import strategies as st

from fuzzing.inputs import FRESH, LAST_ITEM, LAST_RESPONSE, SID

T = TypeVar("T")


_ASCII_UNITS: Final = st.text(string.ascii_letters + string.digits + " _-", min_size=1, max_size=4)


@cache  # One strategy per n: each new one would be validated again when drawn from.
def one_in(n: int) -> st.SearchStrategy[bool]:
    # Hypothesis starts from, and leans towards, the ends of a range; its middle comes up
    # about once in n draws.
    return st.integers(0, n - 1).map(lambda i: i == n // 2)


def repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def huge(max_size: int) -> st.SearchStrategy[str]:
    """Long strings from two small draws (Hypothesis could not draw a megabyte itself)."""
    return st.builds(
        repeat,
        st.one_of(_ASCII_UNITS, _ASCII_UNITS, st.sampled_from(["é", "€", "😀", '"', "\\"])),
        st.integers(16 * 1024, max_size),
    )


HUGE_TEXT: Final = huge(1024 * 1024)
TEXT: Final = st.text(max_size=40)
SHORT_ID: Final = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=24)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def even(data: bytes) -> bytes:
    return data[: len(data) - len(data) % 2]


# Whole 16-bit samples, at most 320 bytes: under every input format this stays well below the
# 100 ms that would make Whisper transcribe a committed turn.
AUDIO: Final = st.one_of(
    st.binary(max_size=320).map(even),
    st.integers(0, 160).map(lambda n: bytes(2 * n)),
)
BAD_B64: Final = st.one_of(
    st.sampled_from(["!!!!", "AAA", "A", "A===", "AA=A", "YW Jj", "YWJj\n", "AAAA====", "%%", "é"]),
    st.builds(
        lambda n, bad: "A" * (4 * n) + bad,
        st.integers(1, 256 * 1024),
        st.sampled_from(["!", "A", "AA", "="]),
    ),
)
PNG: Final = st.binary(min_size=1, max_size=64).map(lambda b: "data:image/png;base64," + b64(b))

EVENT_IDS: Final = st.one_of(
    st.none(),
    st.none(),
    st.integers(0, 10**6).map(lambda n: f"evt_{n}"),
    st.integers(0, 10**6).map(lambda n: f"evt_{n}"),
    # Never a placeholder (Hypothesis draws strings from the code's constants too): a runner
    # would replace it, and the error would rightly name another id than the input says.
    TEXT.filter(lambda text: "@@" not in text),
    huge(64 * 1024),
)
# Items the session may or may not hold: its latest, a fresh one, the reserved "root", the id
# the server would give its next items (a client can predict them), or any string.
ITEM_REFS: Final = st.one_of(
    st.sampled_from([LAST_ITEM, LAST_ITEM, FRESH, "root", "item_0", ""]),
    st.integers(1, 40).map(lambda n: f"item_{SID}_{n}"),
    SHORT_ID,
    TEXT,
)
RESPONSE_REFS: Final = st.one_of(
    st.sampled_from([LAST_RESPONSE, LAST_RESPONSE, "resp_0", ""]),
    st.integers(1, 40).map(lambda n: f"resp_{SID}_{n}"),
    SHORT_ID,
)
SMALL_JSON: Final = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
UNKNOWN_KEYS: Final = st.one_of(
    st.sampled_from(
        ["foo", "extra", "timestamp", "client", "object", "tools", "__proto__", "", "évènement"]
    ),
    SHORT_ID.map(lambda s: "x_" + s),
)


def weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """Branches in proportion to their weights (one_of leans hard on its first branch)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(table).flatmap(lambda strategy: strategy)


def optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)
