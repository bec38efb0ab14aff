"""The workflow routes: ``POST /workflows``, ``GET /workflows`` (a page of the list),
``GET /workflows/{id}``,
``GET /workflows/{id}/history``, ``GET /workflows/{id}/events`` (SSE),
``POST /workflows/{id}/{confirm|regenerate|retry|publish|cancel}``.

Access follows the task routes: a token sees the workflows of its owner only; another
owner's workflow answers 404 exactly like a missing one; admin tokens see all. A bad body
or id is refused (4xx with a reason) before anything is written; an action the workflow's
state refuses answers 409 and is recorded in its history. Errors are raised
(:class:`ApiError`, or the store's typed errors) and answered by the app.
"""

from __future__ import annotations

import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..errors import ConfigError, PayloadError, RsjobsError
from ..ids import exclusive
from ..workflows import listing
from ..workflows.errors import ActionRefused, UnknownDefinition, WorkflowNotFound
from ..workflows.schemas import WorkflowEvent
from .bodies import ACTION_BODIES, ActionResult, EventsPage, StartBody
from .handlers import Handlers, StreamHold, not_found
from .http import (
    PAGE_PARAMS,
    RESUME_PARAMS,
    ApiError,
    etag_response,
    is_ascii_number,
    json_response,
    last_event_id,
)
from .service import Service
from .sse import EventStreamResponse
from .wf_sse import ended_before, workflow_events

__all__ = ["WorkflowApi", "workflow_routes"]


class WorkflowApi(Handlers):
    """The handlers, bound to the app's :class:`Service` (its workflow client)."""

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self.client = service.workflows

    async def answer(
        self, wf_id: str, action: str, status: str, changed: bool, code: int = 200
    ) -> Response:
        doc = await self.client.status(wf_id)
        body = ActionResult(id=wf_id, action=action, status=status, changed=changed, workflow=doc)
        return json_response(body, code)

    async def list(self, request: Request) -> Response:
        """A page of workflows, newest first: an owner's token lists its own only (naming
        another owner is a 403), an admin's all of them or one owner's."""
        who = self.principal(request, params=("state", "name", "owner", "cursor", "limit"))
        q = request.query_params
        owner = q.get("owner") or None
        if not who.admin:
            if owner is not None and owner != who.owner:
                raise ApiError(
                    403, "forbidden", "only an admin token may list another owner's workflows"
                )
            owner = who.owner
        raw = q.get("limit")
        if raw is not None and not (is_ascii_number(raw, 4) and 1 <= int(raw) <= listing.MAX_PAGE):
            raise ApiError(400, "invalid_limit", f"limit: an integer from 1 to {listing.MAX_PAGE}")
        try:
            page = await listing.page(
                self.svc.store,
                # (given empty: refused, as the document's enum and pattern say)
                state=q.get("state"),
                name=q.get("name"),
                owner=owner,
                cursor=q.get("cursor") or None,
                limit=int(raw or 50),
            )
        except ConfigError as exc:
            code = "invalid_cursor" if "cursor" in str(exc) else "invalid_filter"
            raise ApiError(400, code, str(exc)) from None
        return json_response(page)

    async def start(self, request: Request) -> Response:
        who = self.principal(request)
        req = await self.body(request, StartBody)
        if req.owner is not None and req.owner != who.owner and not who.admin:
            raise ApiError(403, "forbidden", "only an admin token may start for another owner")
        owner = req.owner or who.owner
        key = self.idempotency_key(request)
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
        wf_id = self.workflow_id(request)
        await self.visible_workflow(who, wf_id)
        try:
            return etag_response(request, await self.client.status(wf_id))
        except WorkflowNotFound:
            raise not_found("workflow", wf_id) from None

    async def history(self, request: Request) -> Response:
        who = self.principal(request, params=PAGE_PARAMS)
        wf_id = self.workflow_id(request)
        after, limit = self.page(request)
        await self.visible_workflow(who, wf_id)
        entries: list[WorkflowEvent] = []
        if exclusive(after) is not None:  # nothing follows the largest id
            try:
                entries = await self.client.history(wf_id, after=after, count=limit)
            except WorkflowNotFound:  # expired since the visibility read
                raise not_found("workflow", wf_id) from None
        return json_response(
            EventsPage(id=wf_id, entries=list(entries), next=entries[-1].id if entries else None)
        )

    async def events(self, request: Request) -> Response:
        who = self.principal(request, allow_query=True, params=RESUME_PARAMS)
        wf_id = self.workflow_id(request)
        last = last_event_id(request)
        await self.visible_workflow(who, wf_id)
        store = await self.svc.store.at(wf_id)  # the workflow's shard
        if last and last != "0-0" and not await store.workflows.is_entry(wf_id, last):
            # resuming after an id that is not this workflow's would skip entries silently
            raise ApiError(
                400, "invalid_last_event_id", "Last-Event-ID is not an event of this workflow"
            )
        if last and await ended_before(store, wf_id, last):
            return Response(status_code=204)
        svc = self.svc
        hold = StreamHold(svc, request, who)
        release = hold.release
        try:
            await svc.start()
            watch = svc.hub.watch(wf_id)
            hold.hold(lambda: svc.hub.unwatch(watch))
        except BaseException:
            release()
            raise
        body = workflow_events(
            store,
            watch,
            last or "0-0",
            keepalive_ms=self.config.keepalive_ms,
            status_ms=self.config.status_ms,
            retry_ms=self.config.sse_retry_ms,
            release=release,
        )
        return EventStreamResponse(body, release)

    async def act(self, request: Request) -> Response:
        who = self.principal(request)
        wf_id = self.workflow_id(request)
        action = request.path_params["action"]
        kind = ACTION_BODIES.get(action)
        if kind is None:
            raise ApiError(404, "not_found", f"no such action: {action}")
        # every action's body is optional but regenerate's (it names the stage)
        empty = None if action == "regenerate" else kind()
        req: Any = await self.body(request, kind, empty=empty)
        await self.visible_workflow(who, wf_id)
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
            raise not_found("workflow", wf_id) from None
        except ActionRefused as exc:
            raise ApiError(409, "refused", f"{action} refused: {exc.reason}") from None
        except RsjobsError as exc:  # ConfigError: e.g. a stage name the plan does not have
            raise ApiError(422, "invalid_body", str(exc)) from None
        changed = not (status == before and action in ("publish", "cancel"))
        return await self.answer(wf_id, action, status, changed)


def workflow_routes(service: Service) -> list[BaseRoute]:
    """The workflow routes of the app (``create_app`` adds them, with the asset routes)."""
    api = WorkflowApi(service)
    return [
        Route("/workflows", api.start, methods=["POST"]),
        Route("/workflows", api.list, methods=["GET"]),
        Route("/workflows/{wf_id}", api.get, methods=["GET"], name="workflow"),
        Route("/workflows/{wf_id}/history", api.history, methods=["GET"]),
        Route("/workflows/{wf_id}/events", api.events, methods=["GET"]),
        Route("/workflows/{wf_id}/{action}", api.act, methods=["POST"]),
    ]
