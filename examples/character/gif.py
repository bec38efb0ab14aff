"""A pure-Python animated GIF writer (GIF89a, LZW, looping): the stand-in "videos" of the
character example are real files any browser plays.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

__all__ = ["lzw_encode", "write_gif"]

Colour = tuple[int, int, int]


def lzw_encode(indices: bytes, min_code_size: int) -> bytes:
    """GIF's variable-width LZW of palette indices (codes packed least significant bit
    first), starting with a clear code and ending with end-of-information."""
    clear, eoi = 1 << min_code_size, (1 << min_code_size) + 1
    size = min_code_size + 1
    next_code = eoi + 1
    table: dict[int, int] = {}
    out = bytearray()
    buf = nbits = 0

    def emit(code: int) -> None:
        nonlocal buf, nbits
        buf |= code << nbits
        nbits += size
        while nbits >= 8:
            out.append(buf & 0xFF)
            buf >>= 8
            nbits -= 8

    emit(clear)
    if not indices:
        emit(eoi)
        return bytes(out + (bytes([buf]) if nbits else b""))
    prefix = indices[0]
    for c in indices[1:]:
        key = prefix << 8 | c
        code = table.get(key)
        if code is not None:
            prefix = code
            continue
        emit(prefix)
        if next_code < 4096:
            # the decoder widens its codes once its table reaches 2**size entries
            if next_code == 1 << size:
                size += 1
            table[key] = next_code
            next_code += 1
        else:
            emit(clear)
            table.clear()
            size, next_code = min_code_size + 1, eoi + 1
        prefix = c
    emit(prefix)
    if next_code == 1 << size and size < 12:
        size += 1
    emit(eoi)
    if nbits:
        out.append(buf & 0xFF)
    return bytes(out)


def _blocks(data: bytes) -> bytes:
    """Data sub-blocks: a length byte (at most 255) before each, then a 0 terminator."""
    parts = [bytes([len(data[i : i + 255])]) + data[i : i + 255] for i in range(0, len(data), 255)]
    return b"".join(parts) + b"\x00"


def write_gif(
    path: Path,
    frames: Sequence[bytes],
    width: int,
    height: int,
    palette: Sequence[Colour],
    *,
    delay_cs: int = 8,
) -> Path:
    """Write ``frames`` (each ``width * height`` palette indices) as a looping GIF with
    ``delay_cs`` hundredths of a second per frame; returns ``path``."""
    if not 2 <= len(palette) <= 256:
        raise ValueError("a GIF palette has 2 to 256 colours")
    bits = max(1, (len(palette) - 1).bit_length())
    colours = list(palette) + [(0, 0, 0)] * ((1 << bits) - len(palette))
    table = b"".join(bytes(c) for c in colours)
    out = bytearray(b"GIF89a")
    out += struct.pack("<HHBBB", width, height, 0x80 | ((bits - 1) << 4) | (bits - 1), 0, 0)
    out += table
    # NETSCAPE2.0 application extension: loop forever
    out += b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    min_code_size = max(2, bits)
    for frame in frames:
        if len(frame) != width * height:
            raise ValueError("every frame needs width * height indices")
        out += struct.pack("<BBBBHBB", 0x21, 0xF9, 4, 0x04, delay_cs, 0, 0)  # graphic control
        out += struct.pack("<BHHHHB", 0x2C, 0, 0, width, height, 0)  # image descriptor
        out += bytes([min_code_size]) + _blocks(lzw_encode(frame, min_code_size))
    out += b"\x3b"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path
