"""docs/protocol.md names every event and protocol error code the code knows.

The page is the project's own statement of its wire protocol; this keeps its lists real when
an event or a code is added (the session's own codes too).
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from orchestrator.protocol.client import CLIENT_EVENT_TYPES
from orchestrator.protocol.errors import ErrorCode
from orchestrator.protocol.server import SERVER_EVENT_TYPES

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"


def _names() -> set[str]:
    """Every code span of the page, with `a.b.c | d | e` read as a.b.c, a.b.d and a.b.e."""
    names: set[str] = set()
    for span in re.findall(r"`([^`]+)`", DOC.read_text()):
        first, *others = (part.strip() for part in span.split("|"))
        names.add(first)
        stem = first.rsplit(".", 1)[0]
        names.update(f"{stem}.{other}" for other in others)
    return names


def test_doc_lists_every_client_and_server_event() -> None:
    names = _names()
    assert CLIENT_EVENT_TYPES - names == set()
    assert SERVER_EVENT_TYPES - names == set()


def test_doc_lists_every_protocol_error_code() -> None:
    assert set(typing.get_args(ErrorCode)) - _names() == set()


def test_doc_lists_every_session_error_code() -> None:
    from orchestrator.session.core_types import CoreErrorCode

    assert set(typing.get_args(CoreErrorCode)) - _names() == set()


def test_doc_numbers_the_eight_rules() -> None:
    text = DOC.read_text()
    for n in range(1, 9):
        assert re.search(rf"^{n}\. \*\*", text, re.MULTILINE), f"rule {n}"
