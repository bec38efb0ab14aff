"""Workflow definitions in Python: a fixed sequence of stages, each fanning out into tasks.

>>> from rsjobs.workflows import Stage, TaskSpec, WorkflowDefinition, fan_out
>>> character = WorkflowDefinition("character", [
...     Stage("params", [TaskSpec(item="params", type="params.generate", kind="json")],
...           gate=True),
...     Stage("images", fan_out("image.generate", ["front", "side"], kind="image"),
...           queue="images", gate=True),
...     Stage("emotions", fan_out("video.emotion", ["happy", "sad"], kind="video"),
...           queue="videos", max_retries=2),
... ])

A stage's tasks may also be a function of the workflow's input (resolved once, at start).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

import msgspec

from ..codec import encode_payload
from ..errors import ConfigError, PayloadError
from ..labels import validate_labels
from ..limits import check_priority
from ..names import validate_name
from .plan import Plan, StagePlan, TaskPlan

__all__ = ["Stage", "TaskSpec", "WorkflowDefinition", "fan_out"]


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """One task of a stage: the unit that runs, fails and is retried on its own.

    ``item`` names it within its stage (``front``, ``happy``); ``type`` is the handler that
    runs it; ``kind`` is the kind of asset it makes unless its result says otherwise;
    ``params`` (JSON) reaches the handler as ``payload["params"]``. The rest are the task
    options of :meth:`rsjobs.Client.enqueue`; ``labels`` too (a stage whose tasks are a
    function of the workflow's input passes on what lists should find them by, e.g.
    ``{"character": input["id"]}``).
    """

    item: str
    type: str
    kind: str = ""
    params: Any = None
    max_attempts: int = 3
    timeout_ms: int = 0
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 300_000
    labels: Mapping[str, str] | None = None

    def plan(self) -> TaskPlan:
        validate_name("item", self.item)
        if not isinstance(self.type, str) or not self.type or len(self.type) > 200:
            raise ConfigError("task type must be a non-empty string of at most 200 characters")
        if not 1 <= self.max_attempts <= 1000:
            raise ConfigError("max_attempts must be between 1 and 1000")
        if self.timeout_ms < 0 or self.backoff_base_ms < 0:
            raise ConfigError("timeout_ms and backoff_base_ms must be >= 0")
        if self.backoff_max_ms < self.backoff_base_ms:
            raise ConfigError("backoff_max_ms must be >= backoff_base_ms")
        return TaskPlan(
            item=self.item,
            type=self.type,
            kind=self.kind,
            params=self.params,
            max_attempts=self.max_attempts,
            timeout_ms=self.timeout_ms,
            backoff_base_ms=self.backoff_base_ms,
            backoff_max_ms=self.backoff_max_ms,
            labels=validate_labels(self.labels) if self.labels else {},
        )


def fan_out(
    type: str,
    items: Iterable[str],
    *,
    kind: str = "",
    params: Callable[[str], Any] | None = None,
    max_attempts: int = 3,
    timeout_ms: int = 0,
    backoff_base_ms: int = 1000,
    backoff_max_ms: int = 300_000,
    labels: Mapping[str, str] | None = None,
) -> tuple[TaskSpec, ...]:
    """One task of ``type`` per item; ``params(item)`` gives each its params (default:
    ``{"item": item}``)."""
    return tuple(
        TaskSpec(
            item=i,
            type=type,
            kind=kind,
            params=params(i) if params is not None else {"item": i},
            max_attempts=max_attempts,
            timeout_ms=timeout_ms,
            backoff_base_ms=backoff_base_ms,
            backoff_max_ms=backoff_max_ms,
            labels=labels,
        )
        for i in items
    )


TaskList = Sequence[TaskSpec] | Callable[[Any], Sequence[TaskSpec]]


@dataclass(frozen=True)
class Stage:
    """One stage: its tasks (or a function of the workflow input giving them), the queue
    they run on (stages can have their own worker pools), whether the user must confirm
    the stage before the next one starts (``gate``), and how many times the user may
    retry its failed tasks in one version before a failure fails the workflow."""

    name: str
    tasks: TaskList
    _: KW_ONLY
    queue: str = "default"
    gate: bool = False
    max_retries: int = 3
    #: shown to people (status messages); defaults to the name
    label: str = ""
    #: the priority of its tasks on their queue (0-9, higher first; rsjobs.limits)
    priority: int = 0

    def plan(self, input: Any) -> StagePlan:
        validate_name("stage name", self.name)
        validate_name("queue", self.queue)
        check_priority(self.priority)
        if not 0 <= self.max_retries <= 1000:
            raise ConfigError("max_retries must be between 0 and 1000")
        specs = self.tasks(input) if callable(self.tasks) else self.tasks
        tasks = [s.plan() for s in specs]
        if not tasks:
            raise ConfigError(f"stage {self.name!r} has no tasks")
        items = [t.item for t in tasks]
        if len(set(items)) != len(items):
            raise ConfigError(f"stage {self.name!r}: items must be unique, got {items}")
        return StagePlan(
            name=self.name,
            label=self.label or self.name,
            queue=self.queue,
            gate=self.gate,
            max_retries=self.max_retries,
            tasks=tasks,
            priority=self.priority,
        )


class WorkflowDefinition:
    """A named, fixed sequence of stages.

    ``input_type`` (a msgspec Struct, a dataclass, a TypedDict... anything
    ``msgspec.convert`` takes) validates the input at start; ``revision`` is recorded in
    each workflow's plan; ``max_versions`` bounds how often a workflow may be regenerated.
    """

    def __init__(
        self,
        name: str,
        stages: Sequence[Stage],
        *,
        input_type: Any = None,
        revision: int = 1,
        max_versions: int = 100,
    ) -> None:
        self.name = validate_name("definition name", name)
        self.stages = tuple(stages)
        if not self.stages:
            raise ConfigError(f"workflow {name!r} has no stages")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ConfigError(f"workflow {name!r}: stage names must be unique, got {names}")
        if not 1 <= max_versions <= 10_000:
            raise ConfigError("max_versions must be between 1 and 10000")
        self.input_type = input_type
        self.revision = revision
        self.max_versions = max_versions

    def check_input(self, input: Any) -> Any:
        """The input as JSON-ready builtins, validated by ``input_type`` when there is one.
        Raises :class:`rsjobs.ConfigError` (bad input) or :class:`rsjobs.PayloadError`."""
        if self.input_type is not None:
            try:
                value = msgspec.convert(input, self.input_type)
            except msgspec.ValidationError as exc:
                raise ConfigError(f"invalid input for {self.name!r}: {exc}") from None
            input = msgspec.to_builtins(value)
        try:
            encode_payload(input, limit=1 << 62, what="input")  # nesting; size per stage
        except PayloadError as exc:
            raise ConfigError(f"invalid input for {self.name!r}: {exc}") from None
        return input

    def plan(self, input: Any) -> Plan:
        """The plan of a workflow started with ``input`` (already checked)."""
        return Plan(
            definition=self.name,
            revision=self.revision,
            max_versions=self.max_versions,
            stages=[s.plan(input) for s in self.stages],
        )

    def __repr__(self) -> str:
        return f"WorkflowDefinition({self.name!r}, stages={[s.name for s in self.stages]})"
