"""The dashboard knows WAITING, in headless Chromium: the state filter lists the waiting
successors, a successor's page links its predecessors and shows WAITING on its state
graph, and follows it live through RELEASE to SUCCEEDED; a successor cancelled by its
predecessor's failure shows the WAITING -> CANCELLED edge. Screenshots go to
``.test-artifacts/successors/`` (git-ignored)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rsjobs import Client, Settings, Worker
from tests.support.browser import MARKS, open_page
from tests.support.processes import ROOT
from tests.support.successor_apps import tasks
from tests.support.web import ADMIN, make_app, serve

# the slow tier: the suite keeps one browser page (tests/web/test_costs_browser.py)
pytestmark = [*MARKS, pytest.mark.slow]

playwright = pytest.importorskip("playwright.async_api")

SHOTS = Path(ROOT) / ".test-artifacts" / "successors"


async def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@contextlib.asynccontextmanager
async def worker(url: str) -> AsyncIterator[Worker]:
    w = Worker(tasks, url=url, settings=Settings(namespace="t"), handle_signals=False,
               block_ms=100, promote_ms=20)  # fmt: skip
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop(force=True)
        await asyncio.wait_for(task, 20)
        await w.redis.aclose()


async def open_dashboard(browser: Any, url: str, hash_: str) -> tuple[Any, list[str]]:
    page, errors, _ = await open_page(browser, url + "/dashboard")
    await page.fill("#token", ADMIN)
    await page.click("#token-form button")
    await playwright.expect(page.locator("main [data-view=overview]")).to_be_visible()
    await page.evaluate(f"location.hash = {hash_!r}")
    return page, errors


async def _edges(graph: Any) -> list[str]:
    taken: list[str] = await graph.locator(".edge[data-taken='1']").evaluate_all(
        "els => els.map(e => e.dataset.source + '>' + e.dataset.target).sort()"
    )
    return taken


async def test_a_successor_waits_then_runs_live_on_its_page(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    a = await client.enqueue("link", {"name": "render", "n": 1, "s": 0.6})
    b = await client.enqueue("link", {"name": "watermark", "n": 2}, after=[a])
    c = await client.enqueue("link", {"name": "notify", "n": 3}, after=[b])
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, "#/tasks")
        await page.select_option("[data-testid=filter-state]", "WAITING")
        await page.click("[data-testid=apply]")
        rows = page.locator("[data-testid=task-row]")
        await expect(rows).to_have_count(2)
        ids = await rows.evaluate_all("els => els.map(e => e.dataset.taskId)")
        assert sorted(ids) == sorted([b, c])
        await shot(page, "tasks-waiting")

        await page.evaluate(f"location.hash = '#/task/{b}'")
        view = page.locator("main [data-view=task]")
        await expect(view).to_have_attribute("data-state", "WAITING")
        graph = page.locator("[data-testid=fsm]")
        await expect(graph.locator("[data-state=WAITING]")).to_have_attribute("data-current", "1")
        pred = page.locator("[data-testid=predecessor]")
        await expect(pred).to_have_count(1)
        await expect(pred).to_contain_text("awaited")
        await expect(page.locator("[data-testid=successors]")).to_contain_text(c[:12])
        # a WAITING task offers a cancel, not a pause
        await expect(page.locator("[data-testid=action-cancel]")).to_be_enabled()
        await expect(page.locator("[data-testid=action-pause]")).to_be_disabled()
        await shot(page, "successor-waiting")
        async with worker(redis_url):
            await expect(view).to_have_attribute("data-state", "SUCCEEDED", timeout=15_000)
        await expect(pred).to_have_attribute("data-state", "SUCCEEDED")
        done = graph.locator(".edge[data-source=RUNNING][data-target=SUCCEEDED]")
        await expect(done).to_have_attribute("data-taken", "1")
        assert await _edges(graph) == [
            ">WAITING",
            "PENDING>RUNNING",
            "RUNNING>SUCCEEDED",
            "WAITING>PENDING",
        ]
        await expect(page.locator("[data-testid=result]")).to_contain_text('"name": "watermark"')
        await shot(page, "successor-succeeded")
        assert errors == []


async def test_a_successor_cancelled_by_its_predecessor(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    a = await client.enqueue("boom", "render", max_attempts=1)
    b = await client.enqueue("link", {"name": "watermark"}, after=[a])
    async with worker(redis_url):
        assert (await client.wait(b, timeout_ms=15_000)).state == "CANCELLED"
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, f"#/task/{b}")
        view = page.locator("main [data-view=task]")
        await expect(view).to_have_attribute("data-state", "CANCELLED")
        graph = page.locator("[data-testid=fsm]")
        edge = graph.locator(".edge[data-source=WAITING][data-target=CANCELLED]")
        await expect(edge).to_have_attribute("data-taken", "1")
        assert await _edges(graph) == [">WAITING", "WAITING>CANCELLED"]
        await expect(page.locator("[data-testid=error]")).to_contain_text("PredecessorFailed")
        await expect(page.locator("[data-testid=predecessor]")).to_contain_text("FAILED")
        await expect(page.locator("[data-testid=timeline]")).to_contain_text(a)
        # never released: not started over (retry.lua refuses it)
        await expect(page.locator("[data-testid=action-retry]")).to_be_disabled()
        await shot(page, "successor-cancelled")
        assert errors == []
