"""The name rules, once: what a namespace, queue, stage, item or definition name may be,
and what an owner name may be.

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
    "is_external",
    "is_name",
    "is_owner",
    "validate_name",
]

_NAME_CHARS = r"[A-Za-z0-9_.\-]{1,64}"
# no '/' or space (dedup keys are scoped as "<owner>/<key>"), no ':' (a token's role suffix)
_OWNER_CHARS = r"[A-Za-z0-9_.@\-]{1,128}"

# an outside job's id (a provider's): ':' and '/' too, as provider ids often have them
_EXTERNAL_CHARS = r"[A-Za-z0-9_.:/\-]{1,200}"

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


def is_name(value: object) -> bool:
    """Whether ``value`` is a string that follows the name rule."""
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def is_external(value: object) -> bool:
    """Whether ``value`` is a string that follows the external id rule."""
    return isinstance(value, str) and EXTERNAL.fullmatch(value) is not None


def is_owner(value: object) -> bool:
    """Whether ``value`` is a string that follows the owner rule."""
    return isinstance(value, str) and OWNER.fullmatch(value) is not None


def validate_name(kind: str, value: str) -> str:
    """Return ``value`` when it follows the name rule, else raise :class:`ConfigError`
    (a ``ValueError``) naming ``kind`` ("queue", "namespace", "stage name"...)."""
    if not is_name(value):
        raise ConfigError(
            f"invalid {kind} {value!r}: use 1-64 characters of letters, digits, '_', '.', '-'"
        )
    return value
