"""``GET /events``: the namespace's events stream as server-sent events, for the
operator's live pages (admin only; ``?access_token=`` since ``EventSource`` sends no
headers).

- Each entry of the events stream is one SSE event whose ``id`` is the entry's id
  (``<ms>-<seq>``) and whose ``data`` is a :class:`rsjobs.schemas.NamespaceEvent`: a
  task's history entry (task id, event, state after it, queue, workflow id when the task
  is a workflow's) or a workflow's (workflow id, event).
- Without ``Last-Event-ID`` the stream starts at the end (what happens from now on); with
  it, it replays the entries after that id still held (the stream is trimmed to
  ``events_maxlen`` and by retention), then goes on live. When entries after that id were
  trimmed away, an ``event: gap`` comes first (``data``: ``{"after": <id>}``): reload.
- An idle connection gets a comment line every ``keepalive_ms``; a stream ends after
  ``live_stream_ms`` (EventSource reconnects with Last-Event-ID: nothing is missed).

Live, the connection holds no entry in memory and no Redis connection of its own: the
hub's one reader wakes it (:class:`rsjobs.web.hub.Tail`), and it reads the stream after
the last id it sent, a page at a time, so it never misses nor repeats an entry.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..errors import RedisUnavailable, StoreError
from ..schemas import NamespaceEvent
from ..store.events import Events, MergedEvents, order
from .handlers import Handlers, StreamHold
from .http import RESUME_PARAMS, ApiError, last_event_id
from .hub import Tail
from .service import Service
from .sse import KEEPALIVE, EventStreamResponse

__all__ = ["PAGE", "live_routes", "namespace_events"]

#: entries read (and sent) at a time
PAGE = 500
_STREAM_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
_encoder = msgspec.json.Encoder()


async def namespace_events(
    events: Events | MergedEvents,
    tail: Tail,
    after: str,
    *,
    gap: bool,
    keepalive_ms: int,
    retry_ms: int,
    lifetime_ms: int,
    release: Callable[[], None],
) -> AsyncIterator[bytes]:
    """The SSE byte stream of one connection, from the entry after ``after``. ``tail``
    must have been registered before the first read, so the hub wakes it for anything
    written after."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + lifetime_ms / 1000 if lifetime_ms else float("inf")
    try:
        yield b"retry: %d\n\n" % retry_ms
        if gap:
            yield b"event: gap\ndata: %s\n\n" % _encoder.encode({"after": after})
        while not tail.closed:
            described, last, n = await _page(events, after)
            if n:
                out = [
                    b"id: %s\ndata: %s\n\n" % (e.id.encode(), _encoder.encode(e)) for e in described
                ]
                yield b"".join(out)
                after = last
                if n == PAGE:
                    continue  # more is there already
            left = ends - loop.time()
            if left <= 0:
                return  # its lifetime is over: the client resumes with Last-Event-ID
            if not tail.grew:
                try:
                    async with asyncio.timeout(min(keepalive_ms / 1000, left)):
                        await tail.wake.wait()
                except TimeoutError:
                    yield KEEPALIVE
                    continue
            if tail.closed:
                return  # shutting down: the client resumes with Last-Event-ID
            tail.take()
    except (RedisUnavailable, StoreError):
        return  # Redis went away: end it; the client reconnects with Last-Event-ID
    finally:
        release()


async def _page(events: Events | MergedEvents, after: str) -> tuple[list[NamespaceEvent], str, int]:
    """The events after ``after`` (a page), the position after them, how many were read."""
    if isinstance(events, MergedEvents):
        merged = await events.after(after, PAGE)
        last = merged[-1][0] if merged else after
        return await events.describe(merged), last, len(merged)
    rows = await events.after(after, PAGE)
    return await events.describe(rows), rows[-1][0] if rows else after, len(rows)


class Live(Handlers):
    """The handler, bound to the app's :class:`Service`."""

    async def events(self, request: Request) -> Response:
        who = self.principal(request, allow_query=True, params=RESUME_PARAMS)
        if not who.admin:
            raise ApiError(403, "forbidden", "the namespace's events need an admin token")
        svc = self.svc
        stores = await svc.store.each()
        events: Events | MergedEvents
        if len(stores) > 1:
            # a sharded namespace: each event's id is the position in every shard's stream
            events = MergedEvents([s.events for s in stores])
            last = last_event_id(request, events.parse) or None
            newest = await events.last_generated()
            past = last is not None and events.after_last(last, newest)
        else:
            last = last_event_id(request) or None
            if last is not None and not _STREAM_ID.fullmatch(last):
                raise ApiError(
                    400,
                    "invalid_last_event_id",
                    "Last-Event-ID: an id this stream sent (<ms>-<seq>)",
                )
            events = svc.store.events
            newest = await events.last_generated()
            past = last is not None and order(last) > order(newest)
        if past:
            raise ApiError(
                400, "invalid_last_event_id", "Last-Event-ID is after the stream's last event"
            )
        hold = StreamHold(svc, request, who)
        release = hold.release
        try:
            await svc.start()
            tail = svc.hub.tail()
            hold.hold(lambda: svc.hub.untail(tail))
            gap = last is not None and await events.trimmed_past(last)
        except BaseException:
            release()
            raise
        body = namespace_events(
            events,
            tail,
            last or newest,
            gap=gap,
            keepalive_ms=self.config.keepalive_ms,
            retry_ms=self.config.sse_retry_ms,
            lifetime_ms=self.config.live_stream_ms,
            release=release,
        )
        return EventStreamResponse(body, release)


def live_routes(service: Service) -> list[BaseRoute]:
    return [Route("/events", Live(service).events, methods=["GET"])]
