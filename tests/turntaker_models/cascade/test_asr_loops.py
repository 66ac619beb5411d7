"""`loops`: when a sure short-window turn transcript still goes to the full path."""

from __future__ import annotations

import pytest

from turntaker_models.cascade.asr import loops


@pytest.mark.parametrize(
    "text",
    [
        "Tell me a joke. Tell me a joke.",
        "Hello there Hello there",
        "Can you say that again? Can you say that again?",
        "turn off the lights and turn off the lights",
    ],
)
def test_a_transcript_that_says_itself_again_loops(text: str) -> None:
    assert loops(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Yeah.",
        "Yeah, yeah.",
        "What is the capital of France?",
        "Please book a table for two near the window tomorrow evening.",
        "No, no, I said the other one.",
    ],
)
def test_ordinary_transcripts_do_not_loop(text: str) -> None:
    assert not loops(text)
