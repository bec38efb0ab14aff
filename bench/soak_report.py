"""The soak's figures and checks, its markdown summary and its chart.

Checks (targets in CHECKS' texts):
- memory grows linearly with the tasks Redis holds: least squares ``stored = a + b *
  retained`` over the samples before any task could expire, R^2 >= 0.98 (b is the
  memory per retained task at scale; the fits over the producing phase and over all
  samples, where Redis's expiry lag shows, are reported beside it);
- memory returns to its baseline after retention: final - baseline <= 1% of the peak
  growth (the events stream included: the reaper drops its entries once they are older
  than the retention);
- throughput and latency stay flat: the last decile of tasks (by enqueue order)
  against the first: throughput >= 0.9x, p99 <= 1.5x.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display here; must precede pyplot
import matplotlib.pyplot as plt

from bench.machine import OTHER_LOAD_WARN_CORES

R2_MIN = 0.98
BASELINE_SLACK = 0.01  # of the peak growth
THROUGHPUT_RATIO_MIN = 0.9
P99_RATIO_MAX = 1.5


def percentile(sorted_values: list[int] | list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation between samples)."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x; returns a, b, R^2."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    b = sxy / sxx if sxx else 0.0
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return a, b, (1 - ss_res / ss_tot) if ss_tot else 0.0


def _time_at(samples: list[dict[str, Any]], key: str, value: float) -> float:
    """When the (non-decreasing) ``key`` first reached ``value``, interpolated."""
    prev = samples[0]
    for s in samples:
        if s[key] >= value:
            if s[key] == prev[key]:
                return float(s["t"])
            f = (value - prev[key]) / (s[key] - prev[key])
            return float(prev["t"] + f * (s["t"] - prev["t"]))
        prev = s
    return float(samples[-1]["t"])


def _value_at(samples: list[dict[str, Any]], t: float, cpu: str) -> float:
    """The cumulative CPU seconds of ``cpu`` at time ``t``, interpolated."""
    prev = samples[0]
    for s in samples:
        if s["t"] >= t:
            span = s["t"] - prev["t"]
            f = (t - prev["t"]) / span if span else 1.0
            return float(prev["cpu_s"][cpu] + f * (s["cpu_s"][cpu] - prev["cpu_s"][cpu]))
        prev = s
    return float(samples[-1]["cpu_s"][cpu])


def _throughput(rows: list[list[int]], every: int) -> float | None:
    """Tasks finished per second over one decile, from its sampled tasks (every
    ``every``-th): the tasks between the first and the last to finish over the time
    between their ``finished_at`` (Redis TIME, ms), so the figure does not depend on
    where the decile's edges fall between two samples."""
    done = sorted(r[2] for r in rows)
    if len(done) < 2 or done[-1] == done[0]:
        return None
    return (len(done) - 1) * every / ((done[-1] - done[0]) / 1000)


def _deciles(meta: dict[str, Any], result: dict[str, Any]) -> list[dict[str, Any]]:
    n: int = meta["tasks"]
    samples = result["samples"]
    by_decile: list[list[list[int]]] = [[] for _ in range(10)]
    for row_ in result["latency"]["samples"]:
        by_decile[min(9, row_[0] * 10 // n)].append(row_)
    out = []
    for d in range(10):
        lo, hi = d * n / 10, (d + 1) * n / 10
        t0, t1 = _time_at(samples, "finished", lo), _time_at(samples, "finished", hi)
        w = sorted(r[1] for r in by_decile[d])
        row: dict[str, Any] = {
            "decile": d + 1,
            "t_start": t0,
            "t_end": t1,
            "finished_per_s": _throughput(by_decile[d], result["latency"]["every"]),
            "latency_samples": len(w),
            "latency_p50_ms": percentile(w, 50) if w else None,
            "latency_p99_ms": percentile(w, 99) if w else None,
        }
        for cpu in ("redis", "worker"):
            used = _value_at(samples, t1, cpu) - _value_at(samples, t0, cpu)
            row[f"{cpu}_cpu_us_per_task"] = used / (hi - lo) * 1e6
        # the machine-load check over the time this decile's tasks waited and ran
        started = _time_at(samples, "enqueued", lo)
        other = [s["other_cpu_cores"] for s in samples if started <= s["t"] <= t1 and "cores" in s]
        row["other_cpu_cores"] = statistics.median(other) if other else None
        out.append(row)
    return out


def _fit_memory(rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    if len(rows) < 2:
        return 0.0, 0.0, 0.0
    return _fit([float(s["retained"]) for s in rows], [float(s["stored_memory"]) for s in rows])


def _fit_dict(rows: list[dict[str, Any]]) -> dict[str, float]:
    a, b, r2 = _fit_memory(rows)
    return {"a_bytes": a, "b_bytes_per_task": b, "r2": r2, "samples": len(rows)}


def _keys_per_task(growing: list[dict[str, Any]], base_dbsize: int) -> float | None:
    """Keys per task held while nothing has expired (the last growth sample)."""
    last = max(growing, key=lambda s: s["retained"], default=None)
    if last is None or not last["retained"]:
        return None
    return float((last["dbsize"] - base_dbsize) / last["retained"])


def _steady(
    rows: list[dict[str, Any]], keys_per_task: float | None, base_dbsize: int
) -> dict[str, Any]:
    """While tasks are produced and expire at the same rate: how far memory and the
    keyspace stray above what the tasks held account for (expired keys that Redis has
    not reclaimed yet)."""
    if not rows or keys_per_task is None:
        return {}
    stale = [s["dbsize"] - base_dbsize - keys_per_task * s["retained"] for s in rows]
    per_task = [s["stored_memory"] / s["retained"] for s in rows if s["retained"]]
    return {
        "samples": len(rows),
        "keys_per_task": keys_per_task,
        "stored_memory_min": min(s["stored_memory"] for s in rows),
        "stored_memory_max": max(s["stored_memory"] for s in rows),
        "retained_min": min(s["retained"] for s in rows),
        "retained_max": max(s["retained"] for s in rows),
        "stale_keys_median": statistics.median(stale),
        "stale_keys_max": max(stale),
        "bytes_per_task_held_median": statistics.median(per_task) if per_task else None,
    }


def _check(name: str, value: float | None, target: str, ok: bool) -> dict[str, Any]:
    return {"name": name, "value": value, "target": target, "ok": ok}


def analyse(meta: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    samples = result["samples"]
    base = result["baseline"]["stored_memory"]
    final = result["final"]["stored_memory"]
    # Growth: the samples before any task could have expired (t < retention). Once tasks
    # expire, memory lags the count of tasks held by the time Redis's active expiry
    # takes to reach their histories (a hash goes at once when the probe reads it), and
    # that lag comes and goes in bursts: the fits over more samples show it.
    growing = [s for s in samples if s["t"] < meta["retention_s"]]
    a, b, r2 = _fit_memory(growing)
    producing = [s for s in samples if s["producing"]]
    steady = [s for s in producing if s["t"] >= meta["retention_s"] + 10]
    keys_per_task = _keys_per_task(growing, result["baseline"]["dbsize"])
    peak = max(samples, key=lambda s: s["stored_memory"])
    growth = peak["stored_memory"] - base
    events = sum(g["bytes"] for g in result["residual_keys"] if g["pattern"].endswith(":events"))
    tolerance = BASELINE_SLACK * growth
    deciles = _deciles(meta, result)
    first, last = deciles[0], deciles[-1]

    def ratio(key: str) -> float | None:
        x, y = first[key], last[key]
        return y / x if x and y is not None else None

    thr, p99 = ratio("finished_per_s"), ratio("latency_p99_ms")
    other = [s["other_cpu_cores"] for s in samples if "other_cpu_cores" in s]
    checks = [
        _check(
            "memory grows linearly with tasks held (R^2, before any expiry)",
            r2,
            f">= {R2_MIN}",
            r2 >= R2_MIN,
        ),
        _check(
            "memory back to baseline after retention (bytes above it)",
            final - base,
            f"<= {tolerance:,.0f} ({BASELINE_SLACK:.0%} of the peak growth {growth:,}; "
            f"the events stream holds {events:,} of it)",
            final - base <= tolerance,
        ),
        _check(
            "throughput, last decile / first",
            thr,
            f">= {THROUGHPUT_RATIO_MIN}",
            thr is not None and thr >= THROUGHPUT_RATIO_MIN,
        ),
        _check(
            "latency p99, last decile / first",
            p99,
            f"<= {P99_RATIO_MAX}",
            p99 is not None and p99 <= P99_RATIO_MAX,
        ),
    ]
    rates = [s["finished_per_s"] for s in producing if "finished_per_s" in s]
    return {
        "fit": {"a_bytes": a, "b_bytes_per_task": b, "r2": r2, "samples": len(growing)},
        "fit_producing": _fit_dict(producing),
        "fit_all_samples": _fit_dict(samples),
        "steady_state": _steady(steady, keys_per_task, result["baseline"]["dbsize"]),
        "baseline_bytes": base,
        "peak": {
            "stored_memory": peak["stored_memory"],
            "retained": max(s["retained"] for s in samples),
            "dbsize": max(s["dbsize"] for s in samples),
            "growth_bytes": growth,
        },
        "final_bytes": final,
        "residual_bytes": final - base,
        "residual_events_bytes": events,
        "duration_s": samples[-1]["t"],
        "produce_s": max((s["t"] for s in samples if s["producing"]), default=0.0),
        "max_unfinished": max(s["unfinished"] for s in samples),
        "median_finished_per_s_while_producing": statistics.median(rates) if rates else None,
        "deciles": deciles,
        "other_cpu_cores": {
            "median": statistics.median(other) if other else None,
            "max": max(other) if other else None,
            "samples_above_warn": sum(1 for o in other if o > OTHER_LOAD_WARN_CORES),
            "samples": len(other),
        },
        "checks": checks,
    }


def _num(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _steady_line(st: dict[str, Any]) -> str:
    if not st:
        return "- No steady state (the run was shorter than the retention period + 10 s)."
    return (
        f"- Steady state ({st['samples']} samples from retention + 10 s to the producer's "
        f"end): {st['retained_min']:,} to {st['retained_max']:,} tasks held, memory "
        f"{st['stored_memory_min'] / 2**20:,.1f} to {st['stored_memory_max'] / 2**20:,.1f} "
        f"MiB, median {_num(st['bytes_per_task_held_median'])} B per task held. Keys beyond "
        f"{st['keys_per_task']:.2f} per task held (expired, not yet reclaimed by Redis's "
        f"active expiry): median {st['stale_keys_median']:,.0f}, max {st['stale_keys_max']:,.0f}."
    )


def _parts_line(result: dict[str, Any]) -> str:
    """Where the end's memory differs from the baseline's, by MEMORY STATS (dataset: what
    the keys and Redis's other data structures hold; overhead: clients, script caches,
    the keyspace's hash tables), and what the slow log held when it was emptied."""
    parts = result.get("residual_parts", {})
    slow = result.get("slowlog_cleared", {})
    names = ("dataset.bytes", "overhead.total", "clients.normal", "lua.caches",
             "db.0.overhead.hashtable.main", "db.0.overhead.hashtable.expires",
             "number_of_cached_scripts", "used_memory_lua")  # fmt: skip
    shown = ", ".join(f"{n} {parts[n]:+,} B" for n in names if n in parts) or "no change"
    line = f"- The end against the baseline by MEMORY STATS: {shown}."
    if slow:
        line += (
            f" The slow log was emptied before both readings (it held "
            f"{slow['baseline']['entries']} and {slow['final']['entries']} entries)."
        )
    return line


def markdown(meta: dict[str, Any], an: dict[str, Any], result: dict[str, Any]) -> str:
    fit, peak = an["fit"], an["peak"]
    lines = [
        "# rsjobs soak",
        "",
        f"Redis {meta['redis_version']} on 127.0.0.1 (default configuration, no persistence); "
        f"{meta['tasks']:,} no-op tasks enqueued at {meta['rate']:,.0f}/s "
        f"(`enqueue_many` every 10 ms); retention {meta['retention_s']:.0f} s; one "
        f"`rsjobs.Worker` process (concurrency {meta['concurrency']}) and one `rsjobs reaper`; "
        f"a sample every {meta['sample_s']:.0f} s. {meta['cpus']} CPUs, Python "
        f"{meta['python']}. Started {meta['started_at']}, "
        f"{an['duration_s']:,.0f} s in all ({an['produce_s']:,.0f} s producing).",
        "",
        "## Checks",
        "",
        "| check | value | target | |",
        "|---|---:|---|---|",
    ]
    for c in an["checks"]:
        v = c["value"]
        shown = "—" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}")
        lines.append(f"| {c['name']} | {shown} | {c['target']} | {'ok' if c['ok'] else 'MISSED'} |")
    lines += [
        "",
        "## Memory",
        "",
        f"- Growth, the {fit['samples']} samples before any task could expire: used_memory "
        f"(less client buffers and script cache) = {fit['a_bytes'] / 2**20:,.1f} MiB + "
        f"**{fit['b_bytes_per_task']:,.0f} B** x tasks held, R^2 = {fit['r2']:.4f}. The same "
        f"fit over the {an['fit_producing']['samples']} samples while producing: "
        f"{an['fit_producing']['b_bytes_per_task']:,.0f} B/task, R^2 = "
        f"{an['fit_producing']['r2']:.4f}; over all {an['fit_all_samples']['samples']}: "
        f"{an['fit_all_samples']['b_bytes_per_task']:,.0f} B/task, R^2 = "
        f"{an['fit_all_samples']['r2']:.4f}.",
        f"- Baseline {an['baseline_bytes'] / 2**20:,.2f} MiB (taken after a warm-up round of "
        f"{meta.get('warmup', 0):,} tasks, run and expired); peak "
        f"{peak['stored_memory'] / 2**20:,.1f} MiB with up to {peak['retained']:,} tasks held "
        f"and {peak['dbsize']:,} keys; after retention {an['final_bytes'] / 2**20:,.2f} MiB "
        f"({an['residual_bytes'] / 2**20:+,.2f} MiB, of which the events stream "
        f"{an['residual_events_bytes'] / 2**20:,.2f} MiB by MEMORY USAGE).",
        _steady_line(an["steady_state"]),
        _parts_line(result),
        "- Left above the baseline, by key pattern (MEMORY USAGE): "
        + (
            ", ".join(
                f"`{g['pattern']}` {g['bytes']:+,} B ({g['keys']:+} keys)"
                for g in result["residual_keys"]
            )
            or "nothing"
        )
        + ".",
        "",
        "## Deciles of the run",
        "",
        "Decile k = the k-th tenth of the tasks. Throughput and latency from the tasks read "
        f"back (every {result['latency']['every']}th, by enqueue order; Redis TIME in ms, "
        "latency within ±1 ms): tasks finished per second between the decile's first and "
        "last finished_at. CPU per task: over the time the decile's tasks took to finish "
        "(by rsjobs stats), all of Redis's work included (enqueue, expiry, the probes). "
        "Other load: median of the machine-load check from the decile's first enqueue to "
        "its last task's end.",
        "",
        "| decile | finished/s | p50 ms | p99 ms | samples | Redis µs/task | worker µs/task "
        "| other load, cores |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in an["deciles"]:
        lines.append(
            f"| {d['decile']} | {_num(d['finished_per_s'])} | {_num(d['latency_p50_ms'])} "
            f"| {_num(d['latency_p99_ms'])} | {d['latency_samples']:,} "
            f"| {_num(d['redis_cpu_us_per_task'], 1)} | {_num(d['worker_cpu_us_per_task'], 1)} "
            f"| {_num(d.get('other_cpu_cores'), 2)} |"
        )
    o = an["other_cpu_cores"]
    lines += [
        "",
        f"Producer: at most {result['producer_behind_max']:,} tasks behind its schedule; "
        f"at most {an['max_unfinished']:,} tasks unfinished at a sample.",
        "",
        "## Machine load",
        "",
        "Over the 10 s before each sample (the machine's counters arrive in lumps, so "
        "shorter windows are noise). "
        f"CPU used by other processes: median {_num(o['median'], 2)} cores, max "
        f"{_num(o['max'], 2)} cores; {o['samples_above_warn']} of {o['samples']} samples "
        f"above {OTHER_LOAD_WARN_CORES} cores.",
    ]
    if o["samples_above_warn"]:
        lines.append(
            "**Warning:** the machine was busy with other work during part of the run; "
            "latency and CPU figures of those samples are not the system's alone."
        )
    lines += ["", "## Verification", ""]
    if result["problems"]:
        lines += [f"- **{p}**" for p in result["problems"]]
    else:
        lines.append(
            f"All {meta['tasks']:,} tasks SUCCEEDED (rsjobs stats) and the handler ran "
            f"{result['handler_runs']:,} times; {result['latency']['lost']} sampled tasks "
            "expired before they were read."
        )
    return "\n".join(lines) + "\n"


def write_chart(
    path: Path, meta: dict[str, Any], an: dict[str, Any], result: dict[str, Any]
) -> None:
    samples = result["samples"]
    t = [s["t"] for s in samples]
    fig, axes = plt.subplots(3, 2, figsize=(13, 11))
    ax = axes[0][0]
    ax.plot(t, [s["stored_memory"] / 2**20 for s in samples], color="#c0392b", label="memory")
    ax.set_ylabel("used_memory, MiB")
    ax2 = ax.twinx()
    ax2.plot(t, [s["retained"] for s in samples], color="#2980b9", lw=1, label="tasks held")
    ax2.set_ylabel("tasks held", color="#2980b9")
    ax.set_title("Memory (red) and tasks held (blue)", fontsize=10)

    ax = axes[0][1]
    xs = [s["retained"] for s in samples]
    ax.scatter(xs, [s["stored_memory"] / 2**20 for s in samples], s=6, color="#c0392b")
    fit = an["fit"]
    top = max(xs) if xs else 0
    line = [fit["a_bytes"] / 2**20, (fit["a_bytes"] + fit["b_bytes_per_task"] * top) / 2**20]
    ax.plot([0, top], line, color="black", lw=1)
    ax.set_xlabel("tasks held")
    ax.set_ylabel("MiB")
    ax.set_title(
        f"Memory vs tasks held: {fit['b_bytes_per_task']:,.0f} B/task, R²={fit['r2']:.4f}",
        fontsize=10,
    )

    ax = axes[1][0]
    ax.plot(t, [s["dbsize"] for s in samples], color="#8e44ad")
    ax.set_ylabel("keys")
    ax.set_title("DBSIZE", fontsize=10)

    ax = axes[1][1]
    rows = [s for s in samples if "finished_per_s" in s]
    ax.plot([s["t"] for s in rows], [s["finished_per_s"] for s in rows], color="#27ae60")
    ax.axhline(meta["rate"], color="grey", lw=0.8, ls="--")
    ax.set_ylabel("tasks/s")
    ax.set_title(
        f"Tasks finished per second (dashed: producer rate {meta['rate']:,.0f}/s)", fontsize=10
    )

    ax = axes[2][0]
    rows = [s for s in samples if s["latency_p99_ms"] is not None]
    ax.plot([s["t"] for s in rows], [s["latency_p50_ms"] for s in rows], label="p50")
    ax.plot([s["t"] for s in rows], [s["latency_p99_ms"] for s in rows], label="p99")
    ax.set_ylabel("ms")
    ax.set_xlabel("s since start")
    ax.legend(fontsize=8)
    ax.set_title("Enqueue-to-start latency per sample (Redis TIME, ms)", fontsize=10)

    ax = axes[2][1]
    rows = [s for s in samples if "cores" in s]
    tt = [s["t"] for s in rows]
    lines = (
        ("redis", "Redis", "#c0392b"),
        ("worker", "worker", "#2980b9"),
        ("reaper", "reaper", "#16a085"),
        ("own", "producer + probes", "#f39c12"),
    )
    for key, label, color in lines:
        ax.plot(tt, [s["cores"][key] for s in rows], label=label, color=color, lw=1)
    ax.plot(tt, [s["other_cpu_cores"] for s in rows], label="other load", color="grey", lw=1)
    ax.axhline(OTHER_LOAD_WARN_CORES, color="grey", lw=0.6, ls=":")
    ax.set_ylabel("cores")
    ax.set_xlabel("s since start")
    ax.legend(fontsize=8, ncol=3)
    ax.set_title("CPU", fontsize=10)
    for row in axes[:2]:
        row[0].set_xlabel("s since start")
    fig.suptitle(
        f"rsjobs soak — {meta['tasks']:,} tasks at {meta['rate']:,.0f}/s, retention "
        f"{meta['retention_s']:.0f} s, Redis {meta['redis_version']}",
        fontsize=12,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rerender(json_path: Path) -> dict[str, Any]:
    """Recompute the analysis of a soak's JSON and rewrite its .json, .md and .png."""
    import json

    data = json.loads(json_path.read_text())
    meta = data.pop("meta")
    data.pop("analysis", None)
    analysis = analyse(meta, data)
    json_path.write_text(json.dumps({"meta": meta, "analysis": analysis, **data}))
    json_path.with_suffix(".md").write_text(markdown(meta, analysis, data))
    write_chart(json_path.with_suffix(".png"), meta, analysis, data)
    return analysis


if __name__ == "__main__":
    import sys

    # python -m bench.soak_report RESULTS.json: the analysis again, from the samples kept
    for arg in sys.argv[1:]:
        rerender(Path(arg))
        print(f"rewrote {arg} and its .md and .png")
