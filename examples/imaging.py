"""Stand-in "generators" for the examples: real, small PNG files made without any library.

They let the demos produce actual artefacts (an image per task) while the "model" is just a
deterministic gradient derived from the prompt.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def render_png(path: Path, prompt: str, size: int = 96) -> Path:
    """Write a size x size RGB PNG whose colours derive from ``prompt``; returns ``path``."""
    seed = hashlib.sha256(prompt.encode()).digest()
    r0, g0, b0, r1, g1, b1 = seed[:6]
    rows = []
    for y in range(size):
        row = bytearray([0])  # filter type 0 for each scanline
        for x in range(size):
            t = (x + y) / (2 * size - 2)
            ring = 40 if ((x - size / 2) ** 2 + (y - size / 2) ** 2) < (size / 3) ** 2 else 0
            row += bytes(
                (
                    min(255, int(r0 + (r1 - r0) * t) + ring),
                    min(255, int(g0 + (g1 - g0) * t)),
                    min(255, int(b0 + (b1 - b0) * t) + ring),
                )
            )
        rows.append(bytes(row))
    raw = zlib.compress(b"".join(rows), 6)
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", raw) + _chunk(b"IEND", b"")
    )
    return path
