"""The operator's reads: ``GET /tasks`` (a page of a task list, :mod:`rsjobs.store.index`),
``GET /tasks/export`` (the same filters, every page, as JSON lines), ``GET /queues``,
``GET /queues/{queue}/series`` (a queue's per-minute counts), ``GET /workers`` and
``GET /deadletters``.

An owner's token lists its own tasks only: the owner filter is set from the token, and
naming another owner is refused (403); the namespace-wide views (queues, workers, dead
letters) need an admin token. Every bad parameter is a 400 with a reason, before anything
is read; nothing here writes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..errors import ConfigError, RsjobsError, UnknownQueue
from ..overview import deadletter_page, queue_series, queue_views
from ..queries import list_query
from ..reaper.registry import list_workers
from ..scaling import scale_signal
from ..schemas import TaskPage
from ..store import ListQuery
from ..store.series import MAX_MINUTES
from .auth import Principal
from .handlers import Handlers
from .http import ApiError, is_ascii_number, json_response
from .schemas import QueueList, WorkerList
from .service import Service

__all__ = ["EXPORT_PAGE", "FILTER_PARAMS", "LIST_PARAMS", "Lists", "list_routes", "query_of"]

log = logging.getLogger("rsjobs.web")

#: the filters of ``GET /tasks`` and ``GET /tasks/export``
FILTER_PARAMS = ("state", "queue", "type", "owner", "label", "since", "until")
LIST_PARAMS = (*FILTER_PARAMS, "cursor", "limit")
#: tasks per page of an export
EXPORT_PAGE = 500


def _many(request: Request, name: str) -> list[str]:
    """A filter given once, repeated, or comma-separated (an empty part is refused: the
    document's pattern says so)."""
    out: list[str] = []
    for v in request.query_params.getlist(name):
        parts = v.split(",")
        if not all(parts):
            raise ApiError(400, "invalid_filter", f"{name}: names separated by commas")
        out += parts
    return out


def _ms(request: Request, name: str) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return 0
    if not is_ascii_number(raw, 13):
        raise ApiError(400, f"invalid_{name}", f"{name}: a time in ms since the epoch")
    return int(raw)


def _limit(request: Request, default: int, most: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    if not is_ascii_number(raw, 4) or not 1 <= int(raw) <= most:
        raise ApiError(400, "invalid_limit", f"limit: an integer from 1 to {most}")
    return int(raw)


def query_of(request: Request, who: Principal, *, limit: int) -> ListQuery:
    """The list query of a request's parameters, as ``who`` may ask it: a 400 (or 403,
    another owner named by an owner's token) :class:`ApiError` saying what is wrong."""
    owner = request.query_params.get("owner") or None
    if not who.admin:
        if owner is not None and owner != who.owner:
            raise ApiError(403, "forbidden", "only an admin token may list another owner's tasks")
        owner = who.owner
    try:
        return list_query(
            state=_many(request, "state"),
            queue=_many(request, "queue"),
            type=request.query_params.get("type") or None,
            owner=owner,
            label=request.query_params.getlist("label"),
            since=_ms(request, "since"),
            until=_ms(request, "until"),
            cursor=request.query_params.get("cursor") or None,
            limit=limit,
        )
    except ConfigError as exc:
        code = "invalid_cursor" if "cursor" in str(exc) else "invalid_filter"
        raise ApiError(400, code, str(exc)) from None


class Lists(Handlers):
    """The handlers, bound to one :class:`Service`."""

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self.store = service.store

    def admin(self, request: Request, params: tuple[str, ...] = ()) -> Principal:
        who = self.principal(request, params=params)
        if not who.admin:
            raise ApiError(
                403, "forbidden", "this view of the whole namespace needs an admin token"
            )
        return who

    async def _page(self, q: ListQuery) -> TaskPage:
        try:
            return await self.store.index.page(q)
        except ConfigError as exc:  # a cursor of another list
            raise ApiError(400, "invalid_cursor", str(exc)) from None

    async def tasks(self, request: Request) -> Response:
        who = self.principal(request, params=LIST_PARAMS)
        q = query_of(request, who, limit=_limit(request, 50, 500))
        return json_response(await self._page(q))

    async def export(self, request: Request) -> Response:
        who = self.principal(request, params=FILTER_PARAMS)
        q = query_of(request, who, limit=EXPORT_PAGE)
        index = self.store.index
        enc = msgspec.json.Encoder()
        # the first page before the answer starts: an error reading it is a 4xx or 503,
        # not a 200 cut short
        first = await self._page(q)

        async def lines() -> AsyncIterator[bytes]:
            page = first
            while True:
                if page.items:
                    yield b"".join(enc.encode(s) + b"\n" for s in page.items)
                if page.cursor is None:
                    return
                try:
                    page = await index.page(q._replace(cursor=page.cursor))
                except RsjobsError as exc:
                    # the status line is sent: the export ends early, and says so in the log
                    log.warning("export ended early: %s", exc)
                    return

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def queues(self, request: Request) -> Response:
        self.admin(request)
        return json_response(QueueList(queues=await queue_views(self.store)))

    async def queue_series(self, request: Request) -> Response:
        self.admin(request, ("minutes",))
        raw = request.query_params.get("minutes")
        if raw is not None and not (is_ascii_number(raw, 4) and 1 <= int(raw) <= MAX_MINUTES):
            raise ApiError(400, "invalid_minutes", f"minutes: an integer from 1 to {MAX_MINUTES}")
        name = request.path_params["queue"]
        try:
            series = await queue_series(self.store, name, minutes=int(raw or 60))
        except UnknownQueue as exc:
            raise ApiError(404, "unknown_queue", str(exc)) from None
        except ConfigError as exc:
            raise ApiError(400, "invalid_queue", str(exc)) from None
        return json_response(series)

    async def queue_scale(self, request: Request) -> Response:
        self.admin(request, ("target_wait_ms", "slots_per_worker"))
        q = request.query_params
        target, per = q.get("target_wait_ms", "0"), q.get("slots_per_worker")
        if not is_ascii_number(target, 10) or (per is not None and not is_ascii_number(per, 6)):
            raise ApiError(
                400, "invalid_scale", "target_wait_ms and slots_per_worker: whole numbers"
            )
        try:
            signal = await scale_signal(
                self.store,
                request.path_params["queue"],
                target_wait_ms=int(target),
                slots_per_worker=int(per) if per is not None else None,
            )
        except UnknownQueue as exc:
            raise ApiError(404, "unknown_queue", str(exc)) from None
        except ConfigError as exc:
            raise ApiError(400, "invalid_scale", str(exc)) from None
        return json_response(signal)

    async def workers(self, request: Request) -> Response:
        self.admin(request)
        return json_response(WorkerList(workers=await list_workers(self.store)))

    async def deadletters(self, request: Request) -> Response:
        self.admin(request, ("cursor", "limit"))
        limit = _limit(request, 50, 1000)
        cursor = request.query_params.get("cursor")
        if cursor == "":
            raise ApiError(
                400, "invalid_cursor", "cursor: a page's cursor (leave it out for the first)"
            )
        try:
            page = await deadletter_page(self.store, cursor=cursor, limit=limit)
        except ConfigError as exc:
            raise ApiError(400, "invalid_cursor", str(exc)) from None
        return json_response(page)


def list_routes(service: Service) -> list[BaseRoute]:
    """The routes; before ``/tasks/{task_id}`` (which ``/tasks/export`` would match)."""
    h = Lists(service)
    return [
        Route("/tasks", h.tasks, methods=["GET"]),
        Route("/tasks/export", h.export, methods=["GET"]),
        Route("/queues", h.queues, methods=["GET"]),
        Route("/queues/{queue}/series", h.queue_series, methods=["GET"]),
        Route("/queues/{queue}/scale", h.queue_scale, methods=["GET"]),
        Route("/workers", h.workers, methods=["GET"]),
        Route("/deadletters", h.deadletters, methods=["GET"]),
    ]
