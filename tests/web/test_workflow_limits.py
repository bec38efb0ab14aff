"""Workflow requests whose tasks would be over the payload limit are refused with a 4xx and
write nothing (every key's DUMP compared before and after): a start whose first stage is
too big, a confirm or a regenerate whose stage's payloads (the input plus the references
of earlier assets) would be too big."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis as sync_redis

from rsjobs import Settings, connect
from rsjobs.web import WebConfig, create_app
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition
from tests.web.conftest import redis_state
from tests.web.helpers import ADMIN, ALICE, NAMESPACE, TOKENS
from tests.wf_support import Hand

pytestmark = pytest.mark.integration

#: the web app's payload limit: small, so that bodies stay under the body size limit
LIMIT = 100_000

TWO = WorkflowDefinition(
    "two",
    [
        Stage("one", [TaskSpec(item="a", type="t")], queue="wf", gate=True),
        Stage("fan", [TaskSpec(item="x", type="t"), TaskSpec(item="y", type="t")], queue="wf"),
    ],
)


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        redis_url,
        settings=Settings(namespace=NAMESPACE, payload_limit=LIMIT),
        tokens=TOKENS,
        admin_token=ADMIN,
        env={},
        definitions=[TWO],
        config=WebConfig(),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as c:
        yield c
    await app.state.rsjobs.aclose()


@pytest.fixture
async def roomy(redis_url: str) -> AsyncIterator[WorkflowClient]:
    """A client with the default (larger) limit, e.g. a process configured otherwise."""
    c = WorkflowClient(connect(redis_url), Settings(namespace=NAMESPACE), definitions=[TWO])
    yield c
    await c.close()


async def refused(
    api: httpx.AsyncClient, rdb: sync_redis.Redis, url: str, body: object, status: int
) -> str:
    before = redis_state(rdb)
    r = await api.post(url, json=body, headers=ALICE)
    assert r.status_code == status, r.text
    assert redis_state(rdb) == before, "a refused request wrote to redis"
    detail: str = r.json()["detail"]
    return detail


async def at_gate(api: httpx.AsyncClient, roomy: WorkflowClient) -> str:
    """A workflow waiting at its gate whose stage-one asset has a long reference: its
    input fits the limit, the next stage's payloads (input + reference) do not."""
    r = await api.post(
        "/workflows", json={"definition": "two", "input": {"b": "x" * 60_000}}, headers=ALICE
    )
    assert r.status_code == 202, r.text
    wid: str = r.json()["id"]
    hand = Hand(roomy.redis, roomy.settings)
    (task,) = await hand.claim()
    assert await hand.complete(task, {"ref": "r" * 60_000}) == 1
    assert (await roomy.get(wid)).status == "WAITING_CONFIRMATION"
    return wid


async def test_a_start_over_the_limit_answers_413_and_writes_nothing(
    api: httpx.AsyncClient, rdb: sync_redis.Redis
) -> None:
    seed = await api.post("/workflows", json={"definition": "two"}, headers=ALICE)
    assert seed.status_code == 202
    body = {"definition": "two", "input": {"b": "x" * LIMIT}}
    detail = await refused(api, rdb, "/workflows", body, 413)
    assert "task 'a' of stage 'one'" in detail and f"over the limit of {LIMIT} bytes" in detail


async def test_a_confirm_whose_next_stage_is_over_the_limit_writes_nothing(
    api: httpx.AsyncClient, rdb: sync_redis.Redis, roomy: WorkflowClient
) -> None:
    wid = await at_gate(api, roomy)
    detail = await refused(api, rdb, f"/workflows/{wid}/confirm", {}, 422)
    assert "stage 'fan'" in detail and "over the limit" in detail
    assert (await roomy.get(wid)).status == "WAITING_CONFIRMATION"


async def test_a_regenerate_whose_stage_is_over_the_limit_writes_nothing(
    api: httpx.AsyncClient, rdb: sync_redis.Redis, roomy: WorkflowClient
) -> None:
    wid = await at_gate(api, roomy)
    assert await roomy.confirm(wid) == "RUNNING"  # a process with room for it
    detail = await refused(api, rdb, f"/workflows/{wid}/regenerate", {"stage": "fan"}, 422)
    assert "stage 'fan'" in detail
    # from the first stage the tasks fit
    r = await api.post(f"/workflows/{wid}/regenerate", json={"stage": "one"}, headers=ALICE)
    assert r.status_code == 200 and r.json()["status"] == "RUNNING"
