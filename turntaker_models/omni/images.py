"""Image parts -> decoded, checked images for Qwen3-Omni's image processor.

Rules:
- An image arrives as a data URL (`data:image/png;base64,...` or `data:image/jpeg;base64,...`)
  inside CONVERSATION; nothing is ever fetched from elsewhere.
- Only PNG and JPEG are decoded, whatever the URL claims.
- Limits are checked before the work they protect: the URL's length before base64 decoding, the
  pixel count from the header before the pixels are decompressed (a small file can claim a
  huge image: a decompression bomb), and a decoding error or truncated data is reported as such.
- Every refusal is a `ContractError` that names the image by its place among the
  conversation's images (counted from 0, in order of appearance), e.g.
  "image 2 is not a PNG or JPEG: ...". The thinker turns it into a failed request; the stage
  serves the next one as usual.
- Images are handed to the checkpoint's own image processor unchanged (no colour conversion
  here: the processor does its own, and the prompt must equal Qwen's processor's).
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turntaker_models.contract import ContractError

FORMATS = ("PNG", "JPEG")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MEDIA_TYPES = {"image/png", "image/jpeg", "image/jpg"}
# The Qwen2-VL processor refuses a longer side over 200 times the shorter (smart_resize).
MAX_ASPECT_RATIO = 200


@dataclass(frozen=True)
class ImageLimits:
    # A client message is at most 15 MiB (the orchestrator's limit); a data URL past 16 MiB
    # cannot have come through it.
    max_url_bytes: int = 16 * 1024 * 1024
    # Decoded size: 40 Mpx (a 48 Mpx phone photo must be scaled down by the client) is ~120 MB
    # of RGB before the processor resizes it to its own bounds.
    max_pixels: int = 40_000_000
    # The orchestrator keeps at most 8 images in a conversation; more here is a caller error.
    max_images: int = 16

    def __post_init__(self) -> None:
        if min(self.max_url_bytes, self.max_pixels, self.max_images) < 1:
            raise ValueError(f"image limits must be at least 1: {self!r}")


def _payload(index: int, url: str, limits: ImageLimits) -> bytes:
    if len(url) > limits.max_url_bytes:
        raise ContractError(
            f"image {index} is a {len(url)}-byte data URL; at most {limits.max_url_bytes} bytes"
        )
    header, comma, data = url.partition(",")
    if not comma or not header[:5].lower() == "data:":
        raise ContractError(
            f"image {index} is not a data URL (data:image/png;base64,... or "
            "data:image/jpeg;base64,...)"
        )
    media, *options = header[5:].split(";")
    if media.strip().lower() not in MEDIA_TYPES:
        raise ContractError(f"image {index} is not a PNG or JPEG: the data URL says {media!r}")
    if "base64" not in (o.strip().lower() for o in options):
        raise ContractError(f"image {index}: the data URL is not base64 (;base64, missing)")
    try:
        # Line breaks and spaces are common in pasted base64; anything else is an error.
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ContractError(f"image {index}: the data URL's base64 is invalid: {error}") from None
    if not raw:
        raise ContractError(f"image {index} is empty")
    return raw


def decode_image(index: int, url: str, limits: ImageLimits) -> Any:
    """The image of one data URL, decoded (a PIL image), or ContractError."""
    from PIL import Image, UnidentifiedImageError

    raw = _payload(index, url, limits)
    if raw.startswith(PNG_SIGNATURE) and raw[12:16] == b"IHDR" and len(raw) >= 24:
        # PIL calls a zero-sized PNG unidentifiable; say what is wrong with it.
        width, height = struct.unpack(">II", raw[16:24])
        if width == 0 or height == 0:
            raise ContractError(f"image {index} has zero size ({width}x{height})")
    try:
        # Reads the header only: the size is known before any pixel is decompressed.
        image = Image.open(io.BytesIO(raw), formats=FORMATS)
    except UnidentifiedImageError:
        raise ContractError(f"image {index} is not a PNG or JPEG: unrecognised data") from None
    except Image.DecompressionBombError as error:
        raise ContractError(f"image {index} is too large: {error}") from None
    except Exception as error:
        # Recognised as PNG or JPEG, then broken before the header ended.
        raise ContractError(f"image {index} is truncated or corrupt: {error}") from None
    width, height = image.size
    if width < 1 or height < 1:
        raise ContractError(f"image {index} has zero size ({width}x{height})")
    if width * height > limits.max_pixels:
        raise ContractError(
            f"image {index} is too large: {width}x{height} is {width * height} pixels; at most "
            f"{limits.max_pixels}"
        )
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ContractError(
            f"image {index} is {width}x{height}: one side is over {MAX_ASPECT_RATIO} times "
            "the other"
        )
    try:
        image.load()
    except Exception as error:
        # PIL reports truncation and corrupt streams as OSError, SyntaxError, zlib errors...:
        # whatever it is, these bytes are not a whole image.
        raise ContractError(f"image {index} is truncated or corrupt: {error}") from None
    return image


def gray_png_url(width: int, height: int) -> str:
    """A plain gray PNG as a data URL (the thinker's warm-up image)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (128, 128, 128)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def load_image_processor(path: Path) -> Any:
    """The checkpoint's image processor (its preprocessor_config.json), or None if it has none."""
    import transformers

    # transformers' own annotations are partial; treat the library as untyped.
    tf: Any = transformers
    if not (path / "preprocessor_config.json").exists():
        return None
    config = (path / "preprocessor_config.json").read_text()
    if "image_processor_type" not in config:
        return None
    # Without torchvision this resolves to the PIL backend of the class the config names.
    return tf.AutoImageProcessor.from_pretrained(str(path), local_files_only=True)
