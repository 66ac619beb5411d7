"""The prompt journal: one JSON line per request, in the agreed shape, whole under concurrency."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from tests.turntaker_models.omni.conftest import Tiny
from tests.turntaker_models.omni.images import image_url
from turntaker_models.contract import (
    AudioPart,
    Conversation,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from turntaker_models.omni.prompt_journal import PromptJournal, read_entries

CONVERSATION = Conversation(
    [
        Message("system", [TextPart("Be brief.")]),
        Message("user", [AudioPart(0), ImagePart(image_url(64, 48)), TextPart("Hi")]),
        Message("assistant"),
    ]
)


def test_entry_has_the_agreed_shape(tiny: Tiny, tmp_path: Path) -> None:
    prompt = tiny.prompts.build(CONVERSATION, [np.full(16000, 0.01, np.float32)])
    journal = PromptJournal(tmp_path / "sub" / "prompts.jsonl")
    journal.write("req-1", prompt)
    lines = (tmp_path / "sub" / "prompts.jsonl").read_text().splitlines()
    assert len(lines) == 1
    ids = prompt.input_ids[0].tolist()
    tc = tiny.config.thinker_config
    assert json.loads(lines[0]) == {
        "request_id": "req-1",
        "tokens": len(ids),
        "messages": [
            {"role": "system", "parts": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "parts": [
                    {"type": "audio", "tokens": ids.count(tc.audio_token_id)},
                    {"type": "image", "tokens": 4, "grid": [1, 4, 4]},
                    {"type": "text", "text": "Hi"},
                ],
            },
            {"role": "assistant", "parts": []},
        ],
    }


def test_tool_parts_are_journaled(tiny: Tiny, tmp_path: Path) -> None:
    conversation = Conversation(
        [
            Message("user", [TextPart("Time?")]),
            Message("assistant", [TextPart("One moment."), ToolCallPart("c1", "now", "{}")]),
            Message("tool", [ToolResultPart("c1", "15:04")]),
        ]
    )
    prompt = tiny.prompts.build(conversation, [], tools=[ToolSpec("now")])
    journal = PromptJournal(tmp_path / "prompts.jsonl")
    journal.write("req-tools", prompt)
    (entry,) = read_entries(journal.path, "req-tools")
    assert entry["tokens"] == prompt.input_ids.shape[1]
    assert entry["messages"] == [
        {"role": "user", "parts": [{"type": "text", "text": "Time?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "One moment."},
                {"type": "tool_call", "call_id": "c1", "name": "now", "arguments": "{}"},
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_result", "call_id": "c1", "output": "15:04"}]},
    ]


def test_concurrent_writers_never_interleave(tiny: Tiny, tmp_path: Path) -> None:
    # Long lines (a 20 kB text part) from 8 threads at once: each line must come out whole.
    text = "word " * 4000
    prompt = tiny.prompts.build(Conversation([Message("user", [TextPart(text)])]), [])
    journal = PromptJournal(tmp_path / "prompts.jsonl")

    def write(worker: int) -> None:
        for i in range(20):
            journal.write(f"w{worker}-{i}", prompt)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    assert sorted(e["request_id"] for e in entries) == sorted(
        f"w{w}-{i}" for w in range(8) for i in range(20)
    )
    assert all(e["messages"][0]["parts"][0]["text"] == text for e in entries)


def test_the_launcher_hands_the_journal_path_to_the_stubs(tmp_path: Path) -> None:
    from orchestrator.triton import TritonConfig, TritonServer
    from turntaker_models.settings import PROMPT_LOG_ENV, ModelSettings

    path = tmp_path / "prompts.jsonl"
    server = TritonServer(TritonConfig(model_repository=tmp_path, prompt_log=path))
    settings = server.model_settings()
    assert settings.prompt_log == path
    env = settings.environment()
    assert env[PROMPT_LOG_ENV] == str(path)
    # What a stub process reads back from its environment.
    assert ModelSettings.from_env(env).prompt_log == path
    assert ModelSettings.from_env({}).prompt_log is None
    assert PROMPT_LOG_ENV not in TritonServer(TritonConfig(tmp_path)).model_settings().environment()


def test_read_entries_picks_one_requests_lines_in_order(tiny: Tiny, tmp_path: Path) -> None:
    prompt = tiny.prompts.build(Conversation([Message("user", [TextPart("Hi")])]), [])
    journal = PromptJournal(tmp_path / "prompts.jsonl")
    for request_id in ("a", "b", "a"):
        journal.write(request_id, prompt)
    assert [e["request_id"] for e in read_entries(journal.path, "a")] == ["a", "a"]
    assert read_entries(journal.path, "missing") == []
