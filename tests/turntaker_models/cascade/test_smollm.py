"""The SmolLM2 weights: the pinned GGUF, the once-only atomic conversion, offline loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from turntaker_models.cascade import smollm
from turntaker_models.settings import ModelSettings


def test_the_shipped_gguf_is_the_pinned_one() -> None:
    assert smollm.sha256_file(smollm.gguf_path()) == smollm.GGUF_SHA256


def test_folder_is_named_after_the_gguf(tmp_path: Path) -> None:
    folder = smollm.converted_dir(tmp_path)
    assert folder == tmp_path / f"smollm2-135m-instruct-{smollm.GGUF_SHA256[:12]}"


def fake_convert(gguf: Path, target: Path) -> None:
    (target / "model.safetensors").write_bytes(b"weights")


def test_converts_once_and_leaves_no_building_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(smollm, "_convert", fake_convert)
    folder, seconds = smollm.ensure_converted(tmp_path)
    assert seconds is not None and (folder / smollm.COMPLETE_MARKER).is_file()
    assert smollm.ensure_converted(tmp_path) == (folder, None)
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]


def test_losing_the_rename_race_uses_the_winner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def convert_while_another_process_wins(gguf: Path, target: Path) -> None:
        winner = smollm.converted_dir(tmp_path)
        winner.mkdir()
        (winner / "model.safetensors").write_bytes(b"winner")
        (winner / smollm.COMPLETE_MARKER).write_text("done")
        fake_convert(gguf, target)

    monkeypatch.setattr(smollm, "_convert", convert_while_another_process_wins)
    folder, _ = smollm.ensure_converted(tmp_path)
    assert (folder / "model.safetensors").read_bytes() == b"winner"
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]


def test_a_different_gguf_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    impostor = tmp_path / smollm.GGUF_NAME
    impostor.write_bytes(b"not the model")
    monkeypatch.setattr(smollm, "gguf_path", lambda: impostor)
    with pytest.raises(smollm.WeightsError, match="expected"):
        smollm.ensure_converted(tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_the_converted_folder_loads_offline_with_a_chat_template() -> None:
    loaded = smollm.load(ModelSettings.from_env().cache_dir)
    assert loaded.folder.name.endswith(smollm.GGUF_SHA256[:12])
    assert (loaded.folder / "model.safetensors").is_file()
    prompt = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert loaded.model.config.tie_word_embeddings
    model = loaded.model
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
