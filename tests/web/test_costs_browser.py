"""The dashboard's Costs view (``#/costs``) in headless Chromium against a real uvicorn, the
session's Redis and a real worker: the totals and the waste per type, queue and owner,
as the API reports them, in the unit the operator picks.

Screenshots go to ``.test-artifacts/dashboard/`` (git-ignored).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rsjobs import Client
from tests.support.browser import MARKS
from tests.support.processes import wait_for_state
from tests.support.web import make_app, running_worker, serve
from tests.web.test_dashboard_browser import open_dashboard, shot

pytestmark = MARKS

playwright = pytest.importorskip("playwright.async_api")

#: what the view shows for nothing
DASH = "\u2013"


async def shown_names(page: Any, by: str, count: int) -> list[str]:
    """The names of the rows of the view of dimension ``by`` once it shows ``count`` (the
    rows of the view it replaced stay on the page until its first render)."""
    rows = page.locator(f"main [data-view=costs][data-by={by}] [data-testid=cost-row]")
    await playwright.expect(rows).to_have_count(count)
    names: list[str] = await rows.evaluate_all("els => els.map(e => e.dataset.name)")
    return names


async def _workload(client: Client, url: str) -> None:
    """ok, failed-then-retried and cancelled attempts of two types, queues and owners."""
    async with running_worker(url, queues=["default", "gpu"]):
        ids = [
            await client.enqueue("charge", {"charges": {"gpu_s": 1.5, "usd": 0.002}},
                                 owner="ana"),
            await client.enqueue("charge", {"charges": {"gpu_s": 2, "usd": 0.003}, "until": 2},
                                 owner="bo", backoff_base_ms=10, backoff_max_ms=10),
            await client.enqueue("charge", {"charges": {"gpu_s": 0.5}}, queue="gpu",
                                 owner="ana"),
            await client.enqueue("sleep", {"s": 0.2, "steps": 2}, queue="gpu", owner="bo"),
        ]  # fmt: skip
        for tid in ids:
            await client.wait(tid, timeout_ms=15_000)
        slow = await client.enqueue("sleep", {"s": 30}, owner="bo")
        await wait_for_state(client, slow, "RUNNING")
        await asyncio.sleep(0.2)
        await client.cancel(slow, "no longer needed")


async def test_the_costs_view_shows_totals_and_waste_per_dimension(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    await _workload(client, redis_url)
    by_type = await client.costs("type")
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, "#/costs")
        view = page.locator("main [data-view=costs]")
        assert await shown_names(page, "type", 2) == ["charge", "sleep"]
        # the summary: totals as the API has them, and the waste's share
        attempts = view.locator("[data-testid=cost-summary] [data-unit=attempts] .big")
        await expect(attempts).to_have_text(str(by_type.total.total["attempts"]))
        gpu = view.locator("[data-testid=cost-summary] [data-unit=gpu_s]")
        await expect(gpu.locator(".big")).to_have_text("6")  # 1.5 + 2 x 2 (failed, ok) + 0.5
        await expect(gpu.locator("[data-testid=waste-share]")).to_have_text("waste 2 (33 %)")
        # per type: the failed attempt's share of "charge", the cancel's of "sleep"
        charge = view.locator("[data-testid=cost-row][data-name=charge]")
        await expect(charge.locator("td[data-category=failed]")).not_to_have_text(DASH)
        sleep = view.locator("[data-testid=cost-row][data-name=sleep]")
        await expect(sleep.locator("td[data-category=cancelled]")).not_to_have_text(DASH)
        await expect(sleep.locator(".costbar [data-category=cancelled]")).to_have_count(1)
        await shot(page, "costs-by-type")
        # the bar and the waste in another unit
        await view.locator("[data-testid=cost-unit]").select_option("gpu_s")
        await expect(charge.locator("[data-testid=row-waste]")).to_have_text("33 %")
        await expect(sleep).to_be_visible()
        await expect(
            view.locator("[data-testid=cost-row][data-name=sleep] [data-testid=row-waste]")
        ).to_have_text(DASH)
        # other dimensions
        await view.locator("[data-dim=owner]").click()
        assert await shown_names(page, "owner", 2) == ["ana", "bo"]
        await shot(page, "costs-by-owner")
        await page.locator("main [data-view=costs] [data-dim=queue]").click()
        assert await shown_names(page, "queue", 2) == ["default", "gpu"]
        await page.locator("main [data-view=costs] [data-dim=stage]").click()
        await expect(page.locator("main [data-view=costs][data-by=stage]")).to_contain_text(
            "no costs recorded per stage yet"
        )
        assert errors == []
