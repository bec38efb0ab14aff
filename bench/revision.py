"""A named git revision of rsjobs, exported and installed beside the work tree, so that
``python -m bench.run --baseline REV`` can run it against the tree in the same run.

The revision is exported with ``git archive`` into ``.venv-bench/rev/<sha>/src`` and
installed (not editable) into a venv of its own, ``.venv-bench/rev/<sha>/venv``, with the
same redis-py, hiredis and psutil as the tree's bench venv, so the client library is not
a difference between the two. Both are kept by commit sha: a second run against the same
revision only refreshes the harness. The harness is always this tree's ``bench/``, copied
into the export before every run, so both sides are measured by the same code; the
revision's own rsjobs is what its trial and worker processes import (their working
directory is the export, which comes first on their ``sys.path``; ``check_import_root``
in ``bench/peers/base.py`` makes them refuse to run otherwise).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.workers import REPO_ROOT

REV_DIR = REPO_ROOT / ".venv-bench" / "rev"
# The distributions the trial and worker processes need besides rsjobs's own
# dependencies, pinned to the tree's bench venv versions.
HARNESS_DISTS = ("redis", "hiredis", "psutil")
_READY = ".ready"


@dataclass(frozen=True)
class Source:
    """Where one side of a paired run imports rsjobs from."""

    label: str  # the system name its records carry
    sha: str  # full commit sha ("" when unknown)
    dirty: bool  # the work tree's rsjobs/ differs from its commit
    root: Path  # the directory that holds the rsjobs package the processes import
    python: Path  # the interpreter of its trial and worker processes

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "sha": self.sha,
            "dirty": self.dirty,
            "root": str(self.root),
            "python": str(self.python),
        }


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise ValueError(f"git {' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out.stdout.strip()


def resolve(rev: str) -> str:
    """The full commit sha of ``rev``; ValueError when it names no commit."""
    if not rev or rev.startswith("-"):
        raise ValueError(f"not a revision: {rev!r}")
    return _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")


def tree_source(python: Path) -> Source:
    """The work tree as one side: HEAD's sha, and whether rsjobs/ has changes on top."""
    try:
        sha = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--", "rsjobs"))
    except (ValueError, OSError):
        sha, dirty = "", False
    return Source("rsjobs", sha, dirty, REPO_ROOT, python)


def _pins() -> list[str]:
    pins = []
    for dist in HARNESS_DISTS:
        try:
            pins.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pins.append(dist)
    return pins


def _export(sha: str, dest: Path) -> None:
    archive = subprocess.run(
        ["git", "archive", "--format=tar", sha], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def _install(src: Path, venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    # (the embedded server: an older revision without that extra only warns)
    pip += ["--disable-pip-version-check", f"{src}[embedded]", *_pins()]
    out = subprocess.run(pip, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"installing {src} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")


def prepare(rev: str, *, base_dir: Path = REV_DIR) -> Source:
    """Export and install ``rev`` (once per sha), then copy this tree's harness into it."""
    sha = resolve(rev)
    home = base_dir / sha
    src, venv = home / "src", home / "venv"
    if not (home / _READY).exists():
        print(f"bench: exporting {rev} ({sha[:10]}) and installing it into {venv}", flush=True)
        shutil.rmtree(home, ignore_errors=True)
        src.mkdir(parents=True)
        _export(sha, src)
        _install(src, venv)
        (home / _READY).write_text(sha + "\n")
    harness = src / "bench"
    shutil.rmtree(harness, ignore_errors=True)
    shutil.copytree(
        REPO_ROOT / "bench",
        harness,
        ignore=shutil.ignore_patterns("results", "__pycache__"),
    )
    return Source(f"rsjobs@{sha[:7]}", sha, False, src, venv / "bin" / "python")
