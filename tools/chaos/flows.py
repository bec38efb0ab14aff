"""The chaos workload's workflow: two stages without gates, run by the chaos workers.

``first`` fans out into items ``a`` and ``b``, ``second`` into ``c``; every task runs the
``chaos.wf`` handler (:mod:`.handlers`) on the chaos queue, whose behaviour comes from the
workflow input (see :data:`.workload.WF_KINDS`). The reapers drive workflows (spawn a
stage whose tasks are missing, account for tasks they ended). ``definitions`` is what the
chaos web app may start (``rsjobs web --workflows tools.chaos.flows:definitions``).
"""

from __future__ import annotations

from rsjobs.workflows import Stage, TaskSpec, WorkflowDefinition, fan_out

from .workload import QUEUE

__all__ = ["FIRST_ITEMS", "NAME", "SECOND_ITEMS", "definitions", "pipeline"]

NAME = "chaos"
FIRST_ITEMS = ("a", "b")
SECOND_ITEMS = ("c",)


def _tasks(items: tuple[str, ...]) -> tuple[TaskSpec, ...]:
    # short backoffs keep the drain short
    return fan_out(
        "chaos.wf", items, kind="json", max_attempts=4, backoff_base_ms=100, backoff_max_ms=1000
    )


pipeline = WorkflowDefinition(
    NAME,
    [
        Stage("first", _tasks(FIRST_ITEMS), queue=QUEUE, max_retries=2),
        Stage("second", _tasks(SECOND_ITEMS), queue=QUEUE, max_retries=2),
    ],
)

definitions = [pipeline]
