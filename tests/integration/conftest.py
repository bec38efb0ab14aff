"""Fixtures of the integration tier beyond the session-wide ones in tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.browser_support import launch


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Headless Chromium (Debian's package) under Playwright; skips without Playwright."""
    api = pytest.importorskip("playwright.async_api")
    async with api.async_playwright() as pw:
        b = await launch(pw)
        yield b
        await b.close()
