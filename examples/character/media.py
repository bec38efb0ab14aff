"""Stand-in media for the character example: a JSON parameter sheet, and animated GIF
"videos" (a figure entering, leaving or showing an emotion), all derived from seeds."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from .gif import Colour, write_gif

__all__ = ["render_params", "render_video"]

SIZE = 48
FRAMES = 10


def _palette(seed: str) -> list[Colour]:
    """16 colours: a background ramp, the figure's colours, black and white."""
    d = hashlib.sha256(seed.encode()).digest()
    bg0, bg1 = d[0:3], d[3:6]
    ramp = [
        tuple(int(a + (b - a) * i / 7) // 2 + 64 for a, b in zip(bg0, bg1, strict=True))
        for i in range(8)
    ]
    figure = [tuple(d[6 + 3 * i : 9 + 3 * i]) for i in range(6)]
    return [*ramp, *figure, (0, 0, 0), (255, 255, 255)]  # type: ignore[list-item]


def _frame(t: float, motion: str) -> bytes:
    """One frame at time t in [0, 1): a round figure with a face, moved by ``motion``."""
    cx, cy, mouth = SIZE / 2, SIZE / 2, 0.0
    if motion == "enter":
        cx = -SIZE / 4 + (SIZE * 0.75) * t
    elif motion == "leave":
        cx = SIZE / 2 + (SIZE * 0.75) * t
    elif motion in ("happy", "excited"):
        cy -= abs(math.sin(t * math.pi * (4 if motion == "excited" else 2))) * 6
        mouth = 1.0
    elif motion in ("sad", "shy"):
        cy += t * 4
        mouth = -1.0
    elif motion in ("angry", "afraid"):
        cx += math.sin(t * math.pi * 8) * 2
        mouth = -0.5
    elif motion == "surprised":
        mouth = 0.0
    px = bytearray()
    r = SIZE / 4
    for y in range(SIZE):
        for x in range(SIZE):
            dx, dy = x - cx, y - cy
            if dx * dx + dy * dy <= r * r:
                eye = (abs(dx + r / 2.5) < 2 or abs(dx - r / 2.5) < 2) and abs(dy + r / 3) < 2
                lip = abs(dx) < r / 2 and abs(dy - r / 3 + mouth * (dx * dx) / (r * 2)) < 1.2
                px.append(14 if eye or lip else 8 + int((dy + r) / (2 * r) * 5.99))
            else:
                px.append(min(7, y * 8 // SIZE))
    return bytes(px)


def render_video(path: Path, seed: str, motion: str) -> Path:
    """An animated GIF of the figure doing ``motion``; colours from ``seed``."""
    frames = [_frame(i / FRAMES, motion) for i in range(FRAMES)]
    return write_gif(path, frames, SIZE, SIZE, _palette(seed), delay_cs=10)


def render_params(path: Path, character: dict[str, Any], version: int) -> Path:
    """The "fixed parameter description" a model would write from the user's text."""
    d = hashlib.sha256(json.dumps(character, sort_keys=True).encode()).digest()
    sheet = {
        "name": character.get("name", ""),
        "hair": ["black", "silver", "auburn", "blue"][d[0] % 4],
        "eyes": ["amber", "green", "grey", "violet"][d[1] % 4],
        "style": ["casual", "formal", "sporty", "fantasy"][d[2] % 4],
        "voice": ["warm", "bright", "calm", "husky"][d[3] % 4],
        "age": 18 + d[4] % 30,
        "background": character.get("background", ""),
        "version": version,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sheet, indent=2, ensure_ascii=False), encoding="utf-8")
    return path
