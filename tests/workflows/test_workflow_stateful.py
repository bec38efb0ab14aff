"""A hypothesis state machine drives one workflow on a real Redis with random user actions
(confirm, regenerate, retry, publish, cancel), random task outcomes (success, failure,
retryable failure, a result naming no asset, a cancel through the task API), late results
and driver passes. After every step the workflow must be in a possible state with no
old-version asset in its current set; once the system goes quiet it must not be stuck."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from rsjobs import Client, Settings, connect
from rsjobs.model import TERMINAL as TASK_TERMINAL
from rsjobs.store.record import field
from rsjobs.workflows import ActionRefused, Stage, WorkflowClient, WorkflowDefinition, fan_out
from rsjobs.workflows import client as client_module
from rsjobs.workflows import spawn as spawn_module
from tests.support.workflows import Claimed, Hand, invariants, wf_keys_dump

pytestmark = pytest.mark.integration

STAGES = ["params", "images", "emotions"]
QUICK = {"max_attempts": 2, "backoff_base_ms": 0, "backoff_max_ms": 0}
DEFINITION = WorkflowDefinition(
    "prop",
    [
        Stage("params", fan_out("t", ["params"], **QUICK), queue="wf", gate=True, max_retries=2),
        Stage("images", fan_out("t", ["front", "side"], **QUICK), queue="wf", gate=True,
              max_retries=2),
        Stage("emotions", fan_out("t", ["happy", "sad", "angry"], **QUICK), queue="wf",
              max_retries=1),
    ],
)  # fmt: skip

OUTCOMES = ["COMPLETE"] * 5 + ["KEEP", "FAIL", "RETRYABLE", "NOREF"]
#: the kinds of step, weighted by repetition (cancel ends a run: rare)
STEPS = ["workers"] * 6 + ["confirm"] * 4 + ["retry"] * 2 + ["publish"] * 2 + ["late"] * 2 + [
    "regenerate", "drive", "cancel_task", "cancel"]  # fmt: skip

URL = ""  # set by the test from its redis_url fixture
#: ids in creation order within one example (random ids would make the order of what the
#: scripts see differ between a failing example and its replay)
IDS: Iterator[str] = iter(())


def next_id() -> str:
    return next(IDS)


class WorkflowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        global IDS
        prefix = uuid.uuid4().hex[:24]
        IDS = (f"{prefix}{n:08x}" for n in itertools.count())
        self.loop = asyncio.new_event_loop()
        self.redis = connect(URL)
        st_ = Settings(namespace=f"h{uuid.uuid4().hex[:10]}", retention_ms=0)
        self.wf = WorkflowClient(self.redis, st_, definitions=[DEFINITION], source="user")
        self.hand = Hand(self.redis, st_)
        self.tasks = Client(self.redis, st_)
        self.work = self.tasks.store.work
        self.running: list[Claimed] = []
        self.ended: list[Claimed] = []
        self.wid = self.run(self.wf.start("prop", {"name": "x"}))

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def act(self, coro: Any) -> None:
        try:
            await coro
        except ActionRefused:
            pass

    # -- one step: the workers, a late result, the driver or the user --------------------
    # (a single rule, so that every example mixes them: hypothesis's swarm testing would
    # otherwise spend whole examples on one kind of step)

    @rule(step=st.sampled_from(STEPS), data=st.data())
    def step(self, step: str, data: st.DataObject) -> None:
        if step == "workers":
            self.workers(data.draw(st.lists(st.sampled_from(OUTCOMES), max_size=8)))
        elif step == "late":
            self.late_result(data)
        elif step == "drive":
            self.run(self.wf.redrive(self.wid))
        else:
            self.user(step, data)

    def workers(self, outcomes: list[str]) -> None:
        """Claim what is runnable, then end the running tasks: the i-th with outcomes[i]
        (success once the list runs out); KEEP leaves it running."""
        self.run(self.work.promote_due("worker"))
        self.running += self.run(self.hand.claim())
        still = []
        for i, c in enumerate(self.running):
            outcome = outcomes[i] if i < len(outcomes) else "COMPLETE"
            if outcome == "KEEP":
                still.append(c)
                continue
            if outcome == "COMPLETE":
                code = self.run(self.hand.complete(c))
            elif outcome == "NOREF":
                code = self.run(self.hand.complete(c, {"no": "ref"}))
            else:
                code = self.run(self.hand.end(c, "FAIL", retryable=outcome == "RETRYABLE"))
            assert code in (1, -2), code  # -2: cancelled meanwhile (regenerate, cancel)
            self.ended.append(c)
        self.running = still

    def late_result(self, data: st.DataObject) -> None:
        """A result from a lease that ended already never changes the workflow."""
        if not self.ended:
            return
        c = self.ended[data.draw(st.integers(0, len(self.ended) - 1))]
        before = self.run(wf_keys_dump(self.wf, self.wid))
        code = self.run(self.hand.complete(c))
        assert code in (2, -2, -3), code
        assert self.run(wf_keys_dump(self.wf, self.wid)) == before

    def user(self, action: str, data: st.DataObject) -> None:
        wf, wid = self.wf, self.wid
        if action == "confirm":
            self.run(self.act(wf.confirm(wid)))
        elif action == "regenerate":
            stage = data.draw(st.sampled_from(STAGES))
            self.run(self.act(wf.regenerate(wid, stage)))
        elif action == "retry":
            self.run(self.act(wf.retry(wid)))
        elif action == "publish":
            self.run(self.act(wf.publish(wid)))
        elif action == "cancel" and data.draw(st.integers(0, 9)) == 0:  # it ends the run
            self.run(self.act(wf.cancel(wid, "bored")))
        elif action == "cancel_task":  # a task cancelled through the task API
            slots = self.run(self.redis.hgetall(wf.keys.workflow_tasks(wid)))
            if slots:
                # (by slot, not by id: ids are random, draws must not depend on them)
                tid = slots[sorted(slots)[data.draw(st.integers(0, len(slots) - 1))]]
                self.run(self.tasks.cancel(tid, "cancelled through the task API"))

    # -- checks ----------------------------------------------------------------------------

    @invariant()
    def possible(self) -> None:
        problems = self.run(invariants(self.wf, self.wid))
        assert problems == [], problems

    def teardown(self) -> None:
        try:
            self.run(self.quiesce())
            problems = self.run(invariants(self.wf, self.wid, quiet=True))
            assert problems == [], problems
        finally:
            self.run(self.redis.aclose())
            self.loop.close()

    async def quiesce(self) -> None:
        """Run every runnable task to success and let the driver pass, until nothing
        is left to run."""
        for _ in range(30):
            await self.work.promote_due("worker")
            for c in self.running + await self.hand.claim():
                await self.hand.complete(c)
            self.running = []
            await self.wf.redrive(self.wid)
            open_ids = await self.redis.smembers(self.wf.keys.workflow_open(self.wid))
            states = [await self.redis.hget(self.wf.keys.task(t), field("state")) for t in open_ids]
            info = await self.wf.get(self.wid)
            if (
                not info.needs_spawn
                and all(s in TASK_TERMINAL for s in states)
                and not (await self.redis.xlen(self.wf.keys.queue("wf")))
            ):
                await self.wf.redrive(self.wid)
                return
        raise AssertionError("the workflow did not go quiet")


def test_workflow_state_machine(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    global URL
    URL = redis_url
    monkeypatch.setattr(spawn_module, "new_id", next_id)
    monkeypatch.setattr(client_module, "new_id", next_id)
    run_state_machine_as_test(
        WorkflowMachine,
        settings=settings(
            max_examples=50,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
