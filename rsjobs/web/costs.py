"""The cost routes (``docs/costs.md``): ``GET /tasks/{id}/cost``, ``GET /workflows/{id}/cost``
and ``GET /costs?by=owner|type|stage|queue``.

A task's and a workflow's costs follow their own access rule (another owner's answers 404
as a missing one). The namespace's totals: an admin token reads any dimension; an owner's
token reads its own owner's totals only (``by=owner``, which is then the default; another
dimension or another owner's name is a 403). Nothing here writes.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..costs import DIMENSIONS
from ..errors import TaskNotFound, WorkflowNotFound
from .handlers import Handlers, not_found
from .http import ApiError, json_response
from .service import Service

__all__ = ["CostApi", "cost_routes"]

#: the longest name ``?name=`` takes (a task type may have 200 characters)
MAX_NAME = 300


class CostApi(Handlers):
    """The handlers, bound to the app's :class:`Service`."""

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self.client = service.client

    async def task_cost(self, request: Request) -> Response:
        who = self.principal(request)
        tid = self.task_id(request)
        await self.visible_task(who, tid)
        try:
            cost = await self.client.task_cost(tid)
        except TaskNotFound:
            raise not_found("task", tid) from None
        return json_response(cost)

    async def workflow_cost(self, request: Request) -> Response:
        who = self.principal(request)
        wf_id = self.workflow_id(request)
        await self.visible_workflow(who, wf_id)
        try:
            cost = await self.client.workflow_cost(wf_id)
        except WorkflowNotFound:
            raise not_found("workflow", wf_id) from None
        return json_response(cost)

    async def costs(self, request: Request) -> Response:
        who = self.principal(request, params=("by", "name"))
        q = request.query_params
        by = q.get("by", "owner")
        if by not in DIMENSIONS:
            raise ApiError(400, "invalid_parameter", f"by: one of {', '.join(DIMENSIONS)}")
        name = q.get("name")
        if name is not None and not 0 < len(name) <= MAX_NAME:
            raise ApiError(400, "invalid_parameter", f"name: 1-{MAX_NAME} characters")
        if not who.admin:
            if by != "owner" or (name is not None and name != who.owner):
                raise ApiError(
                    403, "forbidden", "an owner's token reads its own owner's totals only"
                )
            name = who.owner
        return json_response(await self.client.costs(by, name=name))


def cost_routes(service: Service) -> list[BaseRoute]:
    api = CostApi(service)
    return [
        Route("/tasks/{task_id}/cost", api.task_cost, methods=["GET"]),
        Route("/workflows/{wf_id}/cost", api.workflow_cost, methods=["GET"]),
        Route("/costs", api.costs, methods=["GET"]),
    ]
