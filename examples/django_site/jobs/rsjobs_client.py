"""One :class:`rsjobs.SyncClient` per process, made on first use.

Django serves requests from many threads (``runserver``, gunicorn ``--threads``): they
all share this client, whose one event loop thread runs their calls side by side. After a
fork (gunicorn's pre-forked workers) it starts a loop of its own in each child.
"""

import threading

from django.conf import settings

from rsjobs import SyncClient

_lock = threading.Lock()
_client: SyncClient | None = None


def client() -> SyncClient:
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = SyncClient(settings.RSJOBS_URL, source="api")
    return _client
