"""The workflow routes: a list of Starlette routes to mount in any app.

    from rsjobs.workflows import WorkflowClient
    from rsjobs.workflows.http import workflow_routes

    wf = WorkflowClient(redis, settings, definitions=[character], source="api")
    routes += workflow_routes(lambda: wf, auth)        # auth: rsjobs.web.Auth

``POST /workflows``, ``GET /workflows/{id}``, ``GET /workflows/{id}/history``,
``GET /workflows/{id}/events`` (SSE), ``POST /workflows/{id}/{confirm|regenerate|retry|
publish|cancel}``. Access follows the task routes: a token sees the workflows of its
owner only; another owner's workflow answers 404 exactly like a missing one; admin tokens
see all. A bad body or id is refused (4xx with a reason) before anything is written; an
action the workflow's state refuses answers 409 and is recorded in its history.
Every handler answers its own errors, so the routes work in any Starlette app.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..errors import ConfigError, PayloadError, RsjobsError
from ..web.auth import Auth, Principal, require_principal
from ..web.http import (
    PAGE_PARAMS,
    RESUME_PARAMS,
    ApiError,
    answering,
    json_response,
    last_event_id,
    page_params,
    read_body,
)
from ..web.hub import exclusive
from ..web.sse import StreamLimiter
from .bodies import (
    ActionResult,
    CancelBody,
    ConfirmBody,
    EventsPage,
    PublishBody,
    RegenerateBody,
    RetryBody,
    StartBody,
)
from .client import WorkflowClient, validate_workflow_id
from .errors import ActionRefused, UnknownDefinition, WorkflowNotFound
from .schemas import WorkflowEvent
from .sse import ended_before, is_entry, workflow_events

__all__ = ["workflow_routes"]

B = TypeVar("B", bound=msgspec.Struct)

_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")


def _not_found(wf_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no such workflow: {wf_id}")


class WorkflowApi:
    """The handlers, bound to a client factory and an auth table."""

    def __init__(
        self,
        client_factory: Callable[[], WorkflowClient],
        auth: Auth,
        *,
        max_body_bytes: int,
        keepalive_ms: int,
        status_ms: int,
        limiter: StreamLimiter | None = None,
    ) -> None:
        self._factory = client_factory
        self._client: WorkflowClient | None = None
        self.auth = auth
        self.max_body_bytes = max_body_bytes
        self.keepalive_ms = keepalive_ms
        self.status_ms = status_ms
        self.limiter = limiter

    @property
    def client(self) -> WorkflowClient:
        if self._client is None:
            self._client = self._factory()
        return self._client

    # -- helpers ---------------------------------------------------------------------------

    def principal(
        self, request: Request, *, allow_query: bool = False, params: tuple[str, ...] = ()
    ) -> Principal:
        return require_principal(self.auth, request, allow_query=allow_query, params=params)

    @staticmethod
    def wf_id(request: Request) -> str:
        try:
            return validate_workflow_id(request.path_params["wf_id"])
        except ConfigError:
            raise ApiError(
                400, "invalid_id", "a workflow id is 32 lowercase hexadecimal characters"
            ) from None

    async def visible(self, who: Principal, wf_id: str) -> None:
        """404 unless the workflow exists and ``who`` may see it."""
        status, owner = await self.client.redis.hmget(
            self.client.keys.workflow(wf_id), ["status", "owner"]
        )
        if status is None or not who.may_see(owner or ""):
            raise _not_found(wf_id)

    async def body(self, request: Request, kind: type[B], *, optional: bool = True) -> B:
        raw = await read_body(request, self.max_body_bytes)
        if not raw.strip():
            if optional:
                return msgspec.convert({}, kind)
            raise ApiError(400, "invalid_json", "the request body is empty; send a JSON object")
        try:
            return msgspec.json.decode(raw, type=kind)
        except msgspec.ValidationError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
        except msgspec.DecodeError as exc:
            raise ApiError(400, "invalid_json", str(exc)) from None

    async def answer(
        self, wf_id: str, action: str, status: str, changed: bool, code: int = 200
    ) -> Response:
        doc = await self.client.status(wf_id)
        body = ActionResult(id=wf_id, action=action, status=status, changed=changed, workflow=doc)
        return json_response(body, code)

    # -- routes ----------------------------------------------------------------------------

    async def start(self, request: Request) -> Response:
        who = self.principal(request)
        req = await self.body(request, StartBody, optional=False)
        if req.owner is not None and req.owner != who.owner and not who.admin:
            raise ApiError(403, "forbidden", "only an admin token may start for another owner")
        owner = req.owner or who.owner
        key = request.headers.get("idempotency-key")
        if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise ApiError(400, "invalid_idempotency_key", "Idempotency-Key: 1-128 printable ASCII")
        client = self.client
        try:
            definition = client.definition(req.definition)
            value = definition.check_input(req.input)
            definition.plan(value)  # a definition whose tasks depend on the input may refuse it
        except UnknownDefinition as exc:
            raise ApiError(422, "unknown_definition", str(exc)) from None
        except PayloadError as exc:
            raise ApiError(413, "payload_too_large", str(exc)) from None
        except ConfigError as exc:
            raise ApiError(422, "invalid_input", str(exc)) from None
        wf_id = None
        if key is not None:
            # scoped per owner: two owners using the same key get two workflows
            wf_id = hashlib.sha256(f"{owner}/{key}".encode()).hexdigest()[:32]
            try:
                existing = await client.get(wf_id)
            except WorkflowNotFound:
                existing = None
            if existing is not None:
                if (existing.definition, existing.input) != (definition.name, value):
                    raise ApiError(
                        422,
                        "idempotency_key_reused",
                        f"this idempotency key already names workflow {wf_id}, started with "
                        "another definition or input",
                    )
                return await self.answer(wf_id, "start", existing.status, False)
        try:
            wf_id = await client.start(definition, value, owner=owner or None, workflow_id=wf_id)
        except PayloadError as exc:
            raise ApiError(413, "payload_too_large", str(exc)) from None
        except ConfigError as exc:
            raise ApiError(422, "invalid_input", str(exc)) from None
        response = await self.answer(wf_id, "start", "RUNNING", True, 202)
        response.headers["Location"] = str(request.url_for("workflow", wf_id=wf_id).path)
        return response

    async def get(self, request: Request) -> Response:
        who = self.principal(request)
        wf_id = self.wf_id(request)
        await self.visible(who, wf_id)
        try:
            return json_response(await self.client.status(wf_id))
        except WorkflowNotFound:
            raise _not_found(wf_id) from None

    async def history(self, request: Request) -> Response:
        who = self.principal(request, params=PAGE_PARAMS)
        wf_id = self.wf_id(request)
        after, limit = page_params(request)
        await self.visible(who, wf_id)
        entries: list[WorkflowEvent] = []
        if exclusive(after) is not None:  # nothing follows the largest id
            try:
                entries = await self.client.history(wf_id, after=after, count=limit)
            except WorkflowNotFound:  # expired since visible()
                raise _not_found(wf_id) from None
        return json_response(
            EventsPage(id=wf_id, entries=list(entries), next=entries[-1].id if entries else None)
        )

    async def events(self, request: Request) -> Response:
        who = self.principal(request, allow_query=True, params=RESUME_PARAMS)
        wf_id = self.wf_id(request)
        last = last_event_id(request)
        await self.visible(who, wf_id)
        ws = self.client.scripts
        if last and last != "0-0" and not await is_entry(ws, wf_id, last):
            # resuming after an id that is not this workflow's would skip entries silently
            raise ApiError(
                400, "invalid_last_event_id", "Last-Event-ID is not an event of this workflow"
            )
        if last and await ended_before(ws, wf_id, last):
            return Response(status_code=204)
        stream = workflow_events(
            ws, wf_id, last or "0-0", keepalive_ms=self.keepalive_ms, status_ms=self.status_ms
        )
        if self.limiter is not None:
            # each open stream holds a blocking read: counted with the task streams
            stream = _counted(stream, self.limiter, self.limiter.claim(request, who))
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def act(self, request: Request) -> Response:
        who = self.principal(request)
        wf_id = self.wf_id(request)
        action = request.path_params["action"]
        kinds: dict[str, type[msgspec.Struct]] = {
            "confirm": ConfirmBody,
            "regenerate": RegenerateBody,
            "retry": RetryBody,
            "publish": PublishBody,
            "cancel": CancelBody,
        }
        kind = kinds.get(action)
        if kind is None:
            raise ApiError(404, "not_found", f"no such action: {action}")
        req: Any = await self.body(request, kind, optional=action != "regenerate")
        await self.visible(who, wf_id)
        c = self.client
        before = (await c.get(wf_id)).status
        by = who.owner or "anonymous"
        try:
            if action == "confirm":
                status = await c.confirm(wf_id, version=req.version, stage=req.stage, note=req.note)
            elif action == "regenerate":
                reason = f"{req.reason} (by {by})" if req.reason else f"by {by}"
                status = await c.regenerate(wf_id, req.stage, reason=reason, version=req.version)
            elif action == "retry":
                status = await c.retry(wf_id, note=req.note)
            elif action == "publish":
                status = await c.publish(wf_id, version=req.version, note=req.note)
            else:
                reason = f"{req.reason} (by {by})" if req.reason else f"by {by}"
                status = await c.cancel(wf_id, reason)
        except WorkflowNotFound:
            raise _not_found(wf_id) from None
        except ActionRefused as exc:
            raise ApiError(409, "refused", f"{action} refused: {exc.reason}") from None
        except RsjobsError as exc:  # ConfigError: e.g. a stage name the plan does not have
            raise ApiError(422, "invalid_body", str(exc)) from None
        changed = not (status == before and action in ("publish", "cancel"))
        return await self.answer(wf_id, action, status, changed)


async def _counted(
    stream: AsyncIterator[bytes], limiter: StreamLimiter, key: str
) -> AsyncIterator[bytes]:
    """``stream``, releasing its place in ``limiter`` when it ends, fails or is dropped."""
    try:
        async for chunk in stream:
            yield chunk
    finally:
        limiter.release(key)


def workflow_routes(
    client_factory: Callable[[], WorkflowClient],
    auth: Auth,
    *,
    max_body_bytes: int = 1 << 20,
    keepalive_ms: int = 15_000,
    status_ms: int = 1_000,
    limiter: StreamLimiter | None = None,
) -> list[BaseRoute]:
    """The workflow routes, to add to an app's routes (or ``Mount`` under a prefix).

    ``client_factory`` is called once, on the first request (so the app can build its
    Redis client at startup); ``auth`` is the app's token table. ``status_ms``: how often
    an SSE stream re-reads the status document while nothing is written to the history.
    ``limiter`` caps the open event streams per client (429 past it); ``create_app``
    passes the one its task streams use, so the cap covers both.
    """
    api = WorkflowApi(
        client_factory,
        auth,
        max_body_bytes=max_body_bytes,
        keepalive_ms=keepalive_ms,
        status_ms=status_ms,
        limiter=limiter,
    )
    return [
        Route("/workflows", answering(api.start), methods=["POST"]),
        Route("/workflows/{wf_id}", answering(api.get), methods=["GET"], name="workflow"),
        Route("/workflows/{wf_id}/history", answering(api.history), methods=["GET"]),
        Route("/workflows/{wf_id}/events", answering(api.events), methods=["GET"]),
        Route("/workflows/{wf_id}/{action}", answering(api.act), methods=["POST"]),
    ]
