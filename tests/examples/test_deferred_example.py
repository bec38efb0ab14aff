"""``python -m examples.deferred`` (its own embedded Redis, the provider stand-in, the web
app and a worker) exits 0 with every task ended as planned."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def test_the_deferred_example_runs_to_the_end() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSJOBS_")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "examples.deferred"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "forged callback" in out and "[401]" in out
    assert "late callback answered [409]" in out
    assert "duplicate callbacks answered [200, 200, 200]" in out
