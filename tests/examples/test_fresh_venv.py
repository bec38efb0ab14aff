"""The quick start, literally, from a fresh venv: a copy of the work tree, its install
step as written (``python3 -m venv .venv``, ``pip install .``: the package registry and
nothing else), the module, ``rsjobs dev`` and the second shell's lines, to SUCCEEDED."""

from __future__ import annotations

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
