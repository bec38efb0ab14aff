"""Workflow definitions, plans and the status document's arithmetic (no Redis)."""

from __future__ import annotations

import msgspec
import pytest

from rsjobs import ConfigError
from rsjobs.workflows import Stage, TaskSpec, WorkflowDefinition, fan_out
from rsjobs.workflows.plan import decode_plan, encode_plan
from rsjobs.workflows.schemas import WorkflowInfo
from rsjobs.workflows.status import build_status, progress_of


class Person(msgspec.Struct):
    name: str


def definition(**kw: object) -> WorkflowDefinition:
    return WorkflowDefinition(
        "d",
        [
            Stage("a", [TaskSpec(item="one", type="t")], gate=True),
            Stage("b", lambda inp: fan_out("t", inp["items"]), queue="q2", max_retries=1),
        ],
        **kw,  # type: ignore[arg-type]
    )


def test_plan_resolves_input_dependent_fan_out_and_round_trips() -> None:
    plan = definition().plan({"items": ["x", "y"]})
    assert [s.name for s in plan.stages] == ["a", "b"]
    assert [t.item for t in plan.stages[1].tasks] == ["x", "y"]
    assert plan.stages[1].tasks[0].params == {"item": "x"} and plan.stages[1].queue == "q2"
    assert plan.total_tasks == 3 and plan.stage_index("b") == 1 and plan.stage_index(0) == 0
    assert decode_plan(encode_plan(plan)) == plan
    with pytest.raises(ValueError):
        plan.stage_index("zz")


@pytest.mark.parametrize(
    "stages, message",
    [
        ([], "no stages"),
        ([Stage("a", []), Stage("b", [])], "no tasks"),
        ([Stage("a", fan_out("t", ["x"])), Stage("a", fan_out("t", ["y"]))], "unique"),
        ([Stage("a", fan_out("t", ["x", "x"]))], "unique"),
        ([Stage("a b", fan_out("t", ["x"]))], "invalid stage name"),
        ([Stage("a", fan_out("t", ["x:y"]))], "invalid item"),
        ([Stage("a", fan_out("t", ["x"]), queue="bad queue")], "invalid queue"),
        ([Stage("a", fan_out("t", ["x"], max_attempts=0))], "max_attempts"),
    ],
)
def test_bad_definitions_are_refused(stages: list[Stage], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WorkflowDefinition("d", stages).plan({})


def test_input_type_validates_and_normalises_the_input() -> None:
    d = definition(input_type=Person)
    assert d.check_input({"name": "Mei"}) == {"name": "Mei"}
    with pytest.raises(ConfigError, match="invalid input"):
        d.check_input({"nom": "Mei"})
    with pytest.raises(ConfigError, match="invalid input"):
        definition().check_input({"x": object()})


def info(status: str, **kw: object) -> WorkflowInfo:
    plan = definition().plan({"items": ["x", "y", "z"]})
    fields: dict[str, object] = {
        "id": "0" * 32,
        "def": "d",
        "status": status,
        "stage": 1,
        "stage_name": "b",
        "version": 2,
        "spawned": "2:1",
        "need": 3,
        "plan": encode_plan(plan).decode(),
    }
    fields.update(kw)
    return WorkflowInfo.from_hash({k: str(v) for k, v in fields.items()})


def test_progress_counts_assets_and_running_work() -> None:
    assert progress_of(info("RUNNING"), assets=1, running_progress=0) == 25
    assert progress_of(info("RUNNING"), assets=2, running_progress=100) == 75
    assert progress_of(info("RUNNING"), assets=4, running_progress=0) == 99  # not yet ready
    assert progress_of(info("READY_TO_PUBLISH"), assets=4, running_progress=0) == 100


def test_status_document_lists_only_current_version_assets() -> None:
    a = '{"ref":"r%d","kind":"k","version":%d,"stage":"%s","stage_index":%d,"item":"%s","task":"t"}'
    raw = {
        "1:0:one": a % (1, 1, "a", 0, "one"),
        "2:0:one": a % (2, 2, "a", 0, "one"),
        "1:1:x": a % (3, 1, "b", 1, "x"),
        "2:1:y": a % (4, 2, "b", 1, "y"),
    }
    tasks = [
        ("x", "tx", {"state": "RUNNING", "progress": "50"}),
        ("y", "ty", {"state": "SUCCEEDED", "progress": "100"}),
        ("z", "tz", {"state": "FAILED", "error": "boom"}),
    ]
    doc = build_status(info("PARTIALLY_FAILED", done=1, nfailed=1), {}, raw, tasks)
    assert [a.ref for a in doc.completed_assets] == ["r2", "r4"]
    assert (doc.running_tasks, doc.pending_tasks, doc.failed_tasks) == (1, 0, 1)
    assert doc.progress == 62 and doc.stage == "b" and doc.stages == ["a", "b"]
    assert "1 of 3 failed" in doc.message and doc.tasks[2].error == "boom"
