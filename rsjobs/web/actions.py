"""The operator's routes: a task's pause, resume, retry and replay, a queue's pause and
resume and its limits (per-owner concurrency, rates: :mod:`rsjobs.limits`), bulk cancel
and retry by filter, and a dead letter's requeue.

Every action goes through the client (the state machine's scripts) with the caller as
its source in the history (``owner:<name>``, ``admin:<name>``, :attr:`Principal.source`).
The task routes answer another owner's task as a missing one (404); the queue and bulk
routes take admin tokens only (403). Input is checked whole before the first write; an
action the task's state refuses is a 409 whose detail says why, recorded in the task's
history as every refused event is.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..errors import ConfigError, InvalidTransition, QueueInUse, TaskNotFound, UnknownQueue
from ..limits import QueueLimits
from ..names import TYPE_RULE, is_owner, is_type, validate_name
from ..schemas import TaskFilter
from ..store import Code
from .auth import Principal
from .handlers import Handlers, not_found
from .http import ApiError, json_response
from .schemas import (
    ActionRequest,
    BulkRequest,
    ControlResult,
    LimitList,
    LimitRequest,
    QueueDeleted,
    RateRequest,
    RequeueResult,
)
from .service import Service

__all__ = ["Actions", "action_routes"]


def refused(exc: InvalidTransition) -> ApiError:
    """The answer for an action the task's state refuses (recorded in its history)."""
    return ApiError(409, "refused", str(exc))


class Actions(Handlers):
    """The action handlers, bound to one :class:`Service`."""

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self.client = service.client

    # -- one task --------------------------------------------------------------------------

    async def control(self, request: Request) -> Response:
        """``POST /tasks/{id}/pause`` and ``/resume``."""
        who = self.principal(request)
        tid = self.task_id(request)
        req = await self.body(request, ActionRequest, empty=ActionRequest())
        ref = await self.visible_task(who, tid)
        event = "PAUSE" if request.url.path.endswith("/pause") else "RESUME"
        try:
            code, state = await self.client.control(
                tid, event, req.reason, ref=ref, source=who.source
            )
        except TaskNotFound:
            raise not_found("task", tid) from None
        except InvalidTransition as exc:
            raise refused(exc) from None
        return json_response(ControlResult(id=tid, state=state, changed=code is Code.APPLIED))

    async def restart(self, request: Request) -> Response:
        """``POST /tasks/{id}/retry`` and ``/replay``: 202 with the new task's Location,
        or 200 when the task had already been started over (that task is answered)."""
        who = self.principal(request)
        tid = self.task_id(request)
        req = await self.body(request, ActionRequest, empty=ActionRequest())
        ref = await self.visible_task(who, tid)
        op = self.client.replay if request.url.path.endswith("/replay") else self.client.retry
        try:
            result = await op(tid, req.reason, ref=ref, source=who.source)
        except TaskNotFound:
            raise not_found("task", tid) from None
        except InvalidTransition as exc:
            raise refused(exc) from None
        location = str(request.url_for("task", task_id=result.new_id).path)
        return json_response(result, 202 if result.created else 200, {"Location": location})

    # -- queues ----------------------------------------------------------------------------

    async def queue(self, request: Request) -> Response:
        """``POST /queues/{queue}/pause`` and ``/resume`` (admin)."""
        who = self.admin(request)
        name = request.path_params["queue"]
        try:
            validate_name("queue", name)
        except ConfigError as exc:
            raise ApiError(400, "invalid_queue", str(exc)) from None
        req = await self.body(request, ActionRequest, empty=ActionRequest())
        if request.url.path.endswith("/pause"):
            flag = await self.client.pause_queue(name, req.reason, source=who.source)
        else:
            flag = await self.client.resume_queue(name, req.reason, source=who.source)
        return json_response(flag)

    async def delete_queue(self, request: Request) -> Response:
        """``DELETE /queues/{queue}`` (admin): remove an unused queue."""
        self.admin(request)
        name = self._queue(request)
        try:
            gone = await self.client.delete_queue(name)
        except QueueInUse as exc:
            raise ApiError(409, "queue_in_use", str(exc)) from None
        except UnknownQueue as exc:
            raise ApiError(404, "unknown_queue", str(exc)) from None
        return json_response(QueueDeleted(queue=name, deleted=gone))

    # -- limits (admin) ----------------------------------------------------------------------

    def _queue(self, request: Request) -> str:
        name = str(request.path_params["queue"])
        try:
            return validate_name("queue", name)
        except ConfigError as exc:
            raise ApiError(400, "invalid_queue", str(exc)) from None

    async def _limits_of(self, queue: str) -> QueueLimits:
        (found,) = await self.client.limits(queue)
        return found

    async def all_limits(self, request: Request) -> Response:
        """``GET /limits``: every queue's limits."""
        self.admin(request)
        found = [
            q
            for q in await self.client.limits()
            if q.default is not None or q.owners or q.rates or q.waiting or q.throttled
        ]
        return json_response(LimitList(queues=found))

    async def limits(self, request: Request) -> Response:
        """``GET``, ``PUT``, ``DELETE /queues/{queue}/limits[/{owner}]``: the queue's
        limits; the default per-owner limit, or an owner's own, set or removed."""
        self.admin(request)
        queue = self._queue(request)
        owner = request.path_params.get("owner")
        if owner is not None and not is_owner(owner):
            raise ApiError(400, "invalid_owner", f"invalid owner {owner!r}")
        if request.method == "PUT":
            req = await self.body(request, LimitRequest)
            try:
                await self.client.set_limit(queue, req.limit, owner=owner)
            except ConfigError as exc:
                raise ApiError(422, "invalid_body", str(exc)) from None
        elif request.method == "DELETE" and not await self.client.clear_limit(queue, owner=owner):
            whose = f"owner {owner}'s own" if owner else "a default"
            raise ApiError(404, "no_limit", f"queue {queue} has no limit of {whose}")
        return json_response(await self._limits_of(queue))

    async def rate(self, request: Request) -> Response:
        """``PUT``, ``DELETE /queues/{queue}/rate[/{type}[/retries]]``: the queue's rate
        limit, a type's on it, or the type's retries'."""
        self.admin(request)
        queue = self._queue(request)
        type_ = request.path_params.get("type")
        retries = request.url.path.endswith("/retries") and type_ is not None
        if type_ is not None and not is_type(type_):
            raise ApiError(400, "invalid_type", f"a task type is {TYPE_RULE}")
        if request.method == "PUT":
            req = await self.body(request, RateRequest)
            try:
                await self.client.set_rate(
                    queue, req.per_second, type=type_, burst=req.burst, retries=retries
                )
            except ConfigError as exc:
                raise ApiError(422, "invalid_body", str(exc)) from None
        elif not await self.client.clear_rate(queue, type=type_, retries=retries):
            raise ApiError(404, "no_limit", f"queue {queue} has no such rate limit")
        return json_response(await self._limits_of(queue))

    # -- bulk ------------------------------------------------------------------------------

    async def bulk(self, request: Request) -> Response:
        """``POST /tasks/bulk/cancel`` and ``/tasks/bulk/retry`` (admin)."""
        who = self.admin(request)
        req = await self.body(request, BulkRequest)
        f = req.filter
        where = TaskFilter(
            queue=f.queue, state=f.state, type=f.type, owner=f.owner, since=f.since,
            until=f.until, labels=f.labels,
        )  # fmt: skip
        retry = request.url.path.endswith("/retry")
        op = self.client.bulk_retry if retry else self.client.bulk_cancel
        try:
            result = await op(
                where, dry_run=req.dry_run, limit=req.limit, reason=req.reason, source=who.source
            )
        except ConfigError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
        return json_response(result)

    # -- dead letters ----------------------------------------------------------------------

    async def requeue(self, request: Request) -> Response:
        """``POST /deadletters/{id}/requeue``: the dead-lettered task as a new task (the
        CLI's ``deadletter requeue``); a second requeue answers the same clone."""
        from ..reaper.deadletter import CannotRequeue, NotDeadLettered, requeue

        who = self.principal(request)
        tid = self.task_id(request)
        await self.body(request, ActionRequest, empty=ActionRequest())
        await self.visible_task(who, tid)
        try:
            clone, created = await requeue(self.client, tid, source=who.source)
        except TaskNotFound:
            raise not_found("task", tid) from None
        except NotDeadLettered as exc:
            raise ApiError(409, "not_dead_lettered", str(exc)) from None
        except CannotRequeue as exc:
            raise ApiError(409, "cannot_requeue", str(exc)) from None
        location = str(request.url_for("task", task_id=clone).path)
        return json_response(
            RequeueResult(id=tid, requeued_as=clone, created=created),
            202 if created else 200,
            {"Location": location},
        )

    def admin(self, request: Request) -> Principal:
        """The caller, when it holds an admin token (403 otherwise)."""
        who = self.principal(request)
        if not who.admin:
            raise ApiError(403, "forbidden", "this action needs an admin token")
        return who


def action_routes(service: Service) -> list[BaseRoute]:
    """The action routes; the bulk ones come before ``/tasks/{task_id}/...``, which would
    read ``bulk`` as a task id."""
    a = Actions(service)
    return [
        Route("/tasks/bulk/cancel", a.bulk, methods=["POST"]),
        Route("/tasks/bulk/retry", a.bulk, methods=["POST"]),
        Route("/tasks/{task_id}/pause", a.control, methods=["POST"]),
        Route("/tasks/{task_id}/resume", a.control, methods=["POST"]),
        Route("/tasks/{task_id}/retry", a.restart, methods=["POST"]),
        Route("/tasks/{task_id}/replay", a.restart, methods=["POST"]),
        Route("/queues/{queue}", a.delete_queue, methods=["DELETE"]),
        Route("/queues/{queue}/pause", a.queue, methods=["POST"]),
        Route("/queues/{queue}/resume", a.queue, methods=["POST"]),
        Route("/limits", a.all_limits, methods=["GET"]),
        Route("/queues/{queue}/limits", a.limits, methods=["GET", "PUT", "DELETE"]),
        Route("/queues/{queue}/limits/{owner}", a.limits, methods=["GET", "PUT", "DELETE"]),
        Route("/queues/{queue}/rate", a.rate, methods=["PUT", "DELETE"]),
        Route("/queues/{queue}/rate/{type}", a.rate, methods=["PUT", "DELETE"]),
        Route("/queues/{queue}/rate/{type}/retries", a.rate, methods=["PUT", "DELETE"]),
        Route("/deadletters/{task_id}/requeue", a.requeue, methods=["POST"]),
    ]
