"""The dashboard's server side: the state machine graph it draws (``/dashboard/fsm.json``,
built from rsjobs.model, the mirror of fsm.lua), and the task fields its detail view shows."""

from __future__ import annotations

from importlib import resources

import httpx

from rsjobs import Client
from rsjobs.model import TERMINAL, TRANSITIONS, Event, State
from rsjobs.web.dashboard import fsm_graph
from tests.support.web import ALICE, running_worker


def test_the_graph_is_the_transition_table() -> None:
    g = fsm_graph()
    assert [s.name for s in g.states] == ["", *[s.value for s in State]]
    assert {s.name for s in g.states if s.terminal} == TERMINAL
    table: dict[str, dict[str, set[str]]] = {}
    for e in g.edges:
        assert e.events, e
        for ev in e.events:
            table.setdefault(e.source, {}).setdefault(ev, set()).add(e.target)
    assert table == {s: {ev: set(t) for ev, t in moves.items()} for s, moves in TRANSITIONS.items()}
    # one edge per pair of states
    assert len({(e.source, e.target) for e in g.edges}) == len(g.edges)
    assert g.restart == {"SUCCEEDED": "REPLAY", "FAILED": "RETRY", "CANCELLED": "RETRY",
                         "TIMED_OUT": "RETRY"}  # fmt: skip


def test_the_page_draws_the_graph_it_is_served() -> None:
    # fsm.js lays out what the server sends: it names no state and no event
    text = (resources.files("rsjobs") / "web" / "dashboard_static" / "fsm.js").read_text()
    for name in [*State, *Event]:
        assert f'"{name.value}"' not in text, name


async def test_a_task_view_names_its_worker_and_timeout(
    api: httpx.AsyncClient, client: Client, redis_url: str
) -> None:
    tid = (
        await api.post("/tasks", json={"type": "noop", "timeout_ms": 5000}, headers=ALICE)
    ).json()["id"]
    before = (await api.get(f"/tasks/{tid}", headers=ALICE)).json()
    assert before["worker"] == "" and before["timeout_ms"] == 5000
    async with running_worker(redis_url) as w:
        done = await client.wait(tid, timeout_ms=10_000)
    view = (await api.get(f"/tasks/{tid}", headers=ALICE)).json()
    assert done.worker and view["worker"] == done.worker
    assert view["worker"].startswith(w.name)
