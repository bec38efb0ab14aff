"""``make demo``: in a terminal it keeps the page up until Ctrl-C, then stops cleanly;
without one (CI) it ends by itself; DEMO_ARGS reach the demo."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time

import httpx
import psutil
import pytest

from tests.support.processes import ROOT

pexpect = pytest.importorskip("pexpect")

# the slow tier (make test-slow, make test-all): the suite runs the demo module itself
# (tests/examples/test_demo.py)
pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT = 120
FAST = "--speed 0.3 --gate-pause 0.3"


def demo_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSJOBS_", "MAKE"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_in_a_terminal_the_page_stays_up_until_ctrl_c(tmp_path: str) -> None:
    env = demo_env() | {"RSJOBS_DEMO_OUT": str(tmp_path)}
    child = pexpect.spawn(
        "make", ["-s", "demo", f"DEMO_ARGS={FAST}"], cwd=ROOT, env=env,
        encoding="utf-8", timeout=TIMEOUT, dimensions=(40, 160),
    )  # fmt: skip
    log: list[str] = []
    child.logfile_read = type("Log", (), {"write": log.append, "flush": lambda self: None})()
    try:
        child.expect(r"redis-server \(.*, pid (\d+)\) at (redis://127\.0\.0\.1:\d+/0)")
        redis_pid, url = int(child.match.group(1)), child.match.group(2)
        child.expect(
            r"stay up until Ctrl-C: (http://127\.0\.0\.1:\d+)/ui/workflow\.html\?id=([0-9a-f]{32})"
        )
        base, wid = child.match.groups()
        # up to the blank line after them: the lines may arrive in more than one read
        child.expect(r"try, in another shell:\r\n((?:    .* queues\r\n)+)\r\n")
        tries = [line.strip() for line in child.match.group(1).splitlines() if line.strip()]
        # it would have stopped by now; it stays up: the page, the API and the CLI line work
        time.sleep(4)
        assert child.isalive()
        page = httpx.get(f"{base}/ui/workflow.html?id={wid}", timeout=5)
        assert page.status_code == 200 and "workflow.js" in page.text
        assert httpx.get(f"{base}/workflows/{wid}", timeout=5).json()["status"] == "PUBLISHED"
        assert len(tries) == 2 and all(url in t for t in tries)
        for line in tries:
            out = subprocess.run(line.split(), cwd=ROOT, capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            assert "SUCCEEDED" in out.stdout.splitlines()[0]  # the table's header
        shown = subprocess.run(tries[0].split(), cwd=ROOT, capture_output=True, text=True)
        assert re.search(
            r"^default\s+0\s+0\s+0\s+0\s+0\s+0\s+0\s+0\s+\d+\s+1\s+1\s+1", shown.stdout, re.M
        )
        child.sendintr()  # Ctrl-C on the terminal
        child.expect(pexpect.EOF, timeout=30)
    finally:
        if child.isalive():
            child.terminate(force=True)
        child.close()
    out = "".join(log)
    # the demo returns 0; make itself, which the terminal's Ctrl-C reached too, then ends
    # by that signal as make does after an interrupt
    assert child.exitstatus == 0 or child.signalstatus == signal.SIGINT, out[-3000:]
    for expected in ("demo: stopping (Ctrl-C)", "demo: web app stopped",
                     "demo: redis-server stopped", "demo: OK:"):  # fmt: skip
        assert expected in out, expected
    assert "Traceback" not in out
    assert gone(redis_pid)


def test_without_a_terminal_it_ends_by_itself_with_demo_args(tmp_path: str) -> None:
    env = demo_env() | {"RSJOBS_DEMO_OUT": str(tmp_path)}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["make", "-s", "demo", f"DEMO_ARGS={FAST}"], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    try:
        out, _ = proc.communicate()
    finally:
        watchdog.cancel()
    assert proc.returncode == 0, out[-3000:]
    assert time.monotonic() - t0 < TIMEOUT
    assert "the demo decides in 0.3 s" in out  # DEMO_ARGS reached it
    assert "stay up" not in out and "demo: OK:" in out
    assert re.search(
        r"namespaces demo-[0-9a-f]{6} \(tasks\), demo-wf-[0-9a-f]{6} \(workflow\)", out
    )
    pid = int(re.search(r"redis-server \(.*, pid (\d+)\)", out).group(1))  # type: ignore[union-attr]
    assert gone(pid)
