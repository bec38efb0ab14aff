--[[ enqueue.lua — ENQUEUE: create tasks (one or a batch) as PENDING or SCHEDULED.

KEYS: common (see fsm.lua), then per task: task hash, history stream, queue stream,
      dedup string (the unused "dedup:" key when the task has no dedup key).
ARGV: common (see fsm.lua), then per task 12 values:
  id, type, queue, payload (JSON), max_attempts, timeout_ms (0 = none),
  delay_ms (0 = now), dedup (string or ''), owner (string or ''),
  backoff_base_ms, backoff_max_ms, wait_timeout_ms (0 = none: queue-wait deadline)
Returns: per task {id, state, duplicate}: duplicate = 1 when the dedup key (or the id)
  already named a live task, whose id and state are returned and nothing is written.
  An error (nothing written) when a value is malformed: an empty id / type / queue, or a
  number that is not a decimal integer >= 0 of at most 15 digits (max_attempts >= 1).
Events: ENQUEUE ('' -> PENDING | SCHEDULED).
]]
local PER = 12
if #ARGV ~= NARGV + ntasks() * PER then return bad_arg('ARGV count', #ARGV) end
-- checks of the whole batch first: a bad value in its last task must not leave the others
-- written and the call failed
for i = 1, ntasks() do
  local a = NARGV + (i - 1) * PER
  for _, j in ipairs({1, 2, 3}) do
    if ARGV[a + j] == '' then return bad_arg('empty id, type or queue of task', i) end
  end
  for _, j in ipairs({5, 6, 7, 10, 11, 12}) do
    if not is_count(ARGV[a + j]) then return bad_arg('number (task ' .. i .. ')', ARGV[a + j]) end
  end
  if tonumber(ARGV[a + 5]) < 1 then return bad_arg('max_attempts', ARGV[a + 5]) end
end
local out = {}
for i = 1, ntasks() do
  local key, hkey, qkey, dkey = task_keys(i)
  local a = NARGV + (i - 1) * PER
  local id, typ, queue, payload = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local max_attempts, timeout_ms = ARGV[a + 5], ARGV[a + 6]
  local delay_ms, dedup, owner = tonumber(ARGV[a + 7]), ARGV[a + 8], ARGV[a + 9]
  local bbase, bmax, wait_ms = ARGV[a + 10], ARGV[a + 11], tonumber(ARGV[a + 12])

  -- checks first: a dedup key (or id) already in use answers with the existing task
  local existing = nil
  if dedup ~= '' then
    existing = redis.call('GET', dkey)
  end
  if existing then
    out[i] = {existing, '', 1}
  elseif redis.call('EXISTS', key) == 1 then
    out[i] = {id, redis.call('HGET', key, 'state'), 1}
  else
    local t = {key = key, hkey = hkey, qkey = qkey, dkey = dkey, id = id, queue = queue,
      state = '', attempt = 0, dedup = dedup}
    local fields = {'id', id, 'type', typ, 'queue', queue, 'payload', payload,
      'attempt', 0, 'failures', 0, 'max_attempts', max_attempts, 'timeout_ms', timeout_ms,
      'backoff_base_ms', bbase, 'backoff_max_ms', bmax, 'progress', 0, 'created_at', NOW}
    if owner ~= '' then fields[#fields + 1] = 'owner'; fields[#fields + 1] = owner end
    if dedup ~= '' then
      fields[#fields + 1] = 'dedup'; fields[#fields + 1] = dedup
      redis.call('SET', dkey, id)
    end
    if wait_ms > 0 then
      fields[#fields + 1] = 'expires_at'; fields[#fields + 1] = NOW + wait_ms
      -- indexed for the reaper, which expires the task if no worker started it in time
      redis.call('ZADD', DEADLINES_KEY, NOW + wait_ms, member(t))
    end
    local to = 'PENDING'
    if delay_ms > 0 then
      to = 'SCHEDULED'
      fields[#fields + 1] = 'due_at'; fields[#fields + 1] = NOW + delay_ms
      redis.call('ZADD', SCHED_KEY, NOW + delay_ms, member(t))
    else
      fields[#fields + 1] = 'entry'; fields[#fields + 1] = push_entry(t)
    end
    transition(t, 'ENQUEUE', to, '', fields, {'type', typ})
    compact(t.hkey)  -- a waiting task holds ~1.4 kB, not its history's 4 kB preallocation
    out[i] = {id, to, 0}
  end
end
return out
