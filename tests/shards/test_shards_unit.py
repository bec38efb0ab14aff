"""The shards of a namespace without Redis: tags spread over the slot ring, ids that carry
their shard, placement by its precedence, the metadata, the merged list's cursor."""

from __future__ import annotations

import uuid

import pytest

from rsjobs import ConfigError, PredecessorRefused, Settings
from rsjobs.errors import CorruptData
from rsjobs.store.keys import Keys
from rsjobs.store.merged import decode_shard_cursor, encode_shard_cursor
from rsjobs.store.shards import (
    MAX_SHARDS,
    SLOTS,
    ShardMap,
    Shards,
    decode_map,
    encode_map,
    new_id,
    shard_of,
    shard_tags,
    slot_of,
)


def _ring(a: int, b: int) -> int:
    d = abs(a - b) % SLOTS
    return min(d, SLOTS - d)


@pytest.mark.parametrize("namespace", ["default", "images", "a", "ns.with-dots_9"])
def test_every_tag_sits_within_its_tolerance_of_its_place_on_the_ring(namespace: str) -> None:
    for count in range(1, 65):
        tags = shard_tags(namespace, count)
        assert len(tags) == count and tags[0] == namespace
        assert len(set(tags)) == count
        slots = [slot_of(t) for t in tags]
        assert len(set(slots)) == count, (count, slots)  # distinct slots too
        base = slots[0]
        for k, (tag, slot) in enumerate(zip(tags, slots, strict=True)):
            target = (base + round(k * SLOTS / count)) % SLOTS
            assert _ring(slot, target) <= SLOTS // (8 * count), (count, k, tag)
            if k:
                assert tag == f"{namespace}#{k}" or tag.startswith(f"{namespace}#{k}.")
                assert "{" not in tag and "}" not in tag


def test_the_tags_do_not_change() -> None:
    """Stored at creation; still, the rule must not drift between releases."""
    assert shard_tags("default", 3) == ("default", "default#1.0", "default#2")
    assert shard_tags("default", 1) == ("default",)


def test_three_and_six_shards_fall_evenly_on_three_masters_splitting_the_slots() -> None:
    # a namespace whose own slot is not near the border of a master's third
    ns = next(f"n{i}" for i in range(1000) if 900 < slot_of(f"n{i}") % 2731 < 1830)
    edges = [0, 5461, 10923, SLOTS]

    def master(slot: int) -> int:
        return next(m for m in range(3) if edges[m] <= slot < edges[m + 1])

    for count, per in ((3, 1), (6, 2)):
        owners = [master(slot_of(t)) for t in shard_tags(ns, count)]
        assert sorted(owners.count(m) for m in range(3)) == [per] * 3, (count, owners)


def test_a_shard_count_out_of_range_is_a_config_error() -> None:
    for bad in (0, -1, MAX_SHARDS + 1, 2.0, "4", True):
        with pytest.raises(ConfigError):
            Settings(shards=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            shard_tags("x", bad)  # type: ignore[arg-type]
    assert Settings(shards=MAX_SHARDS).shards == MAX_SHARDS


def test_ids_carry_their_shard_and_stay_valid_ids() -> None:
    for count in (2, 8, 256):
        for k in {0, 1, count // 2, count - 1}:
            tid = new_id(k, count)
            assert len(tid) == 32 and set(tid) <= set("0123456789abcdef")
            assert shard_of(tid) == k
    # S = 1 ids are uuid4s (unchanged), and every uuid4 is shard 0's
    one = new_id(0, 1)
    assert one[12] == "4" and shard_of(one) == 0
    assert all(shard_of(uuid.uuid4().hex) == 0 for _ in range(100))
    # an id naming a shard the namespace has not is shard 0's
    assert Shards("ns", shard_tags("ns", 4)).shard_of(new_id(9, 16)) == 0


def test_keys_of_a_shard_replace_only_the_tag() -> None:
    assert Keys("ns").task("x") == "rsjobs:{ns}:task:x"
    k = Keys("ns", tag="ns#3.1")
    assert k.task("x") == "rsjobs:{ns#3.1}:task:x"
    assert k.queue("q") == "rsjobs:{ns#3.1}:queue:q"
    assert k.namespace == "ns" and k.tag == "ns#3.1"
    assert all("{ns#3.1}" in key for key in k.common())


def test_placement_follows_its_precedence() -> None:
    s = Shards("ns", shard_tags("ns", 8))
    by_owner = s.place(owner="alice")
    assert all(s.place(owner="alice", dedup=f"d{i}") == by_owner for i in range(20))
    by_dedup = s.place(dedup="key-1")
    assert all(s.place(dedup="key-1") == by_dedup for _ in range(5))
    # the predecessors' shard wins over shard_key and round-robin
    pred = new_id(5, 8)
    assert s.place(after=[pred], shard_key="anything") == 5
    assert s.place(shard_key="diamond") == s.place(shard_key="diamond")
    # round-robin visits every shard
    assert {s.place() for _ in range(8)} == set(range(8))
    # nothing places on another shard than a predecessor's
    with pytest.raises(PredecessorRefused, match="shard"):
        s.place(after=[new_id(1, 8), new_id(2, 8)])
    owner_shard = s.place(owner="bob")
    other = new_id((owner_shard + 1) % 8, 8)
    with pytest.raises(PredecessorRefused, match="its owner places the task"):
        s.place(owner="bob", after=[other])
    # one shard: always 0
    assert Shards("ns").place(owner="x", after=[new_id(3, 8)]) == 0


def test_the_metadata_reads_back_and_refuses_what_is_not_it() -> None:
    m = ShardMap(count=4, tags=shard_tags("ns", 4))
    assert decode_map("ns", encode_map(m)) == m
    for raw in (
        "nope",
        '{"count": 4, "tags": ["ns"]}',
        '{"count": 2, "tags": ["other", "ns#1"]}',
        '{"count": 2, "tags": ["ns", "ns"]}',
        '{"count": 2, "tags": ["ns", "{x}"]}',
        '{"count": 0, "tags": []}',
    ):
        with pytest.raises(CorruptData):
            decode_map("ns", raw)


def test_a_merged_list_cursor_is_checked() -> None:
    c = encode_shard_cursor(["abc", "", None, "x"])
    assert decode_shard_cursor(c, 4) == ["abc", "", None, "x"]
    for bad in ("", "!!!", "bm90IGpzb24", encode_shard_cursor(["a"]), "x" * 100_000, c + "x"):
        with pytest.raises(ConfigError, match="invalid cursor"):
            decode_shard_cursor(bad, 4)
