"""The SSE fan-out under load: many concurrent clients on one uvicorn process, every client
receives every event of its task, in order (tools/web_load.py; 500 clients by hand:
``.venv/bin/python tools/web_load.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def test_100_sse_clients_on_one_process_get_every_event() -> None:
    out = subprocess.run(
        [sys.executable, "tools/web_load.py", "--clients", "100", "--tasks", "10",
         "--seconds", "1.5", "--steps", "15", "--timeout", "60", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["clients_failed"] == 0, report["first_error"]
    # complete = the ids received are exactly the task's history ids, in order
    assert report["clients_complete"] == 100 and report["ok"]
    assert report["events_per_task_min"] >= 5  # ENQUEUE, START, PROGRESS..., COMPLETE
    assert report["events_delivered"] >= 100 * report["events_per_task_min"]
