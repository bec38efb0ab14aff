"""Names and request values are checked whole: a trailing newline or a non-integer number
is refused before anything reaches Redis."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest

from rsjobs import ConfigError, Registry, Worker
from rsjobs.bulk import check_filter
from rsjobs.client import MAX_MS, _check_request
from rsjobs.limits import check_rate, check_type
from rsjobs.names import NAME_SCHEMA, OWNER_SCHEMA, is_type
from rsjobs.schemas import EnqueueRequest, TaskFilter
from rsjobs.store.keys import Keys, validate_name
from rsjobs.web.schemas import SubmitRequest
from rsjobs.workflows import Stage, TaskSpec, WorkflowDefinition

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


@pytest.mark.parametrize("name", BAD_NAMES)
def test_workflow_names_follow_the_same_rule(name: str) -> None:
    """Definitions, stages and items are checked by the same rule as queues (a trailing
    newline passed the anchored pattern they had of their own)."""
    with pytest.raises(ConfigError, match="invalid item"):
        TaskSpec(item=name, type="t").plan()
    with pytest.raises(ConfigError, match="invalid stage name"):
        Stage(name, [TaskSpec(item="a", type="t")]).plan(None)
    with pytest.raises(ConfigError, match="invalid definition name"):
        WorkflowDefinition(name, [Stage("s", [TaskSpec(item="a", type="t")])])


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_schema_patterns_refuse_what_the_rule_refuses(name: str) -> None:
    import msgspec

    Name = Annotated[str, msgspec.Meta(pattern=NAME_SCHEMA)]
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(name, Name)
    Owner = Annotated[str, msgspec.Meta(pattern=OWNER_SCHEMA)]
    if not name.strip() or any(c.isspace() for c in name):  # owners allow more
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(name, Owner)
    assert msgspec.convert("gpu.high-1", Name) == "gpu.high-1"
    assert msgspec.convert("alice@example.org", Owner) == "alice@example.org"


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


BAD_TYPES = ["a b", "t\n", "\u2460", "", "t" * 201, "t\x00", "t*", "t{x}"]


@pytest.mark.parametrize("type_", BAD_TYPES)
def test_a_bad_task_type_is_refused_everywhere(type_: str) -> None:
    """Task types follow one rule (names' characters with ':' and '/'): at submit, in
    filters and in the limits' settings."""
    assert not is_type(type_)
    with pytest.raises(ConfigError, match="invalid task type"):
        _check_request(EnqueueRequest(type=type_), 1000)
    with pytest.raises(ConfigError, match="invalid task type"):
        check_type(type_)
    with pytest.raises(ConfigError, match="invalid type"):
        check_filter(TaskFilter(type=type_))
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode({"type": type_}), type=SubmitRequest)


@pytest.mark.parametrize("type_", ["t", "image.resize", "mail:send", "a/b-c_d", "t" * 200])
def test_a_good_task_type_is_taken(type_: str) -> None:
    assert is_type(type_) and check_type(type_) == type_
    msgspec.json.decode(msgspec.json.encode({"type": type_}), type=SubmitRequest)


@pytest.mark.parametrize("per_second", [0, -1, 1e-9, 0.0009, 100_001, 1e308,
                                        float("nan"), float("inf"), True, "5"])  # fmt: skip
def test_an_absurd_rate_is_refused(per_second: object) -> None:
    with pytest.raises(ConfigError, match="a rate must be"):
        check_rate(per_second, None)


def test_the_slowest_and_fastest_rates_are_taken() -> None:
    assert check_rate(0.001, None) == (0.001, 1)
    assert check_rate(100_000, None) == (100_000.0, 100_000)
