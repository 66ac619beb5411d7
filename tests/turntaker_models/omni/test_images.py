"""Image parts: PNG and JPEG data URLs decode; every bad one is a ContractError naming it."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from tests.turntaker_models.omni.conftest import Tiny
from tests.turntaker_models.omni.images import data_url, encoded, image_url
from turntaker_models.contract import ContractError, Conversation, ImagePart, Message, TextPart
from turntaker_models.omni.images import ImageLimits, decode_image

LIMITS = ImageLimits()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims `width` x `height` but whose pixels are one zlib'd byte: what
    a decompression bomb looks like from outside, without the bomb."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00"))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_png_and_jpeg_decode(fmt: str) -> None:
    image = decode_image(0, image_url(64, 48, fmt), LIMITS)
    assert image.size == (64, 48)
    assert image.format == fmt


PNG = encoded(64, 48, "PNG")
GIF = encoded(16, 16, "GIF")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/cat.png", "image 3 is not a data URL"),
        ("data:image/png;base64,@@@@", "image 3: the data URL's base64 is invalid"),
        ("data:image/png;base64,", "image 3 is empty"),
        ("data:image/png," + PNG.hex(), "image 3: the data URL is not base64"),
        ("data:image/gif;base64," + base64.b64encode(GIF).decode(), "image 3 is not a PNG or JPEG"),
        (data_url(GIF, "image/png"), "image 3 is not a PNG or JPEG"),
        (data_url(b"hello, not an image", "image/jpeg"), "image 3 is not a PNG or JPEG"),
        (data_url(PNG[: len(PNG) // 2], "image/png"), "image 3 is truncated or corrupt"),
        (
            data_url(encoded(64, 48, "JPEG")[:300], "image/jpeg"),
            "image 3 is truncated or corrupt",
        ),
        (data_url(png_header(0, 10), "image/png"), "image 3 has zero size (0x10)"),
        # 64 Mpx claimed by a ~60-byte file: refused from the header, never decompressed.
        (data_url(png_header(8000, 8000), "image/png"), "image 3 is too large: 8000x8000"),
        # Past PIL's own bomb limit too: still our message.
        (data_url(png_header(100000, 100000), "image/png"), "image 3 is too large"),
        (image_url(402, 2, "PNG"), "one side is over 200 times the other"),
    ],
)
def test_bad_image_is_a_contract_error_naming_it(url: str, expected: str) -> None:
    with pytest.raises(ContractError) as caught:
        decode_image(3, url, LIMITS)
    assert expected in str(caught.value)


def test_url_length_is_checked_before_decoding() -> None:
    url = image_url(64, 48, "PNG")
    with pytest.raises(ContractError, match=r"image 0 is a \d+-byte data URL; at most 100 bytes"):
        decode_image(0, url, ImageLimits(max_url_bytes=100))


def test_builder_names_the_bad_image_among_good_ones(tiny: Tiny) -> None:
    conversation = Conversation(
        [
            Message("user", [ImagePart(image_url()), TextPart("and")]),
            Message("user", [ImagePart(data_url(b"garbage", "image/png"))]),
        ]
    )
    with pytest.raises(ContractError, match="image 1 is not a PNG or JPEG"):
        tiny.prompts.build(conversation, [])


def test_too_many_images_are_refused(tiny: Tiny) -> None:
    many = [ImagePart(image_url(32, 32)) for _ in range(LIMITS.max_images + 1)]
    with pytest.raises(ContractError, match=f"at most {LIMITS.max_images} per request"):
        tiny.prompts.build(Conversation([Message("user", many)]), [])
