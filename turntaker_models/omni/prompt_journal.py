"""The prompt journal: one JSON line per request the thinker accepts, the layout it ran.

Rules:
- Written before prefill, so a request that fails or is cancelled later is still recorded.
- One line per request, in exactly this shape (end-to-end tests read it):
  `{"request_id": ID, "tokens": len(input_ids), "messages": [{"role": ROLE, "parts": [...]}]}`
  with parts `{"type": "text", "text": T}`, `{"type": "audio", "tokens": PADS}`,
  `{"type": "image", "tokens": PADS, "grid": [t, h, w]}`, `{"type": "tool_call", "call_id",
  "name", "arguments"}` (assistant) and `{"type": "tool_result", "call_id", "output"}` (role
  "tool"); an empty assistant boundary is `{"role": "assistant", "parts": []}`. The tools block
  of the system turn is not listed (its tokens are counted).
- Each line goes out in one `write()` on a file opened in append mode (O_APPEND), so that the
  thinker's concurrent stream threads never interleave or overwrite each other's lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turntaker_models.omni.prompt import MessageLayout, PartLayout, Prompt


def _part(part: PartLayout) -> dict[str, Any]:
    if part.kind == "text":
        return {"type": "text", "text": part.text}
    if part.kind == "audio":
        return {"type": "audio", "tokens": part.tokens}
    if part.kind == "tool_call":
        return {
            "type": "tool_call",
            "call_id": part.call_id,
            "name": part.name,
            "arguments": part.text,
        }
    if part.kind == "tool_result":
        return {"type": "tool_result", "call_id": part.call_id, "output": part.text}
    assert part.grid is not None
    return {"type": "image", "tokens": part.tokens, "grid": list(part.grid)}


def entry(request_id: str, prompt: Prompt) -> dict[str, Any]:
    """The journal's record of one prompt."""
    return {
        "request_id": request_id,
        "tokens": int(prompt.input_ids.shape[1]),
        "messages": [_message(m) for m in prompt.layout],
    }


def _message(message: MessageLayout) -> dict[str, Any]:
    return {"role": message.role, "parts": [_part(p) for p in message.parts]}


class PromptJournal:
    """Appends entries to one file; holds no handle between writes (nothing to close)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, request_id: str, prompt: Prompt) -> None:
        line = (json.dumps(entry(request_id, prompt), ensure_ascii=False) + "\n").encode()
        # Unbuffered: FileIO.write is one write(2) of the whole line, atomic under O_APPEND.
        with open(self.path, "ab", buffering=0) as file:
            written = file.write(line)
        if written != len(line):
            raise OSError(f"prompt journal {self.path}: short write ({written} of {len(line)})")


def read_entries(path: Path, request_id: str) -> list[dict[str, Any]]:
    """The journal's lines for one request, in order (the read side: tests, operators)."""
    lines = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [entry for entry in lines if entry["request_id"] == request_id]
