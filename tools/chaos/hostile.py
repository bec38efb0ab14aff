"""The hostile-client mix: what a careless or malicious client sends during a chaos run.

* **Callbacks** (``cb_*``, through the web app): a provider callback for a task waiting
  on its outside job, its ``X-Rsjobs-Signature`` made for *another* outside job
  (``cross_job``), with a timestamp past the tolerance, old or in the future (``stale``),
  or over a body other than the one sent (``altered``). Each must get 401
  ``bad_signature``; its body's result carries a marker no task may ever hold.
* **Pause/resume storms**: 150-400 PAUSE / RESUME cycles of one PENDING task on a queue no
  worker reads, then a cancel: its hash must stay under the documented ceiling
  (docs/task-size.md) and its history account for every cycle, kept or elided.
* **Queue floods**: one owner submits tasks to ever new queue names, a few past its quota
  (``Settings.queue_quota``, :data:`~.workload.QUEUE_QUOTA` in a run): exactly the quota's
  worth are made, the rest refused (``QueueQuotaExceeded``, 422 ``queue_quota_exceeded``)
  with no trace in Redis. The accepted tasks are cancelled.
* **Cursors** (:mod:`.cursors`): crafted, altered, cross-owner and cross-filter cursors.

What each got is written down (:mod:`.records`); :mod:`.hostilecheck` holds Redis to it.
An answer that is only a symptom of the faults (a 503, a broken connection) is retried
for a while, as the poison inputs are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import msgspec

from rsjobs.callbacks import body_signature
from rsjobs.client import Client
from rsjobs.codec import encode
from rsjobs.errors import InvalidTransition, QueueQuotaExceeded, TaskNotFound
from rsjobs.store import Code
from rsjobs.web.config import WebConfig

from .cursors import CursorProber
from .records import CallbackProbe, CancelAck, PauseStorm, QueueFlood, Submission
from .supervisor import now_ms
from .transient import TRANSIENT, answer
from .workload import HOLD_QUEUE, HostileSpec

__all__ = ["PROVIDER", "HostileSender", "error_code"]

#: how long an action is retried through faults before it counts as unanswered
RETRY_S = 30.0
#: the provider of the chaos workload's deferred tasks (tools.chaos.handlers)
PROVIDER = "chaos"
#: how far past the web app's tolerance a stale signature is dated
STALE_BY_S = WebConfig().callback_tolerance_ms // 1000 + 60
#: submits of a queue flood in flight at once (the quota must hold under concurrency)
FLOOD_CONCURRENCY = 4


def error_code(r: httpx.Response) -> str:
    """The ``error`` of the app's JSON error body ('' when there is none)."""
    try:
        body = msgspec.json.decode(r.content)
    except msgspec.DecodeError:
        return ""
    return str(body.get("error") or "") if isinstance(body, dict) else ""


def _payload(spec: HostileSpec) -> dict[str, Any]:
    return {"k": "hostile", "seq": spec.seq, "hostile": spec.marker}


#: the longest a pause/resume storm goes on (a loaded machine answers slowly: the storm
#: stops early rather than outlast the run)
STORM_MAX_S = 30.0


class HostileSender:
    """Sends the planned hostile actions; its lists are what the checker gets, and its
    tasks (``submissions``, ``cancels``) join the producer's."""

    def __init__(
        self,
        client: Client,
        http: httpx.AsyncClient | None,
        *,
        secret: str,
        tokens: dict[str, str],
        deferred: Callable[[], list[str]],
    ) -> None:
        self.client = client
        self.http = http
        self.secret = secret
        #: the ids of the deferred tasks submitted so far (the callbacks' targets)
        self.deferred = deferred
        self.cursors = CursorProber(client, http, tokens)
        self.callbacks: list[CallbackProbe] = []
        self.storms: list[PauseStorm] = []
        self.queue_floods: list[QueueFlood] = []
        self.submissions: list[Submission] = []
        self.cancels: list[CancelAck] = []
        #: actions that got no answer at all within the bound (warnings)
        self.unanswered: list[str] = []

    async def send(self, spec: HostileSpec) -> None:
        try:
            if spec.kind.startswith("cb_"):
                await self._callbacks(spec)
            elif spec.kind == "pause_storm":
                await self._storm(spec)
            elif spec.kind == "queue_flood":
                await self._queue_flood(spec)
            else:
                await self.cursors.probe(spec.seq, spec.channel)
        except asyncio.CancelledError:
            self.unanswered.append(f"{spec.kind} {spec.seq}: still running when the run ended")
            raise
        except Exception as exc:  # a harness bug: say so, never stop the run
            self.unanswered.append(f"{spec.kind} {spec.seq}: harness: {type(exc).__name__}: {exc}")

    async def _retry(self, call: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        return await answer(call, RETRY_S)

    # -- callbacks ---------------------------------------------------------------------------

    async def _waiting(self) -> list[tuple[str, str]]:
        """(task id, outside job id) of deferred tasks waiting now (20 s at most)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + 20
        while loop.time() < end:
            ids = self.deferred()[-40:]
            try:
                infos = await self.client.get_many(ids) if ids else []
            except TRANSIENT:
                infos = []
            found = [
                (i.id, i.external_id)
                for i in infos
                if i is not None and i.state == "DEFERRED" and i.external_id
            ]
            if found:
                return found
            await asyncio.sleep(0.2)
        return []

    async def _callbacks(self, spec: HostileSpec) -> None:
        assert self.http is not None
        variant = spec.kind.removeprefix("cb_")
        targets = await self._waiting()
        if not targets:
            self.unanswered.append(f"{spec.kind} {spec.seq}: no deferred task waited")
            return
        for i in range(spec.count):
            tid, ext = targets[i % len(targets)]
            marker = f"{spec.marker}-{i}"
            body = encode({"status": "succeeded", "result": {"hostile": marker}})
            signed_for, signed_body, stamp = ext, body, int(time.time())
            if variant == "cross_job":
                others = [e for _, e in targets if e != ext]
                signed_for = others[0] if others else f"{ext}-other"
            elif variant == "stale":
                stamp += STALE_BY_S if i % 2 else -STALE_BY_S  # old, or in the future
            else:  # altered: the signature is of another body
                signed_body = encode({"status": "failed", "error": marker})
            header = body_signature(self.secret, PROVIDER, signed_for, signed_body, stamp)
            await self._post_callback(spec, variant, tid, ext, signed_for, marker, body, header)

    async def _post_callback(
        self,
        spec: HostileSpec,
        variant: str,
        tid: str,
        ext: str,
        signed_for: str,
        marker: str,
        body: bytes,
        header: str,
    ) -> None:
        assert self.http is not None
        http = self.http
        headers = {"Content-Type": "application/json", "X-Rsjobs-Signature": header}

        async def call() -> httpx.Response:
            return await http.post(
                f"/callbacks/external/{PROVIDER}/{ext}", content=body, headers=headers
            )

        answered, got = await self._retry(call)
        status, error, outcome = 0, "", "unanswered"
        if answered and isinstance(got, httpx.Response):
            status, code = got.status_code, error_code(got)
            error = f"{code}: {got.text[:200]}"
            if status == 401 and code == "bad_signature":
                outcome = "refused"
            elif status < 300 or status in (404, 409):  # it got past the signature check
                outcome = "accepted"
            else:
                outcome = "mishandled"
        elif answered:
            outcome, error = "mishandled", f"harness: {type(got).__name__}: {got}"
        self.callbacks.append(
            CallbackProbe(
                seq=spec.seq,
                variant=variant,
                task_id=tid,
                target=ext,
                signed_for=signed_for,
                marker=marker,
                at_ms=now_ms(),
                outcome=outcome,
                status=status,
                error=error,
            )
        )

    # -- tasks of its own --------------------------------------------------------------------

    async def _submit(
        self, spec: HostileSpec, queue: str, owner: str | None, key: str, channel: str
    ) -> tuple[bool, Any]:
        """A hostile task on ``queue`` (no worker reads it), retried under the dedup key
        ``key`` (idempotent); (answered, the task id / the exception / the response)."""

        async def by_client() -> Any:
            return await self.client.enqueue(
                "chaos", _payload(spec), queue=queue, owner=owner, max_attempts=1, dedup_key=key
            )

        async def by_http() -> Any:
            assert self.http is not None
            req = {"type": "chaos", "queue": queue, "owner": owner, "max_attempts": 1,
                   "payload": _payload(spec)}  # fmt: skip
            return await self.http.post("/tasks", json=req, headers={"Idempotency-Key": key})

        answered, got = await self._retry(by_http if channel == "http" else by_client)
        if isinstance(got, httpx.Response) and got.status_code < 300:
            got = str(got.json().get("id") or "")
        if answered and isinstance(got, str):
            self.submissions.append(
                Submission(seq=spec.seq, kind="hostile", task_id=got, ack_ms=now_ms())
            )
        return answered, got

    async def _cancel(self, tid: str) -> None:
        """Cancel a hostile task (retried until it answers, within the bound)."""
        answered, got = await self._retry(lambda: self.client.cancel(tid, "hostile mix"))
        if answered and isinstance(got, str):
            self.cancels.append(CancelAck(task_id=tid, phase="hostile", ack_ms=now_ms(), state=got))
        elif not isinstance(got, TaskNotFound):
            self.unanswered.append(f"cancel of hostile task {tid}: {got!r}")

    # -- pause/resume storms -----------------------------------------------------------------

    async def _storm(self, spec: HostileSpec) -> None:
        _, tid = await self._submit(spec, HOLD_QUEUE, None, spec.marker, "client")
        if not isinstance(tid, str):
            self.unanswered.append(f"pause_storm {spec.seq}: its task was not made: {tid!r}")
            return
        n: dict[str, int] = dict.fromkeys(
            ("PAUSE", "RESUME", "refused", "u_PAUSE", "u_RESUME", "errors"), 0
        )
        first_error = ""
        first = now_ms()
        cycles = 0
        loop = asyncio.get_running_loop()
        end = loop.time() + STORM_MAX_S
        try:
            while cycles < spec.count and loop.time() < end:
                cycles += 1
                for event, want in (("PAUSE", "PAUSED"), ("RESUME", "PENDING")):
                    got = await self._control(spec.channel, event, tid)
                    if got == want:
                        n[event] += 1
                    elif got in ("refused", "unknown"):
                        n["refused" if got == "refused" else f"u_{event}"] += 1
                    else:
                        n["errors"] += 1
                        first_error = first_error or f"{event} answered {got}"
        finally:
            # ended also when the run ends mid-storm (cancelled): the task is not left PAUSED
            last = now_ms()
            await self._cancel(tid)
            self.storms.append(
                PauseStorm(
                    seq=spec.seq,
                    channel=spec.channel,
                    task_id=tid,
                    cycles=cycles,
                    paused=n["PAUSE"],
                    resumed=n["RESUME"],
                    refused=n["refused"],
                    unknown_pause=n["u_PAUSE"],
                    unknown_resume=n["u_RESUME"],
                    errors=n["errors"],
                    error=first_error,
                    first_ms=first,
                    last_ms=last,
                )
            )

    async def _control(self, channel: str, event: str, tid: str) -> str:
        """One PAUSE or RESUME: the state it moved the task to, "refused" (refused, or
        answered unchanged: a PAUSE of a task already PAUSED after a RESUME whose answer
        was lost), "unknown" (no answer: not repeated, it may have been applied) or what
        went wrong."""
        try:
            if channel == "http":
                assert self.http is not None
                path = f"/tasks/{tid}/{event.lower()}"
                r = await self.http.post(path, json={"reason": "storm"})
                if r.status_code == 503:
                    return "unknown"
                if r.status_code == 409 and error_code(r):
                    return "refused"
                if r.status_code != 200:
                    return f"HTTP {r.status_code} {r.text[:200]}"
                body = r.json()
                return str(body.get("state")) if body.get("changed") else "refused"
            code, state = await self.client.control(tid, event, "storm")
            return state if code is Code.APPLIED else "refused"
        except InvalidTransition:
            return "refused"
        except TRANSIENT:
            return "unknown"
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc)[:200]}"

    # -- queue-name floods -------------------------------------------------------------------

    async def _queue_flood(self, spec: HostileSpec) -> None:
        quota = self.client.settings.queue_quota
        owner = f"mallory-{spec.seq}"
        # fixed width: no name is a part of another
        names = [f"hq{spec.seq}n{i:03d}" for i in range(quota + spec.count)]
        accepted: dict[str, str] = {}
        refused: list[str] = []
        unknown: list[str] = []
        mishandled: dict[str, str] = {}
        gate = asyncio.Semaphore(FLOOD_CONCURRENCY)
        first = now_ms()

        async def one(name: str) -> None:
            async with gate:
                # the dedup key names the queue: a refused submit's key left behind shows
                answered, got = await self._submit(spec, name, owner, f"dk-{name}", spec.channel)
            if isinstance(got, str):
                accepted[name] = got
            elif not answered:
                unknown.append(name)
            elif isinstance(got, QueueQuotaExceeded) or (
                isinstance(got, httpx.Response)
                and got.status_code == 422
                and error_code(got) == "queue_quota_exceeded"
            ):
                refused.append(name)
            elif isinstance(got, httpx.Response):
                mishandled[name] = f"HTTP {got.status_code}: {got.text[:200]}"
            else:
                mishandled[name] = f"{type(got).__name__}: {str(got)[:200]}"

        await asyncio.gather(*(one(name) for name in names))
        last = now_ms()
        for tid in accepted.values():
            await self._cancel(tid)
        self.queue_floods.append(
            QueueFlood(
                seq=spec.seq,
                channel=spec.channel,
                owner=owner,
                quota=quota,
                sent=names,
                accepted=accepted,
                refused=sorted(refused),
                unknown=sorted(unknown),
                mishandled=mishandled,
                first_ms=first,
                last_ms=last,
            )
        )
