"""Run the benchmark: ``python -m bench.run [--tasks N] [--rounds R] [--systems a,b]``.

Starts its own Redis on loopback, then for each round runs every experiment for every
system, interleaved (the system order rotates each round so none always goes first),
each run in a fresh trial process on an emptied Redis. Prints medians and rsjobs/peer
ratios and writes bench/results/latest.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report
from bench.machine import OTHER_LOAD_WARN_CORES
from bench.peers import SYSTEMS
from bench.redis_server import RedisServer
from bench.trial import EXPERIMENTS
from bench.workers import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "bench" / "results"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    p.add_argument("--tasks", type=int, default=10_000, help="tasks per run (default 10000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; medians are over these")
    p.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of: {','.join(SYSTEMS)} (default: all)",
    )
    p.add_argument("--concurrency", type=int, default=32, help="per worker process")
    p.add_argument("--latency-samples", type=int, default=200)
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s): {', '.join(unknown)}")
    if args.tasks < 1 or args.rounds < 1 or args.latency_samples < 1:
        p.error("--tasks, --rounds and --latency-samples must be positive")
    return args


def _venv_python(system: str) -> Path:
    exe = REPO_ROOT / SYSTEMS[system].venv / "bin" / "python"
    if not exe.exists():
        raise SystemExit(f"{exe} is missing: run `bash bench/setup.sh` first")
    return exe


def _run_trial(
    system: str, experiment: str, args: argparse.Namespace, redis_url: str, work: Path
) -> dict[str, Any]:
    """One run in a fresh process of the system's venv; returns its JSON record."""
    out = work / f"{system}-{experiment}.json"
    out.unlink(missing_ok=True)
    # Generous: ten times slower than the slowest system seen, plus start-up.
    drain_timeout = max(60.0, args.tasks / 100)
    cmd = [
        str(_venv_python(system)),
        "-m",
        "bench.trial",
        "--system",
        system,
        "--experiment",
        experiment,
        "--tasks",
        str(args.tasks),
        "--concurrency",
        str(args.concurrency),
        "--samples",
        str(args.latency_samples),
        "--timeout",
        str(drain_timeout),
        "--out",
        str(out),
    ]
    env = dict(os.environ, BENCH_REDIS_URL=redis_url)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    # Own session, so that on a timeout or an interruption the trial and the workers it
    # started can be ended together by the trial's process group id.
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, start_new_session=True)
    try:
        proc.wait(timeout=3 * drain_timeout + 120)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
    except BaseException:  # Ctrl-C or SIGTERM: leave nothing running behind us
        _kill_session(proc)
        raise
    if out.exists():
        record: dict[str, Any] = json.loads(out.read_text())
        return record
    return {
        "system": system,
        "experiment": experiment,
        "versions": {},
        "metrics": {},
        "problems": [f"trial process ended with {proc.returncode} and wrote no result"],
        "raw": {},
    }


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _summary(record: dict[str, Any]) -> str:
    if record["problems"]:
        last_line: str = record["problems"][0].strip().splitlines()[-1]
        return "FAILED: " + last_line
    text = ", ".join(f"{k}={v:,.1f}" for k, v in record["metrics"].items())
    other = record["raw"].get("other_cpu_cores")
    if other is not None and other > OTHER_LOAD_WARN_CORES:
        text += f"  [machine busy: {other:.2f} cores of other load]"
    return text


def _git_commit() -> str | None:
    try:
        out: str = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.strip()


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    # Turn SIGTERM into an exception so the cleanup below (stopping Redis and the
    # running trial) happens, as it does for Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    systems: list[str] = args.systems
    for s in systems:
        _venv_python(s)

    server = RedisServer()
    server.start()
    started = datetime.now(UTC)
    records: list[dict[str, Any]] = []
    try:
        meta: dict[str, Any] = {
            "redis_version": server.version(),
            "redis_executable": server.executable,
            "tasks": args.tasks,
            "rounds": args.rounds,
            "concurrency": args.concurrency,
            "latency_samples": args.latency_samples,
            "systems": systems,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "git_commit": _git_commit(),
            "started_at": started.isoformat(timespec="seconds"),
        }
        print(
            f"Redis {meta['redis_version']} at {server.url}; {args.tasks:,} tasks, "
            f"{args.rounds} round(s), systems: {', '.join(systems)}",
            flush=True,
        )
        with tempfile.TemporaryDirectory(prefix="rsjobs-bench-") as tmp:
            for rnd in range(args.rounds):
                # Rotate the order each round so no system is always first or last.
                shift = rnd % len(systems)
                order = systems[shift:] + systems[:shift]
                for experiment in EXPERIMENTS:
                    for system in order:
                        t0 = time.monotonic()
                        rec = _run_trial(system, experiment, args, server.url, Path(tmp))
                        rec["round"] = rnd + 1
                        records.append(rec)
                        print(
                            f"[round {rnd + 1}/{args.rounds}] {experiment:<8} {system:<7} "
                            f"{time.monotonic() - t0:5.1f}s  {_summary(rec)}",
                            flush=True,
                        )
    finally:
        server.stop()

    meta["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    meta["versions"] = {}
    for rec in records:
        if rec.get("versions"):
            meta["versions"].setdefault(rec["system"], rec["versions"])
    med = report.medians(records, systems)
    rat = report.ratios(med)
    md = report.markdown(meta, med, rat, records)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "latest.json").write_text(
        json.dumps(
            {"meta": meta, "medians": med, "ratios_rsjobs_over_peer": rat, "runs": records},
            indent=1,
        )
    )
    (args.out_dir / "latest.md").write_text(md)
    from bench.chart import write_chart  # matplotlib only after all runs are done

    write_chart(args.out_dir / "latest.png", meta, med)
    print()
    print(md)
    print(f"Wrote {args.out_dir}/latest.json, latest.md and latest.png")
    return 1 if any(r["problems"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
