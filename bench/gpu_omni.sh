#!/usr/bin/env bash
# Qwen3-Omni at real size (30B-A3B, random weights built on the GPU) on one GPU node:
# TTFA at 1/4/10 streams, codec frames/s, cancel -> last stage stopped, into docs/benchmarks.md.
#
#   bench/gpu_omni.sh                 # from a copy of this repository; extra args go to
#   bench/gpu_omni.sh --budget-s 200  # python -m bench.gpu_omni --weights real --write
#
# Sized for under 8 minutes on one H200, not yet timed on one (weights are built in place; no
# download, no weight files: turntaker_models/omni/real_size.py). Needs, with no network:
# - one GPU with ~75 GiB free (thinker 59 GiB, talker 6.6, Code2Wav 0.4 in bf16, caches),
#   /dev/shm of 2 GiB or more (the Python backend's tensors and the cancel board);
# - a Python whose torch sees CUDA, with this project installed (its stubs import it) at the
#   versions pyproject.toml pins: transformers 5.24.0, nvidia-pytriton 0.7.0 (the tritonserver
#   binary and stubs), tritonclient[grpc], msgspec, soxr, numpy<2. Either
#     PYTHON=/path/to/venv/bin/python   a venv built elsewhere with
#                                       `pip install -c constraints.txt -e '.[triton]'` from
#                                       PyPI (its x86_64 torch wheel is the CUDA build, NOT the
#                                       CPU wheel `make test` installs), same OS and Python path;
#     WHEELS=/path/to/wheels            or wheels to install into $PYTHON offline first (as
#                                       `pip download` saved them; torch may be the node's own).
#   Default PYTHON: .venv/bin/python if it is there, else python3.
# - flite is optional: without it the prompt's speech is a synthetic signal of the same length.
# Dockerfile.triton's image holds the models' packages but not the benchmark's client side
# (nvidia-pytriton, tritonclient): there, serve with TURNTAKER_OMNI_WEIGHTS=<the folder that
# `python -c "from turntaker_models.omni.real_size import make_random_init_omni; ..."` writes>
# and point `python -m bench.gpu_omni --url HOST:8001 --board /dev/shm/turntaker-cancel-board`
# at it from a Python that has them.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if [ -n "${WHEELS:-}" ]; then
  "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" --no-deps "$WHEELS"/*.whl
  "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation -e .
fi

echo "== $(date -u +%FT%TZ) $(hostname), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
nvidia-smi || { echo "gpu_omni.sh: nvidia-smi failed: no NVIDIA driver here" >&2; exit 1; }
df -h /dev/shm | tail -1
command -v flite >/dev/null || echo "flite not found: the prompt's speech will be a synthetic signal"

# Fail here, in seconds, rather than after the server's start.
"$PYTHON" - <<'EOF'
import importlib.metadata as md
import importlib.util
import sys

import torch

problems = []
if not torch.cuda.is_available():
    problems.append(f"torch {torch.__version__} sees no CUDA GPU (a CPU wheel?)")
wanted = {"transformers": "5.24.0", "nvidia-pytriton": "0.7.0"}
for name, version in wanted.items():
    try:
        found = md.version(name)
    except md.PackageNotFoundError:
        found = None
    if found != version:
        problems.append(f"{name} {found or 'missing'}, needs {version}")
for module in ("tritonclient.grpc", "msgspec", "soxr", "turntaker_models", "orchestrator"):
    if importlib.util.find_spec(module) is None:
        problems.append(f"no module {module}")
if problems:
    sys.exit("gpu_omni.sh: " + "; ".join(problems) + " (see the top of bench/gpu_omni.sh)")
name = torch.cuda.get_device_name(0)
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), {name}")
EOF

export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
time "$PYTHON" -m bench.gpu_omni --weights real --write "$@"
git --no-pager diff --stat -- docs/benchmarks.md 2>/dev/null || true
