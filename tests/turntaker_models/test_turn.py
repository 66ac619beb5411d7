"""turntaker_models.turn (Smart Turn v3.2) without a server: window, features, pinned file,
complete vs cut turns, batching, bad input."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests.turntaker_models.turn_speech import SENTENCES, complete_turn, cut_turn, spoken, word_gap
from turntaker_models.contract import INPUT_SAMPLE_RATE, ContractError
from turntaker_models.turn import (
    N_FRAMES,
    N_MELS,
    ONNX_SHA256,
    WINDOW_SAMPLES,
    TurnAssetError,
    TurnModel,
    cpu_flags,
    feature_extractor,
    installed_onnx,
    int8_needs_widening,
    verified_onnx,
    window,
)
from turntaker_models.turn_window import window as client_window


@pytest.fixture(scope="module")
def model() -> TurnModel:
    return TurnModel(threads=1)


def _pipecat_features() -> ModuleType:
    """pipecat's numpy re-implementation of the features, loaded by file path: `import pipecat`
    fails here (the wheel is installed without its dependencies, loguru among them)."""
    path = installed_onnx().parents[1] / "_whisper_features.py"
    spec = importlib.util.spec_from_file_location("pipecat_whisper_features", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# window -----------------------------------------------------------------------------------


def test_window_pads_short_audio_with_zeros_in_front() -> None:
    audio = np.arange(1, 1001, dtype=np.float32)
    out = window(audio)
    assert out.shape == (WINDOW_SAMPLES,) and out.dtype == np.float32
    assert not out[: WINDOW_SAMPLES - 1000].any()
    np.testing.assert_array_equal(out[-1000:], audio)


def test_window_keeps_the_last_8_s_of_long_audio() -> None:
    audio = np.arange(WINDOW_SAMPLES + 5000, dtype=np.float32)
    np.testing.assert_array_equal(window(audio), audio[-WINDOW_SAMPLES:])


def test_window_of_exactly_8_s_and_of_nothing() -> None:
    audio = np.random.default_rng(1).standard_normal(WINDOW_SAMPLES).astype(np.float32)
    np.testing.assert_array_equal(window(audio), audio)
    np.testing.assert_array_equal(window(np.zeros(0, np.float32)), np.zeros(WINDOW_SAMPLES))


def test_window_refuses_audio_that_is_not_1d() -> None:
    with pytest.raises(ContractError, match=r"1-D .* shape \(2, 10\)"):
        window(np.zeros((2, 10), np.float32))


def test_model_and_client_share_one_window_rule() -> None:
    assert window is client_window


def test_the_orchestrators_client_loads_no_model_runtime() -> None:
    """turn_window is numpy only: the realtime server must not pay for onnxruntime or torch."""
    probe = (
        "import sys, orchestrator.service.backends.turn_predictor; "
        "print(','.join(m for m in ('onnxruntime', 'transformers', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported: {out.stdout.strip()}"


# features ---------------------------------------------------------------------------------


def test_the_extractor_gives_80_by_800_for_an_8_s_window() -> None:
    extractor = feature_extractor()
    assert (extractor.feature_size, extractor.sampling_rate) == (N_MELS, INPUT_SAMPLE_RATE)
    assert (extractor.hop_length, extractor.n_fft, extractor.chunk_length) == (160, 400, 8)
    assert (
        (extractor.n_samples, extractor.nb_max_frames)
        == (WINDOW_SAMPLES, N_FRAMES)
        == (
            128000,
            800,
        )
    )


def test_features_equal_pipecats_own_within_1e_4(model: TurnModel) -> None:
    """Our transformers front end computes what pipecat's runtime feeds the model."""
    reference: Any = _pipecat_features()
    rng = np.random.default_rng(3)
    windows = np.stack(
        [
            window(complete_turn(SENTENCES[0])),
            window(cut_turn(SENTENCES[1])),
            (0.1 * rng.standard_normal(WINDOW_SAMPLES)).astype(np.float32),
        ]
    )
    ours = model.features(windows)
    assert ours.shape == (3, N_MELS, N_FRAMES) and ours.dtype == np.float32
    for i, row in enumerate(windows):
        theirs = reference.compute_whisper_log_mel_features(row, do_normalize=True)
        np.testing.assert_allclose(ours[i], theirs, rtol=0, atol=1e-4, err_msg=f"window {i}")


# the pinned file --------------------------------------------------------------------------


def test_the_installed_file_is_the_pinned_one() -> None:
    assert verified_onnx(installed_onnx()) == installed_onnx()


def test_a_corrupted_file_is_refused_naming_both_digests(tmp_path: Path) -> None:
    copy = tmp_path / "smart-turn-v3.2-cpu.onnx"
    shutil.copyfile(installed_onnx(), copy)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    with pytest.raises(TurnAssetError) as caught:
        TurnModel(threads=1, onnx_path=copy)
    message = str(caught.value)
    assert ONNX_SHA256 in message, message
    assert "pip install --no-deps pipecat-ai==1.14.0" in message, message
    found = message.split("has sha256 ")[1].split(",")[0]
    assert len(found) == 64 and found != ONNX_SHA256, message


def test_a_missing_file_is_refused_with_the_install_command(tmp_path: Path) -> None:
    with pytest.raises(TurnAssetError, match=r"not found .*pip install --no-deps pipecat-ai"):
        TurnModel(threads=1, onnx_path=tmp_path / "absent.onnx")


# probabilities ----------------------------------------------------------------------------


@pytest.mark.parametrize("sentence", SENTENCES)
def test_a_complete_question_scores_complete_and_its_cut_does_not(
    model: TurnModel, sentence: str
) -> None:
    """At pipecat's threshold (0.5): whole sentence complete, cut at its middle word gap not.

    Measured (flite slt, exact int8 sums): 0.829 / 0.030 and 0.979 / 0.214. Synthetic speech
    is a weak judge (tests/turntaker_models/turn_speech.py): this guards the wiring, not the
    model's quality.
    """
    start, end = word_gap(spoken(sentence))
    assert end - start >= 2 * INPUT_SAMPLE_RATE // 100, "the gap is too short to be between words"
    whole, cut = model.predict(
        np.stack([window(complete_turn(sentence)), window(cut_turn(sentence))])
    )
    assert whole > 0.5, f"complete turn scored {whole:.3f}"
    assert cut < 0.5, f"turn cut mid-phrase scored {cut:.3f}"


def test_a_row_of_a_batch_scores_as_it_does_alone(model: TurnModel) -> None:
    sentence = SENTENCES[0]
    complete, cut = window(complete_turn(sentence)), window(cut_turn(sentence))
    batch = np.stack([complete, cut, complete])
    together = model.predict(batch)
    alone = np.concatenate([model.predict(row[None]) for row in batch])
    assert together.shape == (3,) and together.dtype == np.float32
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)
    assert together[0] > 0.5 > together[1]


# exact int8 on every CPU --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "flags", "widen"),
    [
        ("x86_64", {"avx2", "avx512bw"}, True),  # saturating pairs of products
        ("x86_64", {"avx2", "avx512bw", "avx512_vnni"}, False),
        ("x86_64", {"avx2", "avx_vnni"}, False),
        ("x86_64", set(), True),  # flags unknown: widening is exact anywhere
        ("AMD64", {"avx2"}, True),
        ("aarch64", set(), False),  # the option is x86-64's
    ],
)
def test_int8_is_widened_exactly_where_the_cpu_would_saturate(
    machine: str, flags: set[str], widen: bool
) -> None:
    assert int8_needs_widening(machine, flags) is widen


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_vnni\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_vnni"}
    assert cpu_flags(tmp_path / "absent") == frozenset()


def test_the_default_kernel_answers_as_the_widened_one(model: TurnModel) -> None:
    """Rule: exact int8 on every CPU. Whatever this CPU is, the model's default session gives the
    probabilities of one that widens every product (exact by construction): on a CPU that
    saturates, the default widens too; on a VNNI CPU the native sums are exact. Loud turns are
    where saturation shows (the complete question scored 0.46 on a CPU without VNNI)."""
    turns = [complete_turn(s) for s in SENTENCES] + [cut_turn(SENTENCES[0])]
    rows = np.stack([window(turn) for turn in turns])
    widened = TurnModel(threads=1, widen_int8=True)
    assert widened.widens_int8
    np.testing.assert_allclose(model.predict(rows), widened.predict(rows), rtol=0, atol=1e-6)


def test_an_empty_batch_gives_no_probabilities(model: TurnModel) -> None:
    assert model.predict(np.zeros((0, WINDOW_SAMPLES), np.float32)).shape == (0,)


# bad input --------------------------------------------------------------------------------


def test_a_batch_that_is_not_2d_is_refused(model: TurnModel) -> None:
    with pytest.raises(ContractError, match=r"2-D \[batch, 128000\], got shape \(128000,\)"):
        model.predict(np.zeros(WINDOW_SAMPLES, np.float32))


@pytest.mark.parametrize("samples", [0, 16000, WINDOW_SAMPLES - 1, WINDOW_SAMPLES + 1])
def test_a_window_of_the_wrong_length_is_refused(model: TurnModel, samples: int) -> None:
    with pytest.raises(ContractError, match=rf"hold {samples} samples, not 128000"):
        model.predict(np.zeros((2, samples), np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_sample_is_refused_naming_its_row(model: TurnModel, bad: float) -> None:
    windows = np.zeros((3, WINDOW_SAMPLES), np.float32)
    windows[1, 777] = bad
    with pytest.raises(ContractError, match=r"window 1 holds a non-finite sample .* at 777"):
        model.predict(windows)


def test_samples_that_are_not_numbers_are_refused(model: TurnModel) -> None:
    with pytest.raises(ContractError, match="not float32 samples"):
        model.predict([["a"] * WINDOW_SAMPLES])
