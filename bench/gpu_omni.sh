#!/usr/bin/env bash
# Qwen3-Omni at real size (30B-A3B, random weights built on the GPU) on one GPU node: TTFA,
# codec frames/s (per stream, summed) and cancel -> last stage stopped at 1/4/10/32 streams,
# batching on and off, into docs/benchmarks.md.
#
#   bench/gpu_omni.sh                    # from a copy of this repository; extra args go to
#   bench/gpu_omni.sh --budget-s 80      # python -m bench.gpu_omni --weights real --write
#
# Direct mode (the default): the three stages run in the bench's own process, chained as the
# qwen3_omni ensemble chains them (bench/omni_direct.py): no tritonserver, no nvidia-pytriton,
# no tritonclient. Sized for under 8 minutes on one H200 (two stage builds, one per batching
# side, and 2 x 110 s of rounds), not yet timed on one. Needs, with no network:
# - one GPU with ~75 GiB free (thinker 59 GiB, talker 6.6, Code2Wav 0.4 in bf16, KV slots);
#   the two sides' stages are built one after the other, never both at once;
# - the node's own Python with CUDA torch, transformers, numpy (PYTHON=..., default python3),
#   and this project's pure-Python dependencies importable (msgspec, soxr, llguidance,
#   safetensors...; the check below lists what is missing). Checked here only on torch 2.13
#   (CPU), transformers 5.24, numpy 2, Python 3.11; the node has Python 3.12, torch 2.11,
#   transformers 5.17, numpy 2: NOT run on those. Read, not run: the thinker and talker call
#   the model with `cache=` (transformers 5.24 renamed `past_key_values` to `cache`, with
#   deprecate_kwarg in models/qwen3_omni_moe); 5.17 may not know `cache=` (a TypeError, or the
#   cache silently dropped into **kwargs: no KV reuse).
# - flite is optional: without it the prompt's speech is a synthetic signal of the same length.
# `--mode triton` (tritonserver + gRPC) still works where nvidia-pytriton and tritonclient are
# installed: one server per batching side (TritonConfig.omni_batching reaches the stubs).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"

echo "== $(date -u +%FT%TZ) $(hostname), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
nvidia-smi || { echo "gpu_omni.sh: nvidia-smi failed: no NVIDIA driver here" >&2; exit 1; }
command -v flite >/dev/null || echo "flite not found: the prompt's speech will be a synthetic signal"

# Fail here, in seconds, rather than after building 30B parameters.
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - <<'PY'
import importlib
import sys

import torch

problems = []
if not torch.cuda.is_available():
    problems.append(f"torch {torch.__version__} sees no CUDA GPU (a CPU wheel?)")
for module in ("transformers", "numpy", "msgspec", "soxr", "bench.omni_direct",
               "turntaker_models.omni.stages", "turntaker_models.omni.audio_stages"):
    try:
        importlib.import_module(module)
    except Exception as error:  # an import error names the missing package
        problems.append(f"{module}: {type(error).__name__}: {error}")
if problems:
    sys.exit("gpu_omni.sh: " + "; ".join(problems) + " (see the top of bench/gpu_omni.sh)")
import numpy
import transformers

print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"transformers {transformers.__version__}, numpy {numpy.__version__}, "
      f"{torch.cuda.get_device_name(0)}")
PY

export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
time timeout 470 "$PYTHON" -m bench.gpu_omni --weights real --mode direct --write "$@"
git --no-pager diff --stat -- docs/benchmarks.md 2>/dev/null || true
