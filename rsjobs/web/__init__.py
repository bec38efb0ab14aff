"""All of rsjobs's HTTP: tasks and workflows (status, history, actions, SSE push, plans and
asset files), health, metrics and the OpenAPI document, for frontends and operators.

Importable without the worker: nothing here imports ``rsjobs.worker`` (and
``rsjobs.workflows`` imports nothing of this package). It needs the ``web`` extra
(starlette, uvicorn): its names are loaded when first used, so that ``rsjobs.web.cli``
(the ``rsjobs web`` command, registered by every install) imports without it, and a use
without it raises :class:`rsjobs.extras.MissingExtra`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..extras import require

if TYPE_CHECKING:
    from .app import create_app
    from .auth import Auth, Principal
    from .config import WebConfig

__all__ = ["Auth", "Principal", "WebConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require("web", "rsjobs.web", "starlette", "uvicorn")
    from . import app, auth, config

    found = {"create_app": app.create_app, "Auth": auth.Auth, "Principal": auth.Principal,
             "WebConfig": config.WebConfig}  # fmt: skip
    return found[name]
