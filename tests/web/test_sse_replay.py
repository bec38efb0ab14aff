"""SSE replay of finished tasks (the stream ends, so httpx over ASGI can read it whole):
ids are history ids, Last-Event-ID resumes exactly after, a finished task says 204."""

from __future__ import annotations

import httpx
import pytest

from rsjobs import Client
from tests.support.web import ALICE, SSEEvent

pytestmark = pytest.mark.integration


def parse(text: str) -> tuple[list[SSEEvent], list[str], int | None]:
    events, comments, retry = [], [], None
    for block in text.split("\n\n"):
        ev_id, event, data = None, "message", []
        for line in block.split("\n"):
            if line.startswith(":"):
                comments.append(line[1:].strip())
            elif line.startswith("id: "):
                ev_id = line[4:]
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line.startswith("retry: "):
                retry = int(line[7:])
        if data:
            events.append(SSEEvent(ev_id, event, "\n".join(data)))
    return events, comments, retry


async def finished_task(api: httpx.AsyncClient, client: Client) -> str:
    tid: str = (await api.post("/tasks", json={"type": "x"}, headers=ALICE)).json()["id"]
    for _ in range(3):
        await client.pause(tid)
        await client.resume(tid)
    await client.cancel(tid, "done")
    return tid


async def test_full_replay_then_end(api: httpx.AsyncClient, client: Client) -> None:
    tid = await finished_task(api, client)
    r = await api.get(f"/tasks/{tid}/events", headers=ALICE)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    events, _, retry = parse(r.text)
    assert retry == 2000
    history = await client.history(tid)
    transitions = [e for e in events if e.event == "message"]
    assert [e.id for e in transitions] == [h.id for h in history]
    # data is the history entry as GET /tasks/{id}/history shows it
    page = (await api.get(f"/tasks/{tid}/history", headers=ALICE)).json()["entries"]
    assert [e.json() for e in transitions] == page
    assert events[-1].event == "end" and events[-1].id is None
    assert events[-1].json() == {"state": "CANCELLED"}


@pytest.mark.parametrize("cut", [0, 1, 3, 6])
async def test_last_event_id_resumes_exactly_after(
    api: httpx.AsyncClient, client: Client, cut: int
) -> None:
    tid = await finished_task(api, client)
    ids = [h.id for h in await client.history(tid)]
    r = await api.get(f"/tasks/{tid}/events", headers={**ALICE, "Last-Event-ID": ids[cut]})
    events, _, _ = parse(r.text)
    assert [e.id for e in events if e.event == "message"] == ids[cut + 1 :]
    assert events[-1].event == "end"
    # the query parameter does the same (a new EventSource cannot set the header)
    r = await api.get(f"/tasks/{tid}/events", params={"last_event_id": ids[cut]}, headers=ALICE)
    assert [e.id for e in parse(r.text)[0] if e.event == "message"] == ids[cut + 1 :]


async def test_reconnect_after_the_end_is_204(api: httpx.AsyncClient, client: Client) -> None:
    tid = await finished_task(api, client)
    last = (await client.history(tid))[-1].id
    r = await api.get(f"/tasks/{tid}/events", headers={**ALICE, "Last-Event-ID": last})
    assert r.status_code == 204 and r.content == b""
    # the stream slot and subscription were given back
    svc = api._transport.app.state.rsjobs  # type: ignore[attr-defined]
    assert svc.limiter.total == 0 and svc.hub.subscribers == 0


async def test_refused_entries_after_the_end_are_not_streamed_again(
    api: httpx.AsyncClient, client: Client
) -> None:
    """A cancel of a finished task appends a refused entry; the stream still ends at the
    terminal transition and a resume from there sends what followed, then ends."""
    tid = await finished_task(api, client)
    terminal_id = (await client.history(tid))[-1].id
    await client.cancel(tid)  # refused: already CANCELLED (recorded with rej=1)
    hist = await client.history(tid)
    assert hist[-1].rejected
    r = await api.get(f"/tasks/{tid}/events", headers={**ALICE, "Last-Event-ID": terminal_id})
    events, _, _ = parse(r.text)
    assert [e.id for e in events if e.event == "message"] == [hist[-1].id]
    assert events[-1].event == "end"


async def test_last_event_id_of_another_task_is_refused(
    api: httpx.AsyncClient, client: Client
) -> None:
    """Resuming after an id that is not in this task's history would skip entries: an
    entry number past its last entry, or an id of the stream form earlier releases sent."""
    tid = await finished_task(api, client)
    past = str(len(await client.history(tid)) + 1)
    for last in (past, "99999999999999-0", "1796136697425-0"):
        r = await api.get(f"/tasks/{tid}/events", headers={**ALICE, "Last-Event-ID": last})
        assert r.status_code == 400 and r.json()["error"] == "invalid_last_event_id"
    svc = api._transport.app.state.rsjobs  # type: ignore[attr-defined]
    assert svc.limiter.total == 0 and svc.hub.subscribers == 0
