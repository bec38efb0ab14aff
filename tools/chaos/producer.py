"""The producer: submits the planned tasks on time, cancels some, repeats dedup submits,
starts and tends the planned workflows (publishes the ready ones, retries the partly
failed ones, cancels some), sends the poison inputs (:mod:`.poison`) and the hostile
client's actions (:mod:`.hostile`), and writes down
every acknowledgement it gets (that is what the checker holds Redis to).

It rides out Redis restarts: a submit whose reply never came is *indeterminate* (the task
may or may not exist). Plain tasks are then submitted again (new ids; an orphan created by
the first call is reported by the checker as "created without ack"); tasks with a dedup key
are retried with the same key, which makes the retry idempotent. A successor (chain kind)
is submitted once its predecessors' submits were acknowledged, naming their ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

from rsjobs.client import Client
from rsjobs.codec import decode
from rsjobs.errors import InvalidTransition, RsjobsError, TaskNotFound
from rsjobs.model import TERMINAL
from rsjobs.store.transient import boundary
from rsjobs.workflows import TERMINAL as WF_TERMINAL
from rsjobs.workflows import ActionRefused, WorkflowClient

from .aio import stop_tasks
from .flows import NAME
from .handlers import jobs_key
from .hostile import HostileSender
from .poison import PoisonSender
from .records import CancelAck, ExternalAck, Submission, WorkflowStart
from .supervisor import now_ms
from .transient import TRANSIENT
from .workload import HostileSpec, PoisonSpec, TaskSpec, WorkflowSpec

__all__ = ["TRANSIENT", "Producer", "now_ms"]


class Producer:
    """Submits ``specs`` (sorted by ``at_s``) relative to a start time."""

    def __init__(
        self,
        client: Client,
        specs: list[TaskSpec],
        echo: Callable[[str], None] = print,
        *,
        wf: WorkflowClient | None = None,
        workflows: list[WorkflowSpec] | None = None,
        poison: list[PoisonSpec] | None = None,
        http: httpx.AsyncClient | None = None,
        hostile: list[HostileSpec] | None = None,
        callback_secret: str = "",
        tokens: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.specs = specs
        self.echo = echo
        self.wf = wf or WorkflowClient(client.redis, client.settings, source="api")
        self.wf_specs = workflows or []
        self.poison_specs = poison or []
        self.workflow_starts: list[WorkflowStart] = []
        #: the producer's workflow cancels and publishes, and what they answered
        self.wf_actions: list[CancelAck] = []
        #: the last status each tended workflow was seen in
        self._wf_status: dict[str, str] = {}
        #: valid workflow starts that were refused (each one a violation)
        self.wf_errors: list[str] = []
        self._tending: set[asyncio.Task[None]] = set()
        self._stop_tending = asyncio.Event()
        #: workflows whose start got no answer (they may not exist)
        self._unacked: set[str] = set()
        self._flooded: set[str] = set()
        self.poison = PoisonSender(client, self.wf, http, self._finished_task, self._tend_later)
        self.hostile_specs = hostile or []
        self.hostile = HostileSender(
            client,
            http,
            secret=callback_secret,
            tokens=tokens or {},
            deferred=lambda: [s.task_id for s in self.submissions if s.kind == "deferred"],
        )
        self.submissions: list[Submission] = []
        self.indeterminate: list[int] = []
        self.cancels: list[CancelAck] = []
        self.resumes: list[CancelAck] = []
        #: cancel_running tasks that finished before they were seen RUNNING
        self.cancel_missed = 0
        #: pause_resume tasks paused (and resumed), and those that finished first
        self.paused = 0
        self.pause_missed = 0
        self.retries = 0
        #: the outside results sent for deferred tasks, and what each answered
        self.external: list[ExternalAck] = []
        self._side: set[asyncio.Task[None]] = set()
        #: seq -> the task id its acknowledged submit answered (a successor names them)
        self._ids: dict[int, str] = {}
        #: successors whose submit was refused, or whose predecessors were never
        #: acknowledged (a predecessor lost with an AOF window: the checker reports it)
        self.successors_unsubmitted = 0

    @property
    def all_workflow_starts(self) -> list[WorkflowStart]:
        """Every acknowledged workflow start (the planned ones and accepted bad inputs)."""
        return self.workflow_starts + self.poison.started

    @property
    def accepted_ids(self) -> list[str]:
        return list(dict.fromkeys(s.task_id for s in self.submissions))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _hget(self, key: str, field: str) -> Any:
        """HGET with rsjobs's errors (a passing reply raises RedisUnavailable)."""
        with boundary(f"HGET {key}"):
            return await self.client.redis.hget(key, field)

    async def _retrying(self, what: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """``what()`` until it answers (only for idempotent calls)."""
        backoff = 0.05
        while True:
            try:
                return await what()
            except TRANSIENT:
                self.retries += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    # -- submitting ----------------------------------------------------------------------

    async def run(self, t0: float) -> None:
        """Submit every spec at ``t0 + spec.at_s`` (``t0`` on the loop's clock); the
        workflows and poison inputs likewise, alongside."""
        self._spawn(self._at_times(t0, self.wf_specs, self._start_workflow))
        self._spawn(self._at_times(t0, self.poison_specs, self.poison.send))
        self._spawn(self._at_times(t0, self.hostile_specs, self.hostile.send))
        loop = asyncio.get_running_loop()
        i = 0
        while i < len(self.specs):
            now = loop.time() - t0
            due: list[TaskSpec] = []
            while i < len(self.specs) and self.specs[i].at_s <= now:
                due.append(self.specs[i])
                i += 1
            if not due:
                await asyncio.sleep(min(0.05, max(0.0, self.specs[i].at_s - now)))
                continue
            keyed = [s for s in due if s.dedup]
            for s in keyed:
                self._spawn(self._submit_keyed(s))
            for s in due:
                if s.after:
                    self._spawn(self._submit_successor(s))
            plain = [s for s in due if not s.dedup and not s.after]
            if plain:
                await self._submit_plain(plain)

    async def _submit_plain(self, specs: list[TaskSpec]) -> None:
        backoff = 0.05
        while True:
            try:
                ids = await self.client.enqueue_many([s.request() for s in specs])
                break
            except TRANSIENT:
                # unknown outcome: the tasks may exist; submit them again under new ids
                self.indeterminate.extend(s.seq for s in specs)
                self.retries += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        ack = now_ms()
        for s, tid in zip(specs, ids, strict=True):
            self.submissions.append(
                Submission(seq=s.seq, kind=s.kind, task_id=tid, ack_ms=ack, priority=s.priority)
            )
            self._after_submit(s, tid)

    async def _submit_successor(self, s: TaskSpec) -> None:
        """Once its predecessors' submits were acknowledged (60 s at most), submit it
        naming their ids; a reply lost makes it indeterminate and it is submitted again
        (new id), as a plain task is."""
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while not all(p in self._ids for p in s.after):
            if loop.time() > end:
                self.successors_unsubmitted += 1
                return
            await asyncio.sleep(0.02)
        req = s.request(after=[self._ids[p] for p in s.after])
        backoff = 0.05
        while True:
            try:
                result = await self.client.submit(req)
                break
            except TRANSIENT:
                self.indeterminate.append(s.seq)
                self.retries += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            except RsjobsError:
                # a predecessor gone (lost with Redis' AOF window): nothing to wait for
                self.successors_unsubmitted += 1
                return
        self.submissions.append(
            Submission(
                seq=s.seq, kind=s.kind, task_id=result.id, ack_ms=now_ms(), priority=s.priority
            )
        )
        self._after_submit(s, result.id)

    async def _submit_keyed(self, s: TaskSpec) -> None:
        req = s.request()

        async def submit() -> str:
            return await self.client.enqueue(
                req.type,
                req.payload,
                queue=req.queue,
                owner=req.owner,
                priority=req.priority,
                max_attempts=req.max_attempts,
                timeout_ms=req.timeout_ms,
                delay_ms=req.delay_ms,
                dedup_key=req.dedup_key,
                backoff_base_ms=req.backoff_base_ms,
                backoff_max_ms=req.backoff_max_ms,
                wait_timeout_ms=req.wait_timeout_ms,
            )

        tid = str(await self._retrying(submit))
        self.submissions.append(
            Submission(
                seq=s.seq,
                kind=s.kind,
                task_id=tid,
                ack_ms=now_ms(),
                dedup=s.dedup,
                priority=s.priority,
            )
        )
        self._after_submit(s, tid)
        if s.repeat_after_s >= 0:
            await asyncio.sleep(s.repeat_after_s)
            again = str(await self._retrying(submit))
            self.submissions.append(
                Submission(
                    seq=s.seq,
                    kind=s.kind,
                    task_id=again,
                    ack_ms=now_ms(),
                    dedup=s.dedup,
                    repeat=True,
                    priority=s.priority,
                )
            )

    async def _at_times(
        self,
        t0: float,
        specs: list[Any],
        act: Callable[[Any], Coroutine[Any, Any, None]],
    ) -> None:
        loop = asyncio.get_running_loop()
        for spec in specs:
            wait = t0 + spec.at_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._spawn(act(spec))

    # -- workflows -----------------------------------------------------------------------

    async def _start_workflow(self, spec: WorkflowSpec) -> None:
        wf_id = f"{spec.seq:032x}"  # chosen here: a retried start is idempotent
        try:
            await self._retrying(lambda: self.wf.start(NAME, spec.input, workflow_id=wf_id))
        except RsjobsError as exc:
            self.wf_errors.append(f"{wf_id} ({spec.kind}): {type(exc).__name__}: {exc}")
            return
        start = WorkflowStart(seq=spec.seq, kind=spec.kind, wf_id=wf_id, ack_ms=now_ms())
        self.workflow_starts.append(start)
        self._tend_later(start, spec.cancel_after_s)

    def _tend_later(self, start: WorkflowStart, cancel_after_s: float = -1.0) -> None:
        self._wf_status[start.wf_id] = ""
        if not start.acked:
            self._unacked.add(start.wf_id)
        task = asyncio.get_running_loop().create_task(self._tend(start, cancel_after_s))
        self._tending.add(task)
        task.add_done_callback(self._tending.discard)

    async def _tend(self, start: WorkflowStart, cancel_after_s: float) -> None:
        """What its user would do until the run ends: publish it once ready, retry it when
        partly failed, cancel it (``cancel_after_s`` after the start). It keeps looking
        after the workflow finished: a status read from a primary that is about to lose
        it (a write not yet on the replica) is not the end."""
        loop = asyncio.get_running_loop()
        wid = start.wf_id
        key = (await self.wf.store.at(wid)).keys.workflow(wid)  # (its shard's)
        cancel_at = loop.time() + cancel_after_s if cancel_after_s >= 0 else None
        while not self._stop_tending.is_set():
            try:
                with boundary("HGET workflow status"):  # a cluster's replies are passing too
                    status = str(await self.client.redis.hget(key, "status") or "")
                self._wf_status[wid] = status
                if status in WF_TERMINAL:
                    pass
                elif cancel_at is not None and loop.time() >= cancel_at:
                    try:
                        answer = await self.wf.cancel(wid, "chaos")
                    except ActionRefused as exc:  # refused: it finished first
                        answer = f"refused: {exc.status}"
                    except TRANSIENT:
                        # no answer: it may have been cancelled all the same; asked again
                        self._ack(wid, "cancel", "unknown")
                        raise
                    # retried after a lost reply (idempotent) until it answers
                    cancel_at = None
                    self._ack(wid, "cancel", answer)
                elif status == "READY_TO_PUBLISH":
                    self._ack(wid, "publish", await self.wf.publish(wid, note="chaos"))
                elif status == "PARTIALLY_FAILED":
                    await self.wf.retry(wid, note="chaos")
            except TRANSIENT:
                pass
            except RsjobsError:
                pass  # refused: it moved on meanwhile; look again
            await asyncio.sleep(0.3)

    def _open_workflows(self) -> list[str]:
        """Tended workflows not seen finished (one whose start got no answer and that does
        not exist is not open: it was never created)."""
        return [
            w
            for w, st in self._wf_status.items()
            if st not in WF_TERMINAL and not (st == "" and w in self._unacked)
        ]

    def _ack(self, wid: str, action: str, status: str) -> None:
        self.wf_actions.append(CancelAck(task_id=wid, phase=action, ack_ms=now_ms(), state=status))

    async def finish_workflows(self, timeout_s: float) -> int:
        """Wait until every tended workflow is finished (bounded), then stop tending;
        returns how many were not finished at the bound."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        open_ = self._open_workflows()
        while loop.time() < end:
            open_ = self._open_workflows()
            if not open_:
                await asyncio.sleep(1.0)  # one more look at each, on the settled primary
                open_ = self._open_workflows()
                if not open_:
                    break
            await asyncio.sleep(0.3)
        self._stop_tending.set()
        await stop_tasks(set(self._tending))
        return len(open_)

    async def _finished_task(self) -> tuple[str, str] | None:
        """A finished fast task nobody flooded yet, and its state (for a flood). A task
        is reserved before it is read: two floods never share one."""
        old = now_ms() - 3000
        for s in self.submissions:
            if s.kind != "fast" or s.ack_ms > old or s.task_id in self._flooded:
                continue
            self._flooded.add(s.task_id)
            try:
                info = await self.client.get(s.task_id)
            except TaskNotFound:
                continue
            except TRANSIENT:
                self._flooded.discard(s.task_id)
                continue
            if info.terminal:
                return s.task_id, info.state
            self._flooded.discard(s.task_id)
        return None

    # -- cancelling ----------------------------------------------------------------------

    def _after_submit(self, s: TaskSpec, tid: str) -> None:
        self._ids.setdefault(s.seq, tid)
        if s.kind == "cancel_pending" or (s.kind == "chain" and s.payload.get("cancel")):
            self._spawn(self._cancel(tid, "pending"))
        elif s.kind == "cancel_running":
            self._spawn(self._cancel_when_running(tid))
        elif s.kind == "pause_resume":
            self._spawn(self._pause_resume(tid, int(s.payload.get("hold") or 0) / 1000))
        elif s.kind == "deferred":
            self._spawn(self._provide(tid, str(s.payload.get("mode")), int(s.payload["wait"])))

    async def _cancel(self, tid: str, phase: str) -> None:
        try:
            state = await self._retrying(lambda: self.client.cancel(tid, f"chaos ({phase})"))
        except TaskNotFound:
            state = ""  # lost (the checker says so); nothing was cancelled
        self.cancels.append(CancelAck(task_id=tid, phase=phase, ack_ms=now_ms(), state=state))

    async def _cancel_when_running(self, tid: str) -> None:
        if await self._wait_running(tid, 60.0) == "RUNNING":
            await self._cancel(tid, "running")
        else:
            self.cancel_missed += 1

    async def _wait_running(self, tid: str, give_up_s: float) -> str:
        """Poll until the task is RUNNING or terminal; its state then ('' = gone)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + give_up_s
        state = ""
        while loop.time() < end:
            try:
                state = (await self.client.get(tid)).state
            except TRANSIENT:
                await asyncio.sleep(0.2)
                continue
            except TaskNotFound:
                return ""
            if state == "RUNNING" or state in TERMINAL:
                return state
            await asyncio.sleep(0.1)
        return state

    async def _pause_resume(self, tid: str, hold_s: float) -> None:
        """PAUSE (once RUNNING, or after 10 s whatever its state), wait, RESUME."""
        state = await self._wait_running(tid, 10.0)
        if not state or state in TERMINAL:
            self.pause_missed += 1
            return
        try:
            await self._retrying(lambda: self.client.pause(tid, "chaos"))
        except (InvalidTransition, TaskNotFound):
            self.pause_missed += 1  # finished meanwhile
            return
        self.paused += 1
        await asyncio.sleep(hold_s)
        # until it answers: a task left PAUSED would never finish (NOT_TERMINAL)
        with contextlib.suppress(InvalidTransition, TaskNotFound):
            state = await self._retrying(lambda: self.client.resume(tid, "chaos"))
            # written down: a RESUME lost afterwards leaves the task PAUSED, and the checker
            # dates that loss by this acknowledgement
            self.resumes.append(
                CancelAck(task_id=tid, phase="resume", ack_ms=now_ms(), state=str(state))
            )

    # -- the outside service of deferred tasks -------------------------------------------

    async def _provide(self, tid: str, mode: str, wait_ms: int) -> None:
        """Act as the outside service of a deferred task: for each attempt seen DEFERRED,
        send the job's result (``Client.complete_external`` by the job's id) as ``mode``
        says: ok once; dup twice; lost and late: the first attempt's result never / only
        past its longest wait (refused), the next attempts' once; never: no result ever
        (the task times out). Until the task is terminal (bounded)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + 120
        done: set[str] = set()  # the outside jobs answered (by id)
        jobs = jobs_key(self.client.settings.namespace)
        while loop.time() < end:
            try:
                info = await self.client.get(tid)
            except TaskNotFound:
                return
            except TRANSIENT:
                await asyncio.sleep(0.2)
                continue
            if info.terminal:
                return
            # the job of the attempt's execution that deferred it (the task names it)
            att, ext = info.attempt, info.external_id
            if info.state != "DEFERRED" or not ext or ext in done:
                await asyncio.sleep(0.05)
                continue
            done.add(ext)
            first = att == 1
            if mode == "never" or (mode == "lost" and first):
                continue
            raw = await self._retrying(functools.partial(self._hget, jobs, ext))
            result = decode(raw) if raw else None
            late = mode == "late" and first
            if late:
                await asyncio.sleep(wait_ms / 1000 + 0.7)  # past the attempt's longest wait
            for send in (1, 2) if mode == "dup" else (1,):
                answer = await self._external(ext, result)
                ack = ExternalAck(task_id=tid, attempt=att, mode=mode, send=send, late=late,
                                  ack_ms=now_ms(), answer=answer)  # fmt: skip
                self.external.append(ack)

    async def _external(self, ext: str, result: Any) -> str:
        """One outside result, retried through Redis faults (a repeat of an applied one
        answers the same state: idempotent); the state it answered, or why not."""
        try:
            return str(
                await self._retrying(
                    lambda: self.client.complete_external(ext, result, provider="chaos")
                )
            )
        except InvalidTransition:
            return "refused"
        except TaskNotFound:
            return "not_found"

    async def finish(self, timeout_s: float) -> int:
        """Wait for the side tasks (repeats, cancels); returns how many had to be dropped."""
        if self._side:
            await asyncio.wait(set(self._side), timeout=timeout_s)
        left = len(self._side)
        await stop_tasks(set(self._side))
        return left
