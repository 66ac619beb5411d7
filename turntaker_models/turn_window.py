"""The audio window Smart Turn v3.2 judges: the last 8 s of a turn, zero-padded at the front.

Rules:
- A window is exactly WINDOW_SAMPLES (128,000) float32 samples of 16 kHz mono audio: the last
  WINDOW_S seconds of the turn. Longer audio keeps its end (the end of the turn is what the
  model judges); shorter audio gets zeros IN FRONT, so the turn's last sample is always the
  window's last sample (pipecat's `local_smart_turn_v3.py` pads the same way).
- Only numpy and the contract: the orchestrator windows audio before sending it to the `turn`
  model and must not pay for onnxruntime or transformers; `turntaker_models.turn` (the model
  side) uses this very function, so the two cannot drift apart.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from turntaker_models.contract import INPUT_SAMPLE_RATE, ContractError

WINDOW_S = 8
WINDOW_SAMPLES = WINDOW_S * INPUT_SAMPLE_RATE

Samples = npt.NDArray[np.float32]


def window(audio16k: npt.ArrayLike) -> Samples:
    """The model's window of `audio16k` (1-D, 16 kHz): its last 8 s, zeros in front if shorter.

    Raises ContractError for audio that is not 1-D. The values are not checked here (NaN stays
    NaN): the model refuses non-finite windows with a message, which silence would hide.
    """
    clip = np.asarray(audio16k, dtype=np.float32)
    if clip.ndim != 1:
        raise ContractError(f"turn audio must be 1-D (16 kHz mono), got shape {clip.shape}")
    tail = clip[-WINDOW_SAMPLES:]
    out = np.zeros(WINDOW_SAMPLES, np.float32)
    # Right-aligned: the end of the turn sits at the end of the window whatever its length.
    out[WINDOW_SAMPLES - tail.shape[0] :] = tail
    return out
