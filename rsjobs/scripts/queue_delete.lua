--[[ queue_delete.lua — DELETE_QUEUE: remove an unused queue from one shard: its streams,
its counters in the stats hash, its per-minute series, its limit bookkeeping, its pause
record and its name (rsjobs/store/tasks.py delete_queue; `rsjobs queue delete`).

Checks first, nothing written when one fails: the queue must be registered here (or leave
something behind), hold no live task (its PENDING, SCHEDULED, RUNNING, PAUSED, WAITING and
DEFERRED counts all 0, and no entry in any of its streams) and be served by no registered
worker (a worker reads its streams through their group: deleting them under it would
break its reads; the reaper forgets dead workers). Its finished tasks stay until their
retention ends (they are read by id and from the `done:` lists, not from the queue); the
costs hash keeps its cumulative figures (an account, not a gauge). The queue's owner (who
made it: queues:owners) gets its place in the quota back.

KEYS: common (see fsm.lua), then
  per level (0..9, ten of them):
    stream  stream  the stream of one of its priority levels
  queues     set     the namespace's queue names
  owners     hash    `q|<queue>` -> the owner that made it, `o|<owner>` -> its count
  paused     hash    queue name -> its pause record
  workers    hash    worker name -> JSON of its registration (its `queues`)
  series     stream  the queue's per-minute samples
  parked     zset    its tasks parked on an owner's limit
  throttled  zset    its tasks waiting on a rate limit
  claims     hash    its entries handed out and not started yet
ARGV: common (see fsm.lua), then
  ARGV[5]  queue  the queue's name
  ARGV[6]  dry    '1': run the checks and write nothing (a sharded namespace's first pass
                  over every shard); '0': delete
Returns: {code, detail}
   1  deleted (or, dry, would be): detail is how many keys and fields went (dry: 0)
   0  no such queue here (nothing registered or left of it): nothing written
  -1  it holds live tasks: detail names their counts ("PENDING=3 RUNNING=1" or
      "entries=2"); nothing written
  -2  a registered worker serves it: detail is that worker's name; nothing written
An error (nothing written) for an empty queue name.
Events: none (no task moves).
]]
local n, bad = layout(2, 0, 1, 8)
if bad then return bad end
if n ~= 10 then return bad_arg('number of level streams (10)', n) end
local queue, dry = ARGV[5], ARGV[6]
if type(queue) ~= 'string' or queue == '' then return bad_arg('queue', queue) end
if dry ~= '0' and dry ~= '1' then return bad_arg('dry', dry) end
local T = NCOMMON + n
local QUEUES_KEY, OWNERS_KEY, PAUSED_KEY, WORKERS_KEY = KEYS[T + 1], KEYS[T + 2], KEYS[T + 3],
  KEYS[T + 4]
local SERIES_KEY, PARKED_KEY, THROTTLED_KEY, CLAIMS_KEY = KEYS[T + 5], KEYS[T + 6],
  KEYS[T + 7], KEYS[T + 8]

-- the states of the table ('FROM|EVENT|TO'), and the queue's counters in the stats hash
local states, seen = {}, {}
for k in pairs(TRANSITIONS) do
  local from, _, to = string.match(k, '^([^|]*)|([^|]*)|(.*)$')
  for _, s in ipairs({from, to}) do
    if s ~= '' and not seen[s] then seen[s] = true; states[#states + 1] = s end
  end
end
table.sort(states)
local fields = {'started:' .. queue}
local live = {}
for _, s in ipairs(states) do
  fields[#fields + 1] = queue .. ':' .. s
end
local got = redis.call('HMGET', STATS_KEY, unpack(fields))
for i = 2, #fields do
  local s = states[i - 1]
  local v = tonumber(got[i] or '0') or 0
  if not TERMINAL[s] and v > 0 then live[#live + 1] = s .. '=' .. v end
end
if #live > 0 then return {-1, table.concat(live, ' ')} end
local entries = 0
for i = 1, n do
  entries = entries + redis.call('XLEN', KEYS[NCOMMON + i])
end
entries = entries + redis.call('ZCARD', PARKED_KEY) + redis.call('ZCARD', THROTTLED_KEY)
if entries > 0 then return {-1, 'entries=' .. entries} end
local regs = redis.call('HGETALL', WORKERS_KEY)
for i = 1, #regs, 2 do
  local ok, reg = pcall(cjson.decode, regs[i + 1])
  if ok and type(reg) == 'table' and type(reg.queues) == 'table' then
    for _, q in ipairs(reg.queues) do
      if q == queue then return {-2, regs[i]} end
    end
  end
end
local registered = redis.call('SISMEMBER', QUEUES_KEY, queue) == 1
for _, s in ipairs(states) do
  if TERMINAL[s] then
    fields[#fields + 1] = 'dur_ms:' .. queue .. ':' .. s
    for _, le in ipairs(DURATION_LE_MS) do
      fields[#fields + 1] = 'dur:' .. queue .. ':' .. s .. ':' .. le
    end
    fields[#fields + 1] = 'dur:' .. queue .. ':' .. s .. ':inf'
  end
end
local keys = {SERIES_KEY, PARKED_KEY, THROTTLED_KEY, CLAIMS_KEY}
for i = 1, n do keys[#keys + 1] = KEYS[NCOMMON + i] end
local there = redis.call('EXISTS', unpack(keys))
local owner = redis.call('HGET', OWNERS_KEY, 'q|' .. queue)
if not registered and there == 0 and not owner
    and redis.call('HEXISTS', PAUSED_KEY, queue) == 0 then
  -- (its stats fields alone: a queue whose name was never registered here)
  local any = false
  for i = 1, #states + 1 do if got[i] then any = true end end
  if not any then return {0, 0} end
end
if dry == '1' then return {1, 0} end
-- writes from here on
local gone = redis.call('HDEL', STATS_KEY, unpack(fields)) + there
if there > 0 then redis.call('DEL', unpack(keys)) end
gone = gone + redis.call('SREM', QUEUES_KEY, queue) + redis.call('HDEL', PAUSED_KEY, queue)
if owner then
  redis.call('HDEL', OWNERS_KEY, 'q|' .. queue)
  if redis.call('HINCRBY', OWNERS_KEY, 'o|' .. owner, -1) <= 0 then
    redis.call('HDEL', OWNERS_KEY, 'o|' .. owner)
  end
  gone = gone + 1
end
return {1, gone}
