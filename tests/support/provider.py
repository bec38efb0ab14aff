"""A stand-in for an outside generation service, for the deferred-completion tests and
``examples/deferred.py``: a small Starlette app on 127.0.0.1 that accepts a job, finishes
it later, and answers by webhook to the job's callback URL (and to polls, ``GET
/jobs/{id}``).

Each job has a mode (the request's ``mode``, else the provider's ``mode``):

* ``normal``: one callback once the job is done;
* ``lose``: the job finishes but its callback is never sent (polls still see it);
* ``duplicate``: the callback is sent three times;
* ``delay``: the callback is sent ``late_ms`` after the job is done (past a short wait);
* ``forge``: the callback is sent with its token altered (and, by external id, with a
  signature under another secret): the server must answer 401 and write nothing;
* ``fail``: the job fails (callback with ``status: failed``);
* ``external``: one callback by the job's own id, ``POST
  /callbacks/external/testprov/{id}`` on the server of the job's callback URL, signed
  with the provider's ``secret`` (``X-Rsjobs-Signature: t=...,v1=...``, the scheme
  provider adapters follow, docs/web.md);
* ``misdirect``: as ``external``, but the body signed for another job (``prov-0``): the
  server must answer 401 and write nothing;
* ``stale``: as ``external``, but signed ``stale_s`` seconds ago (past the server's
  tolerance): 401, nothing written.

``hold()`` keeps finished jobs from calling back until ``release()``; ``answers`` records
the status code of every callback sent.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rsjobs.callbacks import body_signature
from rsjobs.server import free_port

__all__ = ["Provider", "ProviderJob"]


@dataclass
class ProviderJob:
    id: str
    callback_url: str | None
    mode: str
    done_at: float
    polls: int = 0
    callbacks: list[int] = field(default_factory=list)


class Provider:
    """The provider app and its server thread."""

    #: the provider name the external callbacks are sent under
    NAME = "testprov"
    #: modes that call back by the job's own id, signed
    EXTERNAL = ("external", "misdirect", "stale")

    def __init__(
        self,
        *,
        delay_ms: int = 50,
        late_ms: int = 1500,
        mode: str = "normal",
        secret: str = "",
        stale_s: int = 600,
    ) -> None:
        self.delay_ms = delay_ms
        self.secret = secret
        self.stale_s = stale_s
        self.late_ms = late_ms
        self.mode = mode
        self.jobs: dict[str, ProviderJob] = {}
        #: (job id, HTTP status) of every callback sent
        self.answers: list[tuple[str, int]] = []
        self._ids = itertools.count(1)
        self._held = threading.Event()
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._release: asyncio.Event | None = None
        app = Starlette(
            routes=[
                Route("/jobs", self._submit, methods=["POST"]),
                Route("/jobs/{job_id}", self._poll, methods=["GET"]),
            ]
        )
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Provider:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the provider did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.release()
        self.server.should_exit = True
        self.thread.join(15)

    def hold(self) -> None:
        """Finished jobs wait with their callbacks until :meth:`release`."""
        self._held.set()

    def release(self) -> None:
        self._held.clear()
        loop, ev = self._loop, self._release
        if loop is not None and ev is not None and not loop.is_closed():
            loop.call_soon_threadsafe(ev.set)

    def sent(self, job_id: str) -> list[int]:
        with self._lock:
            return [code for j, code in self.answers if j == job_id]

    def wait_sent(self, job_id: str, n: int = 1, timeout: float = 15.0) -> list[int]:
        """The status codes of the job's callbacks, once ``n`` were sent (blocks until the
        provider's thread sends them: call it through ``asyncio.to_thread``)."""
        with self._answered:
            sent = self._answered.wait_for(
                lambda: sum(1 for j, _ in self.answers if j == job_id) >= n, timeout
            )
            codes = [code for j, code in self.answers if j == job_id]
        assert sent, f"{len(codes)} of {n} callbacks of {job_id} sent: {codes}"
        return codes

    # -- the app -------------------------------------------------------------------------

    async def _submit(self, request: Request) -> JSONResponse:
        self._loop = asyncio.get_running_loop()
        if self._release is None:
            self._release = asyncio.Event()
        body: dict[str, Any] = await request.json()
        job_id = f"prov-{next(self._ids)}"
        delay = float(body.get("delay_ms", self.delay_ms)) / 1000
        job = ProviderJob(job_id, body.get("callback_url"), body.get("mode") or self.mode,
                          time.monotonic() + delay)  # fmt: skip
        with self._lock:
            self.jobs[job_id] = job
        if job.callback_url and job.mode != "lose":
            task = asyncio.get_running_loop().create_task(self._call_back(job, body))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return JSONResponse({"id": job_id}, 202)

    async def _poll(self, request: Request) -> JSONResponse:
        job = self.jobs.get(request.path_params["job_id"])
        if job is None:
            return JSONResponse({"error": "no such job"}, 404)
        job.polls += 1
        if time.monotonic() < job.done_at:
            return JSONResponse({"status": "running"})
        if job.mode == "fail":
            return JSONResponse({"status": "failed", "error": "the model crashed"})
        return JSONResponse({"status": "succeeded", "result": {"image": f"{job.id}.png"}})

    async def _call_back(self, job: ProviderJob, body: dict[str, Any]) -> None:
        await asyncio.sleep(max(0.0, job.done_at - time.monotonic()))
        while self._held.is_set():
            assert self._release is not None
            self._release.clear()
            if self._held.is_set():
                await self._release.wait()
        if job.mode == "delay":
            await asyncio.sleep(self.late_ms / 1000)
        result: dict[str, Any] = {"status": "succeeded", "result": {"image": f"{job.id}.png"}}
        if job.mode == "fail":
            result = {"status": "failed", "error": "the model crashed"}
        url = str(job.callback_url)
        if job.mode == "forge":
            # the token's signature part altered: what an attacker who guessed a task id
            # and attempt could send
            head, _, mac = url.rpartition(".")
            url = head + "." + ("A" if mac[:1] != "A" else "B") + mac[1:]
        times = 3 if job.mode == "duplicate" else 1
        content = httpx.Request("POST", url, json=result).content
        headers = {"content-type": "application/json"}
        if job.mode in self.EXTERNAL:
            url, headers["x-rsjobs-signature"] = self._external(job, url, content)
        async with httpx.AsyncClient(timeout=10) as http:
            for _ in range(times):
                try:
                    r = await http.post(url, content=content, headers=headers)
                    code = r.status_code
                except httpx.HTTPError:
                    code = 0
                with self._answered:
                    job.callbacks.append(code)
                    self.answers.append((job.id, code))
                    self._answered.notify_all()

    def _external(self, job: ProviderJob, token_url: str, body: bytes) -> tuple[str, str]:
        """The by-id URL of ``job`` on the server of ``token_url`` and its signature."""
        base = token_url[: token_url.index("/callbacks/")]
        signed_for, at = job.id, int(time.time())
        if job.mode == "misdirect":
            signed_for = "prov-0"
        if job.mode == "stale":
            at -= self.stale_s
        signature = body_signature(self.secret, self.NAME, signed_for, body, at)
        return f"{base}/callbacks/external/{self.NAME}/{job.id}", signature
