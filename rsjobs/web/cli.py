"""``rsjobs web``: serve the HTTP API (and the example page) with uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

__all__ = ["cmd_web", "register"]


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
    p.add_argument("--keepalive-ms", type=int, default=15_000)
    p.set_defaults(func=cmd_web)


async def cmd_web(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app
    from .config import WebConfig

    config = WebConfig(
        max_streams_per_client=args.max_streams,
        metrics_public=args.public_metrics,
        cors_origins=tuple(args.cors_origin),
        keepalive_ms=args.keepalive_ms,
    )
    app = create_app(args.url, namespace=args.namespace, dev=args.dev, config=config)
    if app.state.rsjobs.auth.dev:
        logging.getLogger("rsjobs.web").warning(
            "dev mode: requests without a token are served as an anonymous admin"
        )
    service = app.state.rsjobs

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
            timeout_graceful_shutdown=5,
            lifespan="on",
        )
    )
    await server.serve()
    return 0
