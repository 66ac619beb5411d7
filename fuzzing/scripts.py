"""Scripts: one WebSocket session of exactly `length` inputs, the fuzzer's unit of work.

Rules:
- The first input sets the session up: turn detection off (mostly) and replies of at most a
  few tokens, so the slow models behind a live server stay quick.
- Each later step is one valid, mutated or raw input, or an out-of-order sequence (cut at
  `length`).
- At most `max_responses` inputs may start a response; later ones become a harmless
  `conversation.context.retrieve`.
- One script in about 20 ends with a non-UTF-8 text frame, which ends the connection.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

from hypothesis import strategies as st

from fuzzing.inputs import FuzzInput, Json, Script
from fuzzing.mutations import mutated_inputs
from fuzzing.raw_frames import bad_utf8_text_frame, raw_inputs
from fuzzing.sequences import sequences
from fuzzing.valid import long_appends, valid_inputs
from fuzzing.values import one_in


@cache
def _setup(vad_one_in: int) -> st.SearchStrategy[FuzzInput]:
    return _draw_setup(vad_one_in)


@st.composite
def _draw_setup(draw: st.DrawFn, vad_one_in: int) -> FuzzInput:
    """The first message: turn detection off (mostly; else server_vad or semantic_vad, either
    maybe preemptive, maybe in pause mode) and small replies."""
    session: dict[str, Json] = {"type": "realtime"}
    if draw(one_in(vad_one_in)):
        vad: dict[str, Json] = {
            "type": draw(st.sampled_from(["server_vad", "server_vad", "semantic_vad"])),
            "create_response": draw(st.sampled_from([False, False, True])),
        }
        # v2: preemptive responses start at candidate pauses (held until the commit).
        if draw(st.booleans()):
            vad["preemptive_response"] = True
        if draw(st.booleans()):
            vad["interruption"] = {"mode": "pause", "min_speech_ms": draw(st.integers(0, 600))}
        session["audio"] = {"input": {"turn_detection": vad}}
    else:
        session["audio"] = {"input": {"turn_detection": None}}
    session["max_output_tokens"] = draw(st.integers(1, 8))
    session["output_modalities"] = draw(st.sampled_from([["text"], ["audio"]]))
    event = {"type": "session.update", "session": session, "event_id": "setup"}
    return FuzzInput(
        "setup:session.update",
        json.dumps(event),
        "reply",
        frozenset({"session.updated"}),
        "exact",
        "setup",
    )


# Cached, like `_setup`'s: a strategy is validated when first drawn from, and a new one per
# script would be validated again for every script.
@cache
def _step(long_audio: bool) -> st.SearchStrategy[list[FuzzInput]]:
    one = st.one_of(
        valid_inputs(),
        valid_inputs(),
        valid_inputs(),
        valid_inputs(),
        mutated_inputs(),
        mutated_inputs(),
        mutated_inputs(),
        raw_inputs(),
        raw_inputs(),
        *([long_appends(), long_appends()] if long_audio else []),
    )
    return st.one_of(
        one.map(lambda i: [i]), one.map(lambda i: [i]), one.map(lambda i: [i]), sequences()
    )


def _harmless(inp: FuzzInput) -> FuzzInput:
    frame = json.dumps({"type": "conversation.context.retrieve", "event_id": "instead_of_response"})
    return FuzzInput(
        "valid:conversation.context.retrieve",
        frame,
        "reply",
        frozenset({"conversation.context"}),
        "exact",
        "instead_of_response",
        step=inp.step,
    )


def scripts(
    length: int = 16, max_responses: int = 2, *, vad_one_in: int = 7, long_audio: bool = False
) -> st.SearchStrategy[Script]:
    """Sessions of exactly `length` inputs, starting at most `max_responses` responses, with
    server VAD on in about one in `vad_one_in`; `long_audio` adds appends long enough for
    turn detection (for the in-memory runner: a live server would transcribe them)."""

    @st.composite
    def build(draw: st.DrawFn) -> Script:
        # Drawn first: Hypothesis varies its early choices the most.
        ends_badly = draw(one_in(20))
        inputs = [draw(_setup(vad_one_in))]
        steps = draw(st.lists(_step(long_audio), min_size=length - 1, max_size=length - 1))
        for index, step in enumerate(steps, start=1):
            inputs.extend(replace(inp, step=index) for inp in step)
        inputs = inputs[:length]
        started = 0
        for i, inp in enumerate(inputs):
            if inp.starts_response:
                started += 1
                if started > max_responses:
                    inputs[i] = _harmless(inp)
        if ends_badly:
            # The connection cannot outlive this one, so it can only come last.
            inputs[-1] = replace(bad_utf8_text_frame(), step=length)
        # Last, so that the inputs are drawn as before it existed.
        return Script(tuple(inputs), seed=draw(st.integers(0, 2**32 - 1)))

    return build()


def live_scripts(length: int = 16) -> st.SearchStrategy[Script]:
    """What the socket runner sends a live server: short audio, few responses, VAD rare."""
    return scripts(length)


def memory_scripts(length: int = 16) -> st.SearchStrategy[Script]:
    """What the in-memory runner feeds a core: its models are stand-ins, so turn detection is
    on in half the sessions, appends are long enough for it, and more responses start."""
    return scripts(length, max_responses=4, vad_one_in=2, long_audio=True)
