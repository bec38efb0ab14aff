"""Handlers declare their queue; a worker told no queue serves those (no Redis)."""

from __future__ import annotations

from typing import Any

import pytest

from rsjobs import ConfigError, Registry
from rsjobs.dev import dev_queues, missing_handlers
from rsjobs.workflows import Stage, TaskSpec, WorkflowDefinition


async def run(ctx: Any, payload: Any) -> None:
    return None


def test_the_queues_a_registry_declares() -> None:
    r = Registry()
    assert r.queues() == ["default"]  # no handler: the default queue
    r.add("a", run, queue="gpu")
    assert r.queues() == ["gpu"]
    assert r.get("a") is not None and r.get("a").queue == "gpu"  # type: ignore[union-attr]
    r.add("b", run)  # declares none: runs from the default queue
    r.add("c", run, queue="gpu")
    r.add("d", run, queue="cpu.small")
    assert r.queues() == ["cpu.small", "default", "gpu"]

    @r.handler("e", queue="video")
    async def e(ctx: Any, payload: Any) -> None:
        return None

    assert "video" in r.queues()


@pytest.mark.parametrize("bad", ["", "q\n", "has space", "x" * 65, "a:b"])
def test_a_bad_queue_name_is_refused_at_registration(bad: str) -> None:
    r = Registry()
    with pytest.raises(ConfigError, match="invalid queue"):
        r.add("a", run, queue=bad)
    assert len(r) == 0


def test_dev_serves_the_handlers_and_the_workflow_stages_queues() -> None:
    r = Registry()
    r.add("image", run, queue="gpu")
    wf = WorkflowDefinition(
        "w",
        [
            Stage("one", [TaskSpec(item="a", type="image")], queue="images"),
            Stage("two", [TaskSpec(item="b", type="nobody.runs.this")], queue="videos"),
            Stage("three", lambda inp: [TaskSpec(item="c", type="unknown.until.run")]),
        ],
    )
    assert dev_queues(r, [wf]) == ["default", "gpu", "images", "videos"]
    # a fixed task nobody handles is found before anything runs; per-input ones cannot be
    assert missing_handlers(r, [wf]) == [("w", "two", "nobody.runs.this")]


def test_a_module_that_fails_on_import_is_one_clear_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsjobs.cli import CliError, load_object

    (tmp_path / "unguarded.py").write_text(
        "import asyncio\nfrom rsjobs import Registry\ntasks = Registry()\n\n"
        # main, not main(): asyncio.run refuses either at once inside a running loop, and
        # so no coroutine is left un-awaited by this test
        "async def main():\n    pass\n\nasyncio.run(main)\n"
    )
    monkeypatch.chdir(tmp_path)
    import asyncio

    async def load() -> Any:
        return load_object("unguarded:tasks")  # as rsjobs dev does, inside its loop

    with pytest.raises(CliError, match=r"importing 'unguarded' failed: RuntimeError: .*"
                       r"put that call under `if __name__ == \"__main__\":`"):  # fmt: skip
        asyncio.run(load())
