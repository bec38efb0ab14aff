"""The provider callbacks: outside services end the wait of a deferred attempt.

``POST /callbacks/{token}``: the token (:mod:`rsjobs.callbacks`, from the handler's
``ctx.callback_url()``) names the namespace, task and attempt, signed with the callback
secret. ``POST /callbacks/external/{provider}/{external_id}``: the outside job's own id,
the request signed in ``X-Rsjobs-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret,
"<t>.<provider>/<external_id>.<body>")>`` (:func:`rsjobs.callbacks.body_signature`): a
body signed for another job, a timestamp outside ``callback_tolerance_ms`` or the old
``sha256=`` form are refused. Either way the signature is checked before anything is read
from Redis: a forged, altered, expired, misdirected or missing one is a 401 and writes
nothing. Then the body (``{"status": "succeeded", "result": ...}`` or
``{"status": "failed", "error": ...}``) goes through the state machine (``resolve.lua``):

* 200 ``changed: true``: the result ended the wait; ``changed: false``: a repeat of it
  (nothing written);
* 409 ``refused``: the attempt is not waiting any more (finished, timed out past its
  longest wait, cancelled, superseded by a workflow's regenerate) or is not the current
  one: recorded in the task's history (coalesced), nothing else written;
* 404: no such task (or callbacks are not enabled: no secret configured).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..callbacks import check_body_signature, verify
from ..errors import BadSignature, ChargeError, ConfigError, PayloadError
from ..external import Resolution, resolve_external
from ..names import is_external, is_name
from ..store import Code
from .handlers import Handlers
from .http import ApiError, check_query, json_response, read_body
from .schemas import CallbackRequest, CallbackResult, decode_body
from .service import Service

__all__ = ["Callbacks", "callback_routes"]

#: how the history names the source of a callback's result
SOURCE = "callback"


def _unauthorized(why: str) -> ApiError:
    return ApiError(401, "bad_signature", why)


class Callbacks(Handlers):
    """The callback handlers, bound to one :class:`Service`."""

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self.secret = service.config.callback_secret
        self.tolerance_s = service.config.callback_tolerance_ms // 1000
        #: the clock signed callbacks' timestamps are checked against (unix s)
        self.clock: Callable[[], float] = time.time

    def _enabled(self) -> str:
        if not self.secret:
            raise ApiError(404, "not_found", "callbacks are not enabled on this server")
        return self.secret

    async def by_token(self, request: Request) -> Response:
        check_query(request)
        secret = self._enabled()
        try:
            claims = verify(secret, request.path_params["token"])
        except BadSignature as exc:
            raise _unauthorized(str(exc)) from None
        if claims.namespace != self.svc.store.keys.namespace:
            raise _unauthorized("callback token of another namespace")
        raw = await read_body(request, self.config.max_body_bytes)
        req = self._decode(raw)
        outcome = await self._resolve(req, task_id=claims.task_id, attempt=claims.attempt)
        return self._answer(outcome, claims.task_id)

    async def by_external_id(self, request: Request) -> Response:
        check_query(request)
        secret = self._enabled()
        raw = await read_body(request, self.config.max_body_bytes)
        provider = request.path_params["provider"]
        external_id = request.path_params["external_id"]
        try:
            check_body_signature(
                secret,
                provider,
                external_id,
                raw,
                request.headers.get("x-rsjobs-signature"),
                tolerance_s=self.tolerance_s,
                clock=self.clock,
            )
        except BadSignature as exc:
            raise _unauthorized(str(exc)) from None
        if not is_name(provider) or not is_external(external_id):
            raise ApiError(
                400,
                "invalid_id",
                "provider: 1-64 letters, digits or '._-'; external id: 1-200 letters, "
                "digits or '._:/-'",
            )
        req = self._decode(raw)
        outcome = await self._resolve(req, external_id=external_id, provider=provider)
        return self._answer(outcome, external_id)

    @staticmethod
    def _decode(raw: bytes) -> CallbackRequest:
        if not raw.strip():
            raise ApiError(400, "invalid_json", "the request body is empty; send a JSON object")
        try:
            return decode_body(raw, CallbackRequest)
        except msgspec.ValidationError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
        except msgspec.DecodeError as exc:
            raise ApiError(400, "invalid_json", str(exc)) from None

    async def _resolve(
        self,
        req: CallbackRequest,
        *,
        task_id: str | None = None,
        attempt: int | None = None,
        external_id: str = "",
        provider: str = "default",
    ) -> Resolution:
        ok = req.status == "succeeded"
        try:
            return await resolve_external(
                self.svc.store,
                event="COMPLETE" if ok else "FAIL",
                task_id=task_id,
                attempt=attempt,
                external_id=external_id,
                provider=provider,
                result=req.result,
                error=req.error,
                retryable=req.retryable,
                via="callback",
                source=SOURCE,
                charges=req.charges,
            )
        except PayloadError as exc:
            raise ApiError(413, "payload_too_large", str(exc)) from None
        except ChargeError as exc:
            raise ApiError(422, "invalid_charges", str(exc)) from None
        except ConfigError as exc:
            raise ApiError(400, "invalid_id", str(exc)) from None

    @staticmethod
    def _answer(outcome: Resolution, named: str) -> Response:
        if outcome.code is Code.NOT_FOUND:
            raise ApiError(404, "not_found", f"no task waits on {named}")
        if outcome.code in (Code.REFUSED, Code.LEASE_LOST):
            why = (
                f"task {outcome.task_id} is {outcome.state}: this attempt is not waiting "
                "for a result any more (recorded in its history)"
            )
            if outcome.code is Code.LEASE_LOST:
                why = (
                    f"task {outcome.task_id} waits on another attempt or outside job "
                    "(recorded in its history)"
                )
            raise ApiError(409, "refused", why)
        changed = outcome.code is Code.APPLIED
        return json_response(
            CallbackResult(id=outcome.task_id, state=outcome.state, changed=changed)
        )


def callback_routes(service: Service) -> list[BaseRoute]:
    """The provider callback routes."""
    cb = Callbacks(service)
    return [
        Route(
            "/callbacks/external/{provider}/{external_id:path}",
            cb.by_external_id,
            methods=["POST"],
        ),
        Route("/callbacks/{token}", cb.by_token, methods=["POST"]),
    ]
