"""Labels: a few ``key: value`` texts a task carries (``{"character": "char_456", "user":
"u_9"}``), shown with it and indexed, so that lists filter by them (``label=user=u_9``).

The rules, checked here before anything is written (``fsm.lua`` checks their shape again,
``decode_labels``): at most :data:`MAX_LABELS` labels; a key of 1-32 ASCII letters,
digits, ``_``, ``.``, ``/`` or ``-``; a value of 1-64 printable characters. A task hash
keeps them as one JSON text, keys sorted (its field ``labels``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from .errors import ConfigError

__all__ = [
    "MAX_KEY",
    "MAX_LABELS",
    "MAX_VALUE",
    "decode_labels",
    "encode_labels",
    "parse_label",
    "validate_labels",
]

#: at most this many labels per task
MAX_LABELS = 8
#: characters of a key, and of a value
MAX_KEY = 32
MAX_VALUE = 64

_KEY = re.compile(r"[A-Za-z0-9_./-]{1,32}")
_encode = msgspec.json.Encoder()
_decode = msgspec.json.Decoder(dict[str, str])


def _key(k: object) -> str:
    if not isinstance(k, str) or not _KEY.fullmatch(k):
        raise ConfigError(
            f"label key {k!r}: 1-{MAX_KEY} ASCII letters, digits, '_', '.', '/' or '-'"
        )
    return k


def _value(k: str, v: object) -> str:
    if not isinstance(v, str) or not 1 <= len(v) <= MAX_VALUE or not v.isprintable():
        raise ConfigError(f"label {k!r}: its value must be 1-{MAX_VALUE} printable characters")
    return v


def validate_labels(labels: object) -> dict[str, str]:
    """``labels`` as a dict, or :class:`rsjobs.ConfigError` saying what is wrong."""
    if not isinstance(labels, Mapping):
        raise ConfigError("labels must be a mapping of key: value texts")
    if len(labels) > MAX_LABELS:
        raise ConfigError(f"at most {MAX_LABELS} labels per task (got {len(labels)})")
    return {_key(k): _value(k, v) for k, v in labels.items()}


def encode_labels(labels: Mapping[str, str] | None) -> str | None:
    """The JSON text a task hash keeps (keys sorted), None for no labels. Raises
    :class:`rsjobs.ConfigError`."""
    if not labels:
        return None
    checked = validate_labels(labels)
    return _encode.encode(dict(sorted(checked.items()))).decode()


def decode_labels(text: str) -> dict[str, str]:
    """The labels of a task hash's ``labels`` field ({} for none, or for a text that is
    not what rsjobs writes)."""
    if not text:
        return {}
    try:
        return _decode.decode(text)
    except msgspec.DecodeError:
        return {}


def parse_label(text: object) -> tuple[str, str]:
    """A label filter ``key=value`` as ``(key, value)``; raises :class:`rsjobs.ConfigError`."""
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(f"label filter {text!r}: expected key=value")
    key, _, value = text.partition("=")
    return _key(key), _value(key, value)
