"""Names and request values are checked whole: a trailing newline or a non-integer number
is refused before anything reaches Redis."""

from __future__ import annotations

from typing import Any

import pytest

from rsjobs import ConfigError, Registry, Worker
from rsjobs.client import MAX_MS, _check_request
from rsjobs.keys import Keys, validate_name
from rsjobs.schemas import EnqueueRequest

BAD_NAMES = ["q\n", "q\r\n", "\nq", "q q", "", "q" * 65, "q:x", "q{x}"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_name_is_refused_everywhere(name: str) -> None:
    with pytest.raises(ValueError, match="invalid queue"):
        validate_name("queue", name)
    with pytest.raises(ValueError, match="invalid namespace"):
        Keys(name)
    with pytest.raises(ConfigError, match="invalid queue"):
        _check_request(EnqueueRequest(type="t", queue=name), 1000)
    with pytest.raises(ConfigError, match="invalid queue"):
        Worker(Registry(), queues=[name], url="redis://127.0.0.1:1/0")


def test_good_names_pass() -> None:
    for name in ("q", "gpu.high-1", "A_b", "q" * 64):
        assert validate_name("queue", name) == name


@pytest.mark.parametrize(
    "field, value",
    [
        ("delay_ms", 1.5),
        ("delay_ms", MAX_MS + 1),
        ("delay_ms", 10**30),
        ("timeout_ms", True),
        ("wait_timeout_ms", -1),
        ("backoff_base_ms", "5"),
        ("backoff_max_ms", 10**20),
        ("max_attempts", 2.0),
        ("max_attempts", False),
        ("dedup_key", 5),
        ("owner", b"alice"),
    ],
)
def test_a_bad_request_value_is_a_config_error(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        _check_request(EnqueueRequest(type="t", **{field: value}), 1000)
