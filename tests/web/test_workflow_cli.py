"""``rsjobs web --workflows MODULE:OBJECT --asset-root DIR``: the definitions are startable
through ``POST /workflows``; a bad spec or root is one line on stderr and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rsjobs.server import free_port
from rsjobs.web.cli import load_definitions
from tests.support.processes import ROOT
from tests.support.web import wait_healthy

pytestmark = pytest.mark.integration


def web(url: str, *args: str, quota: str = "") -> subprocess.Popen[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("RSJOBS_")}
    if quota:
        e["RSJOBS_QUEUE_QUOTA"] = quota
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "t", "web", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=e, stderr=subprocess.PIPE, text=True)


def test_load_definitions_takes_one_or_many() -> None:
    from examples.character.pipeline import character

    assert load_definitions(["examples.character.pipeline:character"]) == [character]
    assert load_definitions([]) == []


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no-colon", "expected MODULE:OBJECT"),
        ("examples.character.pipeline:nothing", "has no attribute 'nothing'"),
        ("no_such_module_x:thing", "cannot import 'no_such_module_x'"),
        ("examples.character.pipeline:EMOTIONS", "is a tuple, not a WorkflowDefinition"),
        ("examples.character.pipeline:QUEUES", "is a dict, not a WorkflowDefinition"),
    ],
)
def test_a_bad_spec_is_one_line(redis_url: str, spec: str, says: str) -> None:
    proc = web(redis_url, "--dev", "--port", str(free_port()), "--workflows", spec)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.count("\n") == 1 and err.startswith("rsjobs: ") and says in err, err


def test_a_bad_asset_root_is_one_line(redis_url: str, tmp_path: Path) -> None:
    proc = web(redis_url, "--dev", "--port", str(free_port()), "--asset-root", str(tmp_path / "x"))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and err.count("\n") == 1 and "not a directory" in err, err


def test_serves_the_definitions(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = web(redis_url, "--dev", "--port", str(port),
               "--workflows", "examples.character.pipeline:character",
               "--asset-root", str(tmp_path))  # fmt: skip
    try:
        wait_healthy(base, proc)
        r = httpx.post(base + "/workflows", json={"definition": "character",
                                                  "input": {"name": "Mei"}}, timeout=10)  # fmt: skip
        assert r.status_code == 202, r.text
        wid = r.json()["id"]
        plan = httpx.get(f"{base}/workflows/{wid}/plan", timeout=10).json()
        assert [s["name"] for s in plan["stages"]] == ["params", "images", "actions", "emotions"]
        r = httpx.get(f"{base}/workflows/{wid}/assets/1/params/params", timeout=10)
        assert r.status_code == 404 and "no asset" in r.json()["detail"]  # none recorded yet
        page = httpx.get(base + "/ui/workflow.html", timeout=10)
        assert page.status_code == 200 and "workflow.js" in page.text
        r = httpx.post(base + "/workflows", json={"definition": "other"}, timeout=10)
        assert r.status_code == 422 and r.json()["error"] == "unknown_definition"
    finally:
        proc.terminate()
        proc.communicate(timeout=15)


def test_the_queue_quota_comes_from_the_environment(redis_url: str) -> None:
    """``RSJOBS_QUEUE_QUOTA`` holds the owners of ``rsjobs web`` to its quota (the
    global options' Settings once left it out: every owner got the default 100); a bad
    value is one line and exit status 2."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = web(redis_url, "--dev", "--port", str(port), quota="2")
    try:
        wait_healthy(base, proc)
        codes = []
        for q in ("qa", "qb", "qc"):
            r = httpx.post(base + "/tasks", json={"type": "t", "queue": q, "owner": "mallory",
                                                  "payload": {}}, timeout=10)  # fmt: skip
            codes.append((r.status_code, r.json().get("error", "")))
        assert all(c < 300 for c, _ in codes[:2]), codes
        assert codes[2] == (422, "queue_quota_exceeded"), codes
    finally:
        proc.terminate()
        proc.communicate(timeout=10)  # (and closes its stderr)
    bad = web(redis_url, "--dev", "--port", str(free_port()), quota="many")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and "RSJOBS_QUEUE_QUOTA" in err.strip().splitlines()[-1], err
