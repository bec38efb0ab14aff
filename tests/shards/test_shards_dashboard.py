"""The operator dashboard on a namespace of 4 shards, in headless Chromium: the overview's
counts and the task list merge the shards (every task, newest first, paged with the
merged cursor), a task of any shard opens, and a pause that reached only some shards says
so. Screenshots go to ``.test-artifacts/dashboard/shards-*.png``."""

from __future__ import annotations

from typing import Any

import pytest

from rsjobs import Client, EnqueueRequest, Settings, connect
from rsjobs.store.shards import shard_of
from tests.support.browser import MARKS
from tests.support.web import NAMESPACE, make_app, serve
from tests.web.test_dashboard_browser import open_dashboard, shot

# the slow tier: the suite keeps one browser page (tests/web/test_costs_browser.py)
pytestmark = [*MARKS, pytest.mark.slow]

playwright = pytest.importorskip("playwright.async_api")


async def test_the_dashboard_merges_the_shards(browser: Any, redis_url: str) -> None:
    expect = playwright.expect
    c = Client(connect(redis_url), Settings(namespace=NAMESPACE, shards=4))
    try:
        reqs = [EnqueueRequest(type="render", payload={"i": i}, queue="gpu") for i in range(80)]
        ids = await c.enqueue_many(reqs)
        assert {shard_of(t) for t in ids} == {0, 1, 2, 3}
        for t in ids[:5]:
            await c.cancel(t)
        await c.pause_queue("gpu", "maintenance")
        # a pause that did not reach shard 3 (a crash half way)
        await c.redis.hdel(c.store.shard(3).keys.paused, "gpu")
        with serve(make_app(redis_url)) as web:
            page, errors = await open_dashboard(browser, web.url)
            card = page.locator("[data-testid=queue][data-queue=gpu]")
            await expect(card.locator("[data-state=PENDING]")).to_have_text("75")
            await expect(card.locator("[data-state=CANCELLED]")).to_have_text("5")
            await expect(card.locator("[data-testid=paused-badge]")).to_have_text(
                "paused on 3 of 4 shards"
            )
            await shot(page, "shards-overview")
            await card.locator("[data-state=PENDING] a").click()  # the PENDING tasks
            rows = page.locator("[data-testid=task-row]")
            await expect(rows.first).to_be_visible()
            seen = set()
            for _ in range(10):
                await expect(rows.first).to_be_visible()
                seen |= {(await r.get_attribute("data-task-id")) or "" for r in await rows.all()}
                await shot(page, "shards-tasks")
                nxt = page.locator("[data-testid=next]")
                if not await nxt.is_enabled():
                    break
                first = await rows.first.get_attribute("data-task-id")
                await nxt.click()
                await expect(rows.first).not_to_have_attribute("data-task-id", first or "")
            assert seen - {""} == set(ids[5:])
            await page.evaluate(f"location.hash = '#/task/{ids[-1]}'")
            await expect(page.locator("main")).to_contain_text(ids[-1])
            await shot(page, "shards-task")
            assert errors == []
    finally:
        await c.close()
