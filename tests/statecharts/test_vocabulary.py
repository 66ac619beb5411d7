"""One vocabulary (statecharts/vocabulary.py rule 1): the layers above the charts import these
words, never define their own."""

from __future__ import annotations

from typing import get_args

from orchestrator.protocol import response, server, session_config
from orchestrator.session.turns import overlap
from statecharts import effects, session, vocabulary


def test_rule1_each_word_is_the_same_object_in_every_layer() -> None:
    assert server.OverlapReason is vocabulary.OverlapReason
    assert server.OverlapDecisionKind is vocabulary.OverlapDecisionKind
    assert session_config.InterruptionMode is vocabulary.InterruptionMode
    assert overlap.Heard is vocabulary.Heard
    assert session.Heard is vocabulary.Heard
    assert effects.OverlapReason is vocabulary.OverlapReason


def test_rule1_the_wire_status_is_the_terminal_statuses_and_in_progress() -> None:
    flat: set[str] = set()
    for arg in get_args(response.ResponseStatus):
        flat.update(get_args(arg) or (arg,))
    assert flat == {"in_progress", *get_args(vocabulary.TerminalStatus)}
