"""The test cluster's ``failover()`` asked again and again for one shard: each settles,
because it waits for what Redis Cluster can elect (:class:`tools.topology.Elections`).

Asked at once, the third switch (A -> B -> A -> B) never settles: B ran an election less
than 2 x ``cluster-node-timeout`` before, and without a restart since it "wins" at once on
that old election's votes and epoch, a claim the other masters ignore."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tools.topology import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.mark.timeout(120)
def test_coordinated_failovers_in_a_row_each_settle() -> None:
    with Cluster(masters=3, replicas=1, node_timeout_ms=1000) as c:
        a = c.owner(0)
        (b,) = c.replicas_of(a)
        t0 = time.monotonic()
        assert c.failover(a) == b
        assert c.failover(b) == a
        assert c.failover(a) == b  # waits: b's own election was < 4 x 1 s ago
        took = time.monotonic() - t0
        assert c.owner(0) == b and c.replicas_of(b) == [a]
        assert 4.0 <= took < 30, took
        lines = [
            line
            for n in c.nodes
            for line in Path(n.data_dir, "redis.log").read_text().splitlines()
            if "Failover auth denied" in line or "Failover election won" in line
        ]
    # three elections won, none refused a vote
    assert sum("won" in line for line in lines) == 3, lines
    assert not any("denied" in line for line in lines), lines
