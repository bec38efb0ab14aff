"""What every route does before its own work, in one place for the task and the workflow
routes: who asks (the bearer token, and no query parameter the route does not take), the
id in the path, the body, the page parameters, and whether the caller may see the task or
workflow (read through the store). Each raises an :class:`ApiError` the app's exception
handlers answer; nothing here writes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import msgspec
from starlette.requests import Request

from ..client import validate_task_id
from ..errors import ConfigError
from ..store import TaskRef
from ..workflows.client import validate_workflow_id
from .auth import Principal, require_principal
from .http import ApiError, page_params, read_body
from .schemas import decode_body
from .service import Service

__all__ = ["Handlers", "not_found"]

T = TypeVar("T")

_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")  # printable ASCII, no spaces


def not_found(what: str, ident: str) -> ApiError:
    """The answer for a missing task or workflow, and for one the caller may not see."""
    return ApiError(404, "not_found", f"no such {what}: {ident}")


class StreamHold:
    """What one open event stream holds of the service: its client's slot in the stream
    limiter (claimed here: a client over its limit gets the limiter's 429) and, once
    :meth:`hold` is called, its place in the hub. :meth:`release` gives both back, once,
    whether the stream ended or opening it failed."""

    def __init__(self, svc: Service, request: Request, who: Principal) -> None:
        self.svc = svc
        self.key = svc.limiter.claim(request, who)
        self._undo: Callable[[], None] | None = None
        self._released = False

    def hold(self, undo: Callable[[], None]) -> None:
        """The hub registration to undo on release."""
        self._undo = undo

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self.svc.limiter.release(self.key)
        if self._undo is not None:
            self._undo()


class Handlers:
    """The helpers, bound to the app's :class:`Service`; the route classes derive from it."""

    def __init__(self, service: Service) -> None:
        self.svc = service
        self.config = service.config

    def principal(
        self, request: Request, *, allow_query: bool = False, params: tuple[str, ...] = ()
    ) -> Principal:
        """Who the token names (401 otherwise); 400 for a query parameter not in ``params``
        (``access_token`` too where ``allow_query`` accepts the token there)."""
        return require_principal(self.svc.auth, request, allow_query=allow_query, params=params)

    @staticmethod
    def task_id(request: Request) -> str:
        try:
            return validate_task_id(request.path_params["task_id"])
        except ConfigError:
            raise ApiError(
                400, "invalid_id", "a task id is 32 lowercase hexadecimal characters"
            ) from None

    @staticmethod
    def workflow_id(request: Request) -> str:
        try:
            return validate_workflow_id(request.path_params["wf_id"])
        except ConfigError:
            raise ApiError(
                400, "invalid_id", "a workflow id is 32 lowercase hexadecimal characters"
            ) from None

    @staticmethod
    def idempotency_key(request: Request) -> str | None:
        """The ``Idempotency-Key`` header (None: not sent); 400 unless 1-128 printable
        ASCII characters."""
        key = request.headers.get("idempotency-key")
        if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise ApiError(400, "invalid_idempotency_key", "Idempotency-Key: 1-128 printable ASCII")
        return key

    @staticmethod
    def page(request: Request) -> tuple[str, int]:
        """``after`` and ``limit`` of a history page (400 when malformed)."""
        return page_params(request)

    async def body(self, request: Request, kind: type[T], *, empty: T | None = None) -> T:
        """The request body decoded as ``kind``: 413 past ``max_body_bytes``, 415 unless
        JSON, 400 when it does not parse, 422 when it does not fit ``kind``. An empty body
        is ``empty`` when given, else a 400."""
        raw = await read_body(request, self.config.max_body_bytes)
        if not raw.strip():
            if empty is not None:
                return empty
            raise ApiError(400, "invalid_json", "the request body is empty; send a JSON object")
        try:
            value: T = decode_body(raw, kind)
        except msgspec.ValidationError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
        except msgspec.DecodeError as exc:
            raise ApiError(400, "invalid_json", str(exc)) from None
        return value

    async def visible_task(self, who: Principal, task_id: str) -> TaskRef:
        """The task's state, owner and keys in one read; 404 when it does not exist or
        ``who`` may not see it."""
        ref = await self.svc.store.tasks.ref(task_id)
        if ref is None or not who.may_see(ref.owner):
            raise not_found("task", task_id)
        return ref

    async def visible_workflow(self, who: Principal, wf_id: str) -> tuple[str, str, str]:
        """The workflow's status, owner and plan (JSON) in one read; 404 when it does not
        exist or ``who`` may not see it."""
        seen = await (await self.svc.store.at(wf_id)).workflows.visible(wf_id)
        if seen is None or not who.may_see(seen[1]):
            raise not_found("workflow", wf_id)
        return seen
