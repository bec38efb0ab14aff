"""HTTP plumbing shared by the routes: JSON answers, errors, bounded bodies, credentials."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..codec import MAX_DEPTH, too_deep
from ..ids import parse_id
from .schemas import ErrorBody, encode

log = logging.getLogger("rsjobs.web")

__all__ = [
    "BODY_DEPTH",
    "PAGE_PARAMS",
    "PROBLEM_JSON",
    "RESUME_PARAMS",
    "ApiError",
    "bearer_token",
    "check_query",
    "error_response",
    "etag_response",
    "is_ascii_number",
    "json_response",
    "last_event_id",
    "page_params",
    "read_body",
    "unavailable",
]


class ApiError(Exception):
    """An answer other than success: status, a short code and a sentence for people."""

    def __init__(
        self, status: int, code: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail
        self.headers = headers


def is_ascii_number(text: str, digits: int = 19) -> bool:
    """Whether ``text`` is 1 to ``digits`` ASCII digits: ``str.isdigit()`` also accepts
    superscripts ('\\u00b2', which ``int()`` refuses) and other scripts' digits ('\\u0661',
    which it reads as 1)."""
    return 0 < len(text) <= digits and text.isascii() and text.isdigit()


def unavailable() -> ApiError:
    """The answer while Redis cannot be reached (every route, the same shape)."""
    return ApiError(503, "redis_unavailable", "the task store is unavailable; retry later")


def store_error(exc: Exception) -> ApiError | None:
    """The answer for an error of the store behind a route (None: not one of those).

    Redis unreachable, frozen or failing over, or refusing the work for its own condition
    (:class:`rsjobs.StoreError`): 503 ``redis_unavailable``. Durable mode's replicas not
    confirming a write in time: 503 ``not_replicated`` (the write was applied; repeating
    the request is safe). A namespace or task of an earlier layout (``rsjobs migrate``
    not run): 503 ``not_migrated``, logged, nothing written. Stored data rsjobs cannot
    read, a task's or a workflow's (written by something else): 500 ``corrupt_data``,
    logged, the request changed nothing."""
    from ..errors import CorruptData, NotMigrated, NotReplicated, RedisUnavailable, StoreError

    if isinstance(exc, RedisUnavailable | StoreError):
        return unavailable()
    if isinstance(exc, NotMigrated):
        log.error("%s", exc)
        return ApiError(503, "not_migrated", str(exc))
    if isinstance(exc, NotReplicated):
        return ApiError(503, "not_replicated", str(exc), {"Retry-After": "1"})
    if isinstance(exc, CorruptData):
        log.error("corrupt stored data: %s", exc)
        return ApiError(500, "corrupt_data", str(exc))
    return None


def json_response(
    value: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(encode(value), status, headers, media_type="application/json")


#: the media type of every error answer (RFC 9457)
PROBLEM_JSON = "application/problem+json"


def error_response(exc: ApiError) -> Response:
    """``exc`` as an RFC 9457 problem document, its code in the ``error`` member."""
    try:
        title = HTTPStatus(exc.status).phrase
    except ValueError:
        title = "Error"
    body = ErrorBody(title=title, status=exc.status, detail=exc.detail, error=exc.code)
    return Response(encode(body), exc.status, exc.headers, media_type=PROBLEM_JSON)


#: what a GET that answers with an ETag sends along: revalidate every time (the document
#: changes as the task runs), and only the caller keeps it (it depends on the token)
_REVALIDATE = "private, no-cache"


def etag_response(request: Request, value: Any) -> Response:
    """``value`` as JSON with a strong ``ETag`` (a hash of the body); 304 with no body
    when ``If-None-Match`` names it (or is ``*``), so a poller pays one small answer
    while nothing changed. The comparison is weak, as RFC 9110 asks for If-None-Match."""
    body = encode(value)
    tag = f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'
    headers = {"ETag": tag, "Cache-Control": _REVALIDATE}
    if _matches(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return Response(body, 200, headers, media_type="application/json")


def _matches(header: str | None, tag: str) -> bool:
    if header is None:
        return False
    listed = {t.strip().removeprefix("W/") for t in header.split(",")}
    return "*" in listed or tag in listed


#: a JSON body nests one level above the payload (or workflow input) it carries
BODY_DEPTH = MAX_DEPTH + 1


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 past ``limit`` bytes (checked before reading
    when Content-Length is sent, and while reading otherwise), and with 422 when it nests
    deeper than :data:`BODY_DEPTH` (decoding it would exhaust the stack)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not is_ascii_number(declared):
            raise ApiError(400, "bad_request", "invalid Content-Length header")
        if int(declared) > limit:
            raise ApiError(413, "body_too_large", f"request body over the limit of {limit} bytes")
    ctype = request.headers.get("content-type")
    mime = (ctype or "application/json").split(";")[0].strip().lower()
    if mime != "application/json" and not mime.endswith("+json"):
        raise ApiError(415, "unsupported_media_type", "send the body as application/json")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"request body over the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if too_deep(body, BODY_DEPTH):
        raise ApiError(
            422,
            "invalid_body",
            f"the body nests more than {BODY_DEPTH} levels deep (a payload or input at "
            f"most {MAX_DEPTH})",
        )
    return body


def check_query(request: Request, allowed: tuple[str, ...] = ()) -> None:
    """400 when the query string has a parameter the route does not take: a misspelt one
    (``?limt=5``) would otherwise be ignored without a word."""
    unknown = sorted({k for k in request.query_params if k not in allowed})
    if unknown:
        names = ", ".join(repr(k[:40]) for k in unknown[:5])
        takes = ", ".join(allowed) if allowed else "none"
        raise ApiError(
            400, "unknown_parameter", f"unknown query parameter {names}; this route takes: {takes}"
        )


def bearer_token(request: Request, *, allow_query: bool = False) -> str | None:
    """The token of ``Authorization: Bearer ...`` (or ``?access_token=`` where a browser
    cannot send headers, i.e. EventSource). None when none was sent."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401,
                "unauthorized",
                "expected 'Authorization: Bearer <token>'",
                {"WWW-Authenticate": 'Bearer realm="rsjobs"'},
            )
        return token.strip()
    if allow_query:
        query = request.query_params.get("access_token")
        if query:
            return query
    return None


#: the query parameters of a history page, and of an event stream's resume point
PAGE_PARAMS = ("after", "limit")
RESUME_PARAMS = ("last_event_id",)


def page_params(request: Request) -> tuple[str, int]:
    """``after`` (an exclusive history entry id, default ``0-0``: a task's entries are
    numbered ``1``, ``2``..., a workflow's are stream ids) and ``limit`` (1-1000,
    default 100) of a history page request; raises a 400 :class:`ApiError` otherwise."""
    after = request.query_params.get("after", "0-0")
    try:
        parse_id(after)
    except ValueError:
        raise ApiError(
            400, "invalid_after", "after: a history entry id like 3 or 1700000000000-0"
        ) from None
    raw_limit = request.query_params.get("limit", "100")
    if not is_ascii_number(raw_limit, 4) or not 1 <= int(raw_limit) <= 1000:
        raise ApiError(400, "invalid_limit", "limit: an integer from 1 to 1000")
    return after, int(raw_limit)


def last_event_id(request: Request, check: Callable[[str], object] | None = None) -> str | None:
    """The resume point of an SSE request (``Last-Event-ID`` header, or ``last_event_id``
    in the query for a page that reconnects by hand; the header wins when both are sent); a
    400 :class:`ApiError` if either is malformed (``check``: what raises ValueError for a
    malformed one; default: a stream id)."""
    header = request.headers.get("last-event-id")
    query = request.query_params.get("last_event_id")
    # both are checked: a malformed one is refused even when the other one is there
    for given in (header, query):
        try:
            if given or check is None:
                (check or parse_id)(given or "0-0")
        except ValueError:
            raise ApiError(
                400, "invalid_last_event_id", "Last-Event-ID: an id this stream sent"
            ) from None
    return header or query
