"""The project's own test picture: a small PNG built byte for byte the same on every machine.

Image goldens carry the picture inside the request (a base64 data URL, as OpenAI clients send
it), so its bytes are part of what a golden records. They must never depend on an installed
library: the pixels are a fixed pattern and the PNG is written here, its zlib stream made of
stored (uncompressed) deflate blocks, whose bytes no zlib version or compression level can
change. Pillow only reads it (in the reference processor and in tests).
"""

from __future__ import annotations

import base64
import functools
import struct
import zlib

# The two sizes of the image shapes: a square and a 2:1 landscape, so a processor that counts
# image tokens by size (tiles, patches) gives each its own count; Gemma 3 gives both 256.
SQUARE = (32, 32)
WIDE = (64, 32)

_STORED_BLOCK = 65535  # the most one stored deflate block holds


def pixels(width: int, height: int) -> bytes:
    """RGB rows of a fixed picture: four coloured quadrants crossed by a diagonal gradient,
    so resizing and cropping keep visible structure (a flat colour would hide a wrong crop)."""
    if width < 2 or height < 2:
        raise ValueError(f"image too small: {width}x{height}")
    quadrants = ((220, 40, 40), (40, 160, 60), (40, 80, 220), (230, 200, 40))
    rows = []
    for y in range(height):
        row = bytearray()
        for x in range(width):
            r, g, b = quadrants[(2 if y >= height // 2 else 0) + (1 if x >= width // 2 else 0)]
            shade = (x + y) * 96 // (width + height)  # 0..95 along the diagonal
            row += bytes((min(255, r + shade), min(255, g + shade), min(255, b + shade)))
        rows.append(bytes(row))
    return b"".join(rows)


def png(width: int, height: int) -> bytes:
    """The picture as an 8-bit RGB PNG, no filter, stored deflate blocks."""
    raw = pixels(width, height)
    stride = width * 3
    scanlines = b"".join(b"\x00" + raw[y * stride:(y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", _zlib_stored(scanlines))
            + _chunk(b"IEND", b""))


@functools.cache
def data_url(width: int, height: int) -> str:
    """The PNG as the data URL an OpenAI-style image_url part carries."""
    return "data:image/png;base64," + base64.b64encode(png(width, height)).decode("ascii")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _zlib_stored(data: bytes) -> bytes:
    """A zlib stream of stored deflate blocks (RFC 1950/1951): header, blocks, Adler-32."""
    out = bytearray(b"\x78\x01")
    blocks = [data[i:i + _STORED_BLOCK] for i in range(0, len(data), _STORED_BLOCK)] or [b""]
    for index, block in enumerate(blocks):
        final = 1 if index == len(blocks) - 1 else 0
        out += bytes((final,)) + struct.pack("<HH", len(block), len(block) ^ 0xFFFF) + block
    return bytes(out + struct.pack(">I", zlib.adler32(data)))
