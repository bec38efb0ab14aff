--[[ defer.lua — DEFER: a handler hands its attempt to an outside service (one task).

The lease holder of a RUNNING task ends its part of the attempt: the task becomes DEFERRED
and waits for the outside job named by (provider, external_id). Its work entry is acked
and deleted (the worker's slot is free at once, and no reaper can take it for a dead
worker's: it has no entry and no lease expiry); the longest wait is its member's score in
the deadlines zset (deadline.lua times it out); with poll_every_ms > 0 its member in the
polls zset is due then (poll.lua). The external key maps (provider, external_id) to the
task, so that an outside result naming only its id finds it; it expires a retention
period after the longest wait.

KEYS: common (see fsm.lua), then
  per task (one): the task keys (see fsm.lua)
  external  string  "<attempt> <queue> <id>" of the task waiting on that outside job
  polls     zset    "<queue>:<id>" of DEFERRED tasks completed by polling, by next poll (ms)
ARGV: common (see fsm.lua), then
  ARGV[5]   lease          the lease token START issued to this worker
  ARGV[6]   external_id    the outside job's id (is_external in fsm.lua)
  ARGV[7]   provider       the outside service's name (is_provider)
  ARGV[8]   max_wait_ms    the longest wait, >= 1
  ARGV[9]   poll_every_ms  0 = no polls (a callback or a client call ends the wait)
  ARGV[10]  message        a note for the history ('' = none; at most TEXT_MAX bytes)
  ARGV[11]  charges        what the handler charged before deferring ('' = nothing; see
                           parse_charges in fsm.lua): on the DEFER entry (ch), accounted
                           with the attempt when its wait ends
Returns: {code, state}:
   1  applied: DEFERRED
   2  a repeated DEFER of the lease holder (its reply was lost): nothing written
  -1  the task no longer exists
  -2  refused: the task is no longer RUNNING;  -3  refused: RUNNING under another lease
  -6  refused: the external id is the wait of another task (recorded)
An error (nothing written) when an external id, provider, max_wait_ms, poll_every_ms,
lease, message or charges are malformed.
Events: DEFER (RUNNING -> DEFERRED; history fields x external id, xw longest wait, xo poll
  period (when > 0), ch charges; the task hash keeps the entry's number in xh while it
  waits, see account_attempt in fsm.lua); refused ones
  recorded with rej=1.
]]
local _, bad = layout(7, 0, 3, 2, 1)
if bad then return bad end
local XKEY, POLLS_KEY = KEYS[#KEYS - 1], KEYS[#KEYS]
local lease, ext, provider = ARGV[5], ARGV[6], ARGV[7]
local max_wait, poll, msg = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
if #lease > TEXT_MAX then return bad_arg('lease length', #lease) end
if not is_external(ext) then return bad_arg('external_id', ext) end
if not is_provider(provider) then return bad_arg('provider', provider) end
if not is_count(ARGV[8]) or max_wait < 1 then return bad_arg('max_wait_ms', ARGV[8]) end
if not is_count(ARGV[9]) then return bad_arg('poll_every_ms', ARGV[9]) end
if #msg > TEXT_MAX then return bad_arg('message length', #msg) end
local charged, why = parse_charges(ARGV[11])
if not charged then return bad_arg('charges (' .. why .. ')', string.sub(ARGV[11], 1, 80)) end

local t = load(1, {'lease', 'entry', 'external_id'})
if t == nil then return {-1, ''} end
if t.state == 'DEFERRED' and t.f.lease == lease and t.f.external_id == ext then
  return {2, t.state}  -- its reply was lost: the same answer, no write
end
local refused = check_lease(t, 'DEFER', lease)
if refused ~= nil then return refused end
local mine = t.queue .. ' ' .. t.id
local holder = redis.call('GET', XKEY)
if holder and string.sub(holder, (string.find(holder, ' ', 1, true) or 0) + 1) ~= mine then
  reject(t, 'DEFER', 'external id ' .. provider .. '/' .. ext .. ' is the wait of another task')
  return {-6, t.state}
end
drop_entry(t.qkey, t.f.entry)
redis.call('HDEL', t.key, 'e', 'lease_expires_at', 'deadline_at', 'consumer', 'xd')
redis.call('ZADD', DEADLINES_KEY, NOW + max_wait, member(t))
if poll > 0 then redis.call('ZADD', POLLS_KEY, NOW + poll, member(t)) end
redis.call('SET', XKEY, t.attempt .. ' ' .. mine)
if RETENTION_MS > 0 then redis.call('PEXPIRE', XKEY, max_wait + RETENTION_MS) end
local fields = {'external_id', ext, 'provider', provider, 'wait_until', NOW + max_wait}
if poll > 0 then fields[#fields + 1] = 'poll_ms'; fields[#fields + 1] = poll end
-- (short: a history entry over 64 bytes turns the task hash into a hashtable)
-- (the provider is the hash's xp field: the entry names the job, the wait, the polls)
local extra = {'x', ext, 'xw', max_wait}
if poll > 0 then extra[#extra + 1] = 'xo'; extra[#extra + 1] = poll end
t.charges = ARGV[11]
transition(t, 'DEFER', 'DEFERRED', msg, fields, extra)
return {1, t.state}
