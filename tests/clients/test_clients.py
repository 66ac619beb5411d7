"""Four realtime client libraries hold one conversation each with the real server, through
their own public APIs (tests/clients/conftest.py says how they run; kit.converse what they
say): a spoken question, a barge-in over the next answer, a tool call under
`tool_choice: "required"`, then the server's history read back with the
`conversation.context.retrieve` extension.

The first test checks what each library told the app; the second what the server's history
holds (docs/protocol.md rule 5): the replies that played out whole, the interrupted one cut
to a word prefix of what it was going to say, the call and its output.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.clients.conftest import CLIENTS, Run, Runs

RATE = 24000
WEATHER = "Sunny."  # what every client's get_weather returns (kit.WEATHER)

each_client = pytest.mark.parametrize("client", list(CLIENTS))

# Audio a library hands the app after it said the reply was interrupted, by design: Pipecat's
# output transport keeps writing the one chunk it had already taken (40 ms: 1920 bytes at
# 24 kHz mono pcm16; BaseOutputTransport.handle_interruptions drains only what is queued,
# "so the frame being written ... [is] still delivered"), and its app hears of the interruption
# from the LLM service before the transport does. Every other library: nothing.
IN_FLIGHT_BYTES = {"pipecat": 1920}

# An interrupted reply's history must have lost words where the app still had this much of it
# unplayed (a word of the cascade's voice lasts well under a second).
UNPLAYED_S = 1.0


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def _spoken(run: Run, phase: str) -> list[dict[str, Any]]:
    return [r for r in run.report["replies"] if r["phase"] == phase and r["audio_bytes"]]


def _text(item: dict[str, Any]) -> str:
    return "".join(
        str(part.get("transcript") or part.get("text") or "") for part in item.get("content", [])
    )


@each_client
def test_a_spoken_turn_a_barge_in_and_a_tool_call_through_the_library(
    client: str, client_runs: Runs
) -> None:
    run = client_runs[client]
    report = run.report
    assert run.returncode == 0 and not report["errors"], run.explain()
    assert not report["server_errors"], run.explain()

    # 1. The question's answer: audio and its transcript, played out uninterrupted.
    answers = _spoken(run, "question")
    assert len(answers) == 1, run.explain()
    (answer,) = answers
    assert answer["done"] and not answer["interrupted"], run.explain()
    assert answer["audio_bytes"] >= RATE * 2 // 2, f"under half a second of audio{run.explain()}"
    assert _words(answer["transcript"]), run.explain()

    # 2. The barge-in: the library said the story was interrupted, and none of its audio
    # reached the app after that (but the chunk a library was already writing).
    story = _spoken(run, "story")
    assert story and story[0]["interrupted"], f"no interruption reported{run.explain()}"
    assert story[0]["audio_after_interrupt"] <= IN_FLIGHT_BYTES.get(client, 0), run.explain()

    # 3. The tool round trip: one call, run by the library, then a spoken answer.
    assert [c["name"] for c in report["tool_calls"]] == ["get_weather"], run.explain()
    assert "paris" in str(report["tool_calls"][0]["arguments"]).lower(), run.explain()
    weather = _spoken(run, "weather")
    assert len(weather) == 1, run.explain()
    assert weather[0]["done"] and not weather[0]["interrupted"], run.explain()
    assert _words(weather[0]["transcript"]), run.explain()


@each_client
def test_the_history_holds_what_was_heard(client: str, client_runs: Runs) -> None:
    run = client_runs[client]
    context = run.report.get("context")
    assert context and context["type"] == "conversation.context", run.explain()
    items = context["items"]
    by_id = {item["id"]: item for item in items}
    replies = [r for r in run.report["replies"] if r["audio_bytes"]]
    for reply in replies:
        item = by_id.get(reply["item_id"])
        assert item is not None, f"no history item for the reply {reply}: {items}"
        heard, full = _words(_text(item)), _words(reply["transcript"])
        if reply["interrupted"]:
            assert heard, f"the interrupted reply left nothing: {item}"
            assert heard == full[: len(heard)], (heard, full)
            # What the app had and had not played is not in it. Where it had played all it
            # had (an answer stalled on a loaded machine, or a library that hands audio over
            # as it plays it), all it had may have been heard.
            if reply["unplayed_at_interrupt"] > UNPLAYED_S:
                assert len(heard) < len(full), (heard, full, reply["unplayed_at_interrupt"])
        else:
            assert heard == full, f"a reply that played out is not whole: {item} {reply}"

    calls = [i for i in items if i["type"] == "function_call"]
    outputs = [i for i in items if i["type"] == "function_call_output"]
    assert [c["name"] for c in calls] == ["get_weather"], items
    assert [o["call_id"] for o in outputs] == [calls[0]["call_id"]], items
    assert WEATHER in outputs[0]["output"], outputs
    answers = [by_id[r["item_id"]] for r in replies if r["phase"] == "weather"]
    assert answers, f"no spoken answer to the tool's output{run.explain()}"
    assert items.index(calls[0]) < items.index(outputs[0]) < items.index(answers[0]), items
