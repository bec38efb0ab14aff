"""``python -m examples.character`` runs the seed's pipeline to PUBLISHED and writes real
files: PNG images and animated GIF videos."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def test_the_character_example_ends_published(redis_url: str, tmp_path: Path) -> None:
    env = dict(os.environ, RSJOBS_URL=redis_url, RSJOBS_DEMO_OUT=str(tmp_path))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-m", "examples.character", "--speed", "0.2", "--timeout", "60"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PUBLISHED (version 2)" in out.stdout
    assert "REGENERATE" in out.stdout and "RETRY" in out.stdout
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert files.count("front.png") == 2  # one per version
    gifs = [p for p in tmp_path.rglob("*.gif")]
    assert len(gifs) == 10 and all(p.read_bytes()[:6] == b"GIF89a" for p in gifs)
    pngs = [p for p in tmp_path.rglob("*.png")]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
