"""A namespace of one shard writes exactly the keys it wrote before shards existed; a
sharded one writes the same keys on each shard's tag, and its metadata.

``fixtures/s1_keys.txt`` is what ``layout_scenario.py`` printed on the release before
shards (``PYTHONPATH=<that checkout> python tests/shards/layout_scenario.py URL``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.shards.layout_scenario import keys, scenario

FIXTURE = Path(__file__).parent / "fixtures" / "s1_keys.txt"


@pytest.mark.parametrize("shards", [None, 1])
async def test_one_shard_writes_the_keys_it_always_wrote(
    redis_url: str, shards: int | None
) -> None:
    await scenario(redis_url, shards)
    assert keys(redis_url) == FIXTURE.read_text().splitlines()


async def test_a_sharded_namespace_writes_the_same_keys_per_shard(redis_url: str) -> None:
    await scenario(redis_url, 4)
    found = keys(redis_url)
    tags = {m[1] for k in found if (m := re.search(r"\{(lay[^}]*)\}", k))}
    assert len(tags) == 4  # every shard was used
    same = {re.sub(r"\{lay[^}]*\}", "{lay}", k) for k in found}
    expected = set(FIXTURE.read_text().splitlines())
    assert same - expected == {"string rsjobs:{lay}:shards"}
