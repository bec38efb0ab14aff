"""The operator dashboard (``/dashboard/``) in headless Chromium (Debian's package, driven by
Playwright) against a real uvicorn, the session's Redis and a real worker: a task seen live
from PENDING to SUCCEEDED on its state graph, a failed task found by state and by label,
its tracebacks read and the task retried, a paused queue holding a task back, a running
task cancelled, a bulk retry confirmed after its dry run, a workflow's thumbnails.

Screenshots go to ``.test-artifacts/dashboard/`` (git-ignored). Needs /usr/bin/chromium
(``tools/install-browser.sh`` installs it); skipped without it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from rsjobs import Client, Context, EnqueueRequest, Registry, Settings, Worker, connect
from rsjobs.errors import InvalidTransition
from rsjobs.model import State
from rsjobs.web import create_app
from rsjobs.workflows import WorkflowClient
from tests.support.browser import MARKS, open_page
from tests.support.character_app import NS, backend, definition
from tests.support.processes import ROOT, wait_for_state
from tests.support.web import ADMIN, NAMESPACE, TOKENS, make_app, running_worker, serve
from tests.support.wf_fixtures import wait_status

# the slow tier: the suite keeps one browser page (tests/web/test_costs_browser.py)
pytestmark = [*MARKS, pytest.mark.slow]

playwright = pytest.importorskip("playwright.async_api")

SHOTS = Path(ROOT) / ".test-artifacts" / "dashboard"


async def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def open_dashboard(browser: Any, url: str, hash_: str = "") -> tuple[Any, list[str]]:
    """The dashboard with the admin token typed in (kept in the tab's sessionStorage)."""
    page, errors, _ = await open_page(browser, url + "/dashboard")
    assert page.url.endswith("/dashboard/")
    await page.fill("#token", ADMIN)
    await page.click("#token-form button")
    await playwright.expect(page.locator("main [data-view=overview]")).to_be_visible()
    if hash_:
        await page.evaluate(f"location.hash = {hash_!r}")
    return page, errors


async def test_bad_token_is_said_plainly(browser: Any, redis_url: str) -> None:
    expect = playwright.expect
    with serve(make_app(redis_url)) as web:
        page, errors, _ = await open_page(browser, web.url + "/dashboard/")
        banner = page.locator("[data-testid=banner]")
        await expect(banner).to_contain_text("the token was refused (HTTP 401")
        await page.fill("#token", "not-a-token")
        await page.click("#token-form button")
        await expect(banner).to_contain_text("the token was refused (HTTP 401")
        await page.fill("#token", "tok-alice")  # a valid token, but not an admin's
        await page.click("#token-form button")
        await expect(banner).to_contain_text("this needs an admin token (HTTP 403")
        await page.fill("#token", ADMIN)
        await page.click("#token-form button")
        await expect(banner).to_be_hidden()
        assert errors == []


async def test_a_task_goes_live_from_pending_to_succeeded(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    # user data that looks like markup must be shown as text
    evil = "<img id='injected' src='x' onerror='window.pwned=1'>"
    tid = await client.enqueue(
        "sleep", {"s": 1.0, "steps": 4, "note": evil}, labels={"batch": evil[:60]}
    )
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, f"#/task/{tid}")
        view = page.locator("main [data-view=task]")
        await expect(view).to_have_attribute("data-state", "PENDING")
        graph = page.locator("[data-testid=fsm]")
        await expect(graph.locator("[data-state=PENDING]")).to_have_attribute("data-current", "1")
        await page.evaluate("window.notReloaded = true")
        await shot(page, "task-pending")
        async with running_worker(redis_url):
            await expect(view).to_have_attribute("data-state", "RUNNING", timeout=10_000)
            await expect(graph.locator("[data-state=RUNNING]")).to_have_attribute(
                "data-current", "1"
            )
            await shot(page, "task-running")
            await expect(view).to_have_attribute("data-state", "SUCCEEDED", timeout=10_000)
        assert await page.evaluate("window.notReloaded") is True
        await expect(page.locator("[data-testid=result]")).to_contain_text('"attempt": 1')
        await expect(graph.locator("[data-state=SUCCEEDED]")).to_have_attribute("data-current", "1")
        # the path: ENQUEUE, START, COMPLETE taken; nothing else visited
        taken = await graph.locator(".edge[data-taken='1']").evaluate_all(
            "els => els.map(e => e.dataset.source + '>' + e.dataset.target).sort()"
        )
        assert taken == [">PENDING", "PENDING>RUNNING", "RUNNING>RUNNING", "RUNNING>SUCCEEDED"]
        visited = await graph.locator(".node[data-visited='1']").evaluate_all(
            "els => els.map(e => e.dataset.state).sort()"
        )
        assert visited == ["NEW", "PENDING", "RUNNING", "SUCCEEDED"]
        # the timeline is the task's history, in order
        ids = await page.locator("[data-testid=timeline] li").evaluate_all(
            "els => els.map(e => e.dataset.id)"
        )
        assert ids == [e.id for e in await client.history(tid)]
        # escaped: the markup is text, nothing was injected or run
        await expect(page.locator("[data-testid=payload]")).to_contain_text(evil)
        await expect(page.locator("[data-fact=labels]")).to_contain_text(evil[:60])
        assert await page.locator("#injected").count() == 0
        assert await page.evaluate("window.pwned") is None
        await shot(page, "task-succeeded")

        # refused calls (a pause of a finished task, twice): one entry, counted twice,
        # marked on the node where they were refused
        for _ in range(2):
            with pytest.raises(InvalidTransition):
                await client.control(tid, "PAUSE", "late")
        await page.reload()
        mark = graph.locator("[data-state=SUCCEEDED] [data-testid=refusal]")
        await expect(mark).to_have_attribute("data-count", "2")
        await expect(page.locator("[data-testid=timeline] li[data-rejected='1']")).to_contain_text(
            "refused \N{MULTIPLICATION SIGN}2 PAUSE"
        )
        # the finished task offers a replay only
        for name in ("cancel", "pause", "resume"):
            await expect(page.locator(f"[data-testid=action-{name}]")).to_be_disabled()
        await expect(page.locator("[data-testid=action-replay]")).to_be_enabled()
        await shot(page, "task-refusals")
        assert errors == []


async def test_find_a_failed_task_read_its_tracebacks_and_retry_it(
    browser: Any, redis_url: str, client: Client, tmp_path: Path
) -> None:
    expect = playwright.expect
    missing = tmp_path / "prompt.txt"
    async with running_worker(redis_url):
        bad = await client.enqueue("needs_file", {"path": str(missing)}, max_attempts=2,
                                   backoff_base_ms=10, backoff_max_ms=10,
                                   labels={"batch": "b7"})  # fmt: skip
        other = await client.enqueue("fatal", None, labels={"batch": "b8"})
        ok = await client.enqueue("noop", 1, labels={"batch": "b7"})
        for t in (bad, other, ok):
            await client.wait(t, timeout_ms=10_000)
    assert (await client.get(bad)).state == "FAILED"
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, "#/tasks")
        rows = page.locator("[data-testid=task-row]")
        await expect(rows).to_have_count(3)
        # by state
        await page.select_option("[data-testid=filter-state]", "FAILED")
        await page.click("[data-testid=apply]")
        await expect(rows).to_have_count(2)
        assert sorted(await rows.evaluate_all("els => els.map(e => e.dataset.taskId)")) == sorted(
            [bad, other]
        )
        # and by label
        await page.fill("[data-testid=filter-label]", "batch=b7")
        await page.click("[data-testid=apply]")
        await expect(rows).to_have_count(1)
        assert await rows.first.get_attribute("data-task-id") == bad
        assert "label=batch%3Db7" in page.url and "state=FAILED" in page.url
        await shot(page, "tasks-failed-by-label")
        await rows.first.locator("a").click()
        view = page.locator("main [data-view=task]")
        await expect(view).to_have_attribute("data-state", "FAILED")
        # every failed attempt with its traceback, newest first
        attempts = page.locator("[data-testid=failed-attempt]")
        await expect(attempts).to_have_count(2)
        assert await attempts.evaluate_all("els => els.map(e => e.dataset.attempt)") == ["2", "1"]
        for i in range(2):
            tb = attempts.nth(i).locator("[data-testid=traceback]")
            await expect(tb).to_contain_text("FileNotFoundError")
            await expect(tb).to_contain_text("_open_input")
        await expect(page.locator("[data-testid=error]")).to_contain_text("FileNotFoundError")
        graph = page.locator("[data-testid=fsm]")
        await expect(graph.locator(".edge[data-source=RUNNING][data-target=SCHEDULED]")).to_have_attribute(
            "data-taken", "1"
        )  # fmt: skip
        await shot(page, "task-failed-tracebacks")
        # the cause fixed, retry from the page: the new task is linked and succeeds
        missing.write_text("a lighthouse at dusk")
        async with running_worker(redis_url):
            await page.click("[data-testid=action-retry]")
            new = page.locator("[data-testid=new-task]")
            await expect(new).to_be_visible()
            await expect(page.locator("[data-testid=retried-as]")).to_be_visible()
            new_id = (await new.text_content() or "").strip()
            await new.click()
            await expect(view).to_have_attribute("data-task-id", new_id)
            await expect(view).to_have_attribute("data-state", "SUCCEEDED", timeout=10_000)
        await expect(page.locator("[data-testid=result]")).to_contain_text("a lighthouse at dusk")
        await expect(page.locator("[data-testid=retry-of]")).to_have_attribute(
            "href", f"#/task/{bad}"
        )
        assert (await client.get(new_id)).retry_of == bad
        await shot(page, "task-retried")
        assert errors == []


async def test_pause_a_queue_then_cancel_a_running_task(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    await client.enqueue("noop", 1)  # the queue exists
    with serve(make_app(redis_url)) as web:
        async with running_worker(redis_url):
            page, errors = await open_dashboard(browser, web.url)
            card = page.locator("[data-testid=queue][data-queue=default]")
            await expect(card).to_have_attribute("data-paused", "0")
            await card.locator("[data-testid=queue-toggle]").click()
            await expect(card).to_have_attribute("data-paused", "1")
            tid = await client.enqueue("sleep", {"s": 30, "steps": 30})
            assert (await client.get(tid)).queue_paused
            await expect(card.locator("[data-testid=backlog]")).to_have_text("1", timeout=10_000)
            await shot(page, "overview-paused")
            await page.evaluate(f"location.hash = '#/task/{tid}'")
            view = page.locator("main [data-view=task]")
            await expect(view).to_have_attribute("data-state", "PENDING")
            await expect(page.locator("[data-testid=queue-paused]")).to_be_visible()
            await asyncio.sleep(1.0)  # a worker polls every 100 ms: it would have started it
            assert (await client.get(tid)).state == "PENDING"
            await expect(view).to_have_attribute("data-state", "PENDING")
            await page.go_back()
            await card.locator("[data-testid=queue-toggle]").click()
            await expect(card).to_have_attribute("data-paused", "0")
            await page.go_forward()
            await expect(view).to_have_attribute("data-state", "RUNNING", timeout=10_000)
            await page.click("[data-testid=action-cancel]")
            await expect(view).to_have_attribute("data-state", "CANCELLED", timeout=10_000)
            assert (await client.get(tid)).state == "CANCELLED"
            await expect(page.locator("[data-testid=timeline] li").last).to_have_attribute(
                "data-event", "CANCEL"
            )
            await shot(page, "task-cancelled")
            # the worker that ran it, alive
            await page.evaluate("location.hash = '#/workers'")
            workers = page.locator("[data-testid=worker-row]")
            await expect(workers).to_have_count(1)
            await expect(workers.first).to_have_attribute("data-status", "alive")
            await shot(page, "workers")
            assert errors == []


async def test_bulk_retry_after_a_confirmed_dry_run(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    async with running_worker(redis_url, queues=["bulk"]):
        ids = [await client.enqueue("fatal", i, queue="bulk") for i in range(3)]
        for t in ids:
            await client.wait(t, timeout_ms=10_000)
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, "#/tasks?state=FAILED&queue=bulk")
        rows = page.locator("[data-testid=task-row]")
        await expect(rows).to_have_count(3)
        dialog = page.locator("[data-testid=confirm-dialog]")
        # cancelled in the dialog: nothing happens
        await page.click("[data-testid=bulk-retry]")
        await expect(dialog).to_be_visible()
        await expect(page.locator("[data-testid=confirm-text]")).to_contain_text(
            "Retry 3 tasks matching state=FAILED, queue=bulk?"
        )
        await expect(page.locator("[data-testid=confirm-sample] li")).to_have_count(3)
        await shot(page, "bulk-retry-confirm")
        await page.click("[data-testid=confirm-no]")
        await expect(page.locator("[data-testid=bulk-result]")).to_have_text("retry: not done")
        assert all([(await client.get(t)).retried_as == "" for t in ids])
        # confirmed: every one is started over
        await page.click("[data-testid=bulk-retry]")
        await page.click("[data-testid=confirm-yes]")
        await expect(page.locator("[data-testid=bulk-result]")).to_have_text(
            "retry: 3 of 3 changed"
        )
        assert all([(await client.get(t)).retried_as for t in ids])
        # a label filter selects by label: the dry run counts the labelled tasks only
        await page.evaluate("location.hash = '#/tasks?state=FAILED&label=batch=b2'")
        await page.click("[data-testid=bulk-retry]")
        await expect(page.locator("[data-testid=bulk-result]")).to_contain_text(
            "no task matches label batch=b2, state=FAILED"
        )
        await expect(dialog).to_be_hidden()
        assert errors == []


async def test_a_workflow_with_its_thumbnails(
    browser: Any, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from examples.character import generators

    monkeypatch.setattr(generators, "OUT", tmp_path)
    expect = playwright.expect
    app = create_app(redis_url, namespace=NS, tokens=TOKENS, admin_token=ADMIN, env={},
                     definitions=[definition()], asset_root=tmp_path)  # fmt: skip
    wf = WorkflowClient(connect(redis_url), Settings(namespace=NS), definitions=[definition()])
    try:
        with serve(app) as web:
            async with backend(redis_url):
                wid = await wf.start("character", {"name": "Mei"})
                await wait_status(wf, wid, "WAITING_CONFIRMATION")
                await wf.confirm(wid)  # the parameters: on to the images
                for _ in range(300):  # at most 15 s
                    doc = await wait_status(wf, wid, "WAITING_CONFIRMATION")
                    if doc.stage == "images":
                        break
                    await asyncio.sleep(0.05)
                assert doc.stage == "images", doc
                page, errors = await open_dashboard(browser, web.url, "#/workflows")
                listed = page.locator(f"[data-testid=wf-row][data-wf-id='{wid}']")
                if any(getattr(r, "path", "") == "/workflows" and "GET" in (r.methods or ())
                       for r in app.routes):  # fmt: skip
                    await expect(listed).to_be_visible()
                    await listed.locator("a").click()
                else:  # a server without the list says so, and opens a workflow by id
                    await expect(page.locator("[data-testid=not-available]")).to_contain_text(
                        "the workflow list"
                    )
                    await page.fill("[data-testid=wf-open-id]", wid)
                    await page.press("[data-testid=wf-open-id]", "Enter")
                await expect(page.locator("main [data-view=workflow]")).to_be_visible()
                # version 1's assets as thumbnails: the front and side images load
                thumbs = page.locator(
                    "[data-testid=version][data-version='1'] [data-testid=thumb] img"
                )
                await expect(thumbs).to_have_count(2, timeout=10_000)
                await page.wait_for_function(
                    "() => [...document.querySelectorAll('[data-testid=thumb] img')]"
                    ".every(i => i.complete && i.naturalWidth > 0)", timeout=10_000)  # fmt: skip
                # the workflow page, embedded: status, stages and the gate actions
                frame = page.frame_locator("[data-testid=wf-frame]")
                card = frame.locator("[data-testid=workflow]")
                await expect(card).to_have_attribute("data-status", "WAITING_CONFIRMATION")
                await expect(card).to_have_attribute("data-stage", "images")
                await expect(frame.locator("[data-testid=asset] img")).to_have_count(2)
                await shot(page, "workflow-thumbnails")
                await frame.locator("[data-testid=confirm]").click()
                await expect(card).to_have_attribute("data-stage", "actions", timeout=10_000)
                assert errors == []
    finally:
        await wf.close()


async def test_pages_of_a_long_list_forward_and_back(
    browser: Any, redis_url: str, client: Client
) -> None:
    expect = playwright.expect
    await client.enqueue_many([EnqueueRequest(type="noop", payload=i, queue="many")
                               for i in range(120)])  # fmt: skip
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url)
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if "/tasks?" in r.url else None)
        await page.evaluate("location.hash = '#/tasks?state=PENDING&queue=many'")
        rows = page.locator("[data-testid=task-row]")

        async def shown() -> list[str]:
            ids: list[str] = await rows.evaluate_all("els => els.map(e => e.dataset.taskId)")
            return ids

        await expect(rows).to_have_count(50)
        first = await shown()
        await page.click("[data-testid=next]")
        await expect(page.locator(".pager")).to_contain_text("page 2")
        await expect(rows).to_have_count(50)
        second = await shown()
        await page.click("[data-testid=next]")
        await expect(page.locator(".pager")).to_contain_text("page 3")
        await expect(rows).to_have_count(20)
        third = await shown()
        await expect(page.locator("[data-testid=next]")).to_be_disabled()
        assert len(set(first + second + third)) == 120
        await page.click("[data-testid=prev]")
        await expect(page.locator(".pager")).to_contain_text("page 2")
        assert await shown() == second
        await page.click("[data-testid=prev]")
        await expect(page.locator(".pager")).to_contain_text("page 1")
        assert await shown() == first
        await expect(page.locator("[data-testid=prev]")).to_be_disabled()
        # never more than a page asked for
        assert asked and all("limit=50" in u for u in asked)
        assert errors == []


async def test_the_overview_charts_a_queues_last_minutes(
    browser: Any, redis_url: str, client: Client
) -> None:
    import redis as sync_redis

    from rsjobs.reaper import Reaper, ReaperConfig
    from rsjobs.store.keys import Keys
    from rsjobs.store.series import STEP_MS

    expect = playwright.expect
    async with running_worker(redis_url, queues=["gpu"]):
        ids = [await client.enqueue("noop", i, queue="gpu") for i in range(4)]
        ids += [await client.enqueue("fatal", i, queue="gpu") for i in range(2)]
        for t in ids:
            await client.wait(t, timeout_ms=10_000)
    # the samples reapers took in the ten minutes before (counters so far), then a real one
    r = sync_redis.Redis.from_url(redis_url)
    secs, _ = r.time()
    minute = int(secs) * 1000 - int(secs) * 1000 % STEP_MS
    for k in range(10):
        r.xadd(Keys("t").series("gpu"),
               {"n": k // 2, "st": k // 2, "ok": k // 3, "f": k // 6, "to": 0, "c": 0, "p": 0,
                "age": 0}, id=f"{minute - (10 - k) * STEP_MS}-0")  # fmt: skip
    r.close()
    reaper = Reaper(url=redis_url, settings=Settings(namespace="t"),
                    config=ReaperConfig(guard=False))  # fmt: skip
    try:
        assert (await reaper.sweep_once()).series_sampled >= 1
    finally:
        await reaper.close()
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url)
        card = page.locator("[data-testid=queue][data-queue=gpu]")
        charts = card.locator("[data-testid=charts]")
        await expect(charts.locator("svg.spark")).to_have_count(3)
        async with httpx.AsyncClient(
            base_url=web.url, headers={"Authorization": f"Bearer {ADMIN}"}
        ) as http:
            series = (await http.get("/queues/gpu/series", params={"minutes": 60})).json()
        points = series["points"]
        assert len(points) >= 9
        finished = sum(
            p["succeeded"] + p["failed"] + p["timed_out"] + p["cancelled"] for p in points
        )
        failed = sum(p["failed"] + p["timed_out"] for p in points)
        assert finished == 6 and failed == 2  # every task counted once, in some minute
        assert await charts.locator("svg.spark").first.get_attribute("data-points") == str(
            len(points)
        )
        await expect(charts).to_contain_text(f"finished: {finished} in 60 min")
        await expect(charts).to_contain_text(f"failure rate: {100 * failed / finished:.1f} %")
        await expect(page.locator("#live")).to_have_text("live (SSE)")
        await shot(page, "overview-charts")
        assert errors == []


async def test_a_dead_letter_requeued_from_its_view(
    browser: Any, redis_url: str, client: Client
) -> None:
    from rsjobs.store import layout
    from rsjobs.store.layout import QuarantineArgs

    expect = playwright.expect
    tid = await client.enqueue("noop", {"x": 1})
    # dead-letter it as the reaper's quarantine does
    (entry,) = [e for e, f in await client.redis.xrange(client.keys.queue("default"))
                if f["id"] == tid]  # fmt: skip
    k, scripts = client.keys, client.store.scripts
    args = QuarantineArgs(tid, "default", "queue", entry, "recovery", "test", 1000)
    await scripts.run(
        layout.quarantine(scripts.common, k, "reaper", k.task_keys(tid, "default"), args)
    )
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, "#/deadletters")
        row = page.locator(f"[data-testid=deadletter-row][data-task-id='{tid}']")
        await expect(row).to_be_visible()
        await shot(page, "deadletters")
        # the task's own view offers the requeue too
        await row.locator("a").first.click()
        await expect(page.locator("main [data-view=task]")).to_have_attribute(
            "data-state", "FAILED"
        )
        await expect(page.locator("[data-testid=action-requeue]")).to_be_enabled()
        await page.go_back()
        await row.locator("[data-testid=requeue]").click()
        new = row.locator("[data-testid=new-task]")
        await expect(new).to_be_visible()
        clone = (await new.get_attribute("href") or "").removeprefix("#/task/")
        copy = await client.get(clone)
        assert (copy.type, copy.payload, copy.state) == ("noop", {"x": 1}, "PENDING")
        async with running_worker(redis_url):
            await new.click()
            await expect(page.locator("main [data-view=task]")).to_have_attribute(
                "data-state", "SUCCEEDED", timeout=10_000
            )
        assert errors == []


async def test_priorities_and_tasks_held_by_a_limit_are_shown(
    browser: Any, redis_url: str, client: Client
) -> None:
    """A task list shows each task's priority, a task's page its priority, and the
    overview the tasks a queue's limits hold back (rsjobs.limits)."""
    expect = playwright.expect
    await client.set_limit("gpu", 1)
    urgent = await client.enqueue("noop", queue="gpu", priority=9, owner="alice")
    await client.enqueue_many(
        [EnqueueRequest(type="noop", queue="gpu", owner="alice") for _ in range(3)]
    )
    bobs = await client.enqueue("noop", queue="gpu", owner="bob")
    await client.store.work.ensure_groups([client.keys.queue("gpu")])
    # a worker that takes and starts but never ends: alice at her limit, her others set
    # aside (parked) on the way to bob's
    taken = await client.store.work.take("ghost", ["gpu"], 4)
    started = await client.store.work.start("ghost", 60_000, "n", taken.deliveries)
    assert sorted(s.id for s in started if s.state == "RUNNING") == sorted([urgent, bobs])
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url, "#/tasks?queue=gpu")
        rows = page.locator("main [data-view=tasks] tbody tr")
        await expect(rows).to_have_count(5)
        prios = await page.locator("[data-testid=priority]").all_inner_texts()
        assert sorted(prios) == ["0", "0", "0", "0", "9"]
        await shot(page, "tasks-priority")
        await page.evaluate(f"location.hash = '#/task/{urgent}'")
        await expect(page.locator("[data-fact=priority]")).to_have_text("9")
        await shot(page, "task-priority")
        await page.evaluate("location.hash = '#/'")
        held = page.locator("[data-testid=queue][data-queue=gpu] [data-testid=held]")
        await expect(held).to_have_text("3")
        await shot(page, "overview-held")
        assert errors == []


handoff = Registry()


@handoff.handler("render")
async def _hand_off(ctx: Context, payload: Any) -> Any:
    """Hands the attempt to an outside service that answers later (DEFERRED)."""
    return ctx.defer(f"ext-{ctx.task_id[:8]}", provider="prov", max_wait_ms=600_000)


async def test_every_state_of_the_table_is_listed_and_a_deferred_task_found(
    browser: Any, redis_url: str, client: Client
) -> None:
    """The state tabs, the state filter and the overview's counts name every state of the
    transition table (served as dashboard/fsm.json), DEFERRED and WAITING included, in
    the order a task passes through them; a DEFERRED task is found by its tab."""
    expect = playwright.expect
    tid = await client.enqueue("render", {"prompt": "a cat"}, queue="gpu")
    worker = Worker(handoff, url=redis_url, queues=["gpu"], handle_signals=False,
                    block_ms=100, settings=Settings(namespace=NAMESPACE))  # fmt: skip
    run = asyncio.create_task(worker.run())
    try:
        await wait_for_state(client, tid, "DEFERRED", timeout=10)
    finally:
        worker.stop(force=True)
        await asyncio.wait_for(run, 20)
        await worker.redis.aclose()
    states = [s.value for s in State]
    with serve(make_app(redis_url)) as web:
        page, errors = await open_dashboard(browser, web.url)
        counts = page.locator("[data-testid=queue][data-queue=gpu] td[data-state]")
        assert await counts.evaluate_all("els => els.map(e => e.dataset.state)") == states
        deferred = page.locator("[data-testid=queue][data-queue=gpu] td[data-state=DEFERRED]")
        await expect(deferred).to_have_text("1")
        await page.evaluate("location.hash = '#/tasks'")
        tabs = page.locator("[data-testid=state-tabs] a")
        await expect(tabs).to_have_count(len(states) + 1)
        assert (await tabs.all_inner_texts())[1:] == states
        options = page.locator("[data-testid=filter-state] option")
        assert (await options.all_inner_texts())[1:] == states
        await tabs.filter(has_text="DEFERRED").click()
        rows = page.locator("[data-testid=task-row]")
        await expect(rows).to_have_count(1)
        assert await rows.first.get_attribute("data-task-id") == tid
        await shot(page, "tasks-deferred")
        assert errors == []
