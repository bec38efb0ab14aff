"""Fixtures of the integration tier beyond the session-wide ones in tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rsjobs import Settings, connect
from rsjobs.workflows import WorkflowClient
from tests.integration.browser_support import launch
from tests.integration.wf_fixtures import NS
from tests.wf_support import character


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Headless Chromium (Debian's package) under Playwright; skips without Playwright."""
    api = pytest.importorskip("playwright.async_api")
    async with api.async_playwright() as pw:
        b = await launch(pw)
        yield b
        await b.close()


@pytest.fixture
async def wf(redis_url: str, tmp_path: Path) -> AsyncIterator[WorkflowClient]:
    """A workflow client of the character test pipeline, whose handlers fail or hang on the
    flag files a test puts in ``tmp_path`` (see ``tests.wf_support.character``)."""
    c = WorkflowClient(
        connect(redis_url), Settings(namespace=NS), definitions=[character(flags=str(tmp_path))]
    )
    yield c
    await c.close()
