"""The quick start, literally, from a fresh venv: a copy of the work tree, its install
step as written (``python3 -m venv .venv``, ``pip install .``: the package registry and
nothing else), the module, ``rsjobs dev`` and the second shell's lines, to SUCCEEDED."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.examples.readme import Session, parse, section
from tests.examples.test_readme import README, reader_env
from tests.support.processes import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def copy_tree(dest: Path) -> Path:
    """The work tree as git sees it (tracked and new files, nothing ignored: no venv)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        src = Path(ROOT, name)
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_a_fresh_venv_follows_the_quick_start(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path / "rsjobs")
    assert (tree / "pyproject.toml").exists() and not (tree / ".venv").exists()
    session = Session(tree, reader_env(None), install="run")
    session.run_all(parse(section(README, "Quick start")))
    ((dev, code),) = session.stop()
    assert code == 0, dev.output[-4000:]
    assert [b.kind for b in session.ran] == ["install", "file", "background", "run"]
    # the venv made by the install step ran everything, from the installed package
    venv = tree / ".venv"
    assert session.env["VIRTUAL_ENV"] == str(venv)
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import rsjobs; print(rsjobs.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(venv)  # installed, not the work tree's sources
    assert "SUCCEEDED" in session.outputs[-1]


def test_the_core_install_is_lean_and_names_the_extras(tmp_path: Path, redis_url: str) -> None:
    """``pip install .`` (no extra): at most 6 packages, rsjobs among them; no server on
    the venv's PATH; the client, worker and CLI work on a server given to them; the parts
    of an extra say which extra to install."""
    tree = copy_tree(tmp_path / "rsjobs")
    venv = tmp_path / "core"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [venv / "bin" / "pip", "install", "-q", str(tree)], check=True, timeout=600
    )  # fmt: skip
    listed = subprocess.run(
        [venv / "bin" / "pip", "list", "--format", "json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    names = {p["name"].lower() for p in json.loads(listed)} - {"pip", "setuptools", "wheel"}
    assert "rsjobs" in names and len(names) <= 6, sorted(names)
    for server in ("redis-server", "valkey-server"):
        assert not (venv / "bin" / server).exists()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "RSJOBS_URL": redis_url}
    rsjobs_cli = str(venv / "bin" / "rsjobs")
    web = subprocess.run([rsjobs_cli, "web"], capture_output=True, text=True, env=env, timeout=60)
    assert web.returncode == 2 and "pip install 'rsjobs[web]'" in web.stderr, web.stderr
    (tmp_path / "coreapp.py").write_text(CORE_APP)
    ran = subprocess.run(
        [venv / "bin" / "python", "coreapp.py", redis_url],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0 and "SUCCEEDED {'hi': 1}" in ran.stdout, ran.stderr[-3000:]


#: a client and a worker of the core install, on the session's server
CORE_APP = """
import asyncio, sys
from rsjobs import Client, Context, Registry, Settings, Worker

tasks = Registry()

@tasks.handler("hello", queue="core")
async def hello(ctx: Context, payload: dict) -> dict:
    return {"hi": payload["n"]}

async def main(url: str) -> None:
    async with Client.from_url(url, namespace="core") as c:
        tid = await c.enqueue("hello", {"n": 1})
        w = Worker(tasks, url=url, settings=Settings(namespace="core"))
        run = asyncio.create_task(w.run())
        info = await c.wait(tid, timeout_ms=30_000)
        print(info.state, info.result)
        w.stop()
        await run

asyncio.run(main(sys.argv[1]))
"""
