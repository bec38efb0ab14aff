"""A process's /livez and /readyz (rsjobs.metrics.Probes, served beside its /metrics): what
they answer from what the process last saw, on an injected clock (no Redis)."""

from __future__ import annotations

from rsjobs.metrics import Probes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_live_while_the_loop_turns_ready_while_redis_answers() -> None:
    clock = Clock()
    p = Probes(10.0, clock)
    assert p.live() and not p.ready()  # started, no Redis contact yet: not ready
    assert p.answer("/readyz")[0].startswith("503")
    p.contact()
    assert p.ready() and p.answer("/readyz") == ("200 OK", b"ok\n")
    clock.now += 11  # the loop turned on, Redis stopped answering
    p.beat()
    assert p.live() and not p.ready()
    assert p.answer("/livez") == ("200 OK", b"ok\n")
    clock.now += 11  # the loop stopped turning (a hung handler thread does not stop it;
    # a dead heartbeat task does)
    assert not p.live() and not p.ready()
    assert p.answer("/livez")[0].startswith("503")
    p.beat()
    p.contact()
    assert p.live() and p.ready()
