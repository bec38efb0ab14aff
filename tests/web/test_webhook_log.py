"""``GET /tasks/{id}/webhooks``: the task's webhook deliveries, for its owner only."""

from __future__ import annotations

import httpx
import msgspec

from rsjobs import Client
from rsjobs.schemas import WebhookDelivery
from tests.support.web import ALICE, BOB


async def test_the_owner_reads_the_webhook_log_others_get_404(
    api: httpx.AsyncClient, client: Client
) -> None:
    tid = (await api.post("/tasks", json={"type": "x"}, headers=ALICE)).json()["id"]
    assert (await api.get(f"/tasks/{tid}/webhooks", headers=ALICE)).json() == {
        "id": tid,
        "deliveries": [],
    }
    for attempt, status in ((1, 500), (2, 200)):
        d = WebhookDelivery(
            webhook="front",
            delivery="1-0",
            state="CANCELLED",
            attempt=attempt,
            at=1,
            ms=3,
            status=status,
            ok=status == 200,
            error="" if status == 200 else "HTTP 500",
        )
        await client.store.hooks.log_delivery(tid, msgspec.json.encode(d))
    body = (await api.get(f"/tasks/{tid}/webhooks", headers=ALICE)).json()
    assert [(d["attempt"], d["status"], d["ok"]) for d in body["deliveries"]] == [
        (2, 200, True),
        (1, 500, False),
    ]
    assert (await api.get(f"/tasks/{tid}/webhooks", headers=BOB)).status_code == 404
    assert (await api.get("/tasks/" + "0" * 32 + "/webhooks", headers=ALICE)).status_code == 404
    assert (await api.get(f"/tasks/{tid}/webhooks")).status_code == 401
