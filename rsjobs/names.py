"""The name rules, once: what a namespace, queue, stage, item, definition or provider name
may be, what a task type, an owner name and an outside job's id may be.

One rule underneath: ASCII letters, digits, '_', '.' and '-', nothing else (no space, no
control character, no other script), with a length; owners add '@' (e-mail addresses),
task types and external ids add ':' and '/' (``"mail:send"``, a provider's
``"jobs/123"``).

Each rule is one character class with a length: compiled for Python (``fullmatch``: with
``match`` and ``$``, a trailing newline such as ``"q\\n"`` would pass), and spelled as the
anchored pattern msgspec's ``Meta(pattern=...)`` checks request bodies with (``\\Z``, not
``$``, for the same reason; the OpenAPI document turns ``\\Z`` into ECMA-262's ``$``).
"""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = [
    "EXTERNAL",
    "EXTERNAL_SCHEMA",
    "NAME",
    "NAME_SCHEMA",
    "OWNER",
    "OWNER_SCHEMA",
    "TYPE",
    "TYPE_RULE",
    "TYPE_SCHEMA",
    "is_external",
    "is_name",
    "is_owner",
    "is_type",
    "validate_name",
    "validate_type",
]

_NAME_CHARS = r"[A-Za-z0-9_.\-]{1,64}"
# no '/' or space (dedup keys are scoped as "<owner>/<key>"), no ':' (a token's role suffix)
_OWNER_CHARS = r"[A-Za-z0-9_.@\-]{1,128}"

# an outside job's id (a provider's): ':' and '/' too, as provider ids often have them
_EXTERNAL_CHARS = r"[A-Za-z0-9_.:/\-]{1,200}"
# a task type: the external id's characters ("mail:send", "image/resize"), 1-200 of them
_TYPE_CHARS = _EXTERNAL_CHARS

#: namespace, queue, stage, item and definition names
NAME = re.compile(_NAME_CHARS)
#: external ids (``is_external`` in fsm.lua)
EXTERNAL = re.compile(_EXTERNAL_CHARS)
EXTERNAL_SCHEMA = rf"^{_EXTERNAL_CHARS}\Z"
#: owner names (tokens, tasks, workflows)
OWNER = re.compile(_OWNER_CHARS)
#: the same rules as msgspec ``Meta`` patterns (anchored; ``\Z``, see the module)
NAME_SCHEMA = rf"^{_NAME_CHARS}\Z"
OWNER_SCHEMA = rf"^{_OWNER_CHARS}\Z"
#: task types
TYPE = re.compile(_TYPE_CHARS)
TYPE_SCHEMA = rf"^{_TYPE_CHARS}\Z"
#: what a refusal says each rule is
TYPE_RULE = "1-200 characters of letters, digits, '_', '.', ':', '/', '-'"


def is_name(value: object) -> bool:
    """Whether ``value`` is a string that follows the name rule."""
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def is_external(value: object) -> bool:
    """Whether ``value`` is a string that follows the external id rule."""
    return isinstance(value, str) and EXTERNAL.fullmatch(value) is not None


def is_owner(value: object) -> bool:
    """Whether ``value`` is a string that follows the owner rule."""
    return isinstance(value, str) and OWNER.fullmatch(value) is not None


def is_type(value: object) -> bool:
    """Whether ``value`` is a string that follows the task type rule."""
    return isinstance(value, str) and TYPE.fullmatch(value) is not None


def validate_type(value: object, kind: str = "task type") -> str:
    """Return ``value`` when it follows the task type rule, else raise
    :class:`ConfigError` naming the rule."""
    if not is_type(value):
        raise ConfigError(f"invalid {kind} {str(value)[:80]!r}: use {TYPE_RULE}")
    return value  # type: ignore[return-value]


def validate_name(kind: str, value: str) -> str:
    """Return ``value`` when it follows the name rule, else raise :class:`ConfigError`
    (a ``ValueError``) naming ``kind`` ("queue", "namespace", "stage name"...)."""
    if not is_name(value):
        raise ConfigError(
            f"invalid {kind} {value!r}: use 1-64 characters of letters, digits, '_', '.', '-'"
        )
    return value
