"""End of turn for the `turn` model: Smart Turn v3.2 (pipecat's ONNX classifier) on CPU.

Rules:
- The weights are the ONNX file shipped in the `pipecat-ai` 1.14.0 wheel (BSD-2), found with
  `importlib.util.find_spec`, never imported: `import pipecat` pulls dependencies that are not
  installed (the wheel is installed with `--no-deps`). Its sha256 is checked against
  ONNX_SHA256 at every load: another pipecat release may ship other weights under the same
  name, which would load fine and answer differently.
- A row is one window (`turntaker_models.turn_window.window`: the last 8 s at 16 kHz, zeros
  in front, exactly WINDOW_SAMPLES samples). Its features are Whisper's log-mel spectrogram of
  the waveform normalised to zero mean and unit variance, computed by transformers'
  `WhisperFeatureExtractor(chunk_length=8)`: 80 mel bins x 800 frames, what the model was
  trained on.
- `TurnModel.predict` answers a batch of rows with one ONNX run: one probability per row that
  the turn is complete (the graph ends in a sigmoid; pipecat compares it with 0.5). A row's
  answer does not depend on the other rows of its batch (up to float rounding, ~1e-7).
- Exact int8 products on every CPU: the graph is int8-quantized (QDQ), and onnxruntime fuses
  it into u8 x s8 integer products. A CPU with VNNI (`avx512_vnni`, `avx_vnni`) sums them in
  32 bits; without it (AVX2, AVX-512 without VNNI) onnxruntime's kernel adds pairs of products
  in 16 bits with saturation (`vpmaddubsw`), and loud frames then score differently by machine:
  the complete question of tests/turntaker_models/turn_speech.py scored 0.83 here with VNNI
  and 0.46 on an earlier CI machine, while its cut turn scored 0.0303 on both to the last
  digit, as exact integer sums do wherever nothing saturates. So where the CPU lacks VNNI
  (`int8_needs_widening`), the session asks onnxruntime to widen to 16 bits before it
  multiplies (`session.x64quantprecision`): the same answer as VNNI's, at ~40% more time per
  row (measured here with the option forced on). Where VNNI is present the native kernel is
  already exact and keeps its speed.
- Bad input (not 2-D, a row that is not WINDOW_SAMPLES long, a NaN or infinite sample) raises
  ContractError naming the row; nothing is silently repaired.
"""

from __future__ import annotations

import hashlib
import importlib.util
import platform
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from transformers import WhisperFeatureExtractor

from turntaker_models.contract import INPUT_SAMPLE_RATE, ContractError
from turntaker_models.turn_window import WINDOW_S, WINDOW_SAMPLES, window

__all__ = [
    "N_FRAMES",
    "N_MELS",
    "ONNX_SHA256",
    "WINDOW_SAMPLES",
    "Features",
    "Probabilities",
    "TurnAssetError",
    "TurnModel",
    "Windows",
    "check_windows",
    "cpu_flags",
    "feature_extractor",
    "installed_onnx",
    "int8_needs_widening",
    "verified_onnx",
    "window",
]

# smart-turn-v3.2-cpu.onnx as shipped in pipecat-ai 1.14.0 (8,679,182 bytes).
ONNX_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
PIPECAT_INSTALL = "pip install --no-deps pipecat-ai==1.14.0"
# Where the file lies inside the installed `pipecat` package.
ONNX_IN_PACKAGE = Path("audio", "turn", "smart_turn", "data", "smart-turn-v3.2-cpu.onnx")
# Whisper's front end as Smart Turn v3 was trained with it: 25 ms FFT frames every 10 ms.
N_MELS = 80
HOP_LENGTH = 160
N_FFT = 400
# onnxruntime's session option: 1 widens u8 x s8 products to 16 bits on x86-64 (no saturation).
WIDEN_INT8 = "session.x64quantprecision"
# CPU flags (Linux /proc/cpuinfo names) of the instructions that sum u8 x s8 products exactly.
EXACT_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})
X86_64 = frozenset({"x86_64", "amd64"})
N_FRAMES = WINDOW_SAMPLES // HOP_LENGTH
_HASH_BLOCK = 1 << 20

Windows = npt.NDArray[np.float32]
Features = npt.NDArray[np.float32]
Probabilities = npt.NDArray[np.float32]


class TurnAssetError(RuntimeError):
    """The Smart Turn ONNX file is missing or is not the pinned one."""


def installed_onnx() -> Path:
    """The ONNX file inside the installed pipecat package; TurnAssetError if there is none."""
    # find_spec of a top-level package locates it without running its __init__.
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        raise TurnAssetError(
            f"pipecat-ai is not installed in this Python; only its Smart Turn v3.2 ONNX file "
            f"is used: {PIPECAT_INSTALL}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / ONNX_IN_PACKAGE


def verified_onnx(path: Path, sha256: str = ONNX_SHA256) -> Path:
    """`path` once its content hashes to `sha256`; TurnAssetError naming both digests if not."""
    if not path.is_file():
        raise TurnAssetError(f"Smart Turn v3.2 ONNX file not found at {path}: {PIPECAT_INSTALL}")
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(_HASH_BLOCK):
            digest.update(block)
    found = digest.hexdigest()
    if found != sha256:
        raise TurnAssetError(
            f"{path} has sha256 {found}, expected {sha256} (smart-turn-v3.2-cpu.onnx of "
            f"pipecat-ai 1.14.0); install that release: {PIPECAT_INSTALL}"
        )
    return path


def feature_extractor() -> WhisperFeatureExtractor:
    """Whisper's log-mel front end set up for 8 s windows (80 x 800 features)."""
    # transformers leaves this __init__ unannotated.
    extractor = WhisperFeatureExtractor(  # type: ignore[no-untyped-call]
        feature_size=N_MELS,
        sampling_rate=INPUT_SAMPLE_RATE,
        hop_length=HOP_LENGTH,
        chunk_length=WINDOW_S,
        n_fft=N_FFT,
    )
    # The model's input is fixed at 80 x 800: a transformers release that derived other sizes
    # from these parameters must fail here, not feed the model garbage.
    if (extractor.n_samples, extractor.nb_max_frames) != (WINDOW_SAMPLES, N_FRAMES):
        raise RuntimeError(
            f"WhisperFeatureExtractor(chunk_length={WINDOW_S}) gives {extractor.n_samples} "
            f"samples / {extractor.nb_max_frames} frames, not {WINDOW_SAMPLES} / {N_FRAMES}"
        )
    return extractor


def check_windows(windows: npt.ArrayLike) -> Windows:
    """`windows` as float32 [batch, WINDOW_SAMPLES]; ContractError naming what is wrong."""
    try:
        rows = np.asarray(windows, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise ContractError(f"windows are not float32 samples: {error}") from None
    if rows.ndim != 2:
        raise ContractError(
            f"windows must be 2-D [batch, {WINDOW_SAMPLES}], got shape {rows.shape}"
        )
    if rows.shape[1] != WINDOW_SAMPLES:
        raise ContractError(
            f"windows hold {rows.shape[1]} samples, not {WINDOW_SAMPLES}: the last "
            f"{WINDOW_S} s at {INPUT_SAMPLE_RATE} Hz, zero-padded at the front "
            f"(turntaker_models.turn_window.window)"
        )
    finite = np.isfinite(rows)
    if not finite.all():
        row, sample = (int(i) for i in np.argwhere(~finite)[0])
        raise ContractError(
            f"window {row} holds a non-finite sample ({rows[row, sample]}) at {sample}"
        )
    return rows


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's flags as Linux lists them; empty where they cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def int8_needs_widening(machine: str, flags: Iterable[str]) -> bool:
    """Whether onnxruntime must widen int8 products on this CPU to sum them exactly: on x86-64
    without VNNI, and also where the flags are unknown (widening is exact on any x86-64 CPU,
    only slower). Other architectures are not x86-64: the option does not apply there."""
    if machine.lower() not in X86_64:
        return False
    return not EXACT_INT8_FLAGS & set(flags)


class TurnModel:
    """Smart Turn v3.2 on onnxruntime's CPU provider; `threads` intra-op threads.

    `onnx_path` defaults to the file in the installed pipecat package; either way it must match
    ONNX_SHA256. With torch installed, transformers computes the features with torch.stft on
    torch's process-wide thread pool, which this class leaves alone (the Triton adapter, alone
    in its process, sets it to one thread). `widen_int8` defaults to what this CPU needs
    (`int8_needs_widening`); True or False forces it, to compare the two kernels.
    """

    def __init__(
        self, threads: int = 1, onnx_path: Path | None = None, widen_int8: bool | None = None
    ) -> None:
        path = verified_onnx(installed_onnx() if onnx_path is None else onnx_path)
        if widen_int8 is None:
            widen_int8 = int8_needs_widening(platform.machine(), cpu_flags())
        options = ort.SessionOptions()
        options.add_session_config_entry(WIDEN_INT8, "1" if widen_int8 else "0")
        self.widens_int8 = widen_int8
        options.intra_op_num_threads = max(1, threads)
        # One graph, run start to end: a second inter-op pool would only compete for cores.
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._extractor = feature_extractor()

    def features(self, windows: npt.ArrayLike) -> Features:
        """float32 [batch, 80, 800]: each row's normalised Whisper log-mel features."""
        rows = check_windows(windows)
        # Row by row: each window is normalised and clamped (max - 8) on its own, exactly as
        # alone, so a row's features never depend on its batch.
        out = np.empty((rows.shape[0], N_MELS, N_FRAMES), np.float32)
        for i, row in enumerate(rows):
            features = self._extractor(
                row,
                sampling_rate=INPUT_SAMPLE_RATE,
                padding="max_length",
                max_length=WINDOW_SAMPLES,
                truncation=True,
                do_normalize=True,
                return_tensors="np",
            ).input_features
            if features.shape != (1, N_MELS, N_FRAMES):
                raise RuntimeError(
                    f"WhisperFeatureExtractor gave features of shape {features.shape}, "
                    f"not (1, {N_MELS}, {N_FRAMES})"
                )
            out[i] = features[0]
        return out

    def predict(self, windows: npt.ArrayLike) -> Probabilities:
        """float32 [batch]: for each window, the probability that the turn is complete."""
        features = self.features(windows)
        if features.shape[0] == 0:
            return np.empty(0, np.float32)
        (logits,) = self._session.run(["logits"], {"input_features": features})
        return np.asarray(logits, np.float32).reshape(-1)
