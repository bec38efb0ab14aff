"""The reply enums say what the script headers say: every word a script answers is a
member, every code it answers has a name; and the one code -> exception map."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from rsjobs import InvalidTransition, TaskNotFound
from rsjobs.store.replies import (
    Beat,
    Code,
    DeadlineOutcome,
    QuarantineOutcome,
    Recovery,
    WfCode,
    error_of,
)
from rsjobs.workflows import ActionRefused, WorkflowNotFound


def _returns(script: str) -> str:
    src = (resources.files("rsjobs") / "scripts" / f"{script}.lua").read_text(encoding="utf-8")
    header = src[: src.index("]]")]
    block = header[header.index("Returns:") :]
    return re.split(r"\n(?:An error|Events:)", block)[0]


@pytest.mark.parametrize(
    "script, enum",
    [("reclaim", Recovery), ("deadline", DeadlineOutcome)],
)
def test_word_replies_are_the_enum(script: str, enum: type[Recovery | DeadlineOutcome]) -> None:
    words = re.findall(r"^  ([A-Z_]+) {2,}", _returns(script), re.M)
    assert set(words) == {m.value for m in enum}


def test_the_release_steps_words_are_the_enum() -> None:
    from rsjobs.store.replies import Released

    words = set(
        re.findall(r"\b(RELEASED|CANCELLED|COUNTED|STALE|GONE|DONE)\b", _returns("successors"))
    )
    assert words == {m.value for m in Released}


def test_a_reply_that_wrote_a_release_entry_says_so_and_still_reads_as_a_pair() -> None:
    from rsjobs.store.replies import TaskReply

    plain, releasing = TaskReply.of([1, "FAILED"]), TaskReply.of([1, "FAILED", 1])
    assert not plain.released and releasing.released
    assert tuple(releasing) == tuple(plain) == (Code.APPLIED, "FAILED")
    code, state = releasing
    assert (code, state) == (Code.APPLIED, "FAILED")


def test_heartbeat_and_quarantine_words() -> None:
    words = set(re.findall(r"^  ([A-Z]+) {2,}", _returns("heartbeat"), re.M))
    assert words == {"OK", "LOST", "GONE"}  # and "<STATE>": every state but RUNNING
    assert {"PENDING", "PAUSED", "CANCELLED", "SUCCEEDED", "UNKNOWN"} <= {m.value for m in Beat}
    assert "RUNNING" not in {m.value for m in Beat}
    assert Beat.of("WHATEVER") is Beat.UNKNOWN
    quarantine = set(re.findall(r"\b(DEADLETTERED|REMOVED|GONE)\b", _returns("quarantine")))
    assert quarantine == {m.value for m in QuarantineOutcome}


@pytest.mark.parametrize(
    "script", ["control", "finish", "start", "retry", "queue", "defer", "resolve", "poll", "after"]
)
def test_task_script_codes_have_names(script: str) -> None:
    codes = {int(c) for c in re.findall(r"^\s+\{?(-?\d+)[,} ]", _returns(script), re.M)}
    assert codes, script
    assert codes <= {m.value for m in Code}, codes


@pytest.mark.parametrize(
    "script",
    [
        "wf_start",
        "wf_spawn",
        "wf_finish",
        "wf_gate",
        "wf_retry",
        "wf_regenerate",
        "wf_cancel",
        "wf_sync",
        "wf_abort",
    ],
)
def test_workflow_script_codes_have_names(script: str) -> None:
    codes = {int(c) for c in re.findall(r"(?:^\s+|, |: )(-?\d) ", _returns(script), re.M)}
    assert codes, script
    assert codes <= {m.value for m in WfCode}, codes


def test_one_map_from_codes_to_exceptions() -> None:
    assert isinstance(error_of(Code.NOT_FOUND, subject="t", action="PAUSE"), TaskNotFound)
    refused = error_of(Code.REFUSED, subject="t", action="RESUME", state="PENDING")
    assert isinstance(refused, InvalidTransition) and refused.state == "PENDING"
    # the workflow codes share values with the task codes: they map by their own enum
    assert isinstance(error_of(WfCode.NOT_FOUND, subject="w", action="CANCEL"), WorkflowNotFound)
    stale = error_of(WfCode.STALE, subject="w", action="RETRY", state="RUNNING")
    assert isinstance(stale, ActionRefused) and "kept changing" in stale.reason
    why = error_of(WfCode.REFUSED, subject="w", action="CONFIRM", state="X", message="because")
    assert isinstance(why, ActionRefused) and why.reason == "because"
    with pytest.raises(ValueError):
        error_of(Code.APPLIED, subject="t", action="CANCEL")


def test_codes_read_from_replies_like_the_enum() -> None:
    from rsjobs.store.replies import Code, code_of, text

    for c in Code:
        assert (
            code_of(c.value) is c and code_of(str(c.value)) is c and code_of(b"1") is Code.APPLIED
        )
    with pytest.raises(ValueError, match="not a valid Code"):
        code_of(7)
    assert [text(v) for v in ("a", b"b", None, 3)] == ["a", "b", "", "3"]
