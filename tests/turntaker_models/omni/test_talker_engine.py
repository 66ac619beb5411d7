"""The Talker batched across streams (talker_engine.py) against each stream alone.

Thinker and talker both batched, streams with text, audio and images spoken at the same time:
every stream must speak the codec codes (all codebooks) it speaks alone, from talker logits
within float rounding, and a cancelled stream must stop within a frame, the others unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from tests.turntaker_models.omni.conftest import Tiny, concurrently
from tests.turntaker_models.omni.test_steppers import CONVERSATIONS, tone
from turntaker_models.omni.prompt import Prompt
from turntaker_models.omni.sampling import Cancelled, SamplingConfig
from turntaker_models.omni.talker import TalkerSession
from turntaker_models.omni.talker_engine import TalkerEngine
from turntaker_models.omni.thinker import ThinkerSession
from turntaker_models.omni.thinker_engine import ThinkerEngine

MAX_TOKENS = 12
MAX_CODEC_TOKENS = 40
ATOL = 1e-4  # as test_thinker_engine.py: float32 sums of another width


@dataclass
class Spoken:
    tokens: list[int] = field(default_factory=list)
    frames: list[list[int]] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    cancelled: bool = False
    slot_full: bool = False


@dataclass(frozen=True)
class Engines:
    thinker: ThinkerEngine | None
    talker: TalkerEngine | None


def speak(
    tiny: Tiny,
    prompt: Prompt,
    engines: Engines,
    cancel_after: int | None,
    max_codec_tokens: int = MAX_CODEC_TOKENS,
) -> Spoken:
    """test_steppers.py's serving loop, with the engines: thinker tokens feed the talker."""
    spoken = Spoken()

    def cancelled() -> bool:
        return cancel_after is not None and len(spoken.frames) >= cancel_after

    never = lambda: False  # noqa: E731
    thinker = ThinkerSession(
        tiny.thinker, tiny.config, prompt, SamplingConfig(), 0, never, engine=engines.thinker
    )
    try:
        token, start = thinker.prefill(want_talker=True)
        assert start is not None
        spoken.tokens.append(token)
        texts: list[torch.Tensor | None] = []
        while token != tiny.config.im_end_token_id and len(spoken.tokens) < MAX_TOKENS:
            token = thinker.step(token)
            spoken.tokens.append(token)
            final = token == tiny.config.im_end_token_id or len(spoken.tokens) >= MAX_TOKENS
            texts.append(None if final else thinker.embed(token))
    finally:
        thinker.close()
    talker = TalkerSession(
        tiny.talker, tiny.config, True, 0, max_codec_tokens, cancelled, engine=engines.talker
    )
    choose_first = talker._choose_first

    def recording(logits: torch.Tensor) -> tuple[int, bool]:
        # Each talker forward's logits (run in the engine's thread when batched).
        spoken.logits.append(logits.detach().float().cpu().clone())
        return choose_first(logits)

    talker._choose_first = recording  # type: ignore[method-assign]
    try:
        frame = talker.start(start, "ethan")
        pending = iter(texts)
        while frame is not None:
            spoken.frames.append(frame)
            frame = talker.step(next(pending, None))
    except Cancelled:
        spoken.cancelled = True
    finally:
        spoken.slot_full = talker.slot_full
        talker.close()
    return spoken


def prompts(tiny: Tiny) -> dict[str, Prompt]:
    out = {}
    for name, (conversation, clips) in CONVERSATIONS.items():
        out[name] = tiny.prompts.build(conversation, [tone()] * clips)
    return out


def together(
    tiny: Tiny, engines: Engines, chosen: dict[str, Prompt], cancel: dict[str, int]
) -> dict[str, Spoken]:
    out: dict[str, Spoken] = {}
    errors: list[BaseException] = []

    def one(name: str) -> None:
        try:
            out[name] = speak(tiny, chosen[name], engines, cancel.get(name))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one, args=(name,)) for name in chosen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return out


@pytest.fixture(scope="module")
def engines(tiny: Tiny) -> Iterator[Engines]:
    engines = Engines(
        ThinkerEngine(tiny.thinker, slots=8, max_len=1024),
        TalkerEngine(tiny.talker, slots=8, max_len=1024),
    )
    yield engines
    assert engines.thinker is not None and engines.talker is not None
    engines.thinker.shutdown()
    engines.talker.shutdown()


def assert_same(alone: Spoken, batched: Spoken, name: str) -> None:
    assert batched.tokens == alone.tokens, f"{name}: the thinker chose other tokens"
    np.testing.assert_array_equal(
        np.array(batched.frames),
        np.array(alone.frames),
        err_msg=f"rule 3: {name} spoke other codec codes in a batch",
    )
    assert len(batched.logits) == len(alone.logits)
    for step, (mine, theirs) in enumerate(zip(batched.logits, alone.logits, strict=True)):
        torch.testing.assert_close(
            mine, theirs, atol=ATOL, rtol=0, msg=f"rule 3: {name}, talker forward {step}"
        )


def test_rule3_each_stream_batched_speaks_the_codes_it_speaks_alone(
    tiny: Tiny, engines: Engines
) -> None:
    chosen = prompts(tiny)
    alone = {name: speak(tiny, p, Engines(None, None), None) for name, p in chosen.items()}
    assert engines.talker is not None
    rounds, jobs = engines.talker.batcher.rounds, engines.talker.batcher.jobs
    talker = engines.talker
    forward = talker._forward
    prefilled: list[int] = []

    def counting(frames: Any) -> Any:
        if frames[0].embeds.shape[1] > 1:
            prefilled.append(len(frames))
        return forward(frames)

    talker._forward = counting  # type: ignore[method-assign]
    try:
        batched = together(tiny, engines, chosen, {})
    finally:
        del talker._forward
    for name in chosen:
        assert alone[name].frames, f"{name} spoke nothing: the test would prove nothing"
        assert_same(alone[name], batched[name], name)
    # The streams' conditionings differ in length: padded rows are read at their own ends.
    assert max(prefilled) > 1, f"rule 1: the prefills never shared a forward: {prefilled}"
    ran = engines.talker.batcher.jobs - jobs, engines.talker.batcher.rounds - rounds
    assert ran[0] / ran[1] > 1.5, f"rule 1: {ran[0]} frames in {ran[1]} rounds"
    assert engines.talker.cache.active == 0, "rule 4: every slot is given back"


def test_rule4_a_cancelled_stream_stops_within_a_frame_and_the_others_are_unchanged(
    tiny: Tiny, engines: Engines
) -> None:
    chosen = prompts(tiny)
    names = sorted(chosen)
    alone = {name: speak(tiny, chosen[name], Engines(None, None), None) for name in names}
    victim = names[0]
    batched = together(tiny, engines, chosen, {victim: 3})
    assert batched[victim].cancelled
    assert len(batched[victim].frames) == 3
    assert batched[victim].frames == alone[victim].frames[:3]
    for name in names[1:]:
        assert_same(alone[name], batched[name], name)
    assert engines.talker is not None and engines.talker.cache.active == 0


def test_rules3_4_a_stream_past_its_slot_ends_its_audio_and_the_other_speaks_as_alone(
    tiny: Tiny,
) -> None:
    # Was: nothing checked the room left in a talker slot; the stream that passed it raised
    # in `SlotCache.select` inside the round's forward, and every stream batched with it
    # failed. Two streams of one prompt share a talker whose slots hold the prefill and 10
    # frames: one asks 6 frames, the other 40.
    name = sorted(prompts(tiny))[0]
    prompt = prompts(tiny)[name]
    short_alone = speak(tiny, prompt, Engines(None, None), None, max_codec_tokens=6)
    long_alone = speak(tiny, prompt, Engines(None, None), None)
    assert len(long_alone.frames) > 12, "the stream must speak past the slot to prove anything"
    probe = TalkerEngine(tiny.talker, slots=1, max_len=1024)
    frame = probe.frame
    prefill: list[int] = []

    def measured(job: Any) -> Any:
        prefill.append(job.embeds.shape[1])
        return frame(job)

    probe.frame = measured  # type: ignore[method-assign]
    try:
        speak(tiny, prompt, Engines(None, probe), None, max_codec_tokens=2)
    finally:
        probe.shutdown()
    from turntaker_models.omni.batcher import Gather

    # Each round waits (up to 2 s) for both slots, so the two share rounds however the machine
    # schedules their threads (a stream that closes its slot leaves: batcher.py rule 3).
    talker = TalkerEngine(tiny.talker, slots=2, max_len=prefill[0] + 10, gather=Gather(0, 2.0, 2.0))
    talker.batcher._last_members = {0, 1}

    def speaking(frames: int) -> Callable[[], Spoken]:
        return lambda: speak(tiny, prompt, Engines(None, talker), None, max_codec_tokens=frames)

    try:
        out = concurrently({"short": speaking(6), "long": speaking(40)}, 120)
    finally:
        talker.shutdown()
    short, long = out["short"], out["long"]
    assert isinstance(short, Spoken), f"rule 4: the stream that fits failed: {short}"
    assert_same(short_alone, short, "the stream that fits")
    assert isinstance(long, Spoken), f"rule 3: the stream past its slot failed: {long}"
    assert long.slot_full, "rule 3: its audio should end where the slot is full"
    assert len(long.frames) == 11, "the prefill gives the first frame, each position after it one"
    assert long.frames == long_alone.frames[: len(long.frames)]
    assert talker.cache.active == 0
    assert talker.batcher.rounds < talker.batcher.jobs, "the two never shared a round"
