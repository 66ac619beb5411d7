"""The Thinker, one token at a time, and the conditioning it hands to the Talker.

Mirrors `Qwen3OmniMoeForConditionalGeneration.generate` (transformers 5.24) step by step so that
greedy decoding gives the same tokens, but with positions passed explicitly: without them the
model keeps `rope_deltas` on the shared module, which interleaved sessions would overwrite.

Talker conditioning (`TalkerStart.rows`, thinker hidden size H, one row per position):
  rows[:U]      the user turns' positions of the prompt: the thinker's input embedding, or at
                audio/image/video placeholders its layer-`accept_hidden_layer` hidden state
                (`mm[:U]` True: the talker applies `hidden_projection`, else `text_projection`)
  rows[U:U+3]   embeddings of the last `<|im_start|>`, `assistant`, `\\n`
  rows[U+3:U+6] embeddings of tts_bos, tts_eos, tts_pad
  rows[U+6]     embedding of the first generated token
Each later text token reaches the talker as its embedding row alone. With it go what the talker
needs for its own mRoPE positions (generate() hands it `talker_input_ids`, `image_grid_thw` and
`audio_feature_lengths`): the user rows' token ids and the grids and mel lengths of the images
and audio in the user turns (the talker sees no other turn).

Positions: the prefill takes the model's own 3-D mRoPE positions (`get_rope_index` with the
image grids and audio lengths; text positions as the first of 4 rows, as
`_prepare_position_ids_for_generation` builds them); each later step is text + delta.

A `CallConstraint` (turntaker_models/tool_grammar.py, tool_choice "required"/"function")
masks
the logits of every choice, prefill included, and accepts each chosen token; the tokens its
grammar forces next (`forced()`) are fed with the chosen one in one forward pass
(`step(token, *forced)`). The mask is built on the CPU and added to the logits on their device.

With a `ThinkerEngine` (thinker_engine.py) the session runs no forward itself: its prefill and
steps are jobs of the engine, batched with the other streams', and its KV cache is one of the
engine's slots; the tokens it chooses are the same (thinker_engine.py rule 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from turntaker_models.omni.prompt import Prompt
from turntaker_models.omni.sampling import (
    CancelCheck,
    SamplingConfig,
    check,
    choose,
    generator_for,
)

if TYPE_CHECKING:
    from turntaker_models.omni.thinker_engine import ThinkerEngine
    from turntaker_models.tool_grammar import CallConstraint

TALKER_FIXED_ROWS = 7


def _empty_long(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.long)


@dataclass(frozen=True)
class TalkerStart:
    rows: torch.Tensor  # [U + 7, H] float32 on CPU
    mm: torch.Tensor  # [U + 7] bool
    # The user rows' token ids [U]; empty: plain positions (nothing multimodal to place).
    ids: torch.Tensor = field(default_factory=lambda: _empty_long(0))
    # (t, h, w) of each image in the user rows [n, 3], in order.
    image_grids: torch.Tensor = field(default_factory=lambda: _empty_long(0, 3))
    # Mel frames of each audio in the user rows [m], in order.
    audio_lengths: torch.Tensor = field(default_factory=lambda: _empty_long(0))

    def with_first(self, row: torch.Tensor) -> TalkerStart:
        """The same conditioning with another first token (its embedding [H]): the first
        token the talker speaks need not be the first one generated (a call is never spoken)."""
        return replace(self, rows=torch.cat([self.rows[:-1], row.view(1, -1).to(self.rows)]))


def _positions(start: int, length: int, delta: torch.Tensor, device: torch.device) -> torch.Tensor:
    # [4, 1, length]: the text positions (for the causal mask) then the 3 mRoPE rows.
    text = torch.arange(start, start + length, device=device).view(1, 1, -1)
    rope = (text + delta.to(device).long().view(1, 1, 1)).expand(3, 1, length)
    return torch.cat([text, rope], dim=0)


def prefill_positions(rope: torch.Tensor) -> torch.Tensor:
    """[4, 1, L]: the text positions row, then `get_rope_index`'s 3 rows (as generate() does)."""
    length = rope.shape[-1]
    text = torch.arange(length, device=rope.device).view(1, 1, -1)
    return torch.cat([text.to(rope.dtype), rope], dim=0)


class ThinkerSession:
    """One generation: prefill, then one token per `step`; owns its KV cache."""

    def __init__(
        self,
        model: Any,
        config: Any,
        prompt: Prompt,
        sampling: SamplingConfig,
        seed: int,
        cancelled: CancelCheck,
        constraint: CallConstraint | None = None,
        engine: ThinkerEngine | None = None,
    ) -> None:
        self.model = model
        self.engine = engine
        self.slot: int | None = None
        self.config = config
        self.prompt = prompt
        self.sampling = sampling
        self.cancelled = cancelled
        self.device: torch.device = model.device
        self.generator = None if sampling.greedy else generator_for(seed, self.device)
        self.cache: Any = None
        self.length = 0
        self.delta = torch.zeros(1, 1, dtype=torch.long)
        self.constraint = constraint

    def _choose(self, logits: torch.Tensor) -> int:
        constraint = self.constraint
        if constraint is not None:
            mask = torch.zeros(logits.shape[-1], dtype=torch.float32)
            constraint.mask_logits(mask)
            logits = logits.float() + mask.to(logits.device)
        token = choose(logits, self.sampling, self.generator)
        if constraint is not None:
            constraint.accept(token)
        return token

    def forced(self) -> list[int]:
        """The tokens the constraint forces next (accepted already; feed them with the last
        chosen one); none without a constraint."""
        return self.constraint.take_forced() if self.constraint is not None else []

    @torch.inference_mode()
    def embed(self, token: int) -> torch.Tensor:
        """The thinker's input embedding of one token, [H] float32 on CPU."""
        ids = torch.tensor([[token]], device=self.device)
        row: torch.Tensor = self.model.get_input_embeddings()(ids)[0, 0]
        return row.float().cpu()

    @torch.inference_mode()
    def prefill(self, want_talker: bool) -> tuple[int, TalkerStart | None]:
        """Run the prompt; returns the first token and, if asked, the talker conditioning."""
        from transformers import DynamicCache

        check(self.cancelled)
        prompt = self.prompt
        ids = prompt.input_ids.to(self.device)
        mask = torch.ones_like(ids)
        audio_lengths = None
        features = feature_mask = pixels = grids = None
        if prompt.input_features is not None and prompt.feature_attention_mask is not None:
            features = prompt.input_features.to(self.device, self.model.dtype)
            feature_mask = prompt.feature_attention_mask.to(self.device)
            audio_lengths = feature_mask.sum(-1)
        if prompt.pixel_values is not None and prompt.image_grid_thw is not None:
            pixels = prompt.pixel_values.to(self.device, self.model.dtype)
            grids = prompt.image_grid_thw.to(self.device)
        rope, self.delta = self.model.model.get_rope_index(
            ids, grids, None, mask, False, audio_lengths, None
        )
        inputs = {
            "input_ids": ids,
            "input_features": features,
            "feature_attention_mask": feature_mask,
            "pixel_values": pixels,
            "image_grid_thw": grids,
            "position_ids": prefill_positions(rope.to(self.device)),
        }
        if self.engine is not None:
            self.slot = self.engine.open()
            # Only the layers `_talker_start` reads (thinker_engine.py rule 4).
            layers = (0, self.config.talker_config.accept_hidden_layer) if want_talker else ()
            done = self.engine.prefill(self.slot, inputs, ids.shape[1], layers)
            logits, hidden = done.logits, done.hidden
        else:
            self.cache = DynamicCache(config=self.model.config.text_config)
            out = self.model(
                **inputs, cache=self.cache, use_cache=True, output_hidden_states=want_talker
            )
            logits, hidden = out.logits[0, -1], out.hidden_states
        self.length = ids.shape[1]
        token = self._choose(logits)
        start = self._talker_start(ids, hidden, token) if want_talker else None
        return token, start

    @torch.inference_mode()
    def step(self, token: int, *after: int) -> int:
        """Feed the last token (and the forced ones `after` it, in the same pass); returns the
        next one."""
        check(self.cancelled)
        fed = (token, *after)
        positions = _positions(self.length, len(fed), self.delta, self.device)
        if self.engine is not None and self.slot is not None:
            logits = self.engine.step(self.slot, fed, positions)
        else:
            out = self.model(
                input_ids=torch.tensor([fed], device=self.device),
                position_ids=positions,
                cache=self.cache,
                use_cache=True,
            )
            logits = out.logits[0, -1]
        self.length += len(fed)
        return self._choose(logits)

    def close(self) -> None:
        # The KV cache is the big per-stream allocation (~96 KiB per token at real size).
        self.cache = None
        if self.engine is not None and self.slot is not None:
            self.engine.close(self.slot)
            self.slot = None

    def _talker_start(self, ids: torch.Tensor, hidden: Any, first: int) -> TalkerStart:
        c = self.config
        embeds = hidden[0][0]
        accepted = hidden[c.talker_config.accept_hidden_layer][0]
        seq = ids[0]
        tc = c.thinker_config
        mm = (seq == tc.audio_token_id) | (seq == tc.image_token_id) | (seq == tc.video_token_id)
        # A position belongs to the turn whose <|im_start|> came last before it (as generate()).
        positions = torch.arange(seq.shape[0], device=seq.device)
        starts = torch.where(seq == c.im_start_token_id, positions, torch.full_like(positions, -1))
        previous = torch.cummax(starts, dim=0).values.clamp_min(0)
        role = seq[(previous + 1).clamp_max(seq.shape[0] - 1)]
        user = role == c.user_token_id
        user_rows = torch.where(mm[:, None], accepted, embeds)[user]
        specials = torch.tensor(
            [c.tts_bos_token_id, c.tts_eos_token_id, c.tts_pad_token_id, first],
            device=self.device,
        )
        special_rows = self.model.get_input_embeddings()(specials)
        rows = torch.cat([user_rows, embeds[-3:], special_rows], dim=0)
        flags = torch.cat(
            [mm[user], torch.zeros(TALKER_FIXED_ROWS, dtype=torch.bool, device=seq.device)]
        )
        grids, audio_lengths = self._user_media(seq, user)
        return TalkerStart(
            rows=rows.float().cpu(),
            mm=flags.cpu(),
            ids=seq[user].long().cpu(),
            image_grids=grids,
            audio_lengths=audio_lengths,
        )

    def _user_media(
        self, seq: torch.Tensor, user: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Grids of the images and mel lengths of the audio that sit in user turns, in order:
        the k-th `<|vision_start|><|image_pad|>` is grid k, the k-th `<|audio_start|>` audio k."""
        tc = self.config.thinker_config
        prompt = self.prompt
        grids = _empty_long(0, 3)
        lengths = _empty_long(0)
        if prompt.image_grid_thw is not None:
            starts = torch.nonzero(seq[:-1] == tc.vision_start_token_id).flatten()
            starts = starts[seq[starts + 1] == tc.image_token_id]
            grids = prompt.image_grid_thw.cpu()[user[starts].cpu()].long()
        if prompt.feature_attention_mask is not None:
            starts = torch.nonzero(seq == tc.audio_start_token_id).flatten()
            frames = prompt.feature_attention_mask.sum(-1).cpu()
            lengths = frames[user[starts].cpu()].long()
        return grids, lengths
