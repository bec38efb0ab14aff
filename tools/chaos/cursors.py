"""Cursor probes of the hostile-client mix: what a client that reads, crafts and passes
on list cursors gets (docs: rsjobs/store/seal.py).

One owner (A) lists a page of its tasks and gets a cursor. Then:

* ``genuine``: A asks for the next page with it: it must work, and show A's tasks only;
* ``cross_owner``: another owner (B) presents A's cursor;
* ``cross_filter``: A presents it with other filters;
* ``altered`` / ``truncated``: one character changed, the end cut off;
* ``crafted_*``: texts no list handed out (a stream id, random sealed-looking bytes, a
  task id of the page, the ``<time>:<id>`` form of an unsealed cursor), to the task list,
  the dead letters and the workflow list.

Each crafted one must be refused as a bad cursor (400 ``invalid_cursor`` through the web
app, :class:`rsjobs.ConfigError` through the Python API) and its answer must reveal none
of the page's ids nor A's name; the cursor text itself must not hold them either.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import msgspec

from rsjobs.client import Client
from rsjobs.errors import ConfigError

from .records import CursorProbe
from .supervisor import now_ms
from .transient import answer

__all__ = ["CursorProber", "cursor_leaks", "text_leaks"]

#: the owners whose tasks are listed (tools.chaos.workload.OWNERS: both have tasks)
OWNER_A, OWNER_B = "alice", "bob"
#: how long a probe is retried through faults
RETRY_S = 30.0
PAGE = 3


def text_leaks(text: str, secrets: list[str]) -> list[str]:
    """The ``secrets`` that ``text`` reveals."""
    return [s for s in secrets if s and s in text]


def cursor_leaks(cursor: str, secrets: list[str]) -> list[str]:
    """The ``secrets`` a cursor's text reveals, as text or decoded (base64url; a hex id
    also as its raw bytes)."""
    found = text_leaks(cursor, secrets)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        return found
    for s in secrets:
        forms = [s.encode()]
        try:
            forms.append(bytes.fromhex(s))
        except ValueError:
            pass
        if s not in found and any(f and f in raw for f in forms):
            found.append(s)
    return found


def _altered(cursor: str) -> str:
    i = len(cursor) // 2
    return cursor[:i] + ("A" if cursor[i] != "A" else "B") + cursor[i + 1 :]


def _crafted(ids: list[str]) -> dict[str, str]:
    sealed_like = base64.urlsafe_b64encode(b"\x01" + os.urandom(47)).rstrip(b"=").decode()
    return {
        "crafted_stream_id": "0-0",
        "crafted_sealed": sealed_like,
        "crafted_task_id": ids[0],
        "crafted_plain": f"1700000000000:{ids[0]}",
    }


class CursorProber:
    """Runs the cursor probes through one channel ("client" or "http") and records them."""

    def __init__(
        self, client: Client, http: httpx.AsyncClient | None, tokens: dict[str, str]
    ) -> None:
        self.client = client
        self.http = http
        self.tokens = tokens
        self.probes: list[CursorProbe] = []

    async def _retry(self, call: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        return await answer(call, RETRY_S)

    def _note(
        self,
        seq: int,
        channel: str,
        variant: str,
        route: str,
        outcome: str,
        status: int = 0,
        error: str = "",
        leaked: list[str] | None = None,
    ) -> None:
        self.probes.append(
            CursorProbe(
                seq=seq,
                channel=channel,
                variant=variant,
                route=route,
                at_ms=now_ms(),
                outcome=outcome,
                status=status,
                error=error[:300],
                leaked=leaked or [],
            )
        )

    async def probe(self, seq: int, channel: str) -> None:
        first = await self._first_page(channel)
        if first is None:
            self._note(seq, channel, "first_page", "/tasks", "unanswered")
            return
        ids, cursor = first
        if cursor is None:
            self._note(seq, channel, "first_page", "/tasks", "unanswered", error="no cursor")
            return
        secrets = [*ids, OWNER_A]
        leaked = cursor_leaks(cursor, secrets)
        if leaked:
            self._note(seq, channel, "cursor_text", "/tasks", "accepted", leaked=leaked)
        asks: list[tuple[str, str, str, dict[str, str]]] = [
            ("genuine", "/tasks", OWNER_A, {"cursor": cursor}),
            ("cross_owner", "/tasks", OWNER_B, {"cursor": cursor}),
            ("cross_filter", "/tasks", OWNER_A, {"cursor": cursor, "state": "SUCCEEDED"}),
            ("altered", "/tasks", OWNER_A, {"cursor": _altered(cursor)}),
            ("truncated", "/tasks", OWNER_A, {"cursor": cursor[:-3]}),
        ]
        for name, text in _crafted(ids).items():
            asks.append((name, "/tasks", OWNER_A, {"cursor": text}))
            asks.append((name, "/deadletters", "", {"cursor": text}))
            asks.append((name, "/workflows", "", {"cursor": text}))
        for variant, route, owner, params in asks:
            await self._ask(seq, channel, variant, route, owner, params, secrets)

    async def _first_page(self, channel: str) -> tuple[list[str], str | None] | None:
        if channel == "http":
            answered, r = await self._retry(lambda: self._get("/tasks", OWNER_A, {}))
            if not answered or not isinstance(r, httpx.Response) or r.status_code != 200:
                return None
            body = r.json()
            return [str(i["id"]) for i in body.get("items", [])], body.get("cursor")
        answered, page = await self._retry(
            lambda: self.client.list_tasks(owner=OWNER_A, limit=PAGE)
        )
        if not answered or isinstance(page, BaseException):
            return None
        return [i.id for i in page.items], page.cursor

    async def _get(self, route: str, owner: str, params: dict[str, str]) -> httpx.Response:
        assert self.http is not None
        # an owner's token lists that owner's tasks; '' = the admin token (the default)
        headers = {"Authorization": f"Bearer {self.tokens[owner]}"} if owner else {}
        query = {"limit": str(PAGE), **params}
        return await self.http.get(route, params=query, headers=headers)

    def _call(self, route: str, owner: str, params: dict[str, str]) -> Callable[[], Awaitable[Any]]:
        c, cursor, state = self.client, params["cursor"], params.get("state")
        if route == "/deadletters":
            return lambda: c.deadletters(cursor=cursor, limit=PAGE)
        if route == "/workflows":
            return lambda: c.list_workflows(cursor=cursor, limit=PAGE)
        return lambda: c.list_tasks(owner=owner, state=state, cursor=cursor, limit=PAGE)

    async def _ask(self, seq: int, channel: str, variant: str, route: str, owner: str,
                   params: dict[str, str], secrets: list[str]) -> None:  # fmt: skip
        genuine = variant == "genuine"
        if channel == "http":
            answered, got = await self._retry(lambda: self._get(route, owner, params))
        else:
            answered, got = await self._retry(self._call(route, owner, params))
        if not answered:
            self._note(seq, channel, variant, route, "unanswered")
            return
        if isinstance(got, httpx.Response):
            await self._answered_http(seq, variant, route, owner, got, secrets)
            return
        if isinstance(got, ConfigError):
            leaked = text_leaks(str(got), secrets)
            self._note(seq, channel, variant, route, "refused", error=str(got), leaked=leaked)
        elif isinstance(got, BaseException):
            error = f"{type(got).__name__}: {got}"
            self._note(seq, channel, variant, route, "mishandled", error=error)
        else:  # a page
            others = [i.owner for i in got.items if i.owner != OWNER_A] if genuine else []
            self._note(seq, channel, variant, route, "accepted", leaked=others)

    async def _answered_http(self, seq: int, variant: str, route: str, owner: str,
                             r: httpx.Response, secrets: list[str]) -> None:  # fmt: skip
        try:
            body = msgspec.json.decode(r.content)
        except msgspec.DecodeError:
            body = None
        if r.status_code == 200 and isinstance(body, dict):
            items = body.get("items") or []
            others = (
                [str(i.get("owner")) for i in items if i.get("owner") != OWNER_A]
                if variant == "genuine"
                else []
            )
            self._note(seq, "http", variant, route, "accepted", 200, leaked=others)
            return
        code = str(body.get("error") or "") if isinstance(body, dict) else ""
        leaked = text_leaks(r.text, secrets)
        outcome = "refused" if r.status_code == 400 and code == "invalid_cursor" else "mishandled"
        error = f"{code}: {r.text[:200]}"
        self._note(seq, "http", variant, route, outcome, r.status_code, error, leaked)
