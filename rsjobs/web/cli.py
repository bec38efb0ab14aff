"""``rsjobs web``: serve the HTTP API (and the example page) with uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..extras import require

if TYPE_CHECKING:
    from ..workflows import WorkflowDefinition

__all__ = ["cmd_web", "load_definitions", "register"]


def register(subparsers: Any) -> None:
    """Add the ``web`` command to the ``rsjobs`` command line."""
    p = subparsers.add_parser(
        "web",
        help="serve the HTTP API, SSE and the example page",
        description="Tokens come from RSJOBS_TOKENS / RSJOBS_TOKENS_FILE / RSJOBS_ADMIN_TOKEN; "
        "without any, --dev is required (anonymous access, local use only).",
    )
    p.add_argument("--host", default=os.environ.get("RSJOBS_WEB_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("RSJOBS_WEB_PORT", "8000")))
    p.add_argument(
        "--dev",
        action="store_true",
        default=None,
        help="local development: allow requests without a token (also RSJOBS_WEB_DEV=1)",
    )
    p.add_argument(
        "--max-streams", type=int, default=16, help="open SSE streams per client (0 = no cap)"
    )
    p.add_argument("--public-metrics", action="store_true", help="serve /metrics without a token")
    p.add_argument(
        "--cors-origin", action="append", default=[], help="allow this origin (repeatable)"
    )
    p.add_argument(
        "--keepalive-ms", type=int, default=15_000, help="keep-alive comment interval of SSE"
    )
    p.add_argument(
        "--request-timeout-ms",
        type=int,
        default=10_000,
        help="close a connection that sends no complete request line and headers in this time",
    )
    p.add_argument(
        "--idle-timeout-ms",
        type=int,
        default=5_000,
        help="close a keep-alive connection idle this long between requests",
    )
    p.add_argument(
        "--workflows",
        action="append",
        default=[],
        metavar="MODULE:OBJECT",
        help="workflow definitions POST /workflows may start: a WorkflowDefinition or an "
        "iterable of them (repeatable)",
    )
    p.add_argument(
        "--asset-root",
        default=os.environ.get("RSJOBS_ASSET_ROOT") or None,
        metavar="DIR",
        help="serve recorded workflow asset files found under DIR (env RSJOBS_ASSET_ROOT)",
    )
    p.set_defaults(func=cmd_web)


def load_definitions(specs: Iterable[str]) -> list[WorkflowDefinition]:
    """The definitions named by ``MODULE:OBJECT`` specs; each object is a
    ``WorkflowDefinition`` or an iterable of them. Raises ``CliError`` (one line)."""
    from ..cli import CliError, load_object
    from ..workflows import WorkflowDefinition

    found: list[WorkflowDefinition] = []
    for spec in specs:
        try:
            obj = load_object(spec)
        except CliError:
            raise
        except Exception as exc:  # the module itself failed: say so in one line
            raise CliError(f"cannot load {spec!r}: {type(exc).__name__}: {exc}") from None
        if isinstance(obj, WorkflowDefinition):
            found.append(obj)
            continue
        items = list(obj) if isinstance(obj, Iterable) and not isinstance(obj, str | bytes) else []
        if not items or not all(isinstance(d, WorkflowDefinition) for d in items):
            raise CliError(
                f"{spec} is a {type(obj).__name__}, not a WorkflowDefinition "
                "(or a non-empty iterable of them)"
            )
        found.extend(items)
    return found


async def cmd_web(args: argparse.Namespace) -> int:
    require("web", "rsjobs web", "starlette", "uvicorn")
    import uvicorn

    from .app import create_app
    from .config import WebConfig
    from .server import protocol

    http = protocol(
        request_timeout_ms=args.request_timeout_ms, idle_timeout_ms=args.idle_timeout_ms
    )
    config = WebConfig(
        max_streams_per_client=args.max_streams,
        metrics_public=args.public_metrics,
        cors_origins=tuple(args.cors_origin),
        keepalive_ms=args.keepalive_ms,
    )
    from ..cli import settings_from_args
    from ..errors import RedisUnavailable
    from ..logfmt import setup_logging, uvicorn_log_config

    if args.log_format == "json":  # uvicorn's own lines go to the root handler then
        setup_logging(args.log_level, "json", "")
    app = create_app(
        args.url,
        # the global options: namespace, durable mode (--wait-replicas / env) and the
        # owners' queue quota (RSJOBS_QUEUE_QUOTA)
        settings=settings_from_args(args),
        dev=args.dev,
        config=config,
        definitions=load_definitions(args.workflows),
        asset_root=args.asset_root,
    )
    service = app.state.rsjobs
    try:
        # refused in one line here, not by a failed startup (the app's lifespan checks too)
        await service.store.require_layout()
    except RedisUnavailable:
        pass  # the app starts and waits for Redis
    if service.auth.dev:
        logging.getLogger("rsjobs.web").warning(
            "dev mode: requests without a token are served as an anonymous admin"
        )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            service.close_streams()  # event streams would hold the shutdown otherwise
            super().handle_exit(sig, frame)

    server = Server(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=str(args.log_level).lower(),
            log_config=uvicorn_log_config(),
            http=http,  # h11 with a deadline for request headers (rsjobs.web.server)
            timeout_graceful_shutdown=5,
            lifespan="on",
        )
    )
    await server.serve()
    return 0
