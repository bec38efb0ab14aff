"""arq application: the WorkerSettings class the ``arq`` CLI runs
(``arq bench.peers.arq_app.WorkerSettings``).

This module and arq_driver.py run in arq's own venv (.venv-bench-arq), see
bench/requirements-arq.txt.
"""

from __future__ import annotations

from typing import Any, ClassVar

from arq import func
from arq.connections import RedisSettings

from bench.handler_support import task_ran
from bench.peers.base import TASK_NAME, concurrency, redis_url

# arq polls its queue instead of blocking on it; the default 0.5 s poll delay caps a
# worker at ~max_jobs/0.5 s tasks per second and makes latency ~250 ms, so it is
# tuned down as one would for throughput (arq's docs name poll_delay for this).
POLL_DELAY_S = 0.01

# The CLI's default logging prints two lines per job at INFO; per-task logging is off
# for every system, so arq logs at WARNING.
LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"arq.standard": {"level": "WARNING", "class": "logging.StreamHandler"}},
    "loggers": {"arq": {"handlers": ["arq.standard"], "level": "WARNING"}},
}


async def noop(ctx: dict[str, Any], i: int) -> None:
    await task_ran(i)


def redis_settings() -> RedisSettings:
    return RedisSettings.from_dsn(redis_url())


class WorkerSettings:
    functions: ClassVar[list[Any]] = [func(noop, name=TASK_NAME)]
    redis_settings = redis_settings()
    max_jobs = concurrency()
    poll_delay = POLL_DELAY_S
