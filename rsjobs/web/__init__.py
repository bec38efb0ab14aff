"""All of rsjobs's HTTP: tasks and workflows (status, history, actions, SSE push, plans and
asset files), health, metrics and the OpenAPI document, for frontends and operators.

Importable without the worker: nothing here imports ``rsjobs.worker`` (and
``rsjobs.workflows`` imports nothing of this package).
"""

from .app import create_app
from .auth import Auth, Principal
from .config import WebConfig

__all__ = ["Auth", "Principal", "WebConfig", "create_app"]
