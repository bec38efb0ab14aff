"""Bearer tokens -> principals (an owner name, maybe admin), and who may see which task.

Configuration (read once, when the app is created):

- ``RSJOBS_TOKENS``: comma-separated ``TOKEN=OWNER[:admin]`` entries.
- ``RSJOBS_TOKENS_FILE``: a file, either JSON (``{"TOKEN": "OWNER"}``,
  ``{"TOKEN": {"owner": "OWNER", "role": "admin"}}`` or a list of
  ``{"token": ..., "owner": ..., "role": ...}``) or lines of ``TOKEN=OWNER[:admin]``
  (blank lines and ``#`` comments ignored).
- ``RSJOBS_ADMIN_TOKEN``: one admin token (owner name ``admin``).

Tokens are kept only as SHA-256 digests, looked up by digest. A token sees and cancels the
tasks of its owner only; another owner's task answers 404, exactly like a task that does
not exist, so ids cannot be probed. Admin tokens see every task. Without any token the app
refuses to start, unless it is told that this is a local development run (``dev``), where
requests without a token act as an anonymous admin.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
from starlette.requests import Request

from ..errors import ConfigError
from ..names import is_owner

__all__ = ["ANONYMOUS", "Auth", "Principal", "parse_entries"]

_ROLES = ("user", "admin")


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """Who is asking: an owner name (``""`` when anonymous) and whether it is an admin."""

    owner: str
    admin: bool = False
    anonymous: bool = False

    def may_see(self, task_owner: str) -> bool:
        return self.admin or (bool(self.owner) and task_owner == self.owner)

    @property
    def source(self) -> str:
        """Who acts, as a task's history records it: ``owner:<name>``, ``admin:<name>``,
        or ``anonymous`` (a dev-mode request without a token)."""
        if self.anonymous:
            return "anonymous"
        return f"{'admin' if self.admin else 'owner'}:{self.owner}"


#: The caller of a dev-mode app that sent no token.
ANONYMOUS = Principal(owner="", admin=True, anonymous=True)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _check(token: str, owner: str, role: str, where: str) -> Principal:
    if not token or token != token.strip() or any(c.isspace() for c in token):
        raise ConfigError(f"{where}: a token must be non-empty and contain no whitespace")
    if not is_owner(owner):
        raise ConfigError(
            f"{where}: invalid owner {owner!r}: 1-128 letters, digits, '_', '.', '@', '-'"
        )
    if role not in _ROLES:
        raise ConfigError(f"{where}: unknown role {role!r} (expected one of {_ROLES})")
    return Principal(owner=owner, admin=role == "admin")


def parse_entries(text: str, where: str, sep: str = ",") -> list[tuple[str, Principal]]:
    """Parse ``TOKEN=OWNER[:ROLE]`` entries separated by ``sep`` (``"\\n"`` for files)."""
    out = []
    for n, raw in enumerate(text.split(sep), 1):
        item = raw.strip()
        if not item or item.startswith("#"):
            continue
        token, eq, rest = item.partition("=")
        if not eq:
            raise ConfigError(f"{where} entry {n}: expected TOKEN=OWNER[:admin]")
        owner, _, role = rest.strip().partition(":")
        out.append((token.strip(), _check(token.strip(), owner, role or "user", where)))
    return out


def _parse_json(data: Any, where: str) -> list[tuple[str, Principal]]:
    rows: list[tuple[str, Any]]
    if isinstance(data, dict):
        rows = list(data.items())
    elif isinstance(data, list):
        rows = []
        for item in data:
            if not isinstance(item, dict) or "token" not in item:
                raise ConfigError(f"{where}: list items must be objects with a 'token'")
            rows.append((item["token"], item))
    else:
        raise ConfigError(f"{where}: expected a JSON object or list")
    out = []
    for token, spec in rows:
        if isinstance(spec, str):
            owner, role = spec, "user"
        elif isinstance(spec, dict):
            owner, role = spec.get("owner", ""), spec.get("role", "user")
        else:
            raise ConfigError(f"{where}: token entries are an owner name or an object")
        if not isinstance(token, str) or not isinstance(owner, str) or not isinstance(role, str):
            raise ConfigError(f"{where}: tokens, owners and roles are strings")
        out.append((token, _check(token, owner, role, where)))
    return out


def load_file(path: str) -> list[tuple[str, Principal]]:
    """Tokens from a JSON file or a file of ``TOKEN=OWNER[:admin]`` lines."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read tokens file {path}: {exc.strerror}") from None
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"tokens file {path} is not valid JSON: {exc}") from None
        return _parse_json(data, f"tokens file {path}")
    return parse_entries(text, f"tokens file {path}", sep="\n")


class Auth:
    """The token table of one app, plus whether anonymous dev access is on."""

    def __init__(self, entries: Iterable[tuple[str, Principal]] = (), *, dev: bool = False):
        self.dev = dev
        self._by_digest: dict[bytes, Principal] = {}
        for token, principal in entries:
            d = _digest(token)
            known = self._by_digest.get(d)
            if known is not None and known != principal:
                raise ConfigError("the same token is configured for two different owners")
            self._by_digest[d] = principal

    def __len__(self) -> int:
        return len(self._by_digest)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        tokens: Mapping[str, str] | None = None,
        admin_token: str | None = None,
        dev: bool | None = None,
    ) -> Auth:
        """Tokens from ``tokens`` (token -> owner) and ``admin_token``, plus the environment.

        ``dev`` None means: read ``RSJOBS_WEB_DEV``.
        """
        env = os.environ if env is None else env
        entries: list[tuple[str, Principal]] = []
        for token, owner in (tokens or {}).items():
            entries.append((token, _check(token, owner, "user", "tokens")))
        if admin_token:
            entries.append((admin_token, _check(admin_token, "admin", "admin", "admin token")))
        if env.get("RSJOBS_TOKENS"):
            entries += parse_entries(env["RSJOBS_TOKENS"], "RSJOBS_TOKENS")
        if env.get("RSJOBS_TOKENS_FILE"):
            entries += load_file(env["RSJOBS_TOKENS_FILE"])
        if env.get("RSJOBS_ADMIN_TOKEN"):
            tok = env["RSJOBS_ADMIN_TOKEN"]
            entries.append((tok, _check(tok, "admin", "admin", "RSJOBS_ADMIN_TOKEN")))
        if dev is None:
            dev = env.get("RSJOBS_WEB_DEV", "").lower() in ("1", "true", "yes", "on")
        return cls(entries, dev=dev)

    def check_startable(self) -> None:
        """Refuse to serve with nobody allowed in, unless this is a local dev run."""
        if not self._by_digest and not self.dev:
            raise ConfigError(
                "no API tokens configured: set RSJOBS_TOKENS, RSJOBS_TOKENS_FILE or "
                "RSJOBS_ADMIN_TOKEN, or pass --dev (RSJOBS_WEB_DEV=1) for a local dev run "
                "without authentication"
            )

    def authenticate(self, token: str | None) -> Principal | None:
        """The principal for ``token`` (None = no token sent); None when refused."""
        if token is None:
            return ANONYMOUS if self.dev else None
        return self._by_digest.get(_digest(token))


def require_principal(
    auth: Auth, request: Request, *, allow_query: bool = False, params: tuple[str, ...] = ()
) -> Principal:
    """Who the request's bearer token names; a 401 :class:`ApiError` when nobody. Then a
    400 for a query parameter the route does not take: ``params``, and ``access_token``
    where ``allow_query`` accepts the token there."""
    from .http import ApiError, bearer_token, check_query

    who = auth.authenticate(bearer_token(request, allow_query=allow_query))
    if who is None:
        raise ApiError(
            401,
            "unauthorized",
            "a valid bearer token is required",
            {"WWW-Authenticate": 'Bearer realm="rsjobs"'},
        )
    check_query(request, (*params, "access_token") if allow_query else params)
    return who
