"""Hook registration: which function runs after which changes of state.

>>> hooks = Hooks()
>>> @hooks.hook(on=["SUCCEEDED", "FAILED"], types=["image.*"])
... async def notify(event):
...     print(event.task_id, event.state)

Hooks run in ``rsjobs hooks`` (:mod:`rsjobs.hooks.runner`), outside the transition that
caused them: a slow mail server delays the notice, never the task.
"""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from ..errors import ConfigError
from ..model import State
from ..schemas import TaskInfo

__all__ = ["Backoff", "Hook", "HookEvent", "Hooks", "check_states", "check_types"]

F = TypeVar("F", bound=Callable[..., Any])


class HookEvent(msgspec.Struct, frozen=True, kw_only=True):
    """What a hook is given: one change of state of one task."""

    #: the hook stream entry's id: the same for every attempt of this delivery
    delivery: str
    task_id: str
    queue: str
    #: the state the task reached and the event that led there
    state: str
    event: str
    #: its history entry (``rsjobs history``)
    hid: str
    #: the task's type ('' when the task is gone: expired after its retention)
    type: str = ""
    #: the task as it is now (None when it is gone; it may have moved on since)
    task: TaskInfo | None = None
    #: this run's attempt, 1 for the first
    attempt: int = 1


class Backoff(msgspec.Struct, frozen=True, kw_only=True):
    """How a failed hook run is retried: ``max_attempts`` in all, the n-th retry after
    ``base_ms * 2**(n-1)`` (at most ``max_ms``), half of it random."""

    max_attempts: int = 5
    base_ms: int = 1000
    max_ms: int = 300_000

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 100:
            raise ConfigError("max_attempts must be between 1 and 100")
        if self.base_ms < 1 or self.max_ms < self.base_ms:
            raise ConfigError("backoff: base_ms must be >= 1 and max_ms >= base_ms")

    def delay_ms(self, failures: int, jitter: float) -> int:
        """The wait after the ``failures``-th failed attempt (jitter in [0, 1))."""
        d = min(self.max_ms, self.base_ms * 2 ** (failures - 1))
        return int(d / 2 + d / 2 * jitter)


def check_states(on: Iterable[str]) -> tuple[str, ...]:
    """The states a listener names, checked (``*``: every state)."""
    states = tuple(on)
    known = [s.value for s in State]
    if not states:
        raise ConfigError("a hook must name at least one state (or '*')")
    for s in states:
        if s != "*" and s not in known:
            raise ConfigError(f"unknown state {s!r} (one of {', '.join(known)} or '*')")
    return states


def check_types(types: Iterable[str]) -> tuple[str, ...]:
    """Task type patterns (fnmatch: ``image.*``); empty = every type."""
    out = tuple(types)
    for t in out:
        if not t or len(t) > 200 or "," in t:
            raise ConfigError(f"bad type pattern {t!r}")
    return out


def matches(states: Sequence[str], types: Sequence[str], state: str, type: str) -> bool:
    if "*" not in states and state not in states:
        return False
    return not types or any(fnmatch.fnmatchcase(type, p) for p in types)


class Hook:
    """A registered hook: ``fn(event)``, async or sync (sync runs in a thread)."""

    __slots__ = ("backoff", "fn", "is_async", "name", "states", "timeout_ms", "types")

    def __init__(
        self,
        name: str,
        fn: Callable[[HookEvent], Any],
        states: tuple[str, ...],
        types: tuple[str, ...],
        backoff: Backoff,
        timeout_ms: int,
    ) -> None:
        self.name, self.fn, self.states, self.types = name, fn, states, types
        self.backoff, self.timeout_ms = backoff, timeout_ms
        self.is_async = inspect.iscoroutinefunction(fn)

    @property
    def listener(self) -> str:
        return f"hook:{self.name}"

    def wants(self, state: str, type: str) -> bool:
        return matches(self.states, self.types, state, type)


class Hooks:
    """The hooks one ``rsjobs hooks`` process runs (``rsjobs hooks run MODULE:OBJECT``)."""

    def __init__(self) -> None:
        self._hooks: dict[str, Hook] = {}

    def hook(
        self,
        on: Iterable[str],
        types: Iterable[str] = (),
        *,
        name: str | None = None,
        max_attempts: int = 5,
        backoff_base_ms: int = 1000,
        backoff_max_ms: int = 300_000,
        timeout_ms: int = 30_000,
    ) -> Callable[[F], F]:
        """Register ``fn(event: HookEvent)`` to run after each change to a state in ``on``
        of a task whose type matches one of ``types`` (all types when empty). A run that
        raises (or passes ``timeout_ms``) is retried with exponential backoff, up to
        ``max_attempts`` runs, then dead-lettered (``rsjobs hooks dead``). A hook runs at
        least once per change: make it idempotent (``event.delivery`` is a stable key)."""
        states, pats = check_states(on), check_types(types)
        backoff = Backoff(max_attempts=max_attempts, base_ms=backoff_base_ms, max_ms=backoff_max_ms)
        if not 1 <= timeout_ms <= 3_600_000:
            raise ConfigError("timeout_ms must be between 1 and 3600000")

        def register(fn: F) -> F:
            hook_name = name or f"{fn.__module__}.{fn.__qualname__}"
            if hook_name in self._hooks:
                raise ConfigError(f"hook {hook_name!r} is registered twice")
            if not hook_name or len(hook_name) > 200 or "," in hook_name:
                raise ConfigError(f"bad hook name {hook_name!r}")
            self._hooks[hook_name] = Hook(hook_name, fn, states, pats, backoff, timeout_ms)
            return fn

        return register

    def __iter__(self) -> Any:
        return iter(self._hooks.values())

    def __len__(self) -> int:
        return len(self._hooks)

    def get(self, name: str) -> Hook | None:
        return self._hooks.get(name)


async def call_hook(hook: Hook, event: HookEvent) -> None:
    """Run ``hook`` on ``event`` (a sync hook in a thread)."""
    import asyncio

    if hook.is_async:
        result: Awaitable[Any] = hook.fn(event)
        await result
    else:
        await asyncio.to_thread(hook.fn, event)
