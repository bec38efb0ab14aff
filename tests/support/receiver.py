"""A webhook receiver for the tests: Starlette under uvicorn on 127.0.0.1, in a thread. It
answers 500 to the first ``fail`` requests of each delivery, then 200, and keeps every
request (time, headers, body)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rsjobs.server import free_port


class Receiver:
    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        delivery = request.headers.get("rsjobs-delivery", "")
        with self._lock:
            seen = sum(1 for r in self.requests if r["delivery"] == delivery)
            self.requests.append(
                {
                    "at": time.monotonic(),
                    "delivery": delivery,
                    "signature": request.headers.get("rsjobs-signature", ""),
                    "body": body,
                }
            )
        return Response(status_code=500 if seen < self.fail else 200)

    def __enter__(self) -> Receiver:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("receiver did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
