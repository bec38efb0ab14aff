"""The workflow page in headless Chromium (Debian's package, driven by Playwright), against
a real uvicorn, workers running the character example's generators (fast stand-in
settings) and the workflow driver: start the pipeline from the page, see it reach its
gates live, see a refused action's reason, confirm through the page, and see it PUBLISHED
with the asset images loaded from the app. A second test follows a workflow through a
server restart (EventSource retries, then polling with backoff, then back to SSE).

Needs /usr/bin/chromium (``tools/install-browser.sh`` installs it); skipped without it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from rsjobs import Settings, connect
from rsjobs.web import WebConfig, create_app
from rsjobs.workflows import WorkflowClient
from tests.support.browser import MARKS, open_page
from tests.support.character_app import backend, definition
from tests.support.web import ServerThread, serve

# the slow tier: the suite keeps one browser page (tests/web/test_costs_browser.py)
pytestmark = [*MARKS, pytest.mark.slow]

playwright = pytest.importorskip("playwright.async_api")

NS = "t"


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from examples.character import generators

    monkeypatch.setattr(generators, "OUT", tmp_path)
    return tmp_path


def make_app(redis_url: str, root: Path, **config: Any) -> Starlette:
    return create_app(redis_url, namespace=NS, dev=True, env={}, definitions=[definition()],
                      asset_root=root, config=WebConfig(**config))  # fmt: skip


@pytest.fixture
async def wf(redis_url: str) -> AsyncIterator[WorkflowClient]:
    c = WorkflowClient(connect(redis_url), Settings(namespace=NS))
    yield c
    await c.close()


async def timeline_ids(page: Any) -> list[str]:
    ids: list[str] = await page.locator("[data-testid=timeline] li").evaluate_all(
        "els => els.map(e => e.dataset.id)"
    )
    return ids


async def test_start_confirm_and_publish_from_the_page(
    browser: Any, redis_url: str, wf: WorkflowClient, out: Path
) -> None:
    expect = playwright.expect
    with serve(make_app(redis_url, out)) as web:
        async with backend(redis_url):
            # the task page links to the workflow page
            page, errors, requests = await open_page(browser, web.url + "/ui/")
            await page.click("#workflows-link")
            await page.wait_for_url("**/ui/workflow.html")
            await page.fill("#wf-definition", "character")
            await page.fill("#wf-input", '{"name": "Mei"}')
            await page.click("#start")
            card = page.locator("[data-testid=workflow]")
            # the first gate, reached live
            await expect(card).to_have_attribute("data-status", "WAITING_CONFIRMATION",
                                                 timeout=15_000)  # fmt: skip
            wid = await card.get_attribute("data-wf-id")
            assert wid and page.url.endswith(f"workflow.html?id={wid}")
            assert await card.get_attribute("data-stage") == "params"
            stages = card.locator("[data-testid=stages] li")
            assert await stages.evaluate_all("els => els.map(e => e.dataset.stage + ':' + "
                                             "e.dataset.gate)") == [
                "params:1", "images:1", "actions:0", "emotions:0"]  # fmt: skip
            await expect(stages.first.locator(".gate")).to_contain_text("waiting for you")
            await expect(card.locator("[data-testid=confirm]")).to_have_class(re_primary())
            # a refused action shows the server's reason
            await card.locator("[data-testid=publish]").click()
            result = card.locator("[data-testid=action-result]")
            await expect(result).to_have_attribute("data-kind", "refused")
            await expect(result).to_contain_text("publish refused (HTTP 409 refused)")
            await expect(result).to_contain_text("WAITING_CONFIRMATION")
            # confirm the parameters, then the images
            await card.locator("[data-testid=confirm]").click()
            await expect(card).to_have_attribute("data-stage", "images", timeout=10_000)
            await expect(card).to_have_attribute("data-status", "WAITING_CONFIRMATION",
                                                 timeout=15_000)  # fmt: skip
            imgs = card.locator("[data-testid=asset] img")
            await expect(imgs).to_have_count(2)  # front and side, shown before confirming
            # not quite right: regenerate the images (version 2; the params are carried)
            await card.locator("[data-testid=regen-stage]").select_option("images")
            await card.locator("[data-testid=regenerate]").click()
            await expect(card).to_have_attribute("data-version", "2", timeout=10_000)
            await expect(card.locator("[data-testid=wf-version]")).to_have_text("v2")
            await expect(card).to_have_attribute("data-status", "WAITING_CONFIRMATION",
                                                 timeout=15_000)  # fmt: skip
            assert await card.get_attribute("data-stage") == "images"
            await expect(imgs).to_have_count(2)
            await expect(card.locator("[data-testid=asset][data-stage=params]")).to_contain_text(
                "made in v1"
            )
            await card.locator("[data-testid=confirm]").click()
            await expect(card).to_have_attribute("data-status", "READY_TO_PUBLISH",
                                                 timeout=20_000)  # fmt: skip
            await expect(card.locator("[data-testid=publish]")).to_have_class(re_primary())
            await card.locator("[data-testid=publish]").click()
            await expect(card).to_have_attribute("data-status", "PUBLISHED", timeout=10_000)
            await expect(card.locator("[data-testid=wf-status]")).to_have_text("PUBLISHED")
            await expect(card.locator("[data-testid=wf-progress]")).to_have_attribute(
                "value", "100"
            )
            await expect(card.locator("[data-testid=wf-published]")).to_have_text("v2")
            for name in ("confirm", "retry", "publish", "cancel", "regenerate"):
                await expect(card.locator(f"[data-testid={name}]")).to_be_disabled()

            # every asset of the version: params as a link, 2 images and 10 GIF videos shown
            doc = await wf.status(wid)
            assert doc.status == "PUBLISHED" and doc.version == 2
            assert len(doc.completed_assets) == 13
            assets = card.locator("[data-testid=asset]")
            await expect(assets).to_have_count(13)
            await expect(imgs).to_have_count(12)
            await page.wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=asset] img')]"
                ".every(i => i.complete && i.naturalWidth > 0)", timeout=10_000)  # fmt: skip
            kinds = await imgs.evaluate_all("els => els.map(e => e.closest('figure').dataset.kind)")
            assert kinds.count("image") == 2 and kinds.count("video") == 10
            link = card.locator("[data-testid=asset][data-stage=params] a")
            assert (await link.get_attribute("href") or "").endswith(
                f"/workflows/{wid}/assets/2/params/params"
            )
            # the timeline is the workflow's history, every entry, in order, pushed live
            await expect(card.locator("[data-testid=timeline] li").last).to_have_attribute(
                "data-event", "PUBLISH"
            )
            assert await timeline_ids(page) == [e.id for e in await wf.history(wid)]
            refused = card.locator("[data-testid=timeline] li.rejected")
            assert await refused.evaluate_all("els => els.map(e => e.dataset.event)") == [
                "PUBLISH"]  # fmt: skip
            assert any(u.endswith(f"/workflows/{wid}/events") for u in requests)
            assert not any("/history" in u for u in requests)
            assert errors == []


def re_primary() -> Any:
    import re

    return re.compile(r"\bprimary\b")


async def test_follows_through_a_server_restart_by_polling(
    browser: Any, redis_url: str, wf: WorkflowClient, out: Path
) -> None:
    expect = playwright.expect
    first = ServerThread(make_app(redis_url, out, sse_retry_ms=200)).start()
    try:
        async with backend(redis_url):
            wf.register(definition())
            wid = await wf.start("character", {"name": "Mei"})
            page, errors, requests = await open_page(
                browser, f"{first.url}/ui/workflow.html?id={wid}")  # fmt: skip
            card = page.locator("[data-testid=workflow]")
            await expect(card).to_have_attribute("data-status", "WAITING_CONFIRMATION",
                                                 timeout=15_000)  # fmt: skip
            await expect(card.locator("[data-testid=transport]")).to_contain_text("live")
            first.stop()  # streams end, then connections are refused
            await expect(card.locator("[data-testid=transport]")).to_contain_text(
                "polling", timeout=10_000)  # fmt: skip
            await wf.confirm(wid)  # someone else confirms while the page cannot hear it
            with serve(make_app(redis_url, out, sse_retry_ms=200), port=first.port):
                await expect(card).to_have_attribute("data-stage", "images", timeout=20_000)
                await expect(card.locator("[data-testid=transport]")).to_contain_text(
                    "live", timeout=10_000)  # fmt: skip
                await wf.cancel(wid, "enough")
                await expect(card).to_have_attribute("data-status", "CANCELLED", timeout=10_000)
                await expect(card.locator("[data-testid=timeline] li").last).to_have_attribute(
                    "data-event", "CANCEL"
                )
                assert await timeline_ids(page) == [e.id for e in await wf.history(wid)]
            assert any("/history" in u for u in requests)  # it did poll
            assert errors == []
    finally:
        if first.thread.is_alive():
            first.stop()
