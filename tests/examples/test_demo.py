"""``make demo`` end to end: ``python -m examples.demo`` as a child process (its own
embedded Redis, with fast stand-in settings) exits 0 after tasks reached every terminal
state and the character workflow was PUBLISHED; the workflow page address it prints
serves the page and the workflow while it runs; nothing it started is left behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

TIMEOUT = 90


def test_the_demo_runs_to_the_end(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSJOBS_")}
    env["RSJOBS_DEMO_OUT"] = str(tmp_path)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.demo", "--speed", "0.3", "--gate-pause", "0.3"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    lines: list[str] = []
    page_seen = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            m = re.search(
                r"open (http://127\.0\.0\.1:\d+)/ui/workflow\.html\?id=([0-9a-f]{32})", line
            )
            if m and not page_seen:
                # the printed address works while the demo runs
                base, wid = m.groups()
                page = httpx.get(f"{base}/ui/workflow.html?id={wid}", timeout=5)
                assert page.status_code == 200 and "workflow.js" in page.text
                doc = httpx.get(f"{base}/workflows/{wid}", timeout=5).json()
                assert doc["id"] == wid and doc["definition"] == "character"
                page_seen = True
        code = proc.wait(10)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    out = "\n".join(lines)
    assert code == 0, out[-4000:]
    assert time.monotonic() - t0 < TIMEOUT
    assert page_seen, out[-4000:]
    # part 1: every terminal task state, each task as expected
    final = out[out.index("final states:") : out.index("terminal states reached")]
    for state in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"):
        assert f" {state} " in final, state
    assert "terminal states reached: CANCELLED, FAILED, SUCCEEDED, TIMED_OUT" in out
    # part 2: gates confirmed, a regenerate (version 2), a retry, PUBLISHED, files served
    for expected in ("user: confirms the params of version 1",
                     "REGENERATE", "user: confirms the images of version 2",
                     "user: retries only the failed ones: angry",
                     "PUBLISH     v2", ": PUBLISHED (version 2)",
                     "demo: the app serves all 13 asset files of v2",
                     "demo: worker pools and reaper stopped", "demo: web app stopped",
                     "demo: redis-server stopped",
                     "demo: OK: every task reached its expected state; the workflow is PUBLISHED"):  # fmt: skip
        assert expected in out, expected
    assert "Traceback" not in out
    # what it started is gone: the task worker process, and the files are where they should be
    pid = int(re.search(r"started worker pid (\d+)", out).group(1))  # type: ignore[union-attr]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert len(list(tmp_path.glob("*/v2/*.gif"))) == 10
    assert len(list(tmp_path.glob("*/v2/*.png"))) == 2
