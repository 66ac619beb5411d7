"""The Talker, one codec frame per text token, as `generate()` runs it (transformers 5.24).

Per frame: the talker's forward + `codec_head` gives codebook 0; the code predictor then makes
codebooks 1..G-1, one forward each with a fresh cache. The next talker input is the sum of the
frame's codebook embeddings plus that step's text conditioning: the projection of the next
thinker token, `tts_eos` in place of the thinker's final token, then `tts_pad` until the talker
emits codec EOS. Positions are passed explicitly (the module's own `rope_deltas` is shared).

Positions as generate() gives them (`compute_3d_position_ids`): with images in the user turns,
the prefill's come from the talker's own `get_rope_index` over the user ids plus the assistant
part's tts_pad ids, with the user images' grids and audio lengths, and each later step is text +
that delta; without images they are plain positions (what `get_rope_index` gives then).

With a `TalkerEngine` (talker_engine.py) the session runs no forward itself: the talker's
forwards and each frame's code predictor are jobs of the engine, batched with the other
streams', and its KV cache is one of the engine's slots; the codes it chooses are the same
(talker_engine.py rule 3).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from turntaker_models.omni.sampling import (
    CancelCheck,
    SamplingConfig,
    check,
    choose,
    generator_for,
    repetition_penalty,
)
from turntaker_models.omni.thinker import TALKER_FIXED_ROWS, TalkerStart

if TYPE_CHECKING:
    from turntaker_models.omni.talker_engine import TalkerEngine

# generate()'s talker defaults (Qwen's): penalty even when greedy, sampling settings when not.
REPETITION_PENALTY = 1.05
TALKER_SAMPLING = SamplingConfig(temperature=0.9, top_k=50, top_p=1.0)
PREDICTOR_SAMPLING = SamplingConfig(temperature=1.0, top_k=50, top_p=0.8)
DEFAULT_SPEAKER = "ethan"


# The assistant part of the talker's prefill: 3 + 4 + 1 + 1 rows (see `TalkerSession.start`).
ASSISTANT_ROWS = 9


def _positions(start: int, length: int, delta: int, device: torch.device) -> torch.Tensor:
    # [4, 1, length]: the text positions (for the causal mask) then the 3 mRoPE rows.
    text = torch.arange(start, start + length, device=device).view(1, 1, -1)
    return torch.cat([text, (text + delta).expand(3, 1, length)], dim=0)


class _WithAudioConfig:
    """The talker's config, read through, plus an `audio_config` (see `_rope_index`)."""

    def __init__(self, config: Any, audio_config: Any) -> None:
        self._config = config
        self.audio_config = audio_config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def speaker_id(config: Any, voice: str) -> int:
    speakers: dict[str, int] = dict(config.talker_config.speaker_id or {})
    if not speakers:
        raise ValueError("the checkpoint's talker has no speakers")
    if voice.lower() in speakers:
        return speakers[voice.lower()]
    return speakers.get(DEFAULT_SPEAKER, speakers[sorted(speakers)[0]])


class TalkerSession:
    """One stream's talker: `start` (prefill), then `frame` per text step; owns its caches."""

    def __init__(
        self,
        model: Any,
        config: Any,
        greedy: bool,
        seed: int,
        max_codec_tokens: int,
        cancelled: CancelCheck,
        engine: TalkerEngine | None = None,
    ) -> None:
        self.model = model
        self.engine = engine
        self.slot: int | None = None
        self.config = config
        self.tc = config.talker_config
        self.device: torch.device = model.device
        self.dtype: torch.dtype = model.dtype
        self.sampling = SamplingConfig() if greedy else TALKER_SAMPLING
        self.predictor_sampling = SamplingConfig() if greedy else PREDICTOR_SAMPLING
        self.generator = None if greedy else generator_for(seed, self.device)
        self.max_codec_tokens = max_codec_tokens
        self.cancelled = cancelled
        self.cache: Any = None
        self.length = 0
        self.delta = 0  # mRoPE positions minus text positions, from the prefill
        vocab = self.tc.text_config.vocab_size
        eos = int(self.tc.codec_eos_token_id)
        self.eos = eos
        suppress = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        suppress[max(0, vocab - 1024) :] = True
        suppress[eos] = False
        self.suppress = suppress
        self.codes0: list[int] = []
        self.last_token = -1
        self.last_hidden: torch.Tensor | None = None
        self.tts_eos: torch.Tensor | None = None
        self.tts_pad: torch.Tensor | None = None
        self.done = False
        # The stream's slot ran out of room (talker_engine.py rule 3): its audio ended there,
        # not at the codec's EOS.
        self.slot_full = False
        # Embeddings of the newest frame's codebooks: their sum is the next talker input.
        self._frame_rows: list[torch.Tensor] = []
        # Seconds the code predictor took for the newest frame (for benchmarks and logs).
        self.predictor_s = 0.0

    def project(self, rows: torch.Tensor) -> torch.Tensor:
        """Text projection of thinker embedding rows [n, H_thinker] -> [n, H_talker]."""
        out: torch.Tensor = self.model.text_projection(rows.to(self.device, self.dtype))
        return out

    @torch.inference_mode()
    def start(self, start: TalkerStart, voice: str) -> list[int] | None:
        """Prefill from the thinker's conditioning; returns the first frame (or None at EOS)."""
        from transformers import DynamicCache

        check(self.cancelled)
        rows = start.rows.to(self.device, self.dtype)
        mm = start.mm.to(self.device)
        user_count = rows.shape[0] - TALKER_FIXED_ROWS
        if user_count < 0:
            raise ValueError("talker conditioning has too few rows")
        user = torch.empty(
            user_count, self.tc.text_config.hidden_size, device=self.device, dtype=self.dtype
        )
        user_mm = mm[:user_count]
        if bool(user_mm.any()):
            user[user_mm] = self.model.hidden_projection(rows[:user_count][user_mm])
        if bool((~user_mm).any()):
            user[~user_mm] = self.model.text_projection(rows[:user_count][~user_mm])
        fixed = self.model.text_projection(rows[user_count:])
        assistant, bos, eos, pad, first = fixed[:3], fixed[3:4], fixed[4:5], fixed[5:6], fixed[6:7]
        self.tts_eos, self.tts_pad = eos, pad
        text_side = torch.cat([assistant, pad.expand(4, -1), bos, first], dim=0)
        codec_ids = torch.tensor(
            [
                self.tc.codec_nothink_id,
                self.tc.codec_think_bos_id,
                self.tc.codec_think_eos_id,
                speaker_id(self.config, voice),
                self.tc.codec_pad_id,
                self.tc.codec_bos_id,
            ],
            device=self.device,
        )
        codec_side = torch.cat(
            [
                torch.zeros(3, text_side.shape[1], device=self.device, dtype=self.dtype),
                self.model.get_input_embeddings()(codec_ids),
            ]
        )
        embeds = torch.cat([user, text_side + codec_side], dim=0)[None]
        if self.engine is not None:
            self.slot = self.engine.open()
        else:
            self.cache = DynamicCache(config=self.tc.text_config)
        return self._forward_frame(embeds, self._prefill_positions(start, user_count))

    def _prefill_positions(self, start: TalkerStart, user_count: int) -> torch.Tensor | None:
        """get_rope_index's positions when images sit in the user turns; None: plain ones."""
        if start.image_grids.numel() == 0:
            return None
        if start.ids.shape[0] != user_count:
            raise ValueError(f"talker start: {start.ids.shape[0]} ids for {user_count} user rows")
        pad = torch.full((ASSISTANT_ROWS,), int(self.config.tts_pad_token_id), dtype=torch.long)
        ids = torch.cat([start.ids.long(), pad])[None].to(self.device)
        audio = start.audio_lengths.to(self.device) if start.audio_lengths.numel() else None
        rope, delta = self._rope_index(ids, start.image_grids.to(self.device), audio)
        self.delta = int(delta.reshape(-1)[0].item())
        text = torch.arange(ids.shape[1], device=self.device).view(1, 1, -1)
        return torch.cat([text.to(rope.dtype), rope.to(self.device)], dim=0)

    def _rope_index(
        self, ids: torch.Tensor, grids: torch.Tensor, audio: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.ones_like(ids)
        if audio is None or hasattr(self.tc, "audio_config"):
            out: tuple[torch.Tensor, torch.Tensor] = self.model.get_rope_index(
                ids, grids, None, mask, False, audio, None
            )
            return out
        # transformers 5.24: with audio next to images, get_rope_index counts each audio's
        # placeholders with `config.audio_config.n_window`, which the talker's config lacks (so
        # generate() itself fails there). Lend it the thinker's: the placeholders were counted
        # with it. A view, never a change to the shared model's config.
        from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as mq

        view = SimpleNamespace(
            config=_WithAudioConfig(self.tc, self.config.thinker_config.audio_config),
            spatial_merge_size=self.model.spatial_merge_size,
            get_llm_pos_ids_for_vision=self.model.get_llm_pos_ids_for_vision,
        )
        shared: Any = mq.Qwen3OmniMoePreTrainedModelForConditionalGeneration
        out = shared.get_rope_index(view, ids, grids, None, mask, False, audio, None)
        return out

    @torch.inference_mode()
    def step(self, text: torch.Tensor | None) -> list[int] | None:
        """One more frame. `text`: the next thinker token's embedding row [H_thinker], or None
        for the end of the thinker's text (tts_eos the first time, tts_pad after)."""
        if self.done:
            return None
        assert (
            self.last_hidden is not None and self.tts_eos is not None and self.tts_pad is not None
        )
        if text is not None:
            condition = self.project(text[None])
        else:
            # The thinker's final token is spoken as tts_eos once; every later step gets tts_pad.
            condition = self.tts_eos
            self.tts_eos = self.tts_pad
        check(self.cancelled)
        embeds = (self._frame_embedding() + condition)[None]
        return self._forward_frame(embeds)

    def close(self) -> None:
        self.cache = None
        self.last_hidden = None
        self.done = True
        if self.engine is not None and self.slot is not None:
            self.engine.close(self.slot)
            self.slot = None

    def _forward_frame(
        self, embeds: torch.Tensor, positions: torch.Tensor | None = None
    ) -> list[int] | None:
        """The talker's forward over `embeds`, then the frame it starts (None: the end)."""
        if positions is None:
            positions = _positions(self.length, embeds.shape[1], self.delta, self.device)
        if self.engine is None or self.slot is None:
            self._forward(embeds, positions)
            return self._frame()
        from turntaker_models.omni.talker_engine import Frame

        if self.length and self.length + embeds.shape[1] > self.engine.max_len:
            # talker_engine.py rule 3: a frame past the slot's room ends this stream's audio
            # here; sent on, it would fail in the engine (alone, rule 4), not speak.
            self.slot_full = True
            self.done = True
            return None

        began = time.perf_counter()
        done = self.engine.frame(
            Frame(
                self.slot,
                embeds,
                positions,
                self._choose_first,
                self.predictor_sampling,
                self.generator,
            )
        )
        self.length += embeds.shape[1]
        self.last_hidden = done.hidden
        self.predictor_s = time.perf_counter() - began
        if done.codes is None:
            self.done = True
            return None
        self._frame_rows = done.rows
        return done.codes

    def _forward(self, embeds: torch.Tensor, positions: torch.Tensor) -> None:
        out = self.model(
            inputs_embeds=embeds,
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
            output_hidden_states=True,
            # Only generate()'s bookkeeping reads it; the forward fails without a number.
            generation_step=0,
        )
        self.length += embeds.shape[1]
        # generate() reads the talker's last hidden state from its hidden-state list.
        self.last_hidden = out.hidden_states[0][-1][:, -1:]
        self._choose_first(out.logits[0, -1].float())

    def _choose_first(self, logits: torch.Tensor) -> tuple[int, bool]:
        """Codebook 0 from the talker's logits; whether its frame goes on to codebooks 1..G-1
        (generate() never predicts them for its last token: EOS or the length cap)."""
        seen = torch.tensor(self.codes0, dtype=torch.long, device=self.device)
        logits = repetition_penalty(logits, seen, REPETITION_PENALTY)
        logits = logits.masked_fill(self.suppress, float("-inf"))
        self.last_token = choose(logits, self.sampling, self.generator)
        self.codes0.append(self.last_token)
        ends = self.last_token == self.eos or len(self.codes0) >= self.max_codec_tokens
        return self.last_token, not ends

    def _frame(self) -> list[int] | None:
        """Codebooks 1..G-1 for the newest codebook-0 token; None at EOS or the length cap."""
        if self.last_token == self.eos or len(self.codes0) >= self.max_codec_tokens:
            # generate() never predicts codebooks for its last token (EOS or the cap).
            self.done = True
            return None
        from transformers import DynamicCache

        began = time.perf_counter()
        assert self.last_hidden is not None
        predictor = self.model.code_predictor
        token = torch.tensor([[self.last_token]], device=self.device)
        first = self.model.get_input_embeddings()(token)
        embeds = torch.cat([self.last_hidden, first], dim=1)
        cache = DynamicCache(config=predictor.config)
        codes = [self.last_token]
        self._frame_rows = [first[0, 0]]
        position = 0
        for group in range(self.tc.num_code_groups - 1):
            check(self.cancelled)
            length = embeds.shape[1]
            out = predictor.model(
                inputs_embeds=embeds,
                position_ids=torch.arange(position, position + length, device=self.device)[None],
                cache=cache,
                use_cache=True,
            )
            position += length
            logits = predictor.lm_head[group](out.last_hidden_state[0, -1])
            code = choose(logits, self.predictor_sampling, self.generator)
            codes.append(code)
            embeds = predictor.model.codec_embedding[group](
                torch.tensor([[code]], device=self.device)
            )
            self._frame_rows.append(embeds[0, 0])
        self.predictor_s = time.perf_counter() - began
        return codes

    def _frame_embedding(self) -> torch.Tensor:
        return torch.stack(self._frame_rows).sum(0, keepdim=True)
