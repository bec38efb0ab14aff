--[[ start.lua — START: claim delivered work entries (a batch of one queue) with a
fencing lease, within the queue's limits.

Limits (see `pools` in fsm.lua): a task whose owner has as many RUNNING tasks in the queue
as its limit allows is parked in `parked`, one a rate limit holds back in `throttled` (the
time it may start is reserved for it); either stays PENDING with its delivered entry, held
by the consumer ~waiting, and nothing is written to its history: take.lua hands it to a
worker when it may start. The owner's limit is checked before the rates.

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua)
  paused     hash  queue name -> its pause record (queue.lua): nothing of such a queue starts
  limits     hash  the limits' settings (see `pools` in fsm.lua; rsjobs/limits.py)
  rates      hash  the token buckets' state (GCRA: theoretical arrival time, ms)
  parked     zset  the queue's tasks parked on their owner's limit
  throttled  zset  the queue's tasks waiting on a rate limit, by their reserved time
  claims     hash  consumer -> the tasks take.lua handed it, per owner with a limit (see
                   pools.read_claims in fsm.lua): a delivery started (or refused) here is
                   one no longer
ARGV: common (see fsm.lua), then
  ARGV[5]  consumer   the worker's consumer name (recorded as the lease holder)
  ARGV[6]  lease_ms   lease duration; the worker renews it with heartbeat.lua
  ARGV[7]  nonce      worker-unique string; lease token = "<attempt>:<nonce>"
  ARGV[8]  queue      the queue every task of the call is of (waiting and throttled are its)
  per task:
    entry  the stream entry id that was delivered
Returns: per task either
  {1, id, type, payload, attempt, lease, deadline_at (0 = none), dedup, timeout_ms, wf,
   owner, traceparent, tracestate, after, predecessors}
                        wf: the id of the workflow the task belongs to ('' = none); the
                        worker ends such a task through wf_finish.lua (rsjobs.workflows).
                        owner, traceparent, tracestate: '' when the task has none (the
                        worker's span of the attempt, rsjobs/tracing.py).
                        after, predecessors: a successor's predecessors and their
                        results (fsm.lua; the handler's ctx.predecessors), '' for any
                        other task
                        A repeated START of a task this consumer started from this entry
                        under this nonce (its reply was lost) answers the same, writing
                        nothing (like a repeated COMPLETE of the lease holder)
  {-1}                  the task no longer exists (entry acked and deleted)
  {-2, state}           START refused: the task is not PENDING or the entry is stale;
                        recorded in history, stale entry acked and deleted
  {-4, 'TIMED_OUT'}     the task was never started and its queue-wait deadline
                        (expires_at) has passed: EXPIRE instead, with the reason in
                        history; the delivered entry is acked and deleted
  {-5, 'PENDING'}       the task's queue is paused: the delivery is handed back (acked
                        and deleted, a fresh entry added, as release.lua does); the task
                        stays PENDING and nothing is recorded (it did not move)
  {-7, 'PENDING'}       its owner is at its limit: in parked (nothing recorded)
  {-8, 'PENDING'}       a rate limit holds it back: parked in throttled until its
                        reserved time (nothing recorded)
An error (nothing written) when the consumer (or it is ~waiting), nonce, lease_ms or queue
is malformed, the number of entries does not match the tasks, a task's queue key is not
the stream of its level, or a task is of another queue.
Events: START (PENDING -> RUNNING); EXPIRE (PENDING -> TIMED_OUT); rejected START. A
  paused queue's delivery, and a parked task, are no event.
]]
local n, bad = layout(4, 1, 3, 6)
if bad then return bad end
local PAUSED_KEY, LIMITS_KEY, RATES_KEY = KEYS[#KEYS - 5], KEYS[#KEYS - 4], KEYS[#KEYS - 3]
local WAITING_KEY, THROTTLED_KEY, CLAIMS_KEY = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local consumer, lease_ms, nonce, queue = ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8]
if not consumer or consumer == '' or consumer == WAITING_CONSUMER or not nonce or nonce == '' then
  return bad_arg('consumer or nonce', consumer)
end
if not is_count(ARGV[6]) or lease_ms < 1 then return bad_arg('lease_ms', ARGV[6]) end
if #consumer > TEXT_MAX or #nonce > TEXT_MAX then return bad_arg('consumer or nonce length', #nonce) end
if type(queue) ~= 'string' or queue == '' then return bad_arg('queue', queue) end
for i = 1, n do  -- a malformed id would fail the XACK at the end of the call
  if not is_entry_id(ARGV[NARGV + 4 + i]) then return bad_arg('entry id', ARGV[NARGV + 4 + i]) end
end
-- every task's queue key is its level's stream, and it is of the call's queue (whose the
-- waiting, throttled and claims keys are)
-- (and loads them: see START_FIELDS below)
local START_FIELDS = {'entry', 'timeout_ms', 'type', 'payload', 'wf', 'expires_at', 'lease',
  'consumer', 'deadline_at', 'tp', 'ts', 'rt', 'after', 'predecessors'}
bad = check_levels(n, queue, START_FIELDS)
if bad then return bad end
pools.prefetch_loaded(n, LIMITS_KEY, true)

-- START's reply for the RUNNING task `t`.
local function started(t, lease, deadline, timeout)
  -- a missing field must not end the reply early (a nil ends a Lua array): the worker
  -- fails such a task (no handler for '', no payload) instead of losing the batch
  return {1, t.id, t.f.type or '', t.f.payload or '', t.attempt, lease, deadline,
    t.dedup or '', timeout, t.f.wf or '', t.owner or '', t.f.tp or '', t.f.ts or '',
    t.f.after or '', t.f.predecessors or ''}
end

-- whether a queue is paused, read once per queue and call
local paused = {}
local function is_paused(queue)
  if paused[queue] == nil then paused[queue] = redis.call('HEXISTS', PAUSED_KEY, queue) == 1 end
  return paused[queue]
end

local out = {}
local claimed = {}  -- owner -> its tasks in this call: their claims (take.lua) end here
for i = 1, n do
  local entry = ARGV[NARGV + 4 + i]
  local t = load(i, START_FIELDS)
  local limit, buckets, at = nil, nil, NOW
  if t ~= nil and t.owner ~= '' then claimed[t.owner] = (claimed[t.owner] or 0) + 1 end
  if t ~= nil and t.state == 'PENDING' and t.f.entry == entry then
    limit = pools.owner_limit(LIMITS_KEY, t.queue, t.owner)
    buckets = pools.buckets(LIMITS_KEY, t, t.attempt + 1)
    -- a task let through on a time reserved before starts on that time (see `pools`)
    if #buckets > 0 and not ((tonumber(t.f.rt) or 0) > 0 and tonumber(t.f.rt) <= NOW + 50) then
      at = pools.conform_at(RATES_KEY, LIMITS_KEY, buckets)
    else
      buckets = {}
    end
  end
  if t == nil then
    local _, qkey = task_keys(i)
    -- its owner's claim (take.lua) ends here too: the entry names the owner
    local rec = redis.call('XRANGE', qkey, entry, entry)[1]
    if rec then
      for j = 1, #rec[2], 2 do
        if rec[2][j] == 'o' then claimed[rec[2][j + 1]] = (claimed[rec[2][j + 1]] or 0) + 1 end
      end
    end
    drop_entry(qkey, entry)
    out[i] = {-1}
  elseif t.state == 'RUNNING' and t.f.entry == entry and t.f.consumer == consumer
      and t.f.lease == t.attempt .. ':' .. nonce then
    -- this consumer's own START again (its reply was lost): the same answer, no write
    out[i] = started(t, t.f.lease, tonumber(t.f.deadline_at) or 0, tonumber(t.f.timeout_ms) or 0)
  elseif t.state ~= 'PENDING' or t.f.entry ~= entry then
    -- keep the entry only when it is the live delivery of a RUNNING task (reaper's call)
    if not (t.state == 'RUNNING' and t.f.entry == entry) then drop_entry(t.qkey, entry) end
    local why = 'task is ' .. t.state
    if t.state == 'PENDING' then why = 'stale delivery ' .. entry end
    reject(t, 'START', why)
    out[i] = {-2, t.state}
  elseif wait_expired(t) then
    -- the deadline holds here, not only at the reaper's next sweep
    expire(t, ', at START by ' .. consumer, {'worker', consumer})
    out[i] = {-4, t.state}
  elseif is_paused(t.queue) then
    -- a worker that has not heard of the pause yet: the task waits on its queue (at its
    -- tail: a fresh entry) for the resume; the worker stops reading the queue
    drop_entry(t.qkey, entry)
    redis.call('HSET', t.key, fld('entry'), push_entry(t))
    out[i] = {-5, t.state}
  elseif limit ~= nil and running_now(t) >= limit then
    pools.park(t, entry, WAITING_KEY, 0, pools.waiting_member(t.owner, t.priority, entry, t.id))
    out[i] = {-7, t.state}
  elseif at > NOW then
    at = math.ceil(at)
    pools.reserve(RATES_KEY, LIMITS_KEY, buckets, at)
    redis.call('HSET', t.key, 'rt', at)
    pools.park(t, entry, THROTTLED_KEY, at, pools.throttled_member(t.priority, entry, t.id))
    out[i] = {-8, t.state}
  else
    if #buckets > 0 then pools.reserve(RATES_KEY, LIMITS_KEY, buckets, NOW) end
    if t.f.rt then redis.call('HDEL', t.key, 'rt') end
    local attempt = t.attempt + 1
    t.attempt = attempt
    local lease = attempt .. ':' .. nonce
    local timeout = tonumber(t.f.timeout_ms) or 0
    local deadline = 0
    if timeout > 0 then
      deadline = NOW + timeout  -- replaces the queue-wait deadline's score, if any
      redis.call('ZADD', DEADLINES_KEY, deadline, member(t))
    elseif t.f.expires_at then
      redis.call('ZREM', DEADLINES_KEY, member(t))  -- started in time: no deadline left
    end
    transition(t, 'START', 'RUNNING', '', {'attempt', attempt, 'lease', lease,
      'consumer', consumer, 'started_at', NOW, 'lease_expires_at', NOW + lease_ms,
      'deadline_at', deadline}, {'w', consumer})
    out[i] = started(t, lease, deadline, timeout)
  end
end
if next(claimed) ~= nil then
  local raw = redis.call('HGET', CLAIMS_KEY, consumer)
  if raw then
    local _, counts, exps = pools.read_claims(raw)
    for owner, c in pairs(claimed) do
      if counts[owner] then counts[owner] = counts[owner] - c end
    end
    pools.write_claims(CLAIMS_KEY, consumer, counts, exps)
  end
end
return out
