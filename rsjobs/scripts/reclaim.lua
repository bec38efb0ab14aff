--[[ reclaim.lua — RECLAIM / DEADLETTER: recover idle deliveries of lost consumers (a batch).

The reaper lists idle entries of a queue's pending list (XPENDING ... IDLE min_idle) and
passes them here. Nothing is taken on trust: for each entry this script re-reads the
pending list and the task hash and acts only when the owner is provably gone:
  * RUNNING task, entry is its live delivery: the lease must have expired by Redis TIME
    (lease_expires_at < now). A heartbeat renews both the lease and the entry's idle time,
    so a healthy task that runs far longer than the lease is never taken. Then
    RECLAIM: RUNNING -> PENDING (a new attempt, new entry) while failures < max_attempts,
    else RUNNING -> FAILED ("attempts exhausted ... worker lost").
  * PENDING task, entry is its delivery, never STARTed: the consumer that holds it must be
    missing from the workers registry or its beat older than dead_leases of its leases (a
    live worker may hold deliveries it has no free slot for yet), or the entry idle for
    dead_leases of its leases (a live worker whose read reply was lost never starts it).
    The entry is replaced by a fresh one (as release.lua does for a live worker); no
    transition.
  * Poison: the task's `deliveries` counter adds up the XPENDING delivery counts of every
    entry recovered here (each one a delivery whose consumer died). When it reaches
    max_deliveries the task is dead-lettered instead: DEADLETTER -> FAILED, and an entry is
    added to the dead-letter stream.
  * Anything else (task gone, entry stale, task in another state): the entry is garbage
    and is acked and deleted.
A second reaper passing the same entry finds it no longer pending (or no longer the
task's entry, or the task no longer RUNNING under that lease) and does nothing. A lost
worker that was only frozen learns at its next heartbeat that the task left its hands;
its late COMPLETE / FAIL is refused by finish.lua and recorded.

KEYS: common (see fsm.lua), then
  per entry: the task keys (see fsm.lua; of the task named by the entry's `id` field,
    with its real dedup key, so FAILED tasks expire with it)
  deadletter  stream  dead-lettered tasks, trimmed with MAXLEN ~
  workers     hash    worker name -> JSON registration (beat_at, lease_ms)
ARGV: common (see fsm.lua), then
  ARGV[5]   min_idle_ms       an entry idle for less is left alone
  ARGV[6]   max_deliveries    lost deliveries after which a task is dead-lettered
  ARGV[7]   dead_leases       a consumer whose registration beat is older than this many of
                              its leases (lease_ms in its registration) is gone
  ARGV[8]   default_lease_ms  the lease assumed when a registration does not say
  ARGV[9]   deadletter_max    approximate MAXLEN of the dead-letter stream
  per entry:
    entry  the stream entry id
Returns: per entry one word:
  RETRIED       RECLAIM -> PENDING (new attempt)
  FAILED        RECLAIM -> FAILED (attempts exhausted)
  DEADLETTERED  DEADLETTER -> FAILED, added to the dead-letter stream
  REDELIVERED   unstarted delivery of a lost consumer put back on the queue
  ALIVE         the owner still holds the lease / the consumer still beats: untouched
  BUSY          the entry is no longer pending, or no longer idle enough: untouched
  WAITING       the entry is held for a limit (consumer ~waiting, see `pools` in
                fsm.lua): no worker holds it, untouched
  STALE         the entry named no live delivery: acked and deleted
An error (nothing written) when a number or an entry id is malformed, or the KEYS do not
  match the entries.
Events: RECLAIM (RUNNING -> PENDING | FAILED), DEADLETTER (RUNNING | PENDING -> FAILED),
  with extra fields worker (the lost consumer), idle_ms and deliveries.
]]
local NARG = 9
local n, bad = layout(5, 1, 3, 2)
if bad then return bad end
for j = 5, NARG do
  if not is_count(ARGV[j]) then return bad_arg('number ARGV[' .. j .. ']', ARGV[j]) end
end
local min_idle, max_deliveries = tonumber(ARGV[5]), tonumber(ARGV[6])
local dead_leases, default_lease = tonumber(ARGV[7]), tonumber(ARGV[8])
local dl_max = tonumber(ARGV[9])
local DEADLETTER_KEY = KEYS[NCOMMON + 3 * n + 1]
local WORKERS_KEY = KEYS[NCOMMON + 3 * n + 2]
for i = 1, n do
  if not is_entry_id(ARGV[NARG + i]) then return bad_arg('entry id', ARGV[NARG + i]) end
end
bad = check_levels(n)
if bad then return bad end

-- Whether `consumer` beat recently enough to count as alive (registration JSON), and the
-- lease it registered with.
local function consumer_alive(consumer)
  local raw = redis.call('HGET', WORKERS_KEY, consumer)
  if not raw then return false, default_lease end
  local ok, reg = pcall(cjson.decode, raw)
  if not ok or type(reg) ~= 'table' then return false, default_lease end
  local lease = tonumber(reg.lease_ms) or default_lease
  return (tonumber(reg.beat_at) or 0) + dead_leases * lease >= NOW, lease
end

-- Dead-letter the task: DEADLETTER -> FAILED, plus an entry on the dead-letter stream.
local function deadletter(t, entry, consumer, deliveries, why)
  drop_entry(t.qkey, entry)
  redis.call('ZREM', DEADLINES_KEY, member(t))
  local from = t.state
  local times = deliveries .. ' times'
  if deliveries == 1 then times = 'once' end
  local reason = 'poison: delivered ' .. times .. ', each time its consumer was lost (last: '
    .. consumer .. ', ' .. why .. ')'
  local dl = redis.call('XADD', DEADLETTER_KEY, 'MAXLEN', '~', dl_max, '*',
    'id', t.id, 'q', t.queue, 'type', t.f.type or '', 'from', from, 'worker', consumer,
    'deliveries', deliveries, 'att', t.attempt, 'ts', NOW, 'reason', reason)
  transition(t, 'DEADLETTER', 'FAILED', reason, {'error', reason, 'error_type', 'DeadLetter',
    'deliveries', deliveries, 'deadletter', dl},
    {'worker', consumer, 'deliveries', deliveries, 'dl', dl})
end

-- RECLAIM under the retry policy (fsm.lua end_attempt): a new attempt while
-- failures < max_attempts, else FAILED. Returns the new state.
local function reclaim(t, consumer, idle, deliveries, why)
  end_attempt(t, 'RECLAIM', 'worker ' .. consumer .. ' lost: ' .. why, 'WorkerLost', true, 0, 0,
    {'worker', consumer, 'idle_ms', idle, 'deliveries', deliveries}, {'deliveries', deliveries})
  return t.state
end

local out = {}
for i = 1, n do
  local entry = ARGV[NARG + i]
  local _, qkey = task_keys(i)
  local pel = redis.call('XPENDING', qkey, GROUP, 'IDLE', min_idle, entry, entry, 1)
  if #pel == 0 then
    out[i] = 'BUSY'
  elseif pel[1][2] == WAITING_CONSUMER then
    out[i] = 'WAITING'
  else
    local consumer, idle, count = pel[1][2], tonumber(pel[1][3]), tonumber(pel[1][4])
    local t = load(i, {'lease', 'entry', 'failures', 'max_attempts', 'backoff_base_ms',
      'backoff_max_ms', 'lease_expires_at', 'deliveries', 'type'})
    if t == nil or t.f.entry ~= entry or (t.state ~= 'RUNNING' and t.state ~= 'PENDING') then
      drop_entry(qkey, entry)
      out[i] = 'STALE'
    elseif t.state == 'RUNNING' then
      local expires = tonumber(t.f.lease_expires_at) or 0
      if expires >= NOW then
        out[i] = 'ALIVE'
      else
        local deliveries = (tonumber(t.f.deliveries) or 0) + count
        local why = 'lease expired ' .. (NOW - expires) .. ' ms ago, idle ' .. idle .. ' ms'
        if deliveries >= max_deliveries then
          deadletter(t, entry, consumer, deliveries, why)
          out[i] = 'DEADLETTERED'
        elseif reclaim(t, consumer, idle, deliveries, why) == 'PENDING' then
          out[i] = 'RETRIED'
        else
          out[i] = 'FAILED'
        end
      end
    else -- PENDING, delivered to `consumer`, never started
      local alive, lease = consumer_alive(consumer)
      if alive and idle < dead_leases * lease then
        out[i] = 'ALIVE'
      elseif alive then
        -- a live worker that has not started it for dead_leases leases never will (its
        -- read reply was lost): deliver it again; not a lost delivery, so not counted
        drop_entry(qkey, entry)
        redis.call('HSET', t.key, fld('entry'), push_entry(t))
        out[i] = 'REDELIVERED'
      else
        local deliveries = (tonumber(t.f.deliveries) or 0) + count
        if deliveries >= max_deliveries then
          deadletter(t, entry, consumer, deliveries, 'never started, idle ' .. idle .. ' ms')
          out[i] = 'DEADLETTERED'
        else
          drop_entry(qkey, entry)
          redis.call('HSET', t.key, fld('entry'), push_entry(t), 'deliveries', deliveries)
          out[i] = 'REDELIVERED'
        end
      end
    end
  end
end
return out
