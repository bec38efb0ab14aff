"""The task routes and the operations routes (health, metrics, the OpenAPI document).
Every handler checks its input completely before the first write, and answers a task of
another owner exactly like a task that does not exist (404)."""

from __future__ import annotations

import asyncio
import hashlib

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..dedup import same_request
from ..errors import (
    ConfigError,
    DedupKeyReused,
    PayloadError,
    PredecessorRefused,
    QueueQuotaExceeded,
    RsjobsError,
    TaskNotFound,
    UnknownPredecessor,
)
from ..ids import exclusive
from ..model import is_terminal
from ..schemas import EnqueueRequest, HistoryEntry, TaskInfo
from .handlers import Handlers, StreamHold, not_found
from .http import (
    PAGE_PARAMS,
    RESUME_PARAMS,
    ApiError,
    check_query,
    etag_response,
    json_response,
    last_event_id,
)
from .metrics import CONTENT_TYPE
from .openapi import openapi_for
from .schemas import (
    CancelRequest,
    CancelResult,
    Health,
    HistoryPage,
    SubmitRequest,
    SubmitResult,
    TaskView,
    WebhookLog,
)
from .service import Service
from .sse import EventStreamResponse, events, snapshot

__all__ = ["Api", "task_routes"]

#: the longest dedup key ``Client.enqueue`` accepts
MAX_DEDUP_KEY = 256


def scoped_key(owner: str, key: str) -> str:
    """The dedup key of idempotency key ``key`` of ``owner``: two owners using the same key
    get two tasks. ``<owner>/<key>``, or where that would pass the 256 characters a dedup
    key may have, ``<owner> <SHA-256 of key>``: neither owners nor keys contain a space,
    so the two forms never meet, and keys that fit keep the form they always had."""
    if not owner:
        return key
    plain = f"{owner}/{key}"
    if len(plain) <= MAX_DEDUP_KEY:
        return plain
    return f"{owner} {hashlib.sha256(key.encode()).hexdigest()}"


def key_reused(tid: str) -> ApiError:
    """The answer to an idempotency key naming task ``tid`` with another request."""
    return ApiError(
        422,
        "idempotency_key_reused",
        f"this idempotency key already names task {tid}, submitted with a "
        "different type, queue or payload",
    )


class Api(Handlers):
    """The handlers, bound to one :class:`Service`."""

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self.client = service.client
        self.tasks = service.store.tasks

    # -- tasks -----------------------------------------------------------------------------

    async def submit(self, request: Request) -> Response:
        who = self.principal(request)
        req = await self.body(request, SubmitRequest)
        if req.owner is not None and req.owner != who.owner and not who.admin:
            raise ApiError(403, "forbidden", "only an admin token may submit for another owner")
        owner = req.owner or who.owner
        header = self.idempotency_key(request)
        if header is not None and req.dedup_key is not None and header != req.dedup_key:
            raise ApiError(400, "invalid_idempotency_key", "Idempotency-Key and dedup_key disagree")
        key = header or req.dedup_key
        dedup = scoped_key(owner, key) if key else None
        if req.backoff_max_ms < req.backoff_base_ms:
            raise ApiError(422, "invalid_body", "backoff_max_ms must be >= backoff_base_ms")
        if dedup:
            # (the request with the owner the task gets: its placement)
            existing = await self.duplicate_of(
                dedup, msgspec.structs.replace(req, owner=owner or None)
            )
            if existing is not None:
                return self.submitted(request, existing.id, existing.state, duplicate=True)
        try:
            result = await self.client.submit(
                EnqueueRequest(
                    type=req.type,
                    payload=req.payload,
                    queue=req.queue,
                    max_attempts=req.max_attempts,
                    timeout_ms=req.timeout_ms,
                    delay_ms=req.delay_ms,
                    dedup_key=dedup,
                    owner=owner or None,
                    backoff_base_ms=req.backoff_base_ms,
                    backoff_max_ms=req.backoff_max_ms,
                    wait_timeout_ms=req.wait_timeout_ms,
                    labels=req.labels,
                    after=req.after,
                    after_policy=req.after_policy,
                    priority=req.priority,
                ),
                shard_key=req.shard_key,
            )
        except DedupKeyReused as exc:  # a concurrent submit with the key won the race
            raise key_reused(exc.task_id or "") from None
        except PayloadError as exc:
            raise ApiError(413, "payload_too_large", str(exc)) from None
        except UnknownPredecessor as exc:
            # (none, or another owner's: answered alike, as a task of another owner is 404)
            raise ApiError(422, "unknown_predecessor", str(exc)) from None
        except PredecessorRefused as exc:
            raise ApiError(422, "predecessor_refused", str(exc)) from None
        except QueueQuotaExceeded as exc:
            raise ApiError(422, "queue_quota_exceeded", str(exc)) from None
        except ConfigError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
        state = result.state
        if result.duplicate:  # a concurrent submit with the same key won the race
            ref = await self.tasks.ref(result.id)
            state = ref.state if ref is not None else ""
        return self.submitted(request, result.id, state or "PENDING", duplicate=result.duplicate)

    async def duplicate_of(self, dedup: str, req: SubmitRequest) -> TaskInfo | None:
        """The live task this idempotency key already names (on the shard that the key, or
        the request's owner, places its task on), checked against ``req``."""
        store = self.client.store
        shards = await store.open()
        place = shards.place(owner=req.owner, dedup=dedup)
        info = await store.shard(place).tasks.by_dedup(dedup)
        if info is None:
            return None
        if not same_request(info, req.type, req.queue, req.payload):
            raise key_reused(info.id)
        return info

    @staticmethod
    def submitted(request: Request, tid: str, state: str, *, duplicate: bool) -> Response:
        location = str(request.url_for("task", task_id=tid).path)
        return json_response(
            SubmitResult(id=tid, state=state, duplicate=duplicate),
            202,
            {"Location": location},
        )

    async def get_task(self, request: Request) -> Response:
        who = self.principal(request)
        tid = self.task_id(request)
        found = await self.tasks.view(tid, self.svc.config.recent_history)
        if found is None or not who.may_see(found[0].owner):
            raise not_found("task", tid)
        info, recent = found
        return etag_response(request, TaskView.build(info, recent))

    async def history(self, request: Request) -> Response:
        who = self.principal(request, params=PAGE_PARAMS)
        tid = self.task_id(request)
        after, limit = self.page(request)
        await self.visible_task(who, tid)
        entries: list[HistoryEntry] = []
        if exclusive(after) is not None:  # nothing follows the largest id
            try:
                entries = await self.client.history(tid, after=after, count=limit)
            except TaskNotFound:
                raise not_found("task", tid) from None
            except ConfigError:
                raise ApiError(
                    400, "invalid_after", "after: a history entry id of this task, like 3"
                ) from None
        return json_response(
            HistoryPage(id=tid, entries=entries, next=entries[-1].id if entries else None)
        )

    async def webhooks(self, request: Request) -> Response:
        who = self.principal(request)
        tid = self.task_id(request)
        await self.visible_task(who, tid)
        deliveries = await self.client.webhook_deliveries(tid)
        return json_response(WebhookLog(id=tid, deliveries=deliveries))

    async def cancel(self, request: Request) -> Response:
        who = self.principal(request)
        tid = self.task_id(request)
        req = await self.body(request, CancelRequest, empty=CancelRequest())
        ref = await self.visible_task(who, tid)
        try:
            # the visibility read gave the script's keys: one more round trip, the script
            _, state = await self.client.control(
                tid, "CANCEL", req.reason, ref=ref, source=who.source
            )
        except TaskNotFound:
            raise not_found("task", tid) from None
        changed = not is_terminal(ref.state) and state == "CANCELLED"
        return json_response(CancelResult(id=tid, state=state, changed=changed))

    async def task_events(self, request: Request) -> Response:
        who = self.principal(request, allow_query=True, params=RESUME_PARAMS)
        tid = self.task_id(request)
        last = last_event_id(request)
        await self.visible_task(who, tid)
        svc = self.svc
        hold = StreamHold(svc, request, who)
        release = hold.release
        try:
            await svc.start()
            sub = svc.hub.subscribe(tid)
            hold.hold(lambda: svc.hub.unsubscribe(sub))
            first = await snapshot(self.tasks, tid, last or "0-0")
        except BaseException:
            release()
            raise
        if first.state is None:
            release()
            raise not_found("task", tid)
        if not first.known:
            # resuming after an id that is not this task's would skip entries silently
            release()
            raise ApiError(
                400, "invalid_last_event_id", "Last-Event-ID is not an event of this task"
            )
        if last and first.finished and not first.items:
            # nothing left to send for a finished task: 204 stops EventSource reconnecting
            release()
            return Response(status_code=204)
        body = events(
            self.tasks,
            sub,
            first,
            last or "0-0",
            keepalive_ms=svc.config.keepalive_ms,
            retry_ms=svc.config.sse_retry_ms,
            release=release,
        )
        return EventStreamResponse(body, release)

    # -- operations ------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        check_query(request)
        try:
            async with asyncio.timeout(2):
                await self.client.store.ping()
            redis_ok = True
        except (RsjobsError, OSError, TimeoutError):
            redis_ok = False
        hub = self.svc.hub
        body = Health(
            status="ok" if redis_ok else "unavailable",
            redis="ok" if redis_ok else "unreachable",
            events_reader=("ok" if hub.healthy else "retrying") if hub.running else "not started",
            event_streams=self.svc.limiter.total,
        )
        return json_response(body, 200 if redis_ok else 503)

    async def livez(self, request: Request) -> Response:
        """Liveness: the process answers (its event loop turns); no Redis read, so that a
        Redis outage restarts no web process (``/readyz``, as ``/healthz``, reads it)."""
        check_query(request)
        return json_response({"status": "ok"})

    async def metrics(self, request: Request) -> Response:
        if not self.svc.config.metrics_public:
            who = self.principal(request)
            if not who.admin:
                raise ApiError(403, "forbidden", "metrics need an admin token")
        else:
            check_query(request)
        try:
            await self.svc.start()  # durations are observed by the events reader
        except (RsjobsError, OSError):
            pass
        return Response(await self.svc.metrics.render(), media_type=CONTENT_TYPE)

    async def openapi(self, request: Request) -> Response:
        check_query(request)
        return json_response(openapi_for(str(request.scope.get("root_path", ""))))


def task_routes(service: Service) -> list[BaseRoute]:
    """The task routes and the operations routes of the app."""
    api = Api(service)
    return [
        Route("/tasks", api.submit, methods=["POST"]),
        Route("/tasks/{task_id}", api.get_task, methods=["GET"], name="task"),
        Route("/tasks/{task_id}/history", api.history, methods=["GET"]),
        Route("/tasks/{task_id}/webhooks", api.webhooks, methods=["GET"]),
        Route("/tasks/{task_id}/cancel", api.cancel, methods=["POST"]),
        Route("/tasks/{task_id}/events", api.task_events, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/livez", api.livez, methods=["GET"]),
        Route("/readyz", api.healthz, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
        Route("/openapi.json", api.openapi, methods=["GET"]),
    ]
