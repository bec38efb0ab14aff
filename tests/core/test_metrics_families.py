"""The namespace's metric families from one snapshot (no Redis): a counter series that
exists keeps existing, at 0 when nothing was counted."""

from __future__ import annotations

from rsjobs.metrics import Snapshot, namespace_families


def _samples(s: Snapshot) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in namespace_families(s):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_every_series_with_attempts_has_its_run_time_at_zero_when_none_was_counted() -> None:
    """Attempts that each ran under 1 ms store no run_ms field: their run-time series is 0,
    not missing (a counter that comes and goes breaks rate() and alerts)."""
    s = Snapshot()
    s.up = True
    s.costs = {"queue|q|attempts|ok": 2, "type|t|attempts|ok": 2, "type|t|run_ms|ok": 1500}
    m = _samples(s)
    run = "rsjobs_attempt_run_seconds_total"
    assert m[(run, (("by", "queue"), ("category", "ok"), ("name", "q")))] == 0
    assert m[(run, (("by", "type"), ("category", "ok"), ("name", "t")))] == 1.5
    assert m[("rsjobs_attempts_total", (("by", "queue"), ("category", "ok"), ("name", "q")))] == 2
