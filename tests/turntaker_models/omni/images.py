"""Tiny test images, made in memory with PIL: a colour gradient that JPEG and PNG both keep."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image


def image(width: int = 64, height: int = 48) -> Image.Image:
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[..., 0] = (np.arange(width)[None, :] * 255 // max(1, width - 1)).astype(np.uint8)
    pixels[..., 1] = (np.arange(height)[:, None] * 255 // max(1, height - 1)).astype(np.uint8)
    pixels[..., 2] = 96
    return Image.fromarray(pixels, "RGB")


def encoded(width: int = 64, height: int = 48, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    image(width, height).save(out, fmt)
    return out.getvalue()


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def image_url(width: int = 64, height: int = 48, fmt: str = "PNG") -> str:
    return data_url(encoded(width, height, fmt), f"image/{fmt.lower()}")
