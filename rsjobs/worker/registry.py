"""Handler registration: task type -> function, and the queue each handler serves."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigError
from ..keys import validate_name

if TYPE_CHECKING:
    from ..hooks import Hooks

__all__ = ["DEFAULT_QUEUE", "Handler", "Poller", "Registry"]

F = TypeVar("F", bound=Callable[..., Any])

#: the queue of a handler that declares none (and of ``Client.enqueue`` without ``queue=``)
DEFAULT_QUEUE = "default"


class Handler:
    """A registered handler: ``fn(ctx, payload)``, async or sync (sync runs in a thread).

    ``queue`` is the queue its tasks are submitted to, when the handler declares one
    (``None``: it names none, and is run from whatever queue a worker serves).
    """

    __slots__ = ("fn", "is_async", "non_retryable", "queue", "type")

    def __init__(
        self,
        type: str,
        fn: Callable[..., Any],
        non_retryable: tuple[type[BaseException], ...] = (),
        queue: str | None = None,
    ) -> None:
        self.type = type
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.non_retryable = non_retryable
        self.queue = queue


class Poller:
    """A registered poller: ``fn(poll)`` (async), asked how the outside job of a DEFERRED
    task of its type is doing (``poll``: a :class:`rsjobs.worker.PollContext`); it answers
    a :class:`rsjobs.worker.PollResult`."""

    __slots__ = ("fn", "type")

    def __init__(self, type: str, fn: Callable[..., Awaitable[Any]]) -> None:
        self.type = type
        self.fn = fn


class Registry:
    """The task types a worker can run, and the queues they are submitted to.

    >>> tasks = Registry()
    >>> @tasks.handler("image.generate", queue="gpu")
    ... async def generate(ctx, payload):
    ...     await ctx.progress(50)
    ...     return {"url": "..."}
    >>> tasks.queues()
    ['gpu']

    ``hooks`` declares the hooks that go with these handlers (:class:`rsjobs.hooks.Hooks`):
    ``rsjobs dev`` runs them beside its worker; elsewhere ``rsjobs hooks run`` does.
    """

    def __init__(self, *, hooks: Hooks | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        self._pollers: dict[str, Poller] = {}
        #: the hooks declared with these handlers (None: none)
        self.hooks = hooks

    def handler(
        self,
        type: str,
        *,
        queue: str | None = None,
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> Callable[[F], F]:
        """Register ``fn(ctx, payload)`` for task ``type``. ``queue`` declares the queue
        its tasks go to, so that ``rsjobs worker`` and ``rsjobs dev`` serve it without
        ``-q``. Exceptions listed in ``non_retryable`` fail the task at once instead of
        retrying."""

        def register(fn: F) -> F:
            self.add(type, fn, queue=queue, non_retryable=non_retryable)
            return fn

        return register

    def add(
        self,
        type: str,
        fn: Callable[..., Awaitable[Any]] | Callable[..., Any],
        *,
        queue: str | None = None,
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not type or not isinstance(type, str):
            raise ConfigError("task type must be a non-empty string")
        if type in self._handlers:
            raise ConfigError(f"a handler for {type!r} is already registered")
        if not callable(fn):
            raise ConfigError(f"handler for {type!r} is not callable")
        if queue is not None:
            try:
                validate_name("queue", queue)
            except ValueError as exc:
                raise ConfigError(f"handler for {type!r}: {exc}") from None
        self._handlers[type] = Handler(type, fn, non_retryable, queue)

    def poller(self, type: str) -> Callable[[F], F]:
        """Register the async ``fn(poll)`` that polls the outside jobs of the tasks of
        ``type`` deferred with ``poll_every_ms`` (see :meth:`rsjobs.Context.defer`). It runs
        on any worker of this registry, holding no handler slot between polls."""

        def register(fn: F) -> F:
            if not type or not isinstance(type, str):
                raise ConfigError("task type must be a non-empty string")
            if type in self._pollers:
                raise ConfigError(f"a poller for {type!r} is already registered")
            if not inspect.iscoroutinefunction(fn):
                raise ConfigError(f"the poller for {type!r} must be an async function")
            self._pollers[type] = Poller(type, fn)
            return fn

        return register

    def get_poller(self, type: str) -> Poller | None:
        return self._pollers.get(type)

    @property
    def has_pollers(self) -> bool:
        return bool(self._pollers)

    def get(self, type: str) -> Handler | None:
        return self._handlers.get(type)

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def queues(self) -> list[str]:
        """The queues a worker of this registry serves when told none: every queue a
        handler declares, and ``default`` when some handler declares none (or there is
        no handler at all)."""
        found = {h.queue or DEFAULT_QUEUE for h in self._handlers.values()}
        return sorted(found or {DEFAULT_QUEUE})

    def __len__(self) -> int:
        return len(self._handlers)
