"""examples/django_site: the Django recipe against a real Redis and a real worker process:
a view submits with rsjobs.SyncClient as the logged-in user, a template shows the status,
and the site's threaded WSGI server takes many submits at once."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from rsjobs import SyncClient
from rsjobs.server import EmbeddedRedis
from tests.support.processes import spawn_worker, stop_process

django = pytest.importorskip("django")

pytestmark = pytest.mark.integration

THREADS = 16


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, redis_server: EmbeddedRedis) -> Iterator[Any]:
    """Django set up once for this module: the recipe's settings, a fresh SQLite file,
    the session's Redis; the environment is put back afterwards."""
    env = {
        "DJANGO_SETTINGS_MODULE": "examples.django_site.settings",
        "DJANGO_DB": str(tmp_path_factory.mktemp("django") / "db.sqlite3"),
        "RSJOBS_URL": redis_server.url,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    from django.contrib.auth.models import User

    User.objects.create_user("alice", password="x")
    User.objects.create_user("bob", password="x")
    yield django
    from examples.django_site.jobs import rsjobs_client

    if rsjobs_client._client is not None:
        rsjobs_client._client.close()


def login(name: str) -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    c = Client()
    c.force_login(User.objects.get(username=name))
    return c


def test_a_view_submits_and_a_template_shows_the_status(
    site: Any, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = login("alice"), login("bob")
    assert "csrfmiddlewaretoken" in alice.get("/jobs/").content.decode()
    r = alice.post("/jobs/", {"prompt": "a watercolour fox", "steps": "3"})
    assert r.status_code == 302, r.content
    m = re.fullmatch(r"/jobs/([0-9a-f]{32})/", r["Location"])
    assert m, r["Location"]
    tid = m.group(1)
    page = alice.get(r["Location"]).content.decode()
    assert '<strong class="state">PENDING</strong>' in page and 'http-equiv="refresh"' in page
    assert bob.get(r["Location"]).status_code == 404  # as a job that does not exist
    assert alice.get(f"/jobs/{'0' * 32}/").status_code == 404
    assert alice.get("/jobs/not-an-id/").status_code == 404
    bad = alice.post("/jobs/", {"prompt": "x", "steps": "many"})
    assert bad.status_code == 400 and "invalid literal" in bad.content.decode()

    monkeypatch.setenv("RSJOBS_DEMO_OUT", str(tmp_path))
    worker = spawn_worker(redis_url, "default", "-q", "gpu", app="examples.demo_tasks:tasks")
    try:
        with SyncClient(redis_url) as check:  # the task's end, then its page
            assert check.wait(tid, timeout_ms=30_000).state == "SUCCEEDED"
        page = alice.get(f"/jobs/{tid}/").content.decode()
        assert '<strong class="state">SUCCEEDED</strong>' in page, page
        image = re.search(r'<code class="result">([^<]+)</code>', page)
        assert image and Path(image.group(1)).parent == tmp_path
        assert 'http-equiv="refresh"' not in page  # a finished job stops refreshing

        # cancel from the page
        slow = alice.post("/jobs/", {"prompt": "slow", "steps": "100"})["Location"]
        assert bob.post(slow).status_code == 404  # not Bob's to cancel
        assert alice.post(slow).status_code == 302
        assert '<strong class="state">CANCELLED</strong>' in alice.get(slow).content.decode()
    finally:
        stop_process(worker)


def test_the_threaded_wsgi_server_takes_many_submits_at_once(site: Any, redis_url: str) -> None:
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    server = ThreadedWSGIServer(("127.0.0.1", 0), WSGIRequestHandler)
    server.set_app(get_wsgi_application())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    session = login("alice").cookies["sessionid"].value
    try:
        with httpx.Client(base_url=base, cookies={"sessionid": session}) as http:
            form = http.get("/jobs/")
            assert form.status_code == 200
            csrf = form.cookies["csrftoken"]
        barrier = threading.Barrier(THREADS)

        def submit(n: int) -> str:
            cookies = {"sessionid": session, "csrftoken": csrf}
            with httpx.Client(base_url=base, cookies=cookies, timeout=30) as http:
                barrier.wait()  # every request at the same moment
                r = http.post("/jobs/", data={"prompt": f"fox {n}"}, headers={"X-CSRFToken": csrf})
                assert r.status_code == 302, r.text
                status = http.get(r.headers["location"])
                assert status.status_code == 200 and "PENDING" in status.text
                return r.headers["location"].split("/")[2]

        with ThreadPoolExecutor(THREADS) as pool:
            ids = list(pool.map(submit, range(THREADS)))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert len(set(ids)) == THREADS
    with SyncClient(redis_url) as check:
        infos = check.get_many(ids)
    assert all(i is not None and i.owner == "alice" and i.queue == "gpu" for i in infos)
    assert sorted(i.payload["prompt"] for i in infos if i) == sorted(
        f"fox {n}" for n in range(THREADS)
    )
