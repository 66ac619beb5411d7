"""What the Python client scripts share: a real-time microphone, the conversation they hold
and the report they write. Standard library only: it runs in `.venv-clients`, beside the
client libraries, never in the server's venv (tests/clients/conftest.py says why).

The conversation (`converse`) is the same for every library; the two steps a library takes
its own way are passed in (`Hooks`): ask for `tool_choice: "required"`, and read the server's
history back (`conversation.context.retrieve`). What the library reports (audio, transcripts,
interruptions, tool calls, errors, raw server events where it shows them) is written into a
`Conversation` by the script's own event handlers, and `Conversation.report()` is what
tests/clients/test_clients.py checks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RATE = 24000
CHUNK_MS = 100
CHUNK_BYTES = RATE * 2 * CHUNK_MS // 1000
INSTRUCTIONS = "You are a helpful voice assistant. Answer in one short sentence."
MAX_OUTPUT_TOKENS = 24
WEATHER = "Sunny."


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/v1/realtime")
    parser.add_argument("--speech", type=Path, required=True, help="folder of *.pcm utterances")
    parser.add_argument("--report", type=Path, required=True, help="where the JSON report goes")
    parser.add_argument("--timeout", type=float, default=120.0)
    return parser.parse_args()


def speech(folder: Path) -> dict[str, bytes]:
    """The utterances (24 kHz mono pcm16) that tests/clients/conftest.py synthesised."""
    return {path.stem: path.read_bytes() for path in folder.glob("*.pcm")}


class Microphone:
    """A microphone in real time: 100 ms of pcm16 every 100 ms, silence when nobody speaks.

    The server's VAD runs on the audio and its timers on the wall clock, so the audio must come
    as a microphone's would; so must the client library's own idea of what has been played."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        self._send = send
        self._pending = bytearray()
        self._spoken = asyncio.Event()
        self._failed: BaseException | None = None

    async def say(self, pcm: bytes) -> None:
        """Speak `pcm` and return once all of it has been sent."""
        self._spoken.clear()
        self._pending += pcm
        while not self._spoken.is_set():
            if self._failed is not None:
                raise RuntimeError("the microphone stopped") from self._failed
            await asyncio.sleep(0.02)

    async def run(self) -> None:
        began = time.monotonic()
        n = 0
        try:
            while True:
                await asyncio.sleep(max(0.0, began + n * CHUNK_MS / 1000 - time.monotonic()))
                n += 1
                chunk = bytes(self._pending[:CHUNK_BYTES])
                del self._pending[:CHUNK_BYTES]
                if not self._pending:
                    self._spoken.set()
                await self._send(chunk.ljust(CHUNK_BYTES, b"\0"))
        except Exception as exc:
            self._failed = exc
            raise


def _text(item: dict[str, Any]) -> str:
    return "".join(str(c.get("transcript") or c.get("text") or "") for c in item.get("content", []))


@dataclass
class Reply:
    """One assistant reply as the app saw it."""

    key: str
    phase: str
    item_id: str | None = None  # its message item, once its response.done said which
    first_audio: float | None = None
    last_audio: float = 0.0
    audio_bytes: int = 0
    transcript: str = ""
    done: bool = False
    interrupted: float | None = None
    # Audio of this reply that reached the app after the library said it was interrupted.
    audio_after_interrupt: int = 0

    @property
    def seconds(self) -> float:
        return self.audio_bytes / 2 / RATE

    @property
    def playing(self) -> bool:
        """Whether the app is still playing it: in real time from its first audio, and for as
        long as audio keeps coming (a library that plays it itself hands it over as it goes)."""
        if self.first_audio is None:
            return False
        now = time.monotonic()
        return not self.done or now < self.first_audio + self.seconds or now < self.last_audio + 0.3

    @property
    def unplayed_at_interrupt(self) -> float:
        """Seconds of it the app had but had not yet played (in real time from its first
        audio) when the library said it was interrupted."""
        if self.interrupted is None or self.first_audio is None:
            return 0.0
        return max(0.0, self.seconds - (self.interrupted - self.first_audio))

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "phase": self.phase,
            "item_id": self.item_id,
            "audio_bytes": self.audio_bytes,
            "transcript": self.transcript,
            "done": self.done,
            "interrupted": self.interrupted is not None,
            "unplayed_at_interrupt": self.unplayed_at_interrupt,
            "audio_after_interrupt": self.audio_after_interrupt,
        }


@dataclass
class Conversation:
    """What the library told the app, in the terms every library shares."""

    phase: str = "connect"
    replies: list[Reply] = field(default_factory=list)
    interruptions: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    server_errors: list[dict[str, Any]] = field(default_factory=list)
    # A library's response.cancel that crossed the server's own cancel (turn detection's
    # interrupt_response) on the wire: answered `response_cancel_not_active`, as OpenAI's
    # Realtime API answers it, once the response it meant is already done, cancelled, and
    # before the next is created (after that, a cancel answered so meant no response). Not a
    # fault of either side, so kept apart from `server_errors`.
    late_cancels: list[dict[str, Any]] = field(default_factory=list)
    last_done_status: str | None = None
    # Phases in which a response completed with nothing said (no call, no words).
    empty_replies: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    began: float = field(default_factory=time.monotonic)

    def note(self, text: str) -> None:
        self.log.append(f"{time.monotonic() - self.began:7.2f} {self.phase:8} {text}")

    def _reply(self, key: str | None) -> Reply | None:
        if key is None:
            return self.replies[-1] if self.replies else None
        return next((r for r in self.replies if r.key == key), None)

    def reply_started(self, key: str | None = None) -> Reply:
        """A new reply begins (libraries that name replies pass its id)."""
        found = self._reply(key) if key is not None else None
        if found is not None:
            return found
        reply = Reply(key or f"reply{len(self.replies)}", self.phase)
        self.replies.append(reply)
        self.note(f"reply started {reply.key}")
        return reply

    def audio(self, data: bytes, key: str | None = None) -> None:
        """Audio reached the app: `key` names its reply where the library does; without one
        it belongs to the latest reply (`reply_started` begins the next)."""
        reply = self._reply(key) or self.reply_started(key)
        now = time.monotonic()
        if reply.interrupted is not None:
            reply.audio_after_interrupt += len(data)
            self.note(f"audio AFTER interrupt {reply.key} {len(data)} bytes")
            return
        if reply.first_audio is None:
            reply.first_audio = now
            self.note(f"first audio {reply.key}")
        reply.audio_bytes += len(data)
        reply.last_audio = now

    def transcript(self, delta: str, key: str | None = None) -> None:
        reply = self._reply(key) or self.reply_started(key)
        if reply.interrupted is None:
            reply.transcript += delta

    def reply_done(self, key: str | None = None) -> None:
        reply = self._reply(key)
        if reply is not None and not reply.done:
            reply.done = True
            self.note(f"reply done {reply.key} {reply.seconds:.2f} s {reply.transcript!r}")

    def interrupted(self, how: str, key: str | None = None) -> None:
        """The library said the playing reply was interrupted (`how`: its event's name)."""
        self.interruptions.append(how)
        reply = self._reply(key)
        if reply is not None and reply.interrupted is None and reply.playing:
            reply.interrupted = time.monotonic()
            self.note(f"interrupted {reply.key} ({how})")
        else:
            self.note(f"interruption event {how} (no reply playing)")

    def tool_call(self, name: str, arguments: Any) -> str:
        self.tool_calls.append({"name": name, "arguments": arguments, "phase": self.phase})
        self.note(f"tool call {name}({arguments})")
        return WEATHER

    def server_event(self, event: dict[str, Any]) -> None:
        """A raw server event, where the library shows them: the few that say what the server
        made of the library's requests go into the log."""
        kind = event.get("type")
        if os.environ.get("CLIENT_DUMP") and "delta" not in str(kind):
            self.note(f"<- {json.dumps(event)[:300]}")
        if kind == "error":
            late = event["error"].get("code") == "response_cancel_not_active"
            if late and self.last_done_status == "cancelled":
                self.late_cancels.append(event["error"])
                self.note(f"late cancel answered {event['error']['code']}")
            else:
                self.server_errors.append(event["error"])
                self.note(f"server error {event['error']}")
        elif kind == "response.created":
            self.last_done_status = None
        elif kind == "response.done":
            response = event["response"]
            self.last_done_status = response["status"]
            output = [f"{o['type']}:{o.get('name') or _text(o)!r}" for o in response["output"]]
            self.note(f"response.done {response['id']} {response['status']} {output}")
            said = [o for o in response["output"] if o["type"] == "message"]
            reply = self._reply(response["id"])
            if reply is not None and reply.key == response["id"] and said:
                reply.item_id = said[0]["id"]
            if response["status"] == "completed" and said == response["output"]:
                if not any(_text(o) for o in said):
                    self.empty_replies.append(self.phase)
        elif kind in ("conversation.item.truncated", "output_audio_buffer.cleared"):
            self.note(f"{kind} {json.dumps(event)}")
        elif kind == "conversation.context":
            self.context = event

    def error(self, text: str) -> None:
        self.errors.append(text)
        self.note(f"error {text}")

    async def until(self, what: str, ready: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while not (value := ready()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not within {timeout_s} s")
            await asyncio.sleep(0.02)
        return value

    def spoken(self, phase: str) -> list[Reply]:
        return [r for r in self.replies if r.phase == phase and r.audio_bytes]

    async def reply_played(self, phase: str, timeout_s: float = 30.0) -> Reply:
        """The phase's first spoken reply, once generated and played out in real time."""

        def played() -> Reply | None:
            if phase in self.empty_replies:
                raise AssertionError(f"a reply in {phase} completed with nothing said")
            return next((r for r in self.spoken(phase) if r.done and not r.playing), None)

        reply: Reply = await self.until(f"a spoken reply in {phase} played out", played, timeout_s)
        await asyncio.sleep(0.3)  # the server's own idea of the playout may lag ours a little
        return reply

    def report(self) -> dict[str, Any]:
        return {
            "replies": [r.as_dict() for r in self.replies],
            "interruptions": self.interruptions,
            "tool_calls": self.tool_calls,
            "context": self.context,
            "errors": self.errors,
            "server_errors": self.server_errors,
            "late_cancels": self.late_cancels,
            "log": self.log,
        }


@dataclass
class Hooks:
    """The steps each library takes its own way."""

    require_tool_call: Callable[[], Awaitable[None]]
    retrieve_context: Callable[[], Awaitable[None]]
    # Whether the library's own flow starts with a reply of its own (Pipecat's LLMRunFrame).
    greets: bool = False


async def converse(
    conv: Conversation, mic: Microphone, said: dict[str, bytes], hooks: Hooks
) -> None:
    """The conversation every library holds with the server.

    1. A spoken question; its spoken answer plays out in full.
    2. A request for a story; a second after its answer starts playing, the user asks about
       the weather over it (barge-in). The library must say the answer was interrupted, and
       no more of its audio may reach the app.
    3. The weather question is asked under `tool_choice: "required"` (set the library's way
       while the story plays): the library runs `get_weather` and sends its output, and a
       spoken answer follows and plays out (that answer must be asked for with "auto", else
       it would be another call: the tools set it back, LiveKit does it on its own).
    4. The server's history, read back with the `conversation.context.retrieve` extension
       (also after a failed step: it says what the server made of it)."""
    if hooks.greets:
        await conv.reply_played("connect")
    conv.phase = "question"
    await mic.say(said["question"])
    await conv.reply_played("question")

    conv.phase = "story"
    await mic.say(said["story"])
    story: Reply = await conv.until(
        "the story's first audio", lambda: next(iter(conv.spoken("story")), None)
    )
    await hooks.require_tool_call()
    await asyncio.sleep(1.0)  # the user hears the start of it, then speaks over it
    conv.phase = "weather"
    await mic.say(said["weather"])

    async def history() -> None:
        conv.phase = "context"
        await hooks.retrieve_context()
        await conv.until("conversation.context", lambda: conv.context, 10)

    try:
        await conv.until("an interruption of the story", lambda: story.interrupted, 10)
        await conv.until("a get_weather call", lambda: conv.tool_calls, 30)
        await conv.reply_played("weather")
    except Exception:
        with contextlib.suppress(Exception):
            await history()
        raise
    await history()


async def run(
    conv: Conversation, args: argparse.Namespace, main: Callable[[], Awaitable[None]]
) -> int:
    """Runs `main` under the hard timeout and writes the report whatever happens. What the
    library logs at warning level and above goes to stderr, which the test keeps."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    status = 0
    try:
        await asyncio.wait_for(main(), args.timeout)
    except BaseException as exc:  # every failure goes into the report
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        cause = f" (from {type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
        conv.error(f"client failed: {type(exc).__name__}: {exc}{cause}")
        status = 1
    finally:
        args.report.write_text(json.dumps(conv.report(), indent=1))
    return status
