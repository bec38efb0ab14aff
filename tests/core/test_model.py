"""The transition table, as data: terminal states are closed, every state is reachable."""

from __future__ import annotations

from rsjobs.model import RESTART, TERMINAL, TRANSITIONS, Event, State, allowed, is_terminal
from rsjobs.schemas import HistoryEntry
from tests.support.reference import replay


def test_states_and_events_cover_the_table() -> None:
    assert set(TRANSITIONS) == {s.value for s in State} | {""}
    for row in TRANSITIONS.values():
        for event, targets in row.items():
            assert event in {e.value for e in Event}
            assert targets <= {s.value for s in State}


def test_terminal_states_are_never_left() -> None:
    # the only event a terminal state accepts is the one that starts the task over as a
    # new task (RETRY, or REPLAY of a SUCCEEDED task), and it leads back to that state
    assert set(RESTART) == set(TERMINAL)
    for state in TERMINAL:
        assert TRANSITIONS[state] == {RESTART[state]: frozenset({state})}
        assert is_terminal(state)
        for event in Event:
            for target in State:
                ok = event.value == RESTART[state] and target.value == state
                assert allowed(state, event.value, target.value) == ok


def test_only_terminal_states_are_started_over() -> None:
    for state, row in TRANSITIONS.items():
        if state not in TERMINAL:
            assert not {"RETRY", "REPLAY"} & set(row), state


def test_every_state_is_reachable_from_creation() -> None:
    seen, frontier = {""}, [""]
    while frontier:
        s = frontier.pop()
        for targets in TRANSITIONS[s].values():
            for t in targets - seen:
                seen.add(t)
                frontier.append(t)
    assert seen == set(TRANSITIONS)


def _h(i: int, ev: str, f: str, t: str, rej: bool = False) -> HistoryEntry:
    return HistoryEntry(
        id=f"{i}-0",
        event=ev,
        from_state=f,
        to_state=t,
        source="test",
        attempt=0,
        ts=i,
        rejected=rej,
    )


def test_replay_accepts_a_valid_path() -> None:
    path = [
        _h(1, "ENQUEUE", "", "PENDING"),
        _h(2, "START", "PENDING", "RUNNING"),
        _h(3, "COMPLETE", "RUNNING", "RUNNING", rej=True),
        _h(4, "COMPLETE", "RUNNING", "SUCCEEDED"),
        _h(5, "CANCEL", "SUCCEEDED", "SUCCEEDED", rej=True),
    ]
    assert replay(path) == []


def test_replay_catches_corrupted_histories() -> None:
    after_terminal = [
        _h(1, "ENQUEUE", "", "PENDING"),
        _h(2, "CANCEL", "PENDING", "CANCELLED"),
        _h(3, "RESUME", "CANCELLED", "PENDING"),
    ]
    assert replay(after_terminal)
    gap = [_h(1, "ENQUEUE", "", "PENDING"), _h(2, "COMPLETE", "RUNNING", "SUCCEEDED")]
    assert replay(gap)
    illegal = [_h(1, "ENQUEUE", "", "PENDING"), _h(2, "COMPLETE", "PENDING", "SUCCEEDED")]
    assert replay(illegal)
    lying_refusal = [_h(1, "ENQUEUE", "", "PENDING"), _h(2, "START", "PENDING", "RUNNING", True)]
    assert replay(lying_refusal)
