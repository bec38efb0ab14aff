"""Bad inputs sent through the public APIs during a chaos run, and what each one got.

Every input carries a *marker* (``poison-<seq>``) in its payload or workflow input, so the
checker can tell whether any of it reached Redis. Through the Python API an input must
raise an :class:`rsjobs.RsjobsError` (anything else, a ``RecursionError`` say, is
mishandled); through the web app it must get a 4xx with a JSON reason. An answer that is
only a symptom of the faults (a broken connection, a 503 while Redis restarts) is retried
for a while: the question is what the input gets, not what an outage does.

Floods send thousands of refused commands (CANCEL through both APIs, PAUSE through the
Python API) at one finished task and count the answers; the checker holds the task's
history and the ``rej:`` counters to them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import msgspec

from rsjobs.client import Client
from rsjobs.codec import encode
from rsjobs.errors import InvalidTransition, RsjobsError
from rsjobs.workflows import WorkflowClient

from .flows import NAME
from .records import Flood, PoisonInput, WorkflowStart
from .supervisor import now_ms
from .transient import TRANSIENT
from .workload import DEEP, QUEUE, PoisonSpec

__all__ = ["PoisonSender"]

#: how long an input is retried through faults before it counts as unanswered
RETRY_S = 30.0
#: commands of a flood in flight at once
FLOOD_CONCURRENCY = 32


def over_limit(base: dict[str, Any], limit: int) -> dict[str, Any]:
    """``base`` plus a ``pad`` that makes its JSON 16 bytes longer than ``limit``."""
    size = len(encode({**base, "pad": ""}))
    return {**base, "pad": "x" * (limit - size + 16)}


def deep_list(depth: int = DEEP) -> list[Any]:
    v: list[Any] = []
    for _ in range(depth - 1):
        v = [v]
    return v


def deep_json(base: dict[str, Any], field: str, depth: int = DEEP) -> bytes:
    """``base`` with ``field`` set to lists nested ``depth`` deep, as JSON text (no JSON
    encoder writes it: they all refuse such depth)."""
    head = encode(base)[:-1]
    sep = b"," if len(head) > 1 else b""
    return head + sep + f'"{field}":'.encode() + b"[" * depth + b"]" * depth + b"}"


class PoisonSender:
    """Sends the planned bad inputs; :attr:`inputs`, :attr:`floods` and :attr:`started`
    (accepted workflow starts) are what the checker gets."""

    def __init__(
        self,
        client: Client,
        wf: WorkflowClient,
        http: httpx.AsyncClient | None,
        finished: Callable[[], Awaitable[tuple[str, str] | None]],
        tend: Callable[[WorkflowStart], None],
    ) -> None:
        self.client = client
        self.wf = wf
        self.http = http
        #: a finished task to flood: (id, terminal state), None when there is none yet
        self.finished = finished
        #: hands an accepted workflow (wf_next_over_limit) to the producer's tending
        self.tend = tend
        self.limit = client.settings.payload_limit
        self.inputs: list[PoisonInput] = []
        self.floods: list[Flood] = []
        self.started: list[WorkflowStart] = []
        #: ids chosen for workflow starts that must be refused
        self.refused_wf_ids: list[str] = []

    async def send(self, spec: PoisonSpec) -> None:
        try:
            if spec.kind.startswith("flood"):
                await self._flood(spec)
            elif spec.channel == "http":
                await self._http(spec)
            else:
                await self._client(spec)
        except asyncio.CancelledError:
            # still waiting for an answer when the run ended (the producer stops what is
            # left after its bound): accounted for as unanswered, never silently dropped
            self._note(spec, "unanswered", error="no answer before the run ended")
            raise
        except Exception as exc:  # a harness bug: say so, never stop the run
            self._note(spec, "mishandled", error=f"harness: {type(exc).__name__}: {exc}")

    def _note(self, spec: PoisonSpec, outcome: str, **kw: Any) -> None:
        self.inputs.append(
            PoisonInput(
                seq=spec.seq,
                kind=spec.kind,
                channel=spec.channel,
                marker=spec.marker,
                at_ms=now_ms(),
                outcome=outcome,
                **kw,
            )
        )

    def _task_payload(self, spec: PoisonSpec) -> dict[str, Any]:
        return {"k": "fast", "seq": spec.seq, "ms": 0, "poison": spec.marker}

    def _wf_input(self, spec: PoisonSpec) -> dict[str, Any]:
        return {"wk": spec.kind, "seq": spec.seq, "ms": 0, "poison": spec.marker}

    async def _retry(self, call: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        """(True, result) or (True, the exception it raised), or (False, None) when only
        transient errors came back within RETRY_S."""
        loop = asyncio.get_running_loop()
        end = loop.time() + RETRY_S
        while True:
            try:
                return True, await call()
            except TRANSIENT:
                if loop.time() > end:
                    return False, None
                await asyncio.sleep(0.5)
            except Exception as exc:
                return True, exc

    # -- through the Python API ----------------------------------------------------------

    async def _client(self, spec: PoisonSpec) -> None:
        if spec.kind == "wf_next_over_limit":
            await self._next_over_limit(spec)
            return
        if spec.kind.startswith("task"):
            base = self._task_payload(spec)
            payload: Any = (
                over_limit(base, self.limit)
                if spec.kind == "task_over_limit"
                else {**base, "deep": deep_list()}
            )

            async def call() -> Any:
                # the marker as dedup key: a retry after a lost reply is idempotent
                return await self.client.enqueue(
                    "chaos", payload, queue=QUEUE, max_attempts=1, dedup_key=spec.marker
                )

        else:
            wf_id = f"{spec.seq:032x}"
            self.refused_wf_ids.append(wf_id)
            base = self._wf_input(spec)
            inp: Any = (
                over_limit(base, self.limit)
                if spec.kind == "wf_over_limit"
                else {**base, "deep": deep_list()}
            )

            async def call() -> Any:
                return await self.wf.start(NAME, inp, workflow_id=wf_id)

        answered, got = await self._retry(call)
        if not answered:
            self._note(spec, "unanswered")
        elif isinstance(got, RsjobsError):
            self._note(spec, "refused", error=f"{type(got).__name__}: {str(got)[:300]}")
        elif isinstance(got, BaseException):
            self._note(spec, "mishandled", error=f"{type(got).__name__}: {str(got)[:300]}")
        else:
            self._note(spec, "accepted", created=str(got))

    async def _next_over_limit(self, spec: PoisonSpec) -> None:
        """Its start fits (the first stage's payloads are under the limit); the first
        stage's two asset references (``ref_bytes`` each) push the second's over it."""
        inp = self._wf_input(spec)
        inp["ref_bytes"] = 3000
        inp["pad"] = ""
        inp["pad"] = "x" * (self.limit - len(encode(inp)) - 2000)
        wf_id = f"{spec.seq:032x}"
        lost_reply = False

        async def call() -> Any:
            nonlocal lost_reply
            try:
                return await self.wf.start(NAME, inp, workflow_id=wf_id)
            except TRANSIENT:
                lost_reply = True  # it may have started: the repeat must say so
                raise

        answered, got = await self._retry(call)
        if isinstance(got, BaseException) or not answered:
            why = f"{type(got).__name__}: {str(got)[:300]}" if answered else "no answer"
            if lost_reply:
                why = f"a repeat of a start whose reply was lost answered {why}"
            # it fits: an error here answers a valid start. The workflow may exist all
            # the same (the error came after it was written): account for it if it does
            self._started(spec, wf_id, acked=False)
            self._note(spec, "mishandled" if answered else "unanswered", error=why)
        else:
            self._note(spec, "accepted", created=wf_id)
            self._started(spec, wf_id, acked=True)

    def _started(self, spec: PoisonSpec, wf_id: str, *, acked: bool) -> None:
        start = WorkflowStart(
            seq=spec.seq, kind=spec.kind, wf_id=wf_id, ack_ms=now_ms(), acked=acked
        )
        self.started.append(start)
        self.tend(start)

    # -- through the web app -------------------------------------------------------------

    async def _http(self, spec: PoisonSpec) -> None:
        assert self.http is not None
        if spec.kind.startswith("task"):
            path = "/tasks"
            head: dict[str, Any] = {"type": "chaos", "queue": QUEUE, "max_attempts": 1}
            base = self._task_payload(spec)
        else:
            path = "/workflows"
            head = {"definition": NAME}
            base = self._wf_input(spec)
        field = "payload" if path == "/tasks" else "input"
        if spec.kind.endswith("over_limit"):
            body = encode({**head, field: over_limit(base, self.limit)})
        else:
            body = _with_deep(head, field, base)
        headers = {"Content-Type": "application/json", "Idempotency-Key": spec.marker}
        http = self.http

        async def call() -> httpx.Response:
            r = await http.post(path, content=body, headers=headers)
            if r.status_code == 503:  # Redis is down: a symptom of the faults
                raise ConnectionError("503")
            return r

        answered, got = await self._retry(call)
        if not answered:
            self._note(spec, "unanswered")
            return
        if isinstance(got, BaseException):
            self._note(spec, "mishandled", error=f"harness: {type(got).__name__}: {got}")
            return
        r: httpx.Response = got
        reason = _reason(r)
        if 400 <= r.status_code < 500 and reason:
            self._note(spec, "refused", status=r.status_code, error=reason[:300])
        elif r.status_code < 300:
            created = ""
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                created = str(r.json().get("id") or "")
            self._note(spec, "accepted", status=r.status_code, created=created)
        else:
            self._note(spec, "mishandled", status=r.status_code, error=(reason or r.text)[:300])

    # -- floods ----------------------------------------------------------------------------

    async def _flood(self, spec: PoisonSpec) -> None:
        target = None
        loop = asyncio.get_running_loop()
        end = loop.time() + 30
        while target is None and loop.time() < end:
            target = await self.finished()
            if target is None:
                await asyncio.sleep(0.5)
        if target is None:
            self._note(spec, "unanswered", error="no finished task to flood")
            return
        tid, state = target
        event = "PAUSE" if spec.kind == "flood_pause" else "CANCEL"
        counts = {"refused": 0, "accepted": 0, "unknown": 0, "errors": 0}
        first_error = ""
        first = now_ms()
        gate = asyncio.Semaphore(FLOOD_CONCURRENCY)

        async def one() -> None:
            nonlocal first_error
            async with gate:
                try:
                    got = await self._command(spec.channel, event, tid)
                except InvalidTransition:
                    got = "refused"
                except TRANSIENT:
                    got = "unknown"
                except Exception as exc:
                    got = "errors"
                    first_error = first_error or f"{type(exc).__name__}: {str(exc)[:200]}"
                else:
                    if got.startswith("HTTP "):
                        first_error = first_error or f"answered {got}"
                        got = "errors"
                    elif got != state and got not in counts:
                        first_error = first_error or f"answered {got}"
                        got = "accepted"
                    elif got == state:
                        got = "refused"
                counts[got] += 1

        await asyncio.gather(*(one() for _ in range(spec.count)))
        self.floods.append(
            Flood(
                seq=spec.seq,
                channel=spec.channel,
                event=event,
                task_id=tid,
                state=state,
                sent=spec.count,
                refused=counts["refused"],
                accepted=counts["accepted"],
                unknown=counts["unknown"],
                errors=counts["errors"],
                error=first_error,
                first_ms=first,
                last_ms=now_ms(),
            )
        )
        clean = not (counts["accepted"] or counts["errors"])
        self._note(spec, "refused" if clean else "mishandled", error=first_error, created=tid)

    async def _command(self, channel: str, event: str, tid: str) -> str:
        """One command; the state it answered (a refused PAUSE raises InvalidTransition)."""
        if channel == "http":
            assert self.http is not None
            r = await self.http.post(f"/tasks/{tid}/cancel", json={"reason": "flood"})
            if r.status_code >= 500:
                if r.status_code == 503:
                    raise ConnectionError("503")
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
            if r.status_code != 200:
                return f"HTTP {r.status_code}"
            body = r.json()
            return "accepted" if body.get("changed") else str(body.get("state"))
        if event == "PAUSE":
            return await self.client.pause(tid, "flood")
        return await self.client.cancel(tid, "flood")


def _with_deep(head: dict[str, Any], field: str, base: dict[str, Any]) -> bytes:
    """``head`` with ``field`` = ``base`` plus ``"deep"``: lists nested DEEP deep."""
    inner = deep_json(base, "deep")
    return encode(head)[:-1] + b"," + f'"{field}":'.encode() + inner + b"}"


def _reason(r: httpx.Response) -> str:
    """``<error>: <detail>`` of the app's error body (``{"error", "detail"}``), or '' when
    the answer carries no reason."""
    try:
        body = msgspec.json.decode(r.content)
    except msgspec.DecodeError:
        return ""
    if not isinstance(body, dict) or not body.get("error") or not body.get("detail"):
        return ""
    return f"{body['error']}: {body['detail']}"
