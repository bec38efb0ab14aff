"""Run the benchmark: ``python -m bench.run [--tasks N] [--rounds R] [--systems a,b]``.

Starts its own Redis on loopback, then for each round runs every experiment for every
system, interleaved (the system order rotates each round so none always goes first),
each run in a fresh trial process on an emptied Redis. Prints medians and rsjobs/peer
ratios and writes bench/results/latest.{json,md,png}.

With ``--baseline REV`` the work tree's rsjobs also runs against rsjobs at git revision
REV (bench.revision), paired in every round (bench.paired): the report adds the median
over rounds of the per-round ratios tree / baseline.
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

from bench import paired, report, revision
from bench.load import DEFAULT_FRACTIONS
from bench.machine import OTHER_LOAD_WARN_CORES
from bench.paired import Pair
from bench.peers import SYSTEMS
from bench.peers.base import RSJOBS_ROOT_ENV
from bench.redis_server import RedisServer
from bench.revision import Source
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
    p.add_argument(
        "--experiments",
        default=",".join(EXPERIMENTS),
        help=f"comma-separated subset of: {','.join(EXPERIMENTS)} (default: all)",
    )
    p.add_argument(
        "--latency-load",
        default=",".join(map(str, DEFAULT_FRACTIONS)),
        help="the load experiment's levels, percent of the measured peak (default 50,80)",
    )
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also run rsjobs at git revision REV, paired with the tree in every round",
    )
    p.add_argument(
        "--python",
        type=Path,
        help="interpreter of the tree's rsjobs trials (default: .venv-bench's)",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    args.systems = _names(args.systems)
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s): {', '.join(unknown)}")
    args.experiments = _names(args.experiments)
    unknown = [e for e in args.experiments if e not in EXPERIMENTS]
    if unknown or not args.experiments:
        p.error(f"unknown or no experiment(s): {', '.join(unknown)}")
    if args.tasks < 1 or args.rounds < 1 or args.latency_samples < 1:
        p.error("--tasks, --rounds and --latency-samples must be positive")
    try:
        args.latency_load = [int(f) for f in _names(args.latency_load)]
    except ValueError:
        p.error(f"--latency-load takes percentages such as 50,80, not {args.latency_load!r}")
    if not args.latency_load or not all(0 < f <= 100 for f in args.latency_load):
        p.error("--latency-load takes percentages of the peak, each in 1..100")
    if args.baseline is not None:
        if "rsjobs" not in args.systems:
            p.error("--baseline compares rsjobs with itself: --systems must include rsjobs")
        try:
            args.baseline_sha = revision.resolve(args.baseline)
        except ValueError as exc:
            p.error(f"--baseline: {exc}")
    return args


def _names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _sources(args: argparse.Namespace) -> dict[str, Source]:
    """Where each system's trials run from: a peer from its venv; rsjobs from the tree (and
    the baseline, when asked for, from its exported revision)."""
    out: dict[str, Source] = {}
    for system in args.systems:
        python = _venv_python(system)
        if system == "rsjobs" and args.python is not None:
            python = args.python
        out[system] = (
            revision.tree_source(python)
            if system == "rsjobs"
            else Source(system, "", False, REPO_ROOT, python)
        )
    if args.baseline is not None:
        base = revision.prepare(args.baseline)
        out[base.label] = base
    return out


def _venv_python(system: str) -> Path:
    return REPO_ROOT / SYSTEMS[system].venv / "bin" / "python"


def _run_trial(
    system: str,
    source: Source,
    experiment: str,
    args: argparse.Namespace,
    redis_url: str,
    work: Path,
) -> dict[str, Any]:
    """One run in a fresh process of the system's venv, in the directory of its source
    (a baseline's export: so it imports that rsjobs); returns its JSON record, labelled
    with the source's label."""
    out = work / f"{source.label}-{experiment}.json"
    out.unlink(missing_ok=True)
    # Generous: ten times slower than the slowest system seen, plus start-up.
    drain_timeout = max(60.0, args.tasks / 100)
    cmd = [
        str(source.python),
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
        "--load-fractions",
        ",".join(map(str, args.latency_load)),
        "--out",
        str(out),
    ]
    env = dict(os.environ, BENCH_REDIS_URL=redis_url)
    root = str(source.root)
    # only the source's directory: a baseline must not see the tree's rsjobs
    env["PYTHONPATH"] = root
    env.pop(RSJOBS_ROOT_ENV, None)
    if system.startswith("rsjobs"):
        env[RSJOBS_ROOT_ENV] = root
    # Own session, so that on a timeout or an interruption the trial and the workers it
    # started can be ended together by the trial's process group id.
    proc = subprocess.Popen(cmd, cwd=root, env=env, start_new_session=True)
    try:
        proc.wait(timeout=3 * drain_timeout + 120)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
    except BaseException:  # Ctrl-C or SIGTERM: leave nothing running behind us
        _kill_session(proc)
        raise
    if out.exists():
        record: dict[str, Any] = json.loads(out.read_text())
        record["system"] = source.label
        return record
    return {
        "system": source.label,
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


def _check_sources(
    sources: dict[str, Source], records: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Every rsjobs run imported rsjobs from its own source's directory (a run that did
    not gets a problem, so it fails and stays out of the figures); returns each rsjobs
    source with its version and where its runs imported rsjobs from."""
    out: dict[str, dict[str, Any]] = {}
    for label, source in sources.items():
        if not label.startswith("rsjobs"):
            continue
        info = source.as_dict()
        for rec in records:
            if rec["system"] != label or "imported_from" not in rec:
                continue
            where = Path(rec["imported_from"]).resolve()
            if not where.is_relative_to(source.root.resolve()):
                rec["problems"].append(f"rsjobs imported from {where}, not from {source.root}")
            info["imported_from"] = str(where)
            info["version"] = rec["versions"].get("rsjobs", "?")
        out[label] = info
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    # Turn SIGTERM into an exception so the cleanup below (stopping Redis and the
    # running trial) happens, as it does for Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for s in args.systems:
        exe = _venv_python(s) if s != "rsjobs" or args.python is None else args.python
        if not exe.exists():
            raise SystemExit(f"{exe} is missing: run `bash bench/setup.sh` first")
    sources = _sources(args)
    pair = None
    if args.baseline is not None:
        pair = Pair("rsjobs", next(label for label in sources if "@" in label))
    systems: list[str] = list(args.systems)
    # the report's columns: the baseline right after the tree
    columns = list(systems)
    if pair is not None:
        columns.insert(columns.index(pair.tree) + 1, pair.baseline)

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
            "experiments": args.experiments,
            "load_fractions": args.latency_load,
            "systems": columns,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "git_commit": _git_commit(),
            "started_at": started.isoformat(timespec="seconds"),
        }
        if pair is not None:
            meta["baseline"] = {
                "label": pair.baseline,
                "rev": args.baseline,
                "sha": args.baseline_sha,
            }
        print(
            f"Redis {meta['redis_version']} at {server.url}; {args.tasks:,} tasks, "
            f"{args.rounds} round(s), systems: {', '.join(columns)}",
            flush=True,
        )
        with tempfile.TemporaryDirectory(prefix="rsjobs-bench-") as tmp:
            for rnd in range(args.rounds):
                # Rotate the order each round so no system is always first or last; the
                # tree and its baseline back to back, alternating which goes first.
                order = paired.round_order(systems, rnd, pair)
                for experiment in args.experiments:
                    for label in order:
                        source = sources[label]
                        system = "rsjobs" if label.startswith("rsjobs@") else label
                        t0 = time.monotonic()
                        rec = _run_trial(system, source, experiment, args, server.url, Path(tmp))
                        rec["round"] = rnd + 1
                        records.append(rec)
                        print(
                            f"[round {rnd + 1}/{args.rounds}] {experiment:<8} {label:<14} "
                            f"{time.monotonic() - t0:5.1f}s  {_summary(rec)}",
                            flush=True,
                        )
    finally:
        server.stop()

    meta["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    meta["sources"] = _check_sources(sources, records)
    if pair is not None:
        meta["sources"][pair.baseline]["rev"] = args.baseline
    meta["versions"] = {}
    for rec in records:
        if rec.get("versions"):
            meta["versions"].setdefault(rec["system"], rec["versions"])
    med = report.medians(records, columns)
    rat = report.ratios({s: v for s, v in med.items() if pair is None or s != pair.baseline})
    result: dict[str, Any] = {"meta": meta, "medians": med, "ratios_rsjobs_over_peer": rat}
    pr = None
    if pair is not None:
        pr = paired.paired(records, pair)
        result["paired"] = {"tree": pair.tree, "baseline": pair.baseline, "metrics": pr}
    md = report.markdown(meta, med, rat, records, pr)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "latest.json").write_text(json.dumps({**result, "runs": records}, indent=1))
    (args.out_dir / "latest.md").write_text(md)
    from bench.chart import write_chart  # matplotlib only after all runs are done

    write_chart(args.out_dir / "latest.png", meta, med)
    print()
    print(md)
    print(f"Wrote {args.out_dir}/latest.json, latest.md and latest.png")
    return 1 if any(r["problems"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
