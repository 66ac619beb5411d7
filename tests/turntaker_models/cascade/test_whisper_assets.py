"""Whisper-base reassembly: the pinned hash, a damaged part, a race between two builders."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from turntaker_models.cascade.whisper_assets import (
    MODEL_SHA256,
    SIDE_FILES,
    WhisperAssetError,
    WhisperParts,
    assemble,
    installed_parts,
    whisper_model_dir,
)


def _fake_parts(root: Path, first: bytes, second: bytes) -> WhisperParts:
    part1, part2 = root / "p1", root / "p2"
    part1.mkdir()
    part2.mkdir()
    (part1 / "model.bin.part1").write_bytes(first)
    (part2 / "model.bin.part2").write_bytes(second)
    for name in SIDE_FILES:
        (part1 / name).write_text(f"{name}\n")
    return WhisperParts(part1, part2)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def test_installed_parts_reassemble_to_the_pinned_model(tmp_path: Path) -> None:
    model_dir = whisper_model_dir(tmp_path)
    assert model_dir == tmp_path / f"whisper-base-{MODEL_SHA256[:12]}"
    assert _sha256(model_dir / "model.bin") == MODEL_SHA256
    for name in SIDE_FILES:
        assert (model_dir / name).read_bytes() == (installed_parts().part1_dir / name).read_bytes()
    # Built once: a second call finds it and leaves it alone, and no build folder is left.
    mtime = (model_dir / "model.bin").stat().st_mtime_ns
    assert whisper_model_dir(tmp_path) == model_dir
    assert (model_dir / "model.bin").stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [model_dir.name]


def test_reassembly_joins_part1_then_part2(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path, b"first-", b"second")
    sha = hashlib.sha256(b"first-second").hexdigest()
    model_dir = assemble(tmp_path / "cache", parts, sha)
    assert (model_dir / "model.bin").read_bytes() == b"first-second"


def test_damaged_part_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path, b"first-", b"sec0nd")
    sha = hashlib.sha256(b"first-second").hexdigest()
    cache = tmp_path / "cache"
    with pytest.raises(WhisperAssetError, match=f"sha256 .* expected {sha}"):
        assemble(cache, parts, sha)
    assert list(cache.iterdir()) == []


def test_missing_part_is_a_clear_error(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path, b"a", b"b")
    parts.pieces[1].unlink()
    with pytest.raises(WhisperAssetError, match=r"model\.bin\.part2"):
        assemble(tmp_path / "cache", parts, hashlib.sha256(b"ab").hexdigest())


def test_builders_racing_both_get_the_complete_directory(tmp_path: Path) -> None:
    first, second = b"x" * (3 << 20), b"y" * (3 << 20)
    parts = _fake_parts(tmp_path, first, second)
    sha = hashlib.sha256(first + second).hexdigest()
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(max_workers=4) as pool:
        dirs = list(pool.map(lambda _: assemble(cache, parts, sha), range(4)))
    assert len(set(dirs)) == 1
    assert (dirs[0] / "model.bin").read_bytes() == first + second
    assert [p.name for p in cache.iterdir()] == [dirs[0].name]
