--[[ finish.lua — a worker ends attempts (a batch): COMPLETE, FAIL, TIMEOUT or REQUEUE.

KEYS: common (see fsm.lua), then per task the four task keys.
ARGV: common, then per task 7 values:
  event       COMPLETE | FAIL | TIMEOUT | REQUEUE
  lease       the lease token START issued to this worker
  body        COMPLETE: result (JSON); FAIL/TIMEOUT/REQUEUE: the error or reason text
  error_type  exception class name ('' for COMPLETE)
  retryable   '1' or '0' (FAIL only; TIMEOUT is always retryable)
  delay_ms    retry delay override, '-1' = the task's exponential backoff
  jitter      random number in [0, 1) for the backoff jitter
Returns: per task {code, state}:
   1  applied; state is the new state (SUCCEEDED, SCHEDULED, FAILED, TIMED_OUT, PENDING)
   2  a repeated COMPLETE from the lease holder of a SUCCEEDED task: nothing written
  -1  the task no longer exists
  -2  refused: the task is no longer RUNNING (cancelled, paused, reclaimed, finished)
  -3  refused: RUNNING under another lease (fencing: this worker lost its lease)
Events: COMPLETE, FAIL, TIMEOUT, REQUEUE; rejected ones are recorded with rej=1.
]]
local PER = 7
local out = {}
for i = 1, ntasks() do
  local a = NCOMMON + (i - 1) * PER
  local event, lease, body = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local etype, retryable = ARGV[a + 4], ARGV[a + 5] == '1'
  local delay, jitter = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local t = load(i, {'lease', 'entry', 'failures', 'max_attempts',
    'backoff_base_ms', 'backoff_max_ms'})
  if t == nil then
    out[i] = {-1, ''}
  elseif t.state ~= 'RUNNING' or t.f.lease ~= lease then
    if event == 'COMPLETE' and t.state == 'SUCCEEDED' and t.f.lease == lease then
      out[i] = {2, t.state}
    elseif t.state == 'RUNNING' then
      reject(t, event, 'lease lost: ' .. lease .. ' no longer holds the task')
      out[i] = {-3, t.state}
    else
      reject(t, event, 'task is ' .. t.state .. ' (lease ' .. lease .. ')')
      out[i] = {-2, t.state}
    end
  else
    drop_entry(t.qkey, t.f.entry)
    redis.call('ZREM', DEADLINES_KEY, member(t))
    if event == 'COMPLETE' then
      transition(t, 'COMPLETE', 'SUCCEEDED', '', {'result', body, 'progress', 100}, nil)
    elseif event == 'REQUEUE' then
      transition(t, 'REQUEUE', 'PENDING', body, {'entry', push_entry(t)}, nil)
    else
      local failures = (tonumber(t.f.failures) or 0) + 1
      local max_attempts = tonumber(t.f.max_attempts) or 1
      local fields = {'error', body, 'error_type', etype, 'failures', failures}
      if (retryable or event == 'TIMEOUT') and failures < max_attempts then
        if delay < 0 then
          delay = backoff(failures, tonumber(t.f.backoff_base_ms), tonumber(t.f.backoff_max_ms),
            jitter)
        end
        fields[#fields + 1] = 'due_at'; fields[#fields + 1] = NOW + delay
        redis.call('ZADD', SCHED_KEY, NOW + delay, member(t))
        transition(t, event, 'SCHEDULED', body, fields, {'retry_in_ms', delay})
      else
        local to = 'FAILED'
        if event == 'TIMEOUT' then to = 'TIMED_OUT' end
        local why = body
        if not retryable and event == 'FAIL' then
          why = 'non-retryable: ' .. body
        elseif failures >= max_attempts then
          why = 'attempts exhausted (' .. failures .. '/' .. max_attempts .. '): ' .. body
        end
        transition(t, event, to, why, fields, nil)
      end
    end
    out[i] = {1, t.state}
  end
end
return out
