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
  local a = NARGV + (i - 1) * PER
  local event, lease, body = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local etype, retryable = ARGV[a + 4], ARGV[a + 5] == '1'
  local delay, jitter = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local t = load(i, ATTEMPT_FIELDS)
  if t == nil then
    out[i] = {-1, ''}
  else
    out[i] = check_lease(t, event, lease)
    if out[i] == nil then
      end_attempt(t, event, body, etype, retryable, delay, jitter)
      out[i] = {1, t.state}
    end
  end
end
return out
