"""Handler registration: task type -> function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..errors import ConfigError

__all__ = ["Handler", "Registry"]

F = TypeVar("F", bound=Callable[..., Any])


class Handler:
    """A registered handler: ``fn(ctx, payload)``, async or sync (sync runs in a thread)."""

    __slots__ = ("fn", "is_async", "non_retryable", "type")

    def __init__(
        self,
        type: str,
        fn: Callable[..., Any],
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.type = type
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.non_retryable = non_retryable


class Registry:
    """The task types a worker can run.

    >>> tasks = Registry()
    >>> @tasks.handler("image.generate")
    ... async def generate(ctx, payload):
    ...     await ctx.progress(50)
    ...     return {"url": "..."}
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def handler(
        self, type: str, *, non_retryable: tuple[type[BaseException], ...] = ()
    ) -> Callable[[F], F]:
        """Register ``fn(ctx, payload)`` for task ``type``. Exceptions listed in
        ``non_retryable`` fail the task at once instead of retrying."""

        def register(fn: F) -> F:
            self.add(type, fn, non_retryable=non_retryable)
            return fn

        return register

    def add(
        self,
        type: str,
        fn: Callable[..., Awaitable[Any]] | Callable[..., Any],
        *,
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not type or not isinstance(type, str):
            raise ConfigError("task type must be a non-empty string")
        if type in self._handlers:
            raise ConfigError(f"a handler for {type!r} is already registered")
        if not callable(fn):
            raise ConfigError(f"handler for {type!r} is not callable")
        self._handlers[type] = Handler(type, fn, non_retryable)

    def get(self, type: str) -> Handler | None:
        return self._handlers.get(type)

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)
