"""The plan: a JSON snapshot of a definition, resolved for one workflow's input.

Stored in the workflow hash at start (field ``plan``), so a workflow runs against the
definition it was started with, and the scripts (``wf.lua`` reads stage names, gates,
retry limits and task counts from it) and any process that spawns a stage (a worker, the
driver) need no Python definition at all.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["Plan", "StagePlan", "TaskPlan", "decode_plan", "encode_plan"]


class TaskPlan(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a stage (see :class:`rsjobs.workflows.TaskSpec`)."""

    item: str
    type: str
    kind: str = ""
    params: Any = None
    max_attempts: int = 3
    timeout_ms: int = 0
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 300_000
    #: the task's labels (rsjobs.labels)
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class StagePlan(msgspec.Struct, frozen=True, kw_only=True):
    """One stage: its tasks, its queue, its gate, how many retries the user gets."""

    name: str
    label: str = ""
    queue: str = "default"
    gate: bool = False
    max_retries: int = 3
    tasks: list[TaskPlan]
    #: the priority of its tasks (0-9)
    priority: int = 0

    def item_order(self) -> dict[str, int]:
        return {t.item: i for i, t in enumerate(self.tasks)}


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """The stages of one workflow, in order."""

    definition: str
    revision: int = 1
    max_versions: int = 100
    stages: list[StagePlan]

    def stage_index(self, name_or_index: str | int) -> int:
        """The index of a stage given by name or index; ValueError when there is none."""
        if isinstance(name_or_index, int):
            if 0 <= name_or_index < len(self.stages):
                return name_or_index
        else:
            for i, s in enumerate(self.stages):
                if s.name == name_or_index:
                    return i
        raise ValueError(f"no stage {name_or_index!r} in {self.definition!r}")

    @property
    def total_tasks(self) -> int:
        return sum(len(s.tasks) for s in self.stages)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Plan)


def encode_plan(plan: Plan) -> bytes:
    return _encoder.encode(plan)


def decode_plan(raw: str | bytes) -> Plan:
    return _decoder.decode(raw)
