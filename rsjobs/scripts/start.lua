--[[ start.lua — START: claim delivered work entries (a batch) with a fencing lease.

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua)
  paused  hash  queue name -> its pause record (queue.lua): nothing of such a queue starts
ARGV: common (see fsm.lua), then
  ARGV[5]  consumer   the worker's consumer name (recorded as the lease holder)
  ARGV[6]  lease_ms   lease duration; the worker renews it with heartbeat.lua
  ARGV[7]  nonce      worker-unique string; lease token = "<attempt>:<nonce>"
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
An error (nothing written) when the consumer, nonce or lease_ms is malformed or the
number of entries does not match the tasks.
Events: START (PENDING -> RUNNING); EXPIRE (PENDING -> TIMED_OUT); rejected START. A
  paused queue's delivery is no event.
]]
local n, bad = layout(3, 1, 3, 1)
if bad then return bad end
local PAUSED_KEY = KEYS[#KEYS]
local consumer, lease_ms, nonce = ARGV[5], tonumber(ARGV[6]), ARGV[7]
if not consumer or consumer == '' or not nonce or nonce == '' then
  return bad_arg('consumer or nonce', consumer)
end
if not is_count(ARGV[6]) or lease_ms < 1 then return bad_arg('lease_ms', ARGV[6]) end
if #consumer > TEXT_MAX or #nonce > TEXT_MAX then return bad_arg('consumer or nonce length', #nonce) end
for i = 1, n do  -- a malformed id would fail the XACK at the end of the call
  if not is_entry_id(ARGV[NARGV + 3 + i]) then return bad_arg('entry id', ARGV[NARGV + 3 + i]) end
end

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
for i = 1, n do
  local entry = ARGV[NARGV + 3 + i]
  local t = load(i, {'entry', 'timeout_ms', 'type', 'payload', 'wf', 'expires_at', 'lease',
    'consumer', 'deadline_at', 'tp', 'ts', 'after', 'predecessors'})
  if t == nil then
    local _, qkey = task_keys(i)
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
  else
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
return out
