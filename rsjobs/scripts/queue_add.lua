--[[ queue_add.lua — register queue names in the namespace's set of queues, holding each
owner to its quota of queues (rsjobs/store/tasks.py remember_queues; shard 0's keys).

A name already registered costs nothing and counts for no one. A new name named for an
owner (the owner of the task about to be submitted with it) is recorded as that owner's
(`q|<queue>` -> owner) and counted (`o|<owner>`): an owner whose count would pass `quota`
is refused and nothing is written, so a client cannot grow the set of queues, their
streams, counters and metrics series without bound. Names registered for no owner (a
worker's, a workflow's stages, a backend's owner-less tasks) count for no one.
`rsjobs queue delete` (queue_delete.lua) gives the owner its place back.

KEYS: common (see fsm.lua), then
  queues  set   the namespace's queue names
  owners  hash  `q|<queue>` -> the owner that made it, `o|<owner>` -> how many it made
ARGV: common (see fsm.lua), then
  ARGV[5]  owner  the owner the names are registered for ('' = none: no quota)
  ARGV[6]  quota   the most queues one owner may make (an integer >= 0; 0 = no quota)
  ARGV[7]  queues  JSON array of the names (at least one)
Returns: {code, made}
   n >= 0  registered: n names were new; made is the owner's count after the call
  -1       refused (nothing written): made is the owner's count, the quota would be passed
An error (nothing written) for a quota that is not a count, or queues that is not a
non-empty array of non-empty names.
Events: none.
]]
local _, bad = layout(3, 0, 0, 2)
if bad then return bad end
local owner, quota = ARGV[5], ARGV[6]
local QUEUES_KEY, OWNERS_KEY = KEYS[NCOMMON + 1], KEYS[NCOMMON + 2]
if not is_count(quota) then return bad_arg('quota', quota) end
quota = tonumber(quota)
local ok, names = pcall(cjson.decode, ARGV[7])
if not ok or type(names) ~= 'table' or #names == 0 then return bad_arg('queues', ARGV[7]) end
for i = 1, #names do
  if type(names[i]) ~= 'string' or names[i] == '' then return bad_arg('queue name', i) end
end
local new, seen = {}, {}
for i = 1, #names do
  local q = names[i]
  if not seen[q] and redis.call('SISMEMBER', QUEUES_KEY, q) == 0 then new[#new + 1] = q end
  seen[q] = true
end
local made = 0
if owner ~= '' then made = tonumber(redis.call('HGET', OWNERS_KEY, 'o|' .. owner) or '0') end
if #new == 0 then return {0, made} end
if owner ~= '' and quota > 0 and made + #new > quota then return {-1, made} end
redis.call('SADD', QUEUES_KEY, unpack(new))
if owner ~= '' then
  local f = {}
  for _, q in ipairs(new) do f[#f + 1] = 'q|' .. q; f[#f + 1] = owner end
  redis.call('HSET', OWNERS_KEY, unpack(f))
  made = redis.call('HINCRBY', OWNERS_KEY, 'o|' .. owner, #new)
end
return {#new, made}
