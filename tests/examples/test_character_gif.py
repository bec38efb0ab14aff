"""The example's pure-Python GIF writer, checked by a small independent GIF decoder."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from examples.character.gif import write_gif


def lzw_decode(data: bytes, min_size: int) -> bytes:
    clear, eoi = 1 << min_size, (1 << min_size) + 1
    pos = nbits = buf = 0
    size = min_size + 1
    table: list[bytes] = []
    out = bytearray()
    prev: bytes | None = None

    def reset() -> None:
        nonlocal size, table, prev
        size, prev = min_size + 1, None
        table = [bytes([i]) for i in range(clear)] + [b"", b""]

    reset()
    while True:
        while nbits < size:
            buf |= data[pos] << nbits
            pos += 1
            nbits += 8
        code = buf & ((1 << size) - 1)
        buf >>= size
        nbits -= size
        if code == clear:
            reset()
            continue
        if code == eoi:
            return bytes(out)
        if code < len(table):
            entry = table[code]
            if prev is not None:
                table.append(prev + entry[:1])
        else:
            assert prev is not None and code == len(table)
            entry = prev + prev[:1]
            table.append(entry)
        out += entry
        prev = entry
        if len(table) == 1 << size and size < 12:
            size += 1


def read_gif(path: Path) -> tuple[int, int, list[tuple[int, int, int]], list[bytes]]:
    d = path.read_bytes()
    assert d[:6] == b"GIF89a"
    w, h, flags = struct.unpack("<HHB", d[6:11])
    ncol = 2 << (flags & 7)
    pal = [tuple(d[13 + 3 * i : 16 + 3 * i]) for i in range(ncol)]
    pos = 13 + 3 * ncol
    frames = []
    while d[pos] != 0x3B:
        if d[pos] == 0x21:  # extension: skip its sub-blocks
            pos += 2
            while d[pos]:
                pos += d[pos] + 1
            pos += 1
        else:
            assert d[pos] == 0x2C
            pos += 10
            min_size = d[pos]
            pos += 1
            data = bytearray()
            while d[pos]:
                data += d[pos + 1 : pos + 1 + d[pos]]
                pos += d[pos] + 1
            pos += 1
            frames.append(lzw_decode(bytes(data), min_size))
    return w, h, pal, frames  # type: ignore[return-value]


@pytest.mark.parametrize(
    "colours, size, noise",
    [(2, 10, False), (3, 40, True), (16, 64, True), (40, 48, False), (256, 120, True)],
)
def test_frames_decode_to_what_was_written(
    tmp_path: Path, colours: int, size: int, noise: bool
) -> None:
    rng = random.Random(colours)
    palette = [(i % 256, (i * 7) % 256, (255 - i) % 256) for i in range(colours)]
    frames = [
        bytes(
            rng.randrange(colours) if noise else (x // 3 + y // 5 + f) % colours
            for y in range(size)
            for x in range(size)
        )
        for f in range(3)
    ]
    w, h, pal, got = read_gif(write_gif(tmp_path / "a.gif", frames, size, size, palette))
    assert (w, h) == (size, size) and pal[:colours] == palette
    assert got == frames
