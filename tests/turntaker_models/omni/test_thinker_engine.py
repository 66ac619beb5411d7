"""The Thinker batched across streams (thinker_engine.py) against each stream alone.

Streams of other lengths, with audio and images, one under a tool-call constraint, run at the
same time through one engine; each must choose the tokens it chooses alone (greedy), from
logits within float rounding of a wider matmul, and a cancel of one must stop it within a step
and leave the others' tokens unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from tests.turntaker_models.omni.conftest import Tiny, concurrently
from tests.turntaker_models.omni.test_steppers import CONVERSATIONS, tone
from turntaker_models.contract import GenerationParameters, ToolSpec
from turntaker_models.omni.prompt import Prompt
from turntaker_models.omni.sampling import Cancelled, SamplingConfig
from turntaker_models.omni.thinker import ThinkerSession
from turntaker_models.omni.thinker_engine import ThinkerEngine
from turntaker_models.tool_grammar import CallConstraint, call_constraint, ll_tokenizer

STEPS = 16
# Logits of a stream in a batch against alone: float32 matmuls of another width sum in another
# order; measured max |diff| on the tiny weights is ~1e-6.
ATOL = 1e-4

ALARM = ToolSpec(
    "set_alarm",
    "Sets an alarm.",
    {
        "type": "object",
        "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23}},
        "required": ["hour"],
        "additionalProperties": False,
    },
)


@dataclass
class Run:
    tokens: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    cancelled_at: int | None = None


@dataclass(frozen=True)
class Stream:
    name: str
    prompt: Prompt
    constraint: Callable[[], CallConstraint | None] = lambda: None
    tools: tuple[ToolSpec, ...] = ()


def streams(tiny: Tiny) -> list[Stream]:
    out = []
    for name in sorted(CONVERSATIONS):
        conversation, clips = CONVERSATIONS[name]
        out.append(Stream(name, tiny.prompts.build(conversation, [tone()] * clips)))
    text, _ = CONVERSATIONS["text"]
    grammar = ll_tokenizer(tiny.prompts.tokenizer)
    params = GenerationParameters(tools=[ALARM], tool_choice="required")
    out.append(
        Stream(
            "required-call",
            tiny.prompts.build(text, [], tools=[ALARM]),
            lambda: call_constraint(grammar, params),
        )
    )
    return out


def generate(
    tiny: Tiny,
    stream: Stream,
    engine: ThinkerEngine | None,
    cancel_after: int | None = None,
) -> Run:
    run = Run()
    steps = 0

    def cancelled() -> bool:
        return cancel_after is not None and steps >= cancel_after

    session = ThinkerSession(
        tiny.thinker,
        tiny.config,
        stream.prompt,
        SamplingConfig(),
        0,
        cancelled,
        stream.constraint(),
        engine=engine,
    )
    choose = session._choose

    def recording(logits: torch.Tensor) -> int:
        run.logits.append(logits.detach().float().cpu().clone())
        return choose(logits)

    session._choose = recording  # type: ignore[method-assign]
    try:
        token, _ = session.prefill(want_talker=True)
        fed = [token, *session.forced()]
        run.tokens.extend(fed)
        while steps < STEPS and not (session.constraint and session.constraint.done):
            steps += 1
            token = session.step(*fed)
            fed = [token, *session.forced()]
            run.tokens.extend(fed)
    except Cancelled:
        run.cancelled_at = steps
    finally:
        session.close()
    return run


def together(
    tiny: Tiny, engine: ThinkerEngine, chosen: list[Stream], cancel: dict[str, int] | None = None
) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    errors: list[BaseException] = []

    def one(stream: Stream) -> None:
        try:
            runs[stream.name] = generate(tiny, stream, engine, (cancel or {}).get(stream.name))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one, args=(s,)) for s in chosen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return runs


@pytest.fixture(scope="module")
def engine(tiny: Tiny) -> Any:
    engine = ThinkerEngine(tiny.thinker, slots=8, max_len=1024)
    yield engine
    engine.shutdown()


def assert_same(alone: Run, batched: Run, name: str) -> None:
    assert batched.tokens == alone.tokens, f"rule 4: {name} chose other tokens in a batch"
    assert len(batched.logits) == len(alone.logits)
    for step, (mine, theirs) in enumerate(zip(batched.logits, alone.logits, strict=True)):
        torch.testing.assert_close(
            mine, theirs, atol=ATOL, rtol=0, msg=f"rule 4: {name}, forward {step}"
        )


def test_rule4_each_stream_batched_chooses_what_it_chooses_alone(
    tiny: Tiny, engine: ThinkerEngine
) -> None:
    chosen = streams(tiny)
    alone = {s.name: generate(tiny, s, None) for s in chosen}
    rounds, jobs = engine.batcher.rounds, engine.batcher.jobs
    prefilled: list[int] = []
    prefills = engine._prefills

    def counting(jobs: Any) -> Any:
        prefilled.append(len(jobs))
        return prefills(jobs)

    engine._prefills = counting  # type: ignore[method-assign]
    try:
        batched = together(tiny, engine, chosen)
    finally:
        del engine._prefills
    assert max(prefilled) > 1, f"rule 2: the prefills never shared a forward: {prefilled}"
    for stream in chosen:
        assert_same(alone[stream.name], batched[stream.name], stream.name)
    # The call stream decodes under its grammar in the batch too: its forced tokens went in
    # as one row of several positions beside one-position rows (rule 1).
    assert len(batched["required-call"].tokens) > len(batched["required-call"].logits)
    ran_rounds = engine.batcher.rounds - rounds
    ran_jobs = engine.batcher.jobs - jobs
    assert ran_jobs / ran_rounds > 1.5, (
        f"rule 1: {ran_jobs} jobs in {ran_rounds} rounds: the streams did not step together"
    )
    assert engine.cache.active == 0, "rule 3: every slot is given back"


def test_rule3_a_cancelled_stream_stops_within_a_step_and_the_others_are_unchanged(
    tiny: Tiny, engine: ThinkerEngine
) -> None:
    chosen = streams(tiny)[:3]
    alone = {s.name: generate(tiny, s, None) for s in chosen}
    victim = chosen[1].name
    batched = together(tiny, engine, chosen, cancel={victim: 4})
    assert batched[victim].cancelled_at == 4
    assert len(batched[victim].tokens) == 4, "stopped at the first step after the cancel"
    for stream in chosen:
        if stream.name != victim:
            assert_same(alone[stream.name], batched[stream.name], stream.name)
    assert engine.cache.active == 0, "rule 3: the cancelled stream's slot is given back"


def test_rule2_a_new_stream_joins_between_the_others_steps(
    tiny: Tiny, engine: ThinkerEngine
) -> None:
    chosen = streams(tiny)[:2]
    alone = {s.name: generate(tiny, s, None) for s in chosen}
    first = threading.Thread(target=lambda: late.update(together(tiny, engine, chosen[:1])))
    late: dict[str, Run] = {}
    first.start()
    joined = together(tiny, engine, chosen[1:])
    first.join(60)
    assert_same(alone[chosen[0].name], late[chosen[0].name], chosen[0].name)
    assert_same(alone[chosen[1].name], joined[chosen[1].name], chosen[1].name)


def test_rule3_a_prompt_longer_than_a_slot_is_refused(tiny: Tiny) -> None:
    small = ThinkerEngine(tiny.thinker, slots=1, max_len=16)
    try:
        stream = streams(tiny)[0]
        with pytest.raises(ValueError, match="room for 16"):
            generate(tiny, stream, small)
        assert small.cache.active == 0
    finally:
        small.shutdown()


def test_rule5_a_failing_prefill_fails_its_own_stream_only(tiny: Tiny) -> None:
    # Was: one stream's failing prefill (a bad image, memory) raised out of the round and
    # every stream batched with it failed too. Two streams prefill in one round (the batcher
    # waits for both slots); the victim's rows make the forward raise, alone or not.
    from turntaker_models.omni.batcher import Gather

    chosen = sorted(streams(tiny)[:3], key=lambda s: s.prompt.input_ids.shape[1])
    victim, other = chosen[-1], chosen[0]
    assert victim.prompt.input_ids.shape[1] != other.prompt.input_ids.shape[1]
    alone = generate(tiny, other, None)
    engine = ThinkerEngine(tiny.thinker, slots=2, max_len=1024, gather=Gather(0, 2.0, 2.0))
    engine.batcher._last_members = {0, 1}  # rule 1: the first round waits for both streams
    prefills = engine._prefills
    rows_seen: list[int] = []

    def planted(jobs: Any) -> Any:
        rows_seen.append(len(jobs))
        if any(job.length == victim.prompt.input_ids.shape[1] for job in jobs):
            raise RuntimeError("a bad image")
        return prefills(jobs)

    engine._prefills = planted  # type: ignore[method-assign]
    try:
        out = concurrently(
            {s.name: (lambda s=s: generate(tiny, s, engine)) for s in (victim, other)}, 60
        )
    finally:
        engine.shutdown()
    assert rows_seen[0] == 2, f"the two prefills never shared a forward: {rows_seen}"
    assert isinstance(out[victim.name], RuntimeError), out[victim.name]
    assert isinstance(out[other.name], Run), f"rule 5: the other stream failed: {out[other.name]}"
    assert_same(alone, out[other.name], other.name)
    assert engine.cache.active == 0


def test_rule4_a_prefills_hidden_states_are_its_own_not_a_view_of_the_padded_batch(
    tiny: Tiny,
) -> None:
    # Was: each stream got every layer's states as views of the round's padded batch, so all
    # of them ([rows, longest, hidden] per layer) stayed alive until every stream of the
    # round had built its Talker start. Now only the two layers the Talker reads, each row's
    # own copy of its own length.
    from turntaker_models.omni.batcher import Gather

    chosen = sorted(streams(tiny)[:3], key=lambda s: s.prompt.input_ids.shape[1])
    short, long = chosen[0], chosen[-1]
    assert short.prompt.input_ids.shape[1] < long.prompt.input_ids.shape[1]
    engine = ThinkerEngine(tiny.thinker, slots=2, max_len=1024, gather=Gather(0, 2.0, 2.0))
    engine.batcher._last_members = {0, 1}  # the first round waits for both streams
    prefills = engine._prefills
    rounds: list[list[Any]] = []

    def recorded(jobs: Any) -> Any:
        outs = prefills(jobs)
        rounds.append([(job.length, out) for job, out in zip(jobs, outs, strict=True)])
        return outs

    engine._prefills = recorded  # type: ignore[method-assign]
    try:
        out = concurrently(
            {s.name: (lambda s=s: generate(tiny, s, engine)) for s in (short, long)}, 60
        )
    finally:
        engine.shutdown()
    assert all(isinstance(run, Run) for run in out.values()), out
    assert len(rounds[0]) >= 2, f"the prefills never shared a forward: {rounds}"
    layer = tiny.config.talker_config.accept_hidden_layer
    for length, result in rounds[0]:
        assert result.hidden is not None and set(result.hidden) == {0, layer}
        for states in result.hidden.values():
            assert states.shape[:2] == (1, length)
            own = states.numel() * states.element_size()
            assert states.untyped_storage().nbytes() == own, (
                "rule 4: a row's hidden states hold the round's padded batch alive"
            )
