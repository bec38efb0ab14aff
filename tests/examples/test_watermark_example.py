"""``python -m examples.watermark`` (its own embedded Redis, the provider stand-in, the web
app, a worker and the hook runner) exits 0: each render's watermark ran after it with its
result, the failed render's watermark was cancelled with the reason, and every owner got
one mail."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def test_the_watermark_example_runs_to_the_end() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSJOBS_")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONIOENCODING"] = "utf-8"
    proc = subprocess.run(
        [sys.executable, "-m", "examples.watermark"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "all as planned" in out
    assert out.count("(WAITING)") == 3  # each watermark waited for its render
    assert "bob: render FAILED    watermark CANCELLED predecessor" in out
    assert "mailed bob: your image could not be made: predecessor" in out
    assert out.count("mailed ") == 3 and out.count("your image is ready") == 2
