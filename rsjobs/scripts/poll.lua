--[[ poll.lua — a worker claims due polls of DEFERRED tasks (a batch).

A DEFERRED task deferred with poll_every_ms > 0 has a member in the polls zset scored by
its next poll. A claim re-scores a due member to now + claim_ms, so that no other worker
polls it meanwhile, and answers what the poller needs; the poller's answer then goes to
resolve.lua (COMPLETE, FAIL, or AGAIN: the next poll after poll_ms). A worker that dies
while polling holds nothing: the member is due again claim_ms later. A member whose task
is not DEFERRED any more (finished, cancelled, timed out) or gone is dropped.

KEYS: common (see fsm.lua), then
  per candidate: the task keys (see fsm.lua)
  polls  zset  "<queue>:<id>" of polled DEFERRED tasks, by next poll (ms)
ARGV: common (see fsm.lua), then
  ARGV[5]  claim_ms  how long a claimed poll is the claimer's, >= 1
  per candidate:
    member  its polls zset member "<queue>:<id>"
Returns: per candidate either
  {1, id, type, attempt, external_id, provider, payload}  claimed
  {0}   not due (another worker claimed it, or its next poll is later): nothing written
  {-1}  stale: its member was dropped (task gone or not DEFERRED)
An error (nothing written) when claim_ms is malformed.
Events: none (a poll is no transition).
]]
local n, bad = layout(1, 1, 3, 1)
if bad then return bad end
bad = check_levels(n)  -- each task's queue key is its level's stream
if bad then return bad end
local POLLS_KEY = KEYS[#KEYS]
if not is_count(ARGV[5]) or tonumber(ARGV[5]) < 1 then return bad_arg('claim_ms', ARGV[5]) end
local claim_ms = tonumber(ARGV[5])
local out = {}
for i = 1, n do
  local m = ARGV[5 + i]
  local score = tonumber(redis.call('ZSCORE', POLLS_KEY, m))
  local t = load(i, {'type', 'payload', 'external_id', 'provider', 'poll_ms'})
  if t == nil or t.state ~= 'DEFERRED' or (tonumber(t.f.poll_ms) or 0) <= 0 then
    redis.call('ZREM', POLLS_KEY, m)
    out[i] = {-1}
  elseif score == nil or score > NOW then
    out[i] = {0}
  else
    redis.call('ZADD', POLLS_KEY, NOW + claim_ms, m)
    out[i] = {1, t.id, t.f.type or '', t.attempt, t.f.external_id or '', t.f.provider or '',
      t.f.payload or ''}
  end
end
return out
