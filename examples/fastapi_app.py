"""Recipe: rsjobs inside a FastAPI app, the app's own authentication mapped to rsjobs owners.

The host app decides who is calling (here a bearer-token table stands in for your OAuth or
session dependency); :func:`jobs_router` turns that user into the task's ``owner``, so a
user sees and cancels only the tasks they submitted, and another user's task answers 404
exactly like a task that does not exist (ids cannot be probed). Only the task types listed
in ``TYPES`` can be submitted, each on its own queue.

Run it (with ``rsjobs dev examples.demo_tasks:tasks -q gpu`` in another shell)::

    export RSJOBS_URL=redis://127.0.0.1:PORT/0     # the line rsjobs dev printed
    uvicorn examples.fastapi_app:app --port 8001
    curl -X POST localhost:8001/jobs -H 'Authorization: Bearer alice-token' \\
         -H 'Content-Type: application/json' -d '{"type": "image.generate", "payload": {}}'
"""

# no `from __future__ import annotations`: FastAPI reads the dependencies' annotations at
# run time, and the router's are local to jobs_router
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Request
from pydantic import BaseModel, Field

from rsjobs import (
    Client,
    ConfigError,
    DedupKeyReused,
    PayloadError,
    RedisUnavailable,
    TaskInfo,
    TaskNotFound,
)

#: what users may submit: task type -> the queue its workers serve
TYPES = {"image.generate": "gpu"}

#: the host app's users; in a real app this is your authentication dependency
TOKENS = {"alice-token": "alice", "bob-token": "bob"}


def current_user(authorization: Annotated[str, Header()] = "") -> str:
    """The host app's authentication: ``Authorization: Bearer <token>`` -> user name."""
    scheme, _, token = authorization.partition(" ")
    user = TOKENS.get(token) if scheme.lower() == "bearer" else None
    if user is None:
        raise HTTPException(401, "unknown or missing token")
    return user


class Submit(BaseModel):
    type: str
    payload: Any = None
    #: a client-chosen key: submitting twice returns the first task
    idempotency_key: str | None = Field(default=None, max_length=200)


class Job(BaseModel):
    id: str
    type: str
    state: str
    progress: float
    message: str
    attempt: int
    result: Any = None
    error: str = ""

    @classmethod
    def of(cls, info: TaskInfo) -> "Job":
        return cls(
            id=info.id,
            type=info.type,
            state=info.state,
            progress=info.progress,
            message=info.progress_msg,
            attempt=info.attempt,
            result=info.result,
            error=info.error,
        )


def jobs_router(client_of: Callable[[Request], Client], owner_of: Callable[..., str]) -> APIRouter:
    """``/jobs`` routes: submit, status, history, cancel. ``client_of(request)`` gives the
    app's :class:`rsjobs.Client`; ``owner_of`` is a FastAPI dependency naming the caller."""
    router = APIRouter(prefix="/jobs", tags=["jobs"])
    ClientDep = Annotated[Client, Depends(client_of)]
    Owner = Annotated[str, Depends(owner_of)]

    async def visible(client: Client, task_id: str, owner: str) -> TaskInfo:
        try:
            info = await client.get(task_id)
        except (TaskNotFound, ConfigError):
            raise HTTPException(404, "no such job") from None
        if info.owner != owner:
            raise HTTPException(404, "no such job")  # the same answer as a missing one
        return info

    @router.post("", status_code=202)
    async def submit(body: Submit, client: ClientDep, owner: Owner) -> Job:
        queue = TYPES.get(body.type)
        if queue is None:
            raise HTTPException(400, f"unknown job type {body.type!r}")
        # dedup keys are per user: one user's key never answers another user's task
        dedup = f"{owner}:{body.idempotency_key}" if body.idempotency_key else None
        try:
            tid = await client.enqueue(
                body.type, body.payload, queue=queue, owner=owner, dedup_key=dedup
            )
        except DedupKeyReused:  # the key already names another job of this user
            raise HTTPException(422, "this idempotency key names a different job") from None
        except (ConfigError, PayloadError) as exc:
            raise HTTPException(400, str(exc)) from None
        return Job.of(await visible(client, tid, owner))

    @router.get("/{task_id}")
    async def status(task_id: str, client: ClientDep, owner: Owner) -> Job:
        return Job.of(await visible(client, task_id, owner))

    @router.get("/{task_id}/history")
    async def history(task_id: str, client: ClientDep, owner: Owner) -> list[dict[str, Any]]:
        await visible(client, task_id, owner)
        return [
            {"event": e.event, "from": e.from_state, "to": e.to_state, "ts": e.ts,
             "message": e.message, "refused": e.rejected}
            for e in await client.history(task_id)
        ]  # fmt: skip

    @router.post("/{task_id}/cancel")
    async def cancel(task_id: str, client: ClientDep, owner: Owner) -> Job:
        await visible(client, task_id, owner)
        await client.cancel(task_id, f"cancelled by {owner}")
        return Job.of(await client.get(task_id))

    return router


def create_app(url: str | None = None) -> FastAPI:
    """The host app: one :class:`rsjobs.Client` for its lifetime (``url`` or
    ``$RSJOBS_URL``), the jobs routes, and 503 while Redis cannot be reached."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        target = url or os.environ.get("RSJOBS_URL", "redis://127.0.0.1:6379/0")
        async with Client.from_url(target, source="api") as client:
            app.state.rsjobs = client
            yield

    app = FastAPI(title="an app with jobs", lifespan=lifespan)

    def client_of(request: Request) -> Client:
        client: Client = request.app.state.rsjobs
        return client

    app.include_router(jobs_router(client_of, current_user))

    @app.exception_handler(RedisUnavailable)
    async def unavailable(request: Request, exc: RedisUnavailable) -> Any:
        from fastapi.responses import JSONResponse

        return JSONResponse({"detail": "the job store is unavailable"}, status_code=503)

    return app


app = create_app()
