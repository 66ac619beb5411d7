"""Load one Qwen3-Omni stage (thinker, talker or code2wav) from a full checkpoint folder.

Each Triton model loads only its own stage: the real thinker alone is 59 GiB in bf16, so a
process that needs the talker must not materialise it. The checkpoint keeps every stage under
its prefix (`thinker.`, `talker.`, `code2wav.`); `key_mapping` strips it and transformers skips
the other stages' tensors. Works for the tiny weights of `tiny.py` and the real checkpoint alike.

A folder with the random-init marker (`RANDOM_INIT_MARKER`, written by real_size.py) has no
weights: the stage is built from its config straight on the placement's device and dtype, and
filled there with seeded values (matrices N(0, 0.02), norms 1, biases 0), deterministic per
seed and device. transformers' own init is skipped: it would leave the talker's fused experts
as torch.empty and walk every module once more for nothing.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from turntaker_models.settings import ModelSettings

Stage = Literal["thinker", "talker", "code2wav"]
# v3: the chat template lays tools out, and the tool-call markers are tokens.
TINY_DIR_NAME = "tiny-omni-seed0-v4"

log = logging.getLogger("turntaker.omni")


DEVICE_ENV = "TURNTAKER_OMNI_DEVICE"
DTYPE_ENV = "TURNTAKER_OMNI_DTYPE"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Placement:
    device: torch.device
    dtype: torch.dtype

    @classmethod
    def auto(cls, env: dict[str, str] | None = None) -> Placement:
        """TURNTAKER_OMNI_DEVICE / TURNTAKER_OMNI_DTYPE if set, else by what is there."""
        e = os.environ if env is None else env
        # bf16 on a GPU (the real model's dtype); float32 on CPU, where bf16 matmuls are slow
        # and the tiny model's exactness tests want full precision.
        device = torch.device(e.get(DEVICE_ENV) or ("cuda" if torch.cuda.is_available() else "cpu"))
        default = "float32" if device.type == "cpu" else "bfloat16"
        name = e.get(DTYPE_ENV) or default
        if name not in _DTYPES:
            raise ValueError(f"{DTYPE_ENV}={name}: one of {', '.join(_DTYPES)}")
        return cls(device, _DTYPES[name])


def weights_dir(settings: ModelSettings) -> Path:
    """The configured weights, or tiny random ones built once into the cache."""
    if settings.omni_weights is not None:
        return settings.omni_weights
    from turntaker_models.omni.tiny import make_tiny_omni

    path = settings.cache_dir / TINY_DIR_NAME
    log.warning(
        "qwen3_omni: TURNTAKER_OMNI_WEIGHTS is not set; serving RANDOM TINY weights from %s "
        "(gibberish text, near-silent audio)",
        path,
    )
    return make_tiny_omni(path, seed=0)


def load_config(path: Path) -> Any:
    from transformers import Qwen3OmniMoeConfig

    return Qwen3OmniMoeConfig.from_pretrained(str(path), local_files_only=True)


def _register_talker_conversion() -> None:
    # Checkpoints store MoE experts one by one; transformers fuses them on load, but only for
    # model types it knows. The talker's text model is missing from that list in 5.24, so
    # loading the talker alone would leave its experts random.
    from transformers import conversion_mapping

    conversions: Any = conversion_mapping
    mapping = conversions.get_checkpoint_conversion_mapping("qwen2_moe")
    if mapping is not None:
        conversions.register_checkpoint_conversion_mapping(
            "qwen3_omni_moe_talker_text", mapping, overwrite=True
        )


RANDOM_INIT_MARKER = "turntaker-random-init.json"
STD = 0.02
# Stage offsets of the seed: the three stages draw different values from one folder's seed.
_SEED_OFFSET = {"thinker": 0, "talker": 1, "code2wav": 2}
# Vectors that the constructors make with torch.zeros/ones/full (which skipping init leaves
# alone): SnakeBeta's log-scale alpha and beta (0), Code2Wav's layer scales and ConvNeXt gamma.
_CONSTRUCTED_VECTORS = frozenset({"alpha", "beta", "scale", "gamma"})


def _stage_class(stage: Stage) -> tuple[Any, str]:
    import transformers

    classes: dict[str, tuple[Any, str]] = {
        "thinker": (transformers.Qwen3OmniMoeThinkerForConditionalGeneration, "thinker_config"),
        "talker": (transformers.Qwen3OmniMoeTalkerForConditionalGeneration, "talker_config"),
        "code2wav": (transformers.Qwen3OmniMoeCode2Wav, "code2wav_config"),
    }
    return classes[stage]


def random_init_seed(path: Path) -> int | None:
    """The seed of a weightless random-init folder (real_size.py), None for real weights."""
    marker = path / RANDOM_INIT_MARKER
    if not marker.exists():
        return None
    return int(json.loads(marker.read_text())["seed"])


def build_empty(stage: Stage, stage_config: Any, placement: Placement) -> Any:
    """The stage's module on the placement's device and dtype, parameters unfilled.

    Allocated where it will run (on the meta device it allocates nothing: parameter counts).
    transformers' init is skipped; buffers (rope frequencies, sinusoids, code offsets) are
    computed by the constructors and are right.
    """
    from transformers import initialization

    cls, _ = _stage_class(stage)
    with torch.device(placement.device), initialization.no_init_weights():
        return cls._from_config(stage_config, dtype=placement.dtype)


@torch.no_grad()
def fill_random_(model: Any, seed: int) -> None:
    """Give every parameter a value: matrices N(0, STD) from a generator seeded with `seed`
    on the parameter's device, norm weights 1, biases 0, constructed vectors as they are."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    for module_name, module in model.named_modules():
        norm = "Norm" in type(module).__name__
        for name, param in module.named_parameters(recurse=False):
            if param.ndim >= 2:
                param.normal_(0.0, STD, generator=generator)
            elif norm and name == "weight":
                param.fill_(1.0)
            elif name == "bias":
                param.zero_()
            elif name not in _CONSTRUCTED_VECTORS:
                # A parameter kind this rule has not seen (a newer transformers): refuse rather
                # than serve torch.empty garbage.
                raise ValueError(f"no random-init rule for {module_name}.{name}")


def load_stage(path: Path, stage: Stage, placement: Placement) -> Any:
    """The stage's module, in eval mode, on the placement's device and dtype."""
    import transformers

    config = load_config(path)
    cls, config_name = _stage_class(stage)
    seed = random_init_seed(path)
    if seed is not None:
        model = build_empty(stage, getattr(config, config_name), placement)
        fill_random_(model, seed * len(_SEED_OFFSET) + _SEED_OFFSET[stage])
        return model.eval().requires_grad_(False)
    if stage == "talker":
        _register_talker_conversion()
    placed: dict[str, Any] = {}
    if placement.device.type != "cpu" and importlib.util.find_spec("accelerate") is not None:
        # Straight onto the GPU, without a full copy in host memory first.
        placed["device_map"] = str(placement.device)
    logs: Any = transformers.utils.logging
    verbosity = logs.get_verbosity()
    # The other stages' tensors are skipped on purpose; their "UNEXPECTED" report is noise.
    logs.set_verbosity_error()
    try:
        model = cls.from_pretrained(
            str(path),
            config=getattr(config, config_name),
            key_mapping={rf"^{stage}\.": ""},
            dtype=placement.dtype,
            local_files_only=True,
            **placed,
        )
    finally:
        logs.set_verbosity(verbosity)
    # Inference only: no autograd bookkeeping whatever context a caller runs it in.
    return model.to(placement.device).eval().requires_grad_(False)


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def load_feature_extractor(path: Path) -> Any:
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor.from_pretrained(str(path), local_files_only=True)
