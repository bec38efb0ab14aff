"""``create_app``: the Starlette app, standalone (``rsjobs web``) or mounted in yours.

    from starlette.applications import Starlette
    from starlette.routing import Mount
    from rsjobs.web import create_app

    jobs = create_app("redis://127.0.0.1:6379/0", namespace="images")
    app = Starlette(routes=[Mount("/jobs", app=jobs)], lifespan=jobs.router.lifespan_context)

(Passing the lifespan on is optional: the events reader also starts on first use.)
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from importlib import resources

import msgspec
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import tracing
from ..callbacks import SECRET_ENV
from ..client import Client
from ..errors import (
    CorruptData,
    NotMigrated,
    NotReplicated,
    RedisUnavailable,
    RsjobsError,
    StoreError,
)
from ..settings import Settings, queue_quota_from_env
from ..store.connection import connect, describe
from ..workflows import WorkflowClient, WorkflowDefinition
from .actions import action_routes
from .assets import asset_routes, check_asset_root
from .auth import Auth
from .callbacks import callback_routes
from .config import WebConfig
from .costs import cost_routes
from .dashboard import dashboard_routes
from .http import ApiError, error_response, store_error
from .lists import list_routes
from .live import live_routes
from .logs import redact_access_logs
from .routes import task_routes
from .service import Service
from .tracectx import TraceContextMiddleware
from .workflows import workflow_routes

__all__ = ["create_app"]

log = logging.getLogger("rsjobs.web")

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def create_app(
    url: str | None = None,
    *,
    redis: Redis | None = None,
    namespace: str | None = None,
    settings: Settings | None = None,
    tokens: Mapping[str, str] | None = None,
    admin_token: str | None = None,
    dev: bool | None = None,
    config: WebConfig | None = None,
    env: Mapping[str, str] | None = None,
    definitions: Iterable[WorkflowDefinition] = (),
    asset_root: str | os.PathLike[str] | None = None,
) -> Starlette:
    """Build the app.

    Redis: ``redis`` (a ``redis.asyncio.Redis`` with ``decode_responses=True``, which the
    app does not close) or ``url`` (default ``$RSJOBS_URL``). Namespace: ``settings`` or
    ``namespace`` (default ``$RSJOBS_NAMESPACE`` or ``default``).

    Access: ``tokens`` (token -> owner) and ``admin_token``, plus ``RSJOBS_TOKENS``,
    ``RSJOBS_TOKENS_FILE`` and ``RSJOBS_ADMIN_TOKEN`` from ``env`` (default
    ``os.environ``). With no token at all this raises :class:`rsjobs.ConfigError`, unless
    ``dev`` is true (or ``RSJOBS_WEB_DEV=1``): then requests without a token are allowed
    as an anonymous admin. Meant for a laptop, never for a deployment.

    Workflows: ``definitions`` are the workflow definitions ``POST /workflows`` may start;
    the other ``/workflows`` routes serve any workflow of the namespace. ``asset_root``:
    a directory whose files ``GET /workflows/{id}/assets/...`` may serve (the recorded
    assets of a workflow the caller may see, and only those under this root); without it
    that route answers 404. Provider callbacks (``POST /callbacks/...``): the secret of
    ``config.callback_secret`` or ``RSJOBS_CALLBACK_SECRET``; without one they answer 404.
    """
    env = os.environ if env is None else env
    # ?access_token= must not reach uvicorn's access log (a no-op under other servers)
    redact_access_logs()
    auth = Auth.from_env(env, tokens=tokens, admin_token=admin_token, dev=dev)
    auth.check_startable()
    config = config or WebConfig()
    if not config.callback_secret and env.get(SECRET_ENV):
        # the provider callbacks' secret, shared with the workers (rsjobs.callbacks)
        config = msgspec.structs.replace(config, callback_secret=env[SECRET_ENV])
    root = check_asset_root(asset_root)
    if settings is None:
        settings = Settings(
            namespace=namespace or env.get("RSJOBS_NAMESPACE") or "default",
            queue_quota=queue_quota_from_env(env),
        )
    own = redis is None
    blocking = redis
    if redis is None:
        target = url or env.get("RSJOBS_URL") or DEFAULT_URL
        bound = config.redis_timeout_ms / 1000
        redis = connect(target, socket_timeout=bound, connect_timeout=bound)
        # the events reader blocks in XREAD: its replies may take the block time
        blocking = connect(target, socket_timeout=config.hub_block_ms / 1000 + bound,
                           connect_timeout=bound)  # fmt: skip
        log.info("rsjobs web: redis %s", describe(redis, target))
    workflows = WorkflowClient(redis, settings, definitions=definitions, source="api")
    service = Service(
        Client(redis, settings, source="api"),
        auth,
        config,
        own_client=own,
        blocking=blocking,
        workflows=workflows,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await service.start()
        except NotMigrated:
            # the app must not serve a namespace it would misread (its connections closed
            # first: a refused startup leaves nothing open)
            await service.aclose()
            raise
        except (RsjobsError, OSError) as exc:
            log.warning("redis unavailable at startup (%s); will retry on first use", exc)
        try:
            yield
        finally:
            await service.aclose()

    # the action routes first (/tasks/bulk/... is not a task id), then the lists
    # (/tasks/export before /tasks/{task_id})
    routes = (
        action_routes(service)
        + list_routes(service)
        + live_routes(service)
        + task_routes(service)
        + cost_routes(service)
        + workflow_routes(service)
        + callback_routes(service)
        + asset_routes(service, root)
    )
    if config.serve_ui:
        static = StaticFiles(directory=str(resources.files("rsjobs") / "web" / "static"), html=True)
        routes += [
            Route("/", _to_ui, methods=["GET"]),
            Mount("/ui", app=static, name="ui"),
            *dashboard_routes(),
        ]
    middleware = []
    if tracing.ENABLED:
        middleware.append(Middleware(TraceContextMiddleware))
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
                expose_headers=["Location"],
            )
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            RedisUnavailable: _store_error,
            StoreError: _store_error,
            NotReplicated: _store_error,
            CorruptData: _store_error,
            NotMigrated: _store_error,
        },
    )
    app.state.rsjobs = service
    return app


async def _to_ui(request: Request) -> Response:
    # a path, not a URL: a URL built from the request would carry its Host header
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return RedirectResponse(f"{root}/ui/", status_code=307)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(ApiError(exc.status_code, code, str(exc.detail), exc.headers))


async def _store_error(request: Request, exc: Exception) -> Response:
    log.warning("store error on %s %s: %s", request.method, request.url.path, exc)
    answer = store_error(exc)
    assert answer is not None
    return error_response(answer)
