"""What the browser tests share: Debian's Chromium driven by Playwright, skipped without it.

Test modules use ``pytestmark = MARKS`` and open pages with :func:`open_page`; the
``browser`` fixture (``tests/conftest.py``) launches Chromium with
:func:`launch`.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

CHROMIUM = os.environ.get("RSJOBS_CHROMIUM", "/usr/bin/chromium")

MARKS = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"{CHROMIUM} not found: run tools/install-browser.sh (Debian's chromium)",
    ),
]


async def launch(pw: Any) -> Any:
    """Chromium as the browser tests run it (headless, no sandbox: CI runs as root)."""
    return await pw.chromium.launch(
        executable_path=CHROMIUM,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update"],
    )  # fmt: skip


async def open_page(browser: Any, url: str) -> tuple[Any, list[str], list[str]]:
    """A new page at ``url``, with the page errors and request URLs it will collect."""
    page = await browser.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    await page.goto(url)
    return page, errors, requests
