"""``rsjobs dev``: everything on an embedded Redis, in one process, for local work.

One redis-server child (AOF on; in a data directory that is kept when named, else a
temporary one removed at exit), a worker for every queue there is work for, the reaper
(it also drives workflows), the web app in dev mode (no tokens), and a hook runner when
the registry declares hooks (``Registry(hooks=...)``) or webhooks are configured (at
start: one added later needs a restart, or an ``rsjobs hooks run`` of its own).

Which queues the worker serves: the ones given with ``-q``; else every queue the
registry's handlers declare, the queues of the ``--workflows`` stages, and every queue
that already has work in the data directory. A queue that gets work nobody serves (no
live worker, here or elsewhere) is named in a warning as soon as it is seen.

Stopping: SIGINT (Ctrl-C) and SIGTERM alike stop every part at once: the worker lets
running handlers finish within ``grace_ms`` and hands the rest back (REQUEUE, so the next
run starts them again), then Redis is shut down (its AOF written), its temporary files
removed, and the process exits 0. A second signal hands back at once. The redis-server
runs in a session of its own, so that a Ctrl-C on the terminal does not stop it before
the worker has handed its tasks back.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .client import Client
from .errors import ConfigError, NotMigrated, RedisUnavailable, RsjobsError
from .logfmt import uvicorn_log_config
from .settings import Settings
from .worker import Registry, Worker

if TYPE_CHECKING:
    from .workflows import WorkflowDefinition

__all__ = ["DevError", "DevOptions", "dev_queues", "run_dev"]

log = logging.getLogger("rsjobs.dev")

#: how often the running stack looks for queues with work that no worker serves (s)
WATCH_S = 2.0


class DevError(RsjobsError):
    """Raised when ``rsjobs dev`` cannot start (a port in use, a data directory another
    ``rsjobs dev`` holds); nothing was started."""


@dataclass
class DevOptions:
    """What ``rsjobs dev`` was asked for (the command line's options)."""

    settings: Settings = field(default_factory=Settings)
    #: the queues named with ``-q`` (empty: the declared ones and those with work)
    queues: Sequence[str] = ()
    concurrency: int = 8
    grace_ms: int = 2000
    #: Redis port (None: a free one)
    port: int | None = None
    web_port: int = 8000
    #: True when the web port was given explicitly: then a port in use is an error
    web_port_given: bool = False
    #: AOF kept here between runs (None: a temporary directory, removed at exit)
    data_dir: str | None = None
    #: convert data an earlier rsjobs left in ``data_dir`` first (``rsjobs migrate``)
    migrate: bool = False


def dev_queues(registry: Registry, definitions: Iterable[WorkflowDefinition]) -> list[str]:
    """The queues that the handlers and the workflow stages declare."""
    found = set(registry.queues())
    for d in definitions:
        found.update(s.queue for s in d.stages)
    return sorted(found)


def missing_handlers(
    registry: Registry, definitions: Iterable[WorkflowDefinition]
) -> list[tuple[str, str, str]]:
    """(workflow, stage, task type) for each fixed task of a stage that the registry has
    no handler for (stages whose tasks depend on the input cannot be checked before)."""
    out = []
    for d in definitions:
        for s in d.stages:
            if callable(s.tasks):
                continue
            for spec in s.tasks:
                if registry.get(spec.type) is None:
                    out.append((d.name, s.name, spec.type))
    return out


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _bind_web(port: int, given: bool) -> socket.socket:
    """The web listener, bound now and held until uvicorn serves on it: a port checked
    free and bound later can be taken in between by another process. The default port,
    when taken, gives way to one the system picks; a port the user named does not."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            if given:
                raise DevError(
                    f"web port {port} is in use (choose another with --web-port)"
                ) from None
            sock.bind(("127.0.0.1", 0))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def _hold_data_dir(path: str) -> Iterator[Path]:
    """Create the directory and lock it for this process: two servers writing one AOF
    would corrupt it."""
    d = Path(path).expanduser()
    try:
        d.mkdir(parents=True, exist_ok=True)
        lock = open(d / "rsjobs-dev.lock", "a+")  # noqa: SIM115 - held until exit
    except OSError as exc:
        raise DevError(f"cannot use data directory {path!r}: {exc}") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise DevError(
                f"data directory {path!r} is in use by another rsjobs dev (pid {holder})"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        # absolute: redis-server resolves its log file after changing into the directory
        yield d.resolve()
    finally:
        lock.close()


def _web_server(app: Any, port: int) -> Any:
    """uvicorn without signal handlers of its own: ``rsjobs dev`` stops every part itself
    (uvicorn's would re-raise SIGTERM after serving, killing the process before Redis and
    the worker were stopped)."""
    import uvicorn

    class Web(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Web(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            log_config=uvicorn_log_config(),
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
    )


class DevStack:
    """The running parts of one ``rsjobs dev`` and the order they stop in."""

    def __init__(
        self,
        registry: Registry,
        definitions: Sequence[WorkflowDefinition],
        options: DevOptions,
        out: IO[str],
        web_sock: socket.socket,
    ) -> None:
        self.registry = registry
        self.web_sock = web_sock
        self.definitions = definitions
        self.options = options
        self.out = out
        self.stopping = asyncio.Event()
        self.signals = 0
        self.worker: Worker | None = None
        self.reaper: Any = None
        self.web: Any = None
        self.service: Any = None
        self.hook_runner: Any = None
        self.hooks_stop = asyncio.Event()

    def say(self, text: str) -> None:
        self.out.write(f"rsjobs dev: {text}\n")
        self.out.flush()

    def on_signal(self, sig: int) -> None:
        self.signals += 1
        if self.signals == 1:
            name = signal.Signals(sig).name
            self.say(f"{name}: stopping (a second signal hands running work back at once)")
        self.stop(force=self.signals > 1)

    def stop(self, *, force: bool = False) -> None:
        self.stopping.set()
        if self.worker is not None:
            self.worker.stop(force=force)
        if self.reaper is not None:
            self.reaper.stop()
        self.hooks_stop.set()
        if self.service is not None:
            self.service.close_streams()  # open event streams would hold the web's stop
        if self.web is not None:
            self.web.should_exit = True
            if force:
                self.web.force_exit = True

    async def check_layout(self, client: Client) -> None:
        """Refuse a data directory an earlier rsjobs wrote, unless ``migrate`` converts it
        first (as ``rsjobs migrate`` does; nothing else runs on this Redis yet)."""
        store = client.store
        if self.options.migrate:
            report = await store.migration.run()
            self.say(
                f"migrated: {report.converted} task(s) converted, {report.already_new} "
                f"already in this layout, {len(report.skipped)} left"
            )
            for tid, why in report.skipped:
                log.error("task %s left unconverted: %s", tid, why)
        try:
            await store.require_layout()
        except NotMigrated as exc:
            if self.options.migrate:
                raise DevError(f"{exc.what} could not be migrated whole (see above)") from None
            raise DevError(
                f"the data in {self.options.data_dir} was written by an earlier rsjobs "
                "(layout 1): start once with --migrate to convert it"
            ) from None

    async def queues(self, client: Client) -> list[str]:
        """The queues to serve; warns about declared ones and ones with work left out."""
        declared = dev_queues(self.registry, self.definitions)
        stats = await client.stats()
        with_work = sorted(q for q, c in stats.items() if _active(c))
        if not self.options.queues:
            return sorted({*declared, *with_work})
        chosen = list(dict.fromkeys(self.options.queues))
        left_out = [q for q in sorted({*declared, *with_work}) if q not in chosen]
        if left_out:
            log.warning(
                "not serving queues %s (declared by handlers or workflows, or holding work); "
                "their tasks wait until a worker serves them (add -q for each)",
                ", ".join(left_out),
            )
        return chosen

    async def hooks(self, client: Client) -> Any:
        """The hook runner to run beside the worker (None: no hooks declared and no
        webhook configured; hooks and webhooks are then run by no one here)."""
        hooks = self.registry.hooks
        webhooks = await client.store.hooks.webhooks()
        if not webhooks and (hooks is None or len(hooks) == 0):
            return None
        from .hooks import HookRunner

        names = [h.name for h in hooks or ()]
        self.say(
            f"hooks  {', '.join(names) or 'none'}; webhooks {', '.join(sorted(webhooks)) or 'none'}"
        )
        # a short block: the runner sees the stop within it
        return HookRunner(client.store, hooks, name=f"dev-{os.getpid()}", block_ms=200)

    async def watch(self, client: Client, served: Sequence[str]) -> None:
        """Warn once for each queue with work and no live worker, until it is served."""
        from .console.views import live_workers_by_queue, unserved_queues
        from .reaper import list_workers

        warned: set[str] = set()
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), WATCH_S)
            if self.stopping.is_set():
                return
            try:
                stats = await client.stats()
                workers = await list_workers(client.store)
            except Exception as exc:  # a glitch of the check must not stop the stack
                log.debug("queue check failed: %s", exc)
                continue
            unserved = unserved_queues(stats, live_workers_by_queue(workers))
            for q, n in sorted(unserved.items()):
                if q not in warned:
                    log.warning(
                        "queue %r has %d task(s) waiting and no live worker serves it "
                        "(this one serves %s): restart with -q %s, or run "
                        "`rsjobs worker MODULE:REGISTRY -q %s` against this Redis",
                        q, n, ", ".join(served), q, q,
                    )  # fmt: skip
            warned = set(unserved)

    async def run(self, url: str) -> int:
        """Run until stopped; 0 after a stop by signal, 1 when a part ended on its own."""
        from .reaper import Reaper, ReaperConfig
        from .web import create_app

        opts = self.options
        client = Client.from_url(url, source="user", namespace=opts.settings.namespace)
        try:
            await self.check_layout(client)
            served = await self.queues(client)
            self.worker = Worker(
                self.registry,
                url=url,
                settings=opts.settings,
                queues=served,
                concurrency=opts.concurrency,
                grace_ms=opts.grace_ms,
                handle_signals=False,
            )
            # quiet: a sweep line only when the sweep changed something
            self.reaper = Reaper(
                url=url, settings=opts.settings, config=ReaperConfig(log_idle=False)
            )
            self.hook_runner = await self.hooks(client)
            app = create_app(url, settings=opts.settings, dev=True, definitions=self.definitions)
            self.service = app.state.rsjobs
            self.web = _web_server(app, opts.web_port)
            self.say(f"worker queues {', '.join(served)} (concurrency {opts.concurrency})")
            if self.definitions:
                self.say(f"workflows {', '.join(d.name for d in self.definitions)}")
            for wf, stage, ttype in missing_handlers(self.registry, self.definitions):
                log.warning(
                    "workflow %r stage %r runs task type %r, which the registry has no "
                    "handler for: those tasks will fail",
                    wf, stage, ttype,
                )  # fmt: skip
            if self.stopping.is_set():  # a signal during the start: nothing runs yet
                return 0
            parts = {
                asyncio.ensure_future(self.worker.run()): "worker",
                asyncio.ensure_future(self.reaper.run()): "reaper",
                asyncio.ensure_future(self.web.serve(sockets=[self.web_sock])): "web",
            }
            if self.hook_runner is not None:
                parts[asyncio.ensure_future(self.hook_runner.run(self.hooks_stop))] = "hook runner"
            watcher = asyncio.ensure_future(self.watch(client, served))
            # the ready line once the page answers (uvicorn bound its socket and ran the
            # app's startup): whoever reads it may connect at once (uvicorn's flag has no
            # event to wait on)
            while not (self.web.started or self.stopping.is_set() or any(t.done() for t in parts)):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            self.say("Ctrl-C or SIGTERM stops everything (running tasks are handed back)")
            stop_wait = asyncio.ensure_future(self.stopping.wait())
            done, _ = await asyncio.wait([*parts, stop_wait], return_when=asyncio.FIRST_COMPLETED)
            ended = [name for task, name in parts.items() if task in done]
            if ended and not self.stopping.is_set():
                log.error("the %s stopped on its own; stopping the rest", " and ".join(ended))
            self.stop()
            results = await asyncio.gather(*parts, return_exceptions=True)
            for task in (watcher, stop_wait):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            failed = False
            for name, result in zip(parts.values(), results, strict=True):
                if isinstance(result, BaseException):
                    failed = True
                    log.error("the %s failed: %s: %s", name, type(result).__name__, result)
            return 1 if failed or (ended and self.signals == 0) else 0
        finally:
            if self.reaper is not None:
                await self.reaper.close()
            if self.hook_runner is not None:
                await self.hook_runner.close()
            await client.close()


def _active(counts: dict[str, int]) -> bool:
    live = ("WAITING", "PENDING", "SCHEDULED", "RUNNING", "DEFERRED", "PAUSED")
    return any(counts.get(s, 0) for s in live)


async def run_dev(
    registry: Registry,
    definitions: Sequence[WorkflowDefinition],
    options: DevOptions,
    out: IO[str],
) -> int:
    """Start Redis, then the stack; stop Redis last, whatever happened."""
    from .server import EmbeddedRedis

    if options.port is not None and not _port_free(options.port):
        raise DevError(f"redis port {options.port} is in use (choose another with --port)")
    web_sock = _bind_web(options.web_port, options.web_port_given)
    web_port = options.web_port = web_sock.getsockname()[1]
    dev = DevStack(registry, definitions, options, out, web_sock)
    loop = asyncio.get_running_loop()
    # before Redis starts: from here on a signal stops everything in order
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, dev.on_signal, sig)
    try:
        with contextlib.ExitStack() as stack:
            data_dir = None
            if options.data_dir is not None:
                data_dir = str(stack.enter_context(_hold_data_dir(options.data_dir)))
            try:
                server = EmbeddedRedis(
                    port=options.port, appendonly=True, data_dir=data_dir, own_session=True
                )
            except ConfigError as exc:
                raise DevError(str(exc)) from None
            stack.callback(server.cleanup)
            try:
                server.start()
            except RedisUnavailable as exc:
                raise DevError(f"the embedded redis-server did not start: {exc}") from None
            assert server.proc is not None
            kept = "kept" if data_dir else "removed at exit"
            dev.say(
                f"redis  {server.url}  (pid {server.proc.pid}; data in {server.data_dir}, {kept})"
            )
            dev.say(f"web    http://127.0.0.1:{web_port}/ui/  (dev mode: no tokens)")
            # what code run here (handlers) and in another shell reads to find this Redis
            os.environ["RSJOBS_URL"] = server.url
            exports = f"export RSJOBS_URL={server.url}"
            ns = options.settings.namespace
            if ns != "default":
                os.environ["RSJOBS_NAMESPACE"] = ns
                exports += f" RSJOBS_NAMESPACE={ns}"
            dev.say(f"in another shell:  {exports}")
            code = await dev.run(server.url)
    finally:
        web_sock.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    dev.say("stopped: worker, reaper, web and redis")
    return code
