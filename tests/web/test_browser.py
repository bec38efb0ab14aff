"""The example page in headless Chromium (Debian's package, driven by Playwright): submit a
task and watch it finish live over SSE, cancel a second one, and survive a server restart
(EventSource retries, then polling with backoff, then back to SSE).

Needs /usr/bin/chromium (``tools/install-browser.sh`` installs it); skipped without it.
"""

from __future__ import annotations

from typing import Any

import pytest

from rsjobs import Client
from tests.support.browser import MARKS, open_page
from tests.support.web import ServerThread, make_app, running_worker, serve

# the slow tier: the suite keeps one browser page (tests/web/test_costs_browser.py)
pytestmark = [*MARKS, pytest.mark.slow]

playwright = pytest.importorskip("playwright.async_api")


async def open_ui(browser: Any, url: str) -> tuple[Any, list[str], list[str]]:
    page, errors, requests = await open_page(browser, url + "/")  # redirects to /ui/
    assert page.url.endswith("/ui/")
    return page, errors, requests


async def submit(page: Any, payload: str) -> Any:
    before = await page.locator("[data-testid=task]").count()
    await page.fill("#task-payload", payload)
    await page.click("#submit")
    await playwright.expect(page.locator("[data-testid=task]")).to_have_count(before + 1)
    return page.locator("[data-testid=task]").first  # new cards go on top


async def timeline_ids(card: Any) -> list[str]:
    ids: list[str] = await card.locator(".timeline li").evaluate_all(
        "els => els.map(e => e.dataset.id)"
    )
    return ids


async def test_submit_watch_live_and_cancel(browser: Any, redis_url: str, client: Client) -> None:
    expect = playwright.expect
    with serve(make_app(redis_url, dev=True)) as web:
        async with running_worker(redis_url):
            page, errors, requests = await open_ui(browser, web.url)

            card = await submit(page, '{"s": 1.0, "steps": 5}')
            await expect(card).to_have_attribute("data-state", "SUCCEEDED", timeout=15_000)
            tid = await card.get_attribute("data-task-id")
            # the timeline is the task's history, every entry, in order
            assert await timeline_ids(card) == [e.id for e in await client.history(tid)]
            events = await card.locator(".timeline li").evaluate_all(
                "els => els.map(e => e.dataset.event)"
            )
            assert events[:2] == ["ENQUEUE", "START"] and events[-1] == "COMPLETE"
            assert "PROGRESS" in events
            assert await card.locator("progress").get_attribute("value") == "100"
            await expect(card.locator("[data-testid=outcome]")).to_contain_text('"attempt":1')
            # it came live over SSE: no polling was needed
            assert any(u.endswith(f"/tasks/{tid}/events") for u in requests)
            assert not any("/history" in u for u in requests)

            long = await submit(page, '{"s": 30, "steps": 30}')
            await expect(long).to_have_attribute("data-state", "RUNNING", timeout=10_000)
            await long.locator("[data-testid=cancel]").click()
            await expect(long).to_have_attribute("data-state", "CANCELLED", timeout=10_000)
            tid2 = await long.get_attribute("data-task-id")
            assert (await client.get(tid2)).state == "CANCELLED"
            await expect(long.locator(".timeline li").last).to_have_attribute(
                "data-event", "CANCEL"
            )
            await expect(long.locator("[data-testid=cancel]")).to_be_disabled()
            assert errors == []


async def test_survives_a_server_restart_by_polling(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    app = make_app(redis_url, dev=True, sse_retry_ms=200)
    first = ServerThread(app).start()
    try:
        async with running_worker(redis_url):
            page, errors, requests = await open_ui(browser, first.url)
            card = await submit(page, '{"s": 3, "steps": 6}')
            await expect(card).to_have_attribute("data-state", "RUNNING", timeout=10_000)
            first.stop()  # streams end, then connections are refused
            transport = card.locator("[data-testid=transport]")
            await expect(transport).to_contain_text("polling", timeout=10_000)
            # the same address comes back (a new process, its own events reader)
            with serve(make_app(redis_url, dev=True, sse_retry_ms=200), port=first.port):
                await expect(card).to_have_attribute("data-state", "SUCCEEDED", timeout=20_000)
                tid = await card.get_attribute("data-task-id")
                assert await timeline_ids(card) == [e.id for e in await client.history(tid)]
            assert any("/history" in u for u in requests)  # it did poll
            assert errors == []
    finally:
        if first.thread.is_alive():
            first.stop()
