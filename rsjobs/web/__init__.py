"""The HTTP face of rsjobs: status, history, cancel and SSE push for frontends.

Importable without the worker: nothing here imports ``rsjobs.worker``.
"""

from .app import create_app
from .auth import Auth, Principal
from .config import WebConfig

__all__ = ["Auth", "Principal", "WebConfig", "create_app"]
