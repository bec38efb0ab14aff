--[[ workers.lua — the reaper's pass over the workers registry: mark dead, forget, prune.

Workers write their registration (JSON with beat_at and lease_ms, worker clock in ms) into
the workers hash at every heartbeat. A worker whose beat is older than dead_leases times
its own lease (or default_lease_ms when it does not say) is marked dead in the workers:dead
hash with the beat it was judged on: {"beat_at": <beat>, "since": <now>}. A worker that
beats again is alive again (its mark no longer matches its beat and is removed here).
A worker dead for longer than forget_ms is forgotten (registration and mark removed), but
only once it holds no pending entry in any queue: the recovery pass takes those back first.
Consumers of the queue groups that hold nothing, have been idle longer than forget_ms and
belong to no registered worker (forgotten, or stopped gracefully) are deleted, so the
groups do not grow with every worker restart. No task state is touched.

KEYS: common (see fsm.lua), then
  per queue:
    queue  stream  a queue stream (group "workers" read by the workers)
  workers       hash  worker name -> JSON registration
  workers_dead  hash  worker name -> JSON {beat_at, since}
ARGV: common (see fsm.lua), then
  ARGV[5]  dead_leases       a worker is dead after this many of its leases without a beat
  ARGV[6]  default_lease_ms  lease assumed for a registration without lease_ms
  ARGV[7]  forget_ms         how long a dead worker stays listed, and how long an idle
                             consumer is kept (0 = forever)
Returns: {newly_dead, forgotten, consumers_deleted}: two lists of worker names, a count.
]]
local nqueues, bad = layout(3, 0, 1, 2)
if bad then return bad end
for j = 5, 7 do
  if not is_count(ARGV[j]) then return bad_arg('number ARGV[' .. j .. ']', ARGV[j]) end
end
local dead_leases, default_lease = tonumber(ARGV[5]), tonumber(ARGV[6])
local forget_ms = tonumber(ARGV[7])
local FIRST_QUEUE, LAST_QUEUE = NCOMMON + 1, NCOMMON + nqueues
local WORKERS_KEY, DEAD_KEY = KEYS[LAST_QUEUE + 1], KEYS[LAST_QUEUE + 2]

local function decode(raw)
  if not raw then return nil end
  local ok, v = pcall(cjson.decode, raw)
  if ok and type(v) == 'table' then return v end
  return nil
end

-- The consumers of one queue's group as {name, pending, idle} (none when no group).
local function consumers(qkey)
  if redis.call('EXISTS', qkey) == 0 then return {} end
  local rows = redis.pcall('XINFO', 'CONSUMERS', qkey, GROUP)
  if type(rows) ~= 'table' or rows.err ~= nil then return {} end
  local out = {}
  for j = 1, #rows do
    local c = {}
    for k = 1, #rows[j], 2 do c[rows[j][k]] = rows[j][k + 1] end
    out[#out + 1] = {c.name, tonumber(c.pending) or 0, tonumber(c.idle) or 0}
  end
  return out
end

-- Whether consumer `name` holds a pending entry in any queue.
local function holds_entries(name)
  for k = FIRST_QUEUE, LAST_QUEUE do
    if redis.call('EXISTS', KEYS[k]) == 1 then
      local pel = redis.pcall('XPENDING', KEYS[k], GROUP, '-', '+', 1, name)
      if type(pel) == 'table' and pel.err == nil and #pel > 0 then return true end
    end
  end
  return false
end

local newly_dead, forgotten, deleted = {}, {}, 0
local regs = redis.call('HGETALL', WORKERS_KEY)
for j = 1, #regs, 2 do
  local name, reg = regs[j], decode(regs[j + 1])
  local beat = (reg and tonumber(reg.beat_at)) or 0
  local lease = (reg and tonumber(reg.lease_ms)) or default_lease
  local mark = decode(redis.call('HGET', DEAD_KEY, name))
  if beat + dead_leases * lease >= NOW then
    if mark then redis.call('HDEL', DEAD_KEY, name) end
  elseif mark == nil or tonumber(mark.beat_at) ~= beat then
    redis.call('HSET', DEAD_KEY, name, cjson.encode({beat_at = beat, since = NOW}))
    newly_dead[#newly_dead + 1] = name
  elseif forget_ms > 0 and (tonumber(mark.since) or NOW) + forget_ms < NOW
      and not holds_entries(name) then
    redis.call('HDEL', WORKERS_KEY, name)
    redis.call('HDEL', DEAD_KEY, name)
    forgotten[#forgotten + 1] = name
  end
end
-- marks of workers no longer registered (stopped gracefully, or forgotten by another reaper)
local marks = redis.call('HKEYS', DEAD_KEY)
for j = 1, #marks do
  if redis.call('HEXISTS', WORKERS_KEY, marks[j]) == 0 then
    redis.call('HDEL', DEAD_KEY, marks[j])
  end
end
if forget_ms > 0 then
  for k = FIRST_QUEUE, LAST_QUEUE do
    for _, c in ipairs(consumers(KEYS[k])) do
      if c[2] == 0 and c[3] > forget_ms and redis.call('HEXISTS', WORKERS_KEY, c[1]) == 0 then
        redis.call('XGROUP', 'DELCONSUMER', KEYS[k], GROUP, c[1])
        deleted = deleted + 1
      end
    end
  end
end
return {newly_dead, forgotten, deleted}
