--[[ shards.lua — the namespace's shards: read their metadata, and set it on a namespace
that holds no data yet (rsjobs/store/shards.py).

A namespace has a shard count S, fixed when it is created. Its metadata (JSON: count and
the hash tag of each shard) is set here, on shard 0 (the namespace's own tag), only while
the namespace holds none of the keys its tasks leave behind (the events stream, the stats
hash, the scheduled and deadlines zsets, the dead-letter stream, as marker.lua checks): a
namespace that holds data without metadata has one shard, and keeps it. A namespace of one
shard has no metadata at all (the caller never asks to set S = 1).

KEYS: common (see fsm.lua), then
  deadletter  stream  the dead-letter stream (looked at, not written)
  shards      string  the namespace's shards metadata
ARGV: common (see fsm.lua), then
  ARGV[5]  wanted  the metadata to set (JSON, built and checked by the caller), or ''
Returns: {found, set}: found, the metadata after the call ('' when there is none: the
  namespace has one shard); set, 1 when this call wrote it.
  An error (nothing written) when wanted is not a JSON object.
]]
local _, bad = layout(1, 0, 0, 2)
if bad then return bad end
local wanted = ARGV[5]
if wanted ~= '' and string.sub(wanted, 1, 1) ~= '{' then return bad_arg('wanted', wanted) end
local DEADLETTER_KEY, SHARDS_KEY = KEYS[NCOMMON + 1], KEYS[NCOMMON + 2]
local found = redis.call('GET', SHARDS_KEY)
if found then return {found, 0} end
if wanted == '' then return {'', 0} end
if redis.call('EXISTS', EVENTS_KEY, STATS_KEY, SCHED_KEY, DEADLINES_KEY, DEADLETTER_KEY) > 0 then
  return {'', 0}
end
redis.call('SET', SHARDS_KEY, wanted)
return {wanted, 1}
