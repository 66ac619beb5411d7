"""The three stages chained in-process the way the ensemble chains them, without Triton.

Every response of a stage becomes one request (with its own reply) to the next stage, as
inside the `qwen3_omni` ensemble. Checks what the server cannot show from outside: every
request at every stage gets its final flag, and no stream state is left behind after normal
ends, text-only streams and cancels.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.turntaker_models.omni.conftest import Tiny
from tests.turntaker_models.omni.images import image_url
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import (
    Conversation,
    GenerationParameters,
    ImagePart,
    Message,
    TextPart,
    encode,
)
from turntaker_models.omni import wire
from turntaker_models.omni.audio_stages import Code2WavStage, TalkerStage
from turntaker_models.omni.stages import ThinkerStage
from turntaker_models.settings import ModelSettings


@dataclass
class FakeReply:
    on_send: Callable[[dict[str, npt.NDArray[Any]]], None]
    closed: bool = False
    error: str | None = None

    def send(self, outputs: Mapping[str, npt.NDArray[Any]], final: bool = False) -> None:
        assert not self.closed, "send after the final flag"
        self.on_send(dict(outputs))
        self.closed = self.closed or final

    def close(self) -> None:
        self.closed = True

    def fail(self, message: str) -> None:
        self.error = message
        self.closed = True

    def is_cancelled(self) -> bool:
        return False


@dataclass
class Chain:
    thinker: ThinkerStage
    talker: TalkerStage
    code2wav: Code2WavStage
    board: CancelBoard
    lock: threading.Lock = field(default_factory=threading.Lock)
    replies: list[FakeReply] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    audio: list[npt.NDArray[np.float32]] = field(default_factory=list)
    # The TOOL_CALL and END_REASON of every response code2wav sent (b"" for none), and the
    # T_KIND of every message the thinker sent, in order.
    calls: list[bytes] = field(default_factory=list)
    reasons: list[bytes] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)

    def _reply(self, on_send: Callable[[dict[str, npt.NDArray[Any]]], None]) -> FakeReply:
        reply = FakeReply(on_send)
        with self.lock:
            self.replies.append(reply)
        return reply

    def _out(self, outputs: dict[str, npt.NDArray[Any]]) -> None:
        with self.lock:
            self.text.append(wire.read_text(outputs["TEXT_DELTA"]).decode())
            if outputs["AUDIO_CHUNK"].size:
                self.audio.append(outputs["AUDIO_CHUNK"])
            # Every response carries every output of the ensemble.
            self.calls.append(wire.read_text(outputs["TOOL_CALL"]))
            self.reasons.append(wire.read_text(outputs["END_REASON"]))

    def _to_code2wav(self, outputs: dict[str, npt.NDArray[Any]]) -> None:
        self.code2wav.submit(outputs, self._reply(self._out))

    def _to_talker(self, outputs: dict[str, npt.NDArray[Any]]) -> None:
        with self.lock:
            self.kinds.append(wire.read_int(outputs["T_KIND"]))
        self.talker.submit(outputs, self._reply(self._to_code2wav))

    def start(
        self,
        request_id: str,
        params: GenerationParameters,
        text: str = "Hello",
        conversation: Conversation | None = None,
    ) -> None:
        conversation = conversation or Conversation([Message("user", [TextPart(text)])])
        tensors = {
            "REQUEST_ID": wire.text_tensor(request_id),
            "CONVERSATION": wire.text_tensor(encode(conversation)),
            "AUDIO": np.zeros(0, np.float32),
            "AUDIO_LENGTHS": np.zeros(0, np.int32),
            "PARAMETERS": wire.text_tensor(encode(params)),
        }
        self.thinker.submit(tensors, self._reply(self._to_talker))

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                open_replies = sum(not r.closed for r in self.replies)
            active = (
                self.thinker.workers.active()
                + self.talker.workers.active()
                + self.code2wav.workers.active()
            )
            if open_replies == 0 and active == 0:
                return
            time.sleep(0.01)
        raise AssertionError(f"{open_replies} requests never got their final flag, {active} live")


@contextmanager
def open_chain(tiny: Tiny, root: Path) -> Iterator[Chain]:
    """The three stages on the tiny weights, with a prompt journal, closed afterwards."""
    settings = ModelSettings(
        board_path=root / "board",
        cache_dir=root,
        omni_weights=tiny.path,
        threads=1,
        prompt_log=root / "prompts.jsonl",
    )
    stages = Chain(
        ThinkerStage(settings),
        TalkerStage(settings),
        Code2WavStage(settings),
        CancelBoard.open(Path(settings.board_path)),
    )
    try:
        yield stages
    finally:
        stages.thinker.close()
        stages.talker.close()
        stages.code2wav.close()
        stages.board.close()


@pytest.fixture(scope="module")
def chain(tiny: Tiny, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    with open_chain(tiny, tmp_path_factory.mktemp("stages")) as stages:
        yield stages


def _reset(chain: Chain) -> None:
    with chain.lock:
        chain.replies.clear()
        chain.text.clear()
        chain.audio.clear()
        chain.calls.clear()
        chain.reasons.clear()
        chain.kinds.clear()


def test_every_request_closes_and_nothing_leaks(chain: Chain) -> None:
    for i in range(3):
        _reset(chain)
        chain.start(f"leak-{i}", GenerationParameters(max_tokens=6))
        chain.wait_idle()
        assert all(r.error is None for r in chain.replies)
        assert "".join(chain.text)
        samples = sum(a.shape[0] for a in chain.audio)
        assert samples > 0 and (samples + 555) % 1920 == 0


def test_every_ensemble_response_carries_an_empty_tool_call(chain: Chain) -> None:
    _reset(chain)
    chain.start("no-tools", GenerationParameters(max_tokens=6))
    chain.wait_idle()
    assert chain.calls and all(call == b"" for call in chain.calls)


@pytest.mark.parametrize("audio", [True, False])
def test_an_answer_max_tokens_ended_carries_its_end_reason_to_the_ensembles_output(
    chain: Chain, audio: bool
) -> None:
    # Was: nothing said why the stream ended. The tiny random thinker never ends on its own
    # within 6 tokens: max_tokens ends it, its END carries the reason, and the talker (silent
    # too when text only) and code2wav pass it on at once.
    _reset(chain)
    chain.start(f"cut-{audio}", GenerationParameters(max_tokens=6, audio=audio))
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies)
    # Once, on one response (every response carries END_REASON: Chain._out reads it).
    assert [r for r in chain.reasons if r] == [b"max_output_tokens"]


def test_text_only_passes_text_and_leaves_nothing(chain: Chain) -> None:
    _reset(chain)
    chain.start("text-only", GenerationParameters(max_tokens=6, audio=False))
    chain.wait_idle()
    assert "".join(chain.text)
    assert not chain.audio


def test_cancel_frees_every_stage(chain: Chain) -> None:
    _reset(chain)
    chain.start("cancel-me", GenerationParameters(max_tokens=400), text="Read me the news.")
    deadline = time.monotonic() + 30
    while not chain.audio and time.monotonic() < deadline:
        time.sleep(0.002)
    assert chain.audio
    at = chain.board.cancel("cancel-me")
    chain.wait_idle()
    stops = {r.stage: r.t_ns - at for r in chain.board.stops("cancel-me")}
    assert {"thinker", "talker"} <= set(stops), stops
    assert all(0 <= t < 1e9 for t in stops.values())
    assert all(r.error is None for r in chain.replies)


def test_image_request_speaks_and_is_journaled(chain: Chain) -> None:
    # The START's image grids and user ids travel to the talker (wire.py) and it speaks.
    _reset(chain)
    conversation = Conversation([Message("user", [ImagePart(image_url()), TextPart("Look")])])
    chain.start("with-image", GenerationParameters(max_tokens=6), conversation=conversation)
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies), [r.error for r in chain.replies]
    assert "".join(chain.text)
    samples = sum(a.shape[0] for a in chain.audio)
    assert samples > 0 and (samples + 555) % 1920 == 0
    journal = chain.thinker.journal
    assert journal is not None
    entries = [json.loads(line) for line in journal.path.read_text().splitlines()]
    entry = next(e for e in entries if e["request_id"] == "with-image")
    assert entry["messages"] == [
        {
            "role": "user",
            "parts": [
                {"type": "image", "tokens": 4, "grid": [1, 4, 4]},
                {"type": "text", "text": "Look"},
            ],
        }
    ]


def test_bad_image_fails_that_request_only(chain: Chain) -> None:
    _reset(chain)
    bad = Conversation([Message("user", [ImagePart("data:image/png;base64,AA==")])])
    chain.start("bad-image", GenerationParameters(max_tokens=4), conversation=bad)
    chain.wait_idle()
    errors = [r.error for r in chain.replies if r.error]
    assert errors == ["qwen3_omni: image 0 is not a PNG or JPEG: unrecognised data"]
    _reset(chain)
    chain.start("after-bad-image", GenerationParameters(max_tokens=4))
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies) and "".join(chain.text)


def test_talker_start_survives_the_wire(tiny: Tiny) -> None:
    import torch

    from turntaker_models.omni.thinker import TalkerStart

    start = TalkerStart(
        rows=torch.randn(10, 4),
        mm=torch.tensor([False, True, True] + [False] * 7),
        ids=torch.arange(3),
        image_grids=torch.tensor([[1, 4, 4]]),
        audio_lengths=torch.tensor([100, 37]),
    )
    tensors = {"T_EMBEDS": start.rows.numpy(), "T_MM": start.mm.numpy()}
    back = wire.read_talker_start(tensors | wire.talker_start_tensors(start))
    for name in ("rows", "mm", "ids", "image_grids", "audio_lengths"):
        assert torch.equal(getattr(back, name), getattr(start, name)), name
    empty = wire.read_talker_start(tensors | wire.talker_start_tensors(None))
    assert empty.image_grids.shape == (0, 3) and empty.ids.numel() == 0


def test_detokenizer_holds_split_characters(tiny: Tiny) -> None:
    from turntaker_models.answers import Detokenizer

    tokenizer = tiny.prompts.tokenizer
    text = "Hé, naïve café! 👋"
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = Detokenizer(tokenizer)
    deltas = [detok.add(token, i == len(ids) - 1) for i, token in enumerate(ids)]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)
    assert detok.add(tiny.config.im_end_token_id, True) == ""


def _thinker_message(
    request_id: str, kind: int, seq: int, rows: int, hidden: int
) -> dict[str, Any]:
    """A thinker message as the talker receives it (wire.py): START's conditioning or a
    TOKEN's embedding, all zeros (as TalkerStage.warm_up speaks), or END with none."""
    return {
        "T_TEXT": wire.text_tensor(""),
        "T_TOOL_CALL": wire.text_tensor(""),
        "T_END_REASON": wire.text_tensor(""),
        "T_REQUEST_ID": wire.text_tensor(request_id),
        "T_PARAMETERS": wire.text_tensor(encode(GenerationParameters())),
        "T_KIND": wire.int_tensor(kind),
        "T_SEQ": wire.int_tensor(seq),
        "T_EMBEDS": np.zeros((rows, hidden), np.float32),
        "T_MM": np.zeros(rows, bool),
        **wire.talker_start_tensors(None),
    }


def test_a_talker_stream_past_its_slot_ends_with_the_end_reason_on_its_last_output(
    tiny: Tiny, tmp_path: Path
) -> None:
    # Was: the talker ended the audio where its KV slot was full (talker_engine.py rule 3) and
    # told nobody: the reply stopped early and ended `completed`. A slot of 16 positions holds
    # the 10 of the prefill and 6 frames after the first; the thinker's 3 tokens and its END
    # ask for up to 40 (the cap), so the slot runs out first.
    from turntaker_models.omni.thinker import TALKER_FIXED_ROWS

    settings = ModelSettings(
        board_path=tmp_path / "board",
        cache_dir=tmp_path,
        omni_weights=tiny.path,
        threads=1,
        omni_max_streams=1,
        omni_max_positions=16,
    )
    talker = TalkerStage(settings)
    hidden = int(tiny.config.talker_config.thinker_hidden_size)
    sent: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def record(outputs: dict[str, npt.NDArray[Any]]) -> None:
        with lock:
            sent.append((wire.read_int(outputs["C_KIND"]), wire.read_text(outputs["C_END_REASON"])))

    replies = [FakeReply(record) for _ in range(4)]
    try:
        kinds = [
            (wire.START, TALKER_FIXED_ROWS + 1),
            (wire.TOKEN, 1),
            (wire.TOKEN, 1),
            (wire.END, 0),
        ]
        for seq, ((kind, rows), reply) in enumerate(zip(kinds, replies, strict=True)):
            talker.submit(_thinker_message("slot", kind, seq, rows, hidden), reply)
        deadline = time.monotonic() + 30
        while not all(r.closed for r in replies) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(r.closed and r.error is None for r in replies), [r.error for r in replies]
        assert talker.workers.active() == 0
    finally:
        talker.close()
    frames = [k for k, _ in sent if k == wire.FRAME]
    assert len(frames) == 7, f"the slot's frames, all spoken before it ran out: {sent}"
    assert sent[-2:] == [(wire.TEXT, b"max_output_tokens"), (wire.END, b"")]
    assert [r for _, r in sent[:-2] if r] == []
