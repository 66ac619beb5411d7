"""Six image + speech turns replayed on `qwen3_omni`, end to end: what the Thinker is given.

The real realtime server on the session's real tritonserver (`qwen3_omni`: tiny random
Qwen3-Omni weights), over a real WebSocket, with server VAD on flite speech. Each turn is one
user image item (a small PNG of its own size and colour, an `input_image` data URL sent with
`conversation.item.create`) and then the turn's speech, which server VAD commits as the turn's
audio item and answers.

Rules guarded:
- Rule 3: every response has exactly one `response.done`, interrupted ones included.
- Rule 5: a reply is in the history in full only after a `playback.ack` covering all its audio
  (`playback.acknowledged` with `history_committed: true`); `qwen3_omni`'s text is unaligned
  with its audio, so it arrives with the reply and a reply cut by a barge-in keeps the length
  of audio heard and none of its text; a reply never heard is an empty assistant boundary in
  its own slot.
- Rule 6: a turn is its image, its audio and the reply after it; with `max_audio_inputs` 4 the
  prompt holds the last four turns with audio, and each pruned turn takes its image and its
  reply with it (so exactly four images remain, each in the turn of its own audio).

Two views, and what "after the last turn" means for each:
- The Thinker's prompt journal (`TritonConfig.prompt_log`): the line of response N is the
  prompt the Thinker really ran for it. `prune()` runs before the prompt is taken and the reply
  slot of response N is opened after it, so response N's prompt holds user turns
  max(1, N-3)..N and only the replies of turns before N (turns N-3..N-1) between them, ending
  with turn N's audio. After the sixth turn: turns 3..6 with replies 3, 4, 5.
- `conversation.context` retrieved after the sixth reply is committed (its full ACK answered):
  what a `response.create` sent now would hold. The stored history was pruned to turns 3..6
  when response 6 started and holds reply 6 in its slot after turn 6's audio; four turns with
  audio do not exceed the limit, so nothing more is pruned: turns 3..6 each with its image,
  its audio and its reply, reply 6 included.
Every response's journal line is checked against the client's own account of the turns (the
same rule applied to what it sent and heard), not only the sixth.

The interruption variant replays the same six turns but leaves some replies unheard: the next
turn's speech barges in on reply 1 once it is generated and never ACKed, on reply 3 once its
first audio arrived (a long reply, so most likely still generating: `response.done` cancelled
with `turn_detected`, or ended on its own if it finished first: `incomplete` at its
max_output_tokens, as the tiny Thinker never ends a reply itself; either way exactly one), and on
reply 5 after an ACK of half its audio. Replies 1 and 3 are empty assistant boundaries in their
own slots in both views. Reply 5 is cut at the played cursor: the history keeps the audio
heard and none of its unaligned text, so `conversation.context` shows an `output_audio` part
without a transcript and the Thinker's prompt an empty assistant message (the Thinker is not
fed its own audio). Reply 1 is seen in the prompts of responses 2..4, then pruned with turn 1.

Turn identity: each image has its own size (so its own patch grid in the prompt) and each
sentence its own length (so its own number of audio tokens); the first prompt that holds a
turn fixes its grid and audio tokens, and every later prompt must show that turn's image with
that turn's audio.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image

from orchestrator.service.serve import BackgroundServer
from orchestrator.service.sessions.actor import pipeline_request_id
from orchestrator.triton import TritonServer
from tests.e2e.realtime_client import ENDED, RawSession, flite_speech, raw_session, silence
from turntaker_models.omni.prompt_journal import read_entries

MAX_AUDIO_INPUTS = 4  # HistoryLimits' default, the server's rule under test
MAX_TOKENS = 6  # short replies: the tiny model is fast, and the test is about the history
EARLY_TOKENS = 200  # the reply the next turn barges into while (most likely) still generating
BYTES_PER_MS = 48  # pcm16 at 24 kHz; the server's ledger floors each chunk to whole ms
SENTENCES = [
    "Look at this.",
    "What colour is the picture?",
    "And this one?",
    "Tell me what you see in it now.",
    "Is it red?",
    "One more picture for you, please have a look.",
]
# (width, height) and colour per turn: distinct sizes, so that the prompt's patch grid of each
# image tells which turn's image it is.
IMAGES = [
    ((64, 48), (200, 30, 30)),
    ((96, 96), (30, 200, 30)),
    ((96, 48), (30, 30, 200)),
    ((48, 96), (200, 200, 30)),
    ((128, 32), (30, 200, 200)),
    ((32, 128), (200, 30, 200)),
]

# How the client handles a reply: plays it all and ACKs it (`full`); barges in with the next
# turn once the reply's first audio arrived (`early`, most likely still generating) or once
# it is generated but not ACKed at all (`unheard`); ACKs half its audio, then barges in
# (`half`).
Handling = Literal["full", "early", "unheard", "half"]


@dataclass
class Turn:
    number: int
    image_id: str
    image_url: str
    how: Handling
    audio_id: str = ""
    rid: str = ""
    reply_id: str = ""
    audio_ms: int = 0  # the reply's audio as received, whole ms per chunk (as the ledger)
    transcript: str = ""
    heard_ms: int = 0  # what the client played of it
    status: str = "completed"


def _png_data_url(size: tuple[int, int], colour: tuple[int, int, int]) -> str:
    image = Image.new("RGB", size, colour)
    # A diagonal stripe: not a flat colour, something for the vision tower to see.
    for i in range(min(size)):
        image.putpixel((i, i), (255, 255, 255))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _configure(session: RawSession, max_tokens: int) -> None:
    since = len(session.events)
    session.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                "max_output_tokens": max_tokens,
                "audio": {
                    "input": {
                        "turn_detection": {
                            "type": "server_vad",
                            "silence_duration_ms": 400,
                            "prefix_padding_ms": 200,
                            "create_response": True,
                            "interrupt_response": True,
                        }
                    }
                },
            },
        }
    )
    session.first("session.updated", since, 10)


Event = dict[str, Any]


def _for(rid: str) -> Callable[[Event], bool]:
    return lambda e: e.get("response_id") == rid


def _response(rid: str) -> Callable[[Event], bool]:
    return lambda e: bool(e["response"]["id"] == rid)


def _send_image(session: RawSession, turn: Turn, since: int) -> None:
    session.send(
        {
            "type": "conversation.item.create",
            "item": {
                "id": turn.image_id,
                "type": "message",
                "role": "user",
                "content": [{"type": "input_image", "image_url": turn.image_url}],
            },
        }
    )
    done = session.first(
        "conversation.item.done", since, 10, lambda e: e["item"]["id"] == turn.image_id
    )
    assert done["item"]["content"][0]["type"] == "input_image", done


def _speak(session: RawSession, turn: Turn) -> None:
    speech = flite_speech(SENTENCES[turn.number - 1])
    session.append(np.concatenate([silence(0.3), speech, silence(0.8)]))


def _received(session: RawSession, rid: str) -> tuple[int, str]:
    """The reply's audio ms (whole ms per chunk) and its transcript, as the client got them."""
    audio_ms = sum(
        len(base64.b64decode(e["delta"])) // BYTES_PER_MS
        for e in session.of("response.output_audio.delta")
        if e["response_id"] == rid
    )
    transcript = "".join(
        e["delta"]
        for e in session.of("response.output_audio_transcript.delta")
        if e["response_id"] == rid
    )
    return audio_ms, transcript


def _ack(session: RawSession, turn: Turn, played_ms: int, since: int) -> dict[str, Any]:
    session.send(
        {
            "type": "playback.ack",
            "response_id": turn.rid,
            "item_id": turn.reply_id,
            "played_ms": played_ms,
        }
    )
    ack = session.first("playback.acknowledged", since, 10, _for(turn.rid))
    assert ack["played_ms"] == played_ms, f"rule 5: the ACK's cursor is not what was sent: {ack}"
    return ack


def _replay(session: RawSession, plan: list[Handling], tag: str) -> list[Turn]:
    """Runs the six turns; returns the client's account of each."""
    turns = [
        Turn(n, f"img_{tag}_{n}", _png_data_url(*IMAGES[n - 1]), how)
        for n, how in enumerate(plan, start=1)
    ]
    previous: Turn | None = None
    for turn in turns:
        since = len(session.events)
        _send_image(session, turn, since)
        if turn.how == "early":
            # A long reply, so that the barge-in most likely finds it still generating.
            _configure(session, EARLY_TOKENS)
        _speak(session, turn)
        committed = session.first("input_audio_buffer.committed", since, 60)
        turn.audio_id = committed["item_id"]
        if previous is not None and previous.how != "full":
            # Rule 1: the next turn's speech stopped the unheard reply.
            session.first("output_audio_buffer.cleared", since, 30, _for(previous.rid))
        created = session.first("response.created", since, 30)
        turn.rid = created["response"]["id"]
        if turn.how == "early":
            # Its first audio: the Thinker has run its prompt (journaled), the reply is live.
            delta = session.first("response.output_audio.delta", since, 60, _for(turn.rid))
            turn.reply_id = delta["item_id"]
            _configure(session, MAX_TOKENS)
        else:
            done = session.first("response.done", since, 90, _response(turn.rid))
            assert done["response"]["status"] in ENDED, done["response"]
            turn.reply_id = done["response"]["output"][0]["id"]
            turn.audio_ms, turn.transcript = _received(session, turn.rid)
            assert turn.audio_ms > 0, f"response {turn.number} has no audio"
            assert turn.transcript.strip(), f"response {turn.number} has no text"
            if turn.how == "full":
                ack = _ack(session, turn, turn.audio_ms, since)
                assert ack["history_committed"] is True, (
                    f"rule 5: a full ACK of reply {turn.number} did not commit it: {ack}"
                )
                assert ack["committed_ms"] == turn.audio_ms, ack
                turn.heard_ms = turn.audio_ms
            elif turn.how == "half":
                turn.heard_ms = max(1, turn.audio_ms // 2)
                ack = _ack(session, turn, turn.heard_ms, since)
                assert ack["history_committed"] is False, (
                    f"rule 5: half an ACK committed reply {turn.number}: {ack}"
                )
        previous = turn
    assert turns[-1].how == "full", "the replay ends with a reply heard in full"
    return turns


def _check_terminals(session: RawSession, turns: list[Turn]) -> None:
    """Rules 3 and 2 for each response; the early-cut reply's audio and text before its clear."""
    session.drain(quiet_s=1.0)  # a late second terminal would arrive here
    created = [e["response"]["id"] for e in session.of("response.created")]
    assert created == [t.rid for t in turns], (
        f"one response per turn, no more: {len(created)} responses for {len(turns)} turns"
    )
    for turn in turns:
        terminals = [e for e in session.of("response.done") if e["response"]["id"] == turn.rid]
        assert len(terminals) == 1, (
            f"rule 3: response {turn.number} ({turn.how}) has {len(terminals)} response.done"
        )
        status = terminals[0]["response"]["status"]
        if turn.how == "early":
            assert status in (*ENDED, "cancelled"), terminals[0]["response"]
            if status == "cancelled":
                reason = terminals[0]["response"]["status_details"]["reason"]
                assert reason == "turn_detected", terminals[0]["response"]
            # The client got what it got before the clear; the history holds none of it.
            turn.audio_ms, turn.transcript = _received(session, turn.rid)
            turn.status = status
            assert turn.audio_ms > 0 and turn.transcript.strip(), (
                f"response {turn.number} ({turn.how}) had no audio or no text before its clear"
            )
        else:
            assert status in ENDED, terminals[0]["response"]
        if turn.how != "full":
            # Rule 2: nothing of an interrupted reply after its clear.
            cleared = next(
                i
                for i, e in enumerate(session.events)
                if e["type"] == "output_audio_buffer.cleared" and e["response_id"] == turn.rid
            )
            late = [
                e["type"]
                for e in session.events[cleared + 1 :]
                if e.get("response_id") == turn.rid and e["type"].endswith(".delta")
            ]
            assert not late, f"rule 2: deltas of reply {turn.number} after its clear: {late[:3]}"


# The client's account of the history: what the server's rules make of what it sent and heard.
def _reply_content(turn: Turn) -> list[dict[str, Any]]:
    """`conversation.context`'s content of a reply."""
    if turn.how == "full":
        return [{"type": "output_audio", "transcript": turn.transcript}]
    if turn.how == "half":
        # Cut at the played cursor by the barge-in: audio heard, none of the unaligned text (the
        # wire form shows no audio length; a part whose transcript is null is the audio kept).
        return [{"type": "output_audio", "transcript": None}]
    return []  # never heard: the empty boundary


def _reply_parts(turn: Turn) -> list[dict[str, Any]]:
    """The Thinker prompt's parts of a reply: its heard text, or none (the empty boundary)."""
    return [{"type": "text", "text": turn.transcript}] if turn.how == "full" else []


def _kept(turns: list[Turn], upto: int) -> list[Turn]:
    """The turns a prompt built at turn `upto` holds: the last MAX_AUDIO_INPUTS with audio."""
    return turns[max(0, upto - MAX_AUDIO_INPUTS) : upto]


def _context(session: RawSession) -> dict[str, Any]:
    since = len(session.events)
    session.send({"type": "conversation.context.retrieve"})
    return session.first("conversation.context", since, 10)


def _check_context(context: dict[str, Any], turns: list[Turn]) -> None:
    """After the sixth reply is committed: turns 3..6, each image, audio and reply (6 too)."""
    kept = _kept(turns, len(turns))
    items = context["items"]
    expected_ids = [i for t in kept for i in (t.image_id, t.audio_id, t.reply_id)]
    assert [i["id"] for i in items] == expected_ids, (
        "rule 6: the context is not turns "
        f"{kept[0].number}..{kept[-1].number} (image, audio, reply each): "
        f"{[(i['id'], i['role']) for i in items]}"
    )
    assert context["audio_inputs"] == MAX_AUDIO_INPUTS, f"rule 6: {context['audio_inputs']} audio"
    assert context["images"] == len(kept), f"rule 6: {context['images']} images, not one per turn"
    for turn, (image, audio, reply) in zip(kept, zip(*[iter(items)] * 3, strict=True), strict=True):
        assert image["role"] == "user" and image["content"] == [
            {"type": "input_image", "image_url": turn.image_url}
        ], f"rule 6: turn {turn.number}'s image is not its own: {image['id']}"
        assert audio["role"] == "user" and [p["type"] for p in audio["content"]] == [
            "input_audio"
        ], f"rule 6: turn {turn.number}'s audio item: {audio}"
        assert reply["role"] == "assistant" and reply["content"] == _reply_content(turn), (
            f"rule 5: reply {turn.number} ({turn.how}) in the context: {reply}"
        )


def _journal(path: Path, server: BackgroundServer, turns: list[Turn]) -> list[dict[str, Any]]:
    """Each response's line of the Thinker's prompt journal, in turn order."""
    entries = []
    for turn in turns:
        request_id = pipeline_request_id(server.config, turn.rid)
        mine = read_entries(path, request_id)
        assert len(mine) == 1, (
            f"the Thinker journaled {len(mine)} prompts for response {turn.number} ({request_id})"
        )
        entries.append(mine[0])
    return entries


def _check_prompts(entries: list[dict[str, Any]], turns: list[Turn]) -> None:
    """Response N's prompt: turns N-3..N (image, audio), the replies before N between them."""
    grids: dict[int, list[int]] = {}
    audio_tokens: dict[int, int] = {}
    for n, entry in enumerate(entries, start=1):
        kept = _kept(turns, n)
        messages = entry["messages"]
        shape = [(m["role"], [p["type"] for p in m["parts"]]) for m in messages]
        expected_shape: list[tuple[str, list[str]]] = []
        for turn in kept:
            expected_shape += [("user", ["image"]), ("user", ["audio"])]
            if turn.number < n:
                expected_shape.append(("assistant", [p["type"] for p in _reply_parts(turn)]))
        assert shape == expected_shape, (
            f"rules 5/6: response {n}'s prompt is not turns {kept[0].number}..{n} with replies "
            f"{[t.number for t in kept[:-1]]} ({[t.how for t in kept[:-1]]}): {shape}"
        )
        pads = sum(p.get("tokens", 0) for m in messages for p in m["parts"])
        assert entry["tokens"] > pads, f"response {n}'s prompt is shorter than its pads: {entry}"
        rest = iter(messages)
        for turn in kept:
            image, audio = next(rest)["parts"][0], next(rest)["parts"][0]
            assert image["tokens"] > 0 and audio["tokens"] > 0, (image, audio)
            # The first prompt holding a turn fixes its image's grid and audio's length.
            grid = grids.setdefault(turn.number, image["grid"])
            tokens = audio_tokens.setdefault(turn.number, audio["tokens"])
            assert (image["grid"], audio["tokens"]) == (grid, tokens), (
                f"rule 6: response {n}'s prompt has in turn {turn.number} the image {image} and "
                f"audio {audio}; that turn's own are grid {grid} and {tokens} audio tokens"
            )
            if turn.number < n:
                reply = next(rest)
                assert reply["parts"] == _reply_parts(turn), (
                    f"rule 5: response {n}'s prompt has reply {turn.number} ({turn.how}) as "
                    f"{reply['parts']}"
                )
    assert len({tuple(g) for g in grids.values()}) == len(turns), (
        f"the test's images must have distinct grids to be told apart: {grids}"
    )
    last = [p["type"] for m in entries[-1]["messages"] for p in m["parts"]]
    assert last.count("audio") == MAX_AUDIO_INPUTS and last.count("image") == MAX_AUDIO_INPUTS, (
        f"rule 6: the last prompt holds {last.count('audio')} audio inputs and "
        f"{last.count('image')} images, not {MAX_AUDIO_INPUTS} of each"
    )


def _run(server: BackgroundServer, triton: TritonServer, plan: list[Handling], tag: str) -> None:
    with raw_session(server.url) as session:
        _configure(session, MAX_TOKENS)
        turns = _replay(session, plan, tag)
        context = _context(session)
        _check_terminals(session, turns)
    for turn in turns:
        print(
            f"turn {turn.number} ({turn.how}, {turn.status}): {turn.audio_ms} ms of audio, heard "
            f"{turn.heard_ms}, text {turn.transcript!r}"
        )
    _check_context(context, turns)
    journal = triton.config.prompt_log
    assert journal is not None, "the session's tritonserver has no prompt journal"
    _check_prompts(_journal(journal, server, turns), turns)


def test_six_image_and_speech_turns_heard_in_full_keep_the_last_four(
    omni_realtime_server: BackgroundServer, triton_server: TritonServer
) -> None:
    _run(omni_realtime_server, triton_server, ["full"] * 6, "full")


def test_interrupted_turns_leave_empty_boundaries_in_their_own_slots(
    omni_realtime_server: BackgroundServer, triton_server: TritonServer
) -> None:
    # Interrupted turns among the last four, so that the final views show them too; turn 1's
    # unheard reply is checked in the prompts of responses 2..4, then pruned with its turn.
    _run(
        omni_realtime_server,
        triton_server,
        ["unheard", "full", "early", "full", "half", "full"],
        "cut",
    )
