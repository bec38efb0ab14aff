"""Coalesced refusals through HTTP: a flood of refused cancels is one history entry whose
repeat count the task view and the history page both show."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette

from rsjobs import InvalidTransition
from tests.web.helpers import ALICE
from tests.web.test_sse_replay import parse

pytestmark = pytest.mark.integration


async def test_repeated_refused_cancels_show_as_one_entry_with_its_count(
    api: httpx.AsyncClient,
) -> None:
    r = await api.post("/tasks", json={"type": "noop", "payload": {}}, headers=ALICE)
    assert r.status_code in (201, 202), r.text
    tid = r.json()["id"]
    first = await api.post(f"/tasks/{tid}/cancel", json={}, headers=ALICE)
    assert first.json()["state"] == "CANCELLED" and first.json()["changed"]
    replies = await asyncio.gather(
        *(api.post(f"/tasks/{tid}/cancel", json={}, headers=ALICE) for _ in range(40))
    )
    assert {(x.status_code, x.json()["changed"]) for x in replies} == {(200, False)}
    page = (await api.get(f"/tasks/{tid}/history", headers=ALICE)).json()
    refused = [e for e in page["entries"] if e["rejected"]]
    assert len(page["entries"]) == 3 and len(refused) == 1
    assert refused[0]["repeats"] == 39 and refused[0]["last_ts"] >= refused[0]["ts"]
    view = (await api.get(f"/tasks/{tid}", headers=ALICE)).json()
    assert [e["repeats"] for e in view["recent"] if e["rejected"]] == [39]


async def test_sse_replay_shows_the_repeat_count(api: httpx.AsyncClient, app: Starlette) -> None:
    """Replaying a task's history over SSE gives a coalesced refusal with the same count as
    the history page (live, a refusal arrives as its first entry)."""
    r = await api.post("/tasks", json={"type": "noop", "payload": {}}, headers=ALICE)
    tid = r.json()["id"]
    client = app.state.rsjobs.client
    for _ in range(5):  # RESUME of a PENDING task: refused, then counted
        with pytest.raises(InvalidTransition):
            await client.resume(tid)
    await api.post(f"/tasks/{tid}/cancel", json={}, headers=ALICE)
    stream = await api.get(f"/tasks/{tid}/events", headers=ALICE)
    events, _, _ = parse(stream.text)
    refused = [e.json() for e in events if e.id and e.json()["rejected"]]
    assert [(e["event"], e["repeats"]) for e in refused] == [("RESUME", 4)]
    page = (await api.get(f"/tasks/{tid}/history", headers=ALICE)).json()
    assert [e["repeats"] for e in page["entries"] if e["rejected"]] == [4]
