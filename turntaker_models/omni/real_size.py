"""A Qwen3-Omni-30B-A3B-Instruct checkpoint folder without weights: real sizes, random values.

Benchmarks on a GPU need the real model's shapes (30B parameters, 48 thinker layers, 128 experts)
but no download: the machine may have no network at all. `make_random_init_omni` writes a folder
that the ordinary loader serves, so the Triton models run unchanged with
`TURNTAKER_OMNI_WEIGHTS=<folder>`.

Rules:
- Sizes are the released checkpoint's `config.json` values (checked against a dump of that
  file; the meta-device parameter counts in tests/turntaker_models/omni/test_real_size.py pin
  them: thinker 31.7B, talker 3.3B, Code2Wav 0.2B). Talker-vocabulary ids (codec controls,
  speakers) are the real ones too: they index the real-size talker's own vocabulary.
- Thinker-vocabulary ids (`*_token_id`) come from the tiny checkpoint, whose tokenizer this
  folder reuses: every non-weight file of the tiny checkpoint is copied, whatever it holds, so
  the tokenizer, chat template and processors stay the ones the tiny model is tested with. The
  feature extractor's `feature_size` becomes the real audio tower's 128 mel bins.
- `sizes="tiny"` writes the tiny sizes instead: the same random-init path, small enough for a
  CPU (tests, the CI run of bench/gpu_omni.py); `layers` keeps the real widths with fewer
  layers, to smoke-test the real-size path on a CPU.
- No weights: the marker file (`loader.RANDOM_INIT_MARKER`) tells the loader to build each
  stage on its device with seeded random values.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal

from turntaker_models.omni.checkpoint_dir import build_in_place
from turntaker_models.omni.loader import RANDOM_INIT_MARKER

Sizes = Literal["real", "tiny"]
# Rewritten (config) or wrong here (the tiny marker, the weights' index).
_NOT_COPIED = frozenset({"config.json", "turntaker-tiny.json", "model.safetensors.index.json"})

# Both rope variants of the checkpoint: the text models' 3-axis (t, h, w) interleaved mrope.
_MROPE: dict[str, Any] = {
    "rope_type": "default",
    "rope_theta": 1000000.0,
    "mrope_section": [24, 20, 20],
    "mrope_interleaved": True,
    "interleaved": True,
}

THINKER_TEXT: dict[str, Any] = {
    "vocab_size": 152064,
    "hidden_size": 2048,
    "intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "max_position_embeddings": 65536,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "rms_norm_eps": 1e-6,
    "rope_parameters": _MROPE,
}
AUDIO: dict[str, Any] = {
    "num_mel_bins": 128,
    "encoder_layers": 32,
    "encoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "d_model": 1280,
    "output_dim": 2048,
    "downsample_hidden_size": 480,
    "n_window": 50,
    "n_window_infer": 800,
    "conv_chunksize": 500,
    "max_source_positions": 1500,
}
VISION: dict[str, Any] = {
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_heads": 16,
    "out_hidden_size": 2048,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "deepstack_visual_indexes": [8, 16, 24],
    "num_position_embeddings": 2304,
    "hidden_act": "gelu_pytorch_tanh",
}
TALKER_TEXT: dict[str, Any] = {
    "vocab_size": 3072,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_hidden_layers": 20,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "max_position_embeddings": 65536,
    "moe_intermediate_size": 384,
    "shared_expert_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 6,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "rms_norm_eps": 1e-6,
    "rope_parameters": _MROPE,
}
CODE_PREDICTOR: dict[str, Any] = {
    "vocab_size": 2048,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 5,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 32768,
    "num_code_groups": 16,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
}
# Ids in the talker's own 3072-entry codec vocabulary (the top 1024 are control ids).
TALKER: dict[str, Any] = {
    "num_code_groups": 16,
    "thinker_hidden_size": 2048,
    "accept_hidden_layer": 24,
    "codec_pad_id": 2148,
    "codec_bos_id": 2149,
    "codec_eos_token_id": 2150,
    "codec_nothink_id": 2155,
    "codec_think_bos_id": 2156,
    "codec_think_eos_id": 2157,
    "speaker_id": {"chelsie": 2301, "ethan": 2302, "aiden": 2303},
    "spatial_merge_size": 2,
    "position_id_per_seconds": 13,
    "seconds_per_chunk": 2,
}
CODE2WAV: dict[str, Any] = {
    "codebook_size": 2048,
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 3072,
    "num_quantizers": 16,
    "decoder_dim": 1536,
    "sliding_window": 72,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "layer_scale_initial_scale": 0.01,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 8000,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


def _token_ids(section: dict[str, Any]) -> dict[str, Any]:
    # Thinker-vocabulary ids only: codec_* ids belong to the talker's vocabulary (kept real).
    return {
        k: v
        for k, v in section.items()
        if k.endswith("_token_id") and not k.startswith("codec_") and v is not None
    }


def real_size_config_dict(tiny: dict[str, Any]) -> dict[str, Any]:
    """The Qwen3OmniMoeConfig fields at real size, with the thinker-vocabulary ids of `tiny`.

    `tiny` is the tiny checkpoint's config.json as a dict.
    """
    thinker, talker = tiny["thinker_config"], tiny["talker_config"]
    return {
        **_token_ids(tiny),
        "dtype": "bfloat16",
        "enable_audio_output": True,
        "thinker_config": {
            **_token_ids(thinker),
            "position_id_per_seconds": 13,
            "seconds_per_chunk": 2,
            "text_config": {**_token_ids(thinker.get("text_config", {})), **THINKER_TEXT},
            "audio_config": dict(AUDIO),
            "vision_config": dict(VISION),
        },
        "talker_config": {
            **_token_ids(talker),
            **TALKER,
            "text_config": dict(TALKER_TEXT),
            "code_predictor_config": dict(CODE_PREDICTOR),
        },
        "code2wav_config": dict(CODE2WAV),
    }


def shallow(fields: dict[str, Any], layers: int) -> dict[str, Any]:
    """`fields` with at most `layers` layers in every stack, widths unchanged: the real-size
    path (vocabularies, heads, experts, codec ids, mel bins) small enough to smoke-test on a
    CPU. The talker listens to the thinker's last layer when it has fewer than 24."""
    thinker, talker = fields["thinker_config"], fields["talker_config"]
    vision = thinker["vision_config"]
    depth = min(int(vision["depth"]), layers)
    deepstack = [i for i in vision["deepstack_visual_indexes"] if i < depth] or [depth - 1]
    capped = min(int(thinker["text_config"]["num_hidden_layers"]), layers)
    return {
        **fields,
        "thinker_config": {
            **thinker,
            "text_config": {**thinker["text_config"], "num_hidden_layers": capped},
            "audio_config": {
                **thinker["audio_config"],
                "encoder_layers": min(int(thinker["audio_config"]["encoder_layers"]), layers),
            },
            "vision_config": {**vision, "depth": depth, "deepstack_visual_indexes": deepstack},
        },
        "talker_config": {
            **talker,
            "accept_hidden_layer": min(int(talker["accept_hidden_layer"]), capped),
            "text_config": {
                **talker["text_config"],
                "num_hidden_layers": min(int(talker["text_config"]["num_hidden_layers"]), layers),
            },
            "code_predictor_config": {
                **talker["code_predictor_config"],
                "num_hidden_layers": min(
                    int(talker["code_predictor_config"]["num_hidden_layers"]), layers
                ),
            },
        },
        "code2wav_config": {
            **fields["code2wav_config"],
            "num_hidden_layers": min(int(fields["code2wav_config"]["num_hidden_layers"]), layers),
        },
    }


def _set_feature_size(folder: Path, mel_bins: int) -> None:
    # The feature extractor computes its mel filters from `feature_size` at construction, so
    # the saved field is all there is to change; it may sit in preprocessor_config.json or
    # nested in a processor's config, so every copied json that has it is rewritten.
    for path in folder.glob("*.json"):
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            continue
        changed = False
        for section in (data, *(v for v in data.values() if isinstance(v, dict))):
            if "feature_size" in section:
                section["feature_size"] = mel_bins
                changed = True
        if changed:
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _write(out_dir: Path, tiny_dir: Path, seed: int, sizes: Sizes, layers: int | None) -> None:
    import transformers

    tf: Any = transformers
    for path in tiny_dir.iterdir():
        # Everything but weights (and the tiny marker, which would mislabel the folder).
        if (
            path.is_file()
            and not path.name.endswith(".safetensors")
            and path.name not in _NOT_COPIED
        ):
            shutil.copy2(path, out_dir / path.name)
    tiny = json.loads((tiny_dir / "config.json").read_text())
    fields = real_size_config_dict(tiny) if sizes == "real" else tiny
    if layers is not None:
        fields = shallow(fields, layers)
    # Through the config class: it fills defaults and refuses fields that do not fit together.
    config = tf.Qwen3OmniMoeConfig(**fields)
    config.save_pretrained(str(out_dir))
    _set_feature_size(out_dir, int(config.thinker_config.audio_config.num_mel_bins))
    size = "30B-A3B" if sizes == "real" else "tiny"
    note = f"Qwen3-Omni {size} sizes, random values built at load"
    (out_dir / RANDOM_INIT_MARKER).write_text(json.dumps({"seed": seed, "note": note}) + "\n")


def make_random_init_omni(
    out_dir: Path,
    tiny_dir: Path,
    seed: int = 0,
    sizes: Sizes = "real",
    layers: int | None = None,
) -> Path:
    """Write a weightless checkpoint folder to `out_dir` (kilobytes, about a second).

    `tiny_dir` is a tiny checkpoint (`tiny.make_tiny_omni`): its tokenizer and processors are
    reused. `sizes` "real" gives the released model's sizes; "tiny" keeps the tiny ones, which
    runs the random-init path on a CPU; `layers` caps every stack (`shallow`). Built aside and
    renamed into place like the tiny checkpoint; an existing `out_dir` is left as it is.
    """
    return build_in_place(
        out_dir,
        lambda folder: _write(folder, Path(tiny_dir), seed, sizes, layers),
        RANDOM_INIT_MARKER,
    )
