"""One run of one system, in a process of its own: ``python -m bench.trial ...``.

The orchestrator (bench.run) starts a fresh interpreter for every run so that no
system's client library, event loop or garbage shares a process with another's, and
so that a system can run from its own venv (arq). The result goes to --out as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.load import DEFAULT_FRACTIONS, load_run
from bench.measure import RunResult, latency_run, memory_run, processing_run
from bench.peers import SYSTEMS, load_driver

# "load": latency under load (bench.load), at --load-fractions of the measured peak
EXPERIMENTS = ("process1", "process2", "latency", "load", "memory")


def _versions(system: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in SYSTEMS[system].dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


async def _run(args: argparse.Namespace) -> RunResult:
    driver = load_driver(args.system)
    if args.experiment == "process1":
        # One worker; enqueue one-by-one (every system has that API).
        return await processing_run(
            driver, args.tasks, 1, args.concurrency, bulk=False, timeout=args.timeout
        )
    if args.experiment == "process2":
        # Two workers; enqueue through the bulk API where the system has one.
        return await processing_run(
            driver, args.tasks, 2, args.concurrency, bulk=driver.has_bulk, timeout=args.timeout
        )
    if args.experiment == "memory":
        # No worker while the tasks are enqueued; bulk API where the system has one.
        return await memory_run(
            driver, args.tasks, args.concurrency, bulk=driver.has_bulk, timeout=args.timeout
        )
    if args.experiment == "load":
        return await load_run(
            lambda: load_driver(args.system),
            args.tasks,
            args.concurrency,
            args.load_fractions,
            timeout=args.timeout,
        )
    return await latency_run(driver, args.samples, args.concurrency, timeout=10.0)


def _fractions(text: str) -> list[int]:
    return [int(f) for f in text.split(",") if f.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--system", required=True, choices=sorted(SYSTEMS))
    parser.add_argument("--experiment", required=True, choices=EXPERIMENTS)
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument(
        "--load-fractions",
        type=_fractions,
        default=list(DEFAULT_FRACTIONS),
        help="percent of the peak for the load experiment (default 50,80)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    record: dict[str, Any] = {
        "system": args.system,
        "experiment": args.experiment,
        "versions": _versions(args.system),
    }
    try:
        result = asyncio.run(_run(args))
        record.update(metrics=result.metrics, problems=result.problems, raw=result.raw)
    except Exception:
        record.update(metrics={}, problems=["run failed:\n" + traceback.format_exc()], raw={})
    # which rsjobs this process ran (a paired run checks it: bench.peers.base)
    module = sys.modules.get("rsjobs")
    if module is not None:
        record["imported_from"] = str(Path(module.__file__ or "?").parent)
    args.out.write_text(json.dumps(record))
    return 0 if not record["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
