--[[ enqueue.lua — ENQUEUE: create tasks (one or a batch) as PENDING or SCHEDULED.

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua)
ARGV: common (see fsm.lua), then
  per task:
    id       the new task's id
    type     its handler's name
    queue    its queue
    payload  JSON
    options  JSON object (see task_options in fsm.lua): max_attempts, timeout_ms (0 =
             none), delay_ms (0 = now), wait_timeout_ms (0 = none: queue-wait deadline),
             backoff_base_ms, backoff_max_ms, dedup, owner, labels, traceparent and
             tracestate (the submitter's trace context, hash fields tp / ts), priority
             (0-9: the task's queue key is that level's stream); one left out is 0 or
             ''
Returns: per task {id, state, duplicate}: duplicate = 1 when the dedup key (or the id)
  already named a live task, whose id and state are returned and nothing is written.
  An error (nothing written) when a value is malformed: an empty id / type / queue, or
  options that task_options refuses (a count that is not an integer >= 0, max_attempts
  below 1, a priority outside 0-9, an unknown name), or a queue key that is not the
  stream of the task's queue and priority.
Events: ENQUEUE ('' -> PENDING | SCHEDULED).
]]
local PER = 5
local n, bad = layout(0, PER, 3, 0)
if bad then return bad end
-- checks of the whole batch first: a bad value in its last task must not leave the others
-- written and the call failed
local opts = {}
for i = 1, n do
  local a = NARGV + (i - 1) * PER
  for j = 1, 3 do
    if ARGV[a + j] == '' then return bad_arg('empty id, type or queue of task', i) end
  end
  local o, why = task_options(ARGV[a + 5])
  if o == nil then return bad_arg(why .. ' (task ' .. i .. ')', ARGV[a + 5]) end
  if not new_task_keys_ok(i, ARGV[a + 3], o) then
    return bad_arg('queue key of task ' .. i .. ' (not the stream of its queue and priority)',
      ARGV[a + 3])
  end
  opts[i] = o
end
local out = {}
for i = 1, n do
  local key, _, dkey = task_keys(i)
  local a = NARGV + (i - 1) * PER
  local id, typ, queue, payload = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local o = opts[i]

  -- checks first: a dedup key (or id) already in use answers with the existing task
  local existing = nil
  if (o.dedup or '') ~= '' then
    existing = redis.call('GET', dkey)
  end
  if existing then
    out[i] = {existing, '', 1}
  elseif redis.call('EXISTS', key) == 1 then
    out[i] = {id, redis.call('HGET', key, fld('state')), 1}
  else
    local t = new_task(i, id, typ, queue, payload, o, '', nil, nil)
    out[i] = {id, t.state, 0}
  end
end
return out
