"""The operator dashboard: ``GET /dashboard/`` (plain HTML, JS and CSS in
``dashboard_static/``, no build step) and ``GET /dashboard/fsm.json``, the task state
machine as a graph for the page to draw.

The graph is built from :mod:`rsjobs.model` (the mirror of ``fsm.lua``, which a test checks)
so that the page never carries its own copy of the transition table. The page calls the
HTTP API with the admin token the operator types in; these routes hold no data of the
namespace and need no token.
"""

from __future__ import annotations

from importlib import resources

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..model import RESTART, TERMINAL, TRANSITIONS, State

__all__ = ["FsmEdge", "FsmGraph", "FsmState", "dashboard_routes", "fsm_graph"]


class FsmState(msgspec.Struct, frozen=True, kw_only=True):
    #: "" is the start node: the task before it is created
    name: str
    terminal: bool


class FsmEdge(msgspec.Struct, frozen=True, kw_only=True):
    """Every event that may lead from ``source`` to ``target`` (one edge per pair)."""

    source: str
    target: str
    events: list[str]


class FsmGraph(msgspec.Struct, frozen=True, kw_only=True):
    states: list[FsmState]
    edges: list[FsmEdge]
    #: the event that starts a task of each terminal state over, as a new task
    restart: dict[str, str]


def fsm_graph() -> FsmGraph:
    """The transition table as nodes and edges, in the order of :class:`State`."""
    states = [FsmState(name="", terminal=False)]
    states += [FsmState(name=s.value, terminal=s.value in TERMINAL) for s in State]
    pairs: dict[tuple[str, str], list[str]] = {}
    for source, moves in TRANSITIONS.items():
        for event, targets in moves.items():
            for target in sorted(targets):
                pairs.setdefault((source, target), []).append(event)
    edges = [FsmEdge(source=s, target=t, events=ev) for (s, t), ev in pairs.items()]
    return FsmGraph(states=states, edges=edges, restart=dict(RESTART))


_GRAPH = msgspec.json.encode(fsm_graph())


async def _fsm(request: Request) -> Response:
    return Response(_GRAPH, media_type="application/json")


async def _to_dashboard(request: Request) -> Response:
    # a path, not a URL: a URL built from the request would carry its Host header
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return RedirectResponse(f"{root}/dashboard/", status_code=307)


def dashboard_routes() -> list[BaseRoute]:
    """The routes; ``fsm.json`` before the files' mount, which would answer it 404."""
    files = resources.files("rsjobs") / "web" / "dashboard_static"
    return [
        Route("/dashboard", _to_dashboard, methods=["GET"]),
        Route("/dashboard/fsm.json", _fsm, methods=["GET"]),
        Mount("/dashboard", app=StaticFiles(directory=str(files), html=True), name="dashboard"),
    ]
