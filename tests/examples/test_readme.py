"""The README's examples run as written (see tests/examples/readme.py for the markers):
the quick start's module under ``rsjobs dev``, the shell lines a reader types in a second
shell, the SyncClient example; every example block is run or skipped for a stated reason."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.examples.readme import Session, parse, section
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

README = Path(ROOT, "README.md").read_text()


def reader_env(bin_dir: str | None) -> dict[str, str]:
    """A reader's shell: no RSJOBS_ variables, no venv of ours; ``bin_dir`` first on
    PATH stands for an activated venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RSJOBS_", "PYTEST", "VIRTUAL_ENV")) and k != "PYTHONPATH"}  # fmt: skip
    paths = [p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(ROOT)]
    env["PATH"] = os.pathsep.join(([bin_dir] if bin_dir else []) + paths)
    return env


def test_every_example_block_is_marked() -> None:
    blocks = parse(README)
    kinds = [b.kind for b in blocks]
    assert kinds.count("skip") <= 2, "only the blocks that cannot run are skipped"
    assert {"install", "file", "background", "run"} <= set(kinds)
    with pytest.raises(ValueError, match="without a readme-test marker"):
        parse("text\n\n```sh\necho unmarked\n```\n")


def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    # the project's venv stands for the one the quick start's install step makes
    session = Session(tmp_path, reader_env(os.path.dirname(sys.executable)), install="skip")
    session.run_all(parse(README))
    stopped = session.stop()
    ((dev, code),) = stopped
    assert code == 0, dev.output[-4000:]
    assert "stopped: worker, reaper, web and redis" in dev.output
    assert "worker queues gpu " in dev.output  # the handler's declared queue is served
    assert (tmp_path / ".rsjobs").is_dir()  # --data-dir keeps the data
    quick = "\n".join(session.outputs)
    assert "ENQUEUE - -> PENDING" in quick and "COMPLETE RUNNING -> SUCCEEDED" in quick
    # the quick start, the SyncClient example, the operator actions
    assert [b.kind for b in session.ran] == ["file", "background", "run", "run", "run"]
    assert parse(section(README, "Quick start"))  # the quick start has the blocks above
