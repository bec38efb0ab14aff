--[[ finish.lua — a worker ends attempts (a batch): COMPLETE, FAIL, TIMEOUT or REQUEUE.

An attempt that ends frees its owner's slot on the queue (the RUNNING counts, see
count_running in fsm.lua): when the owner has a limit there, an entry on the wake stream
tells idle workers to take again (one per queue and call): a task held for that limit may
start now.

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua)
  limits  hash    the limits' settings (see `pools` in fsm.lua)
  wake    stream  idle workers wait on it (an entry "q <queue>", MAXLEN ~ 100)
ARGV: common (see fsm.lua), then
  per task:
    event       COMPLETE | FAIL | TIMEOUT | REQUEUE
    lease       the lease token START issued to this worker
    body        COMPLETE: result (JSON); FAIL/TIMEOUT/REQUEUE: the error or reason text
    error_type  exception class name ('' for COMPLETE)
    retryable   '1' or '0' (FAIL only; TIMEOUT is always retryable)
    delay_ms    retry delay override, '-1' = the task's exponential backoff
    jitter      random number in [0, 1) for the backoff jitter
    traceback   FAIL: the bounded traceback of the handler's exception ('' = none)
    charges     what the handler charged to the attempt ('' = nothing; see parse_charges
                in fsm.lua): accounted with it, and kept on its end's history entry (ch)
Returns: per task {code, state} ({code, state, 1} when the end wrote the task's release
  entry: it has successors, and the worker runs the release step, successors.lua):
   1  applied; state is the new state (SUCCEEDED, SCHEDULED, FAILED, TIMED_OUT, PENDING)
   2  a repeated COMPLETE from the lease holder of a SUCCEEDED task: nothing written
  -1  the task no longer exists
  -2  refused: the task is no longer RUNNING (cancelled, paused, reclaimed, finished)
  -3  refused: RUNNING under another lease (fencing: this worker lost its lease)
An error (nothing written) when an event is unknown, a delay is not '-1' or an integer
>= 0, a jitter is not a number in [0, 1], a lease is longer than TEXT_MAX bytes (it is
quoted in the history of a refusal), a traceback longer than TRACEBACK_MAX, or charges
parse_charges refuses (fsm.lua). The charges of a refused end are not recorded.
Events: COMPLETE, FAIL, TIMEOUT, REQUEUE; rejected ones are recorded with rej=1 (and the
  attempt their lease names). A FAIL entry carries the attempt's exception type (et) and
  traceback (tb) when the worker sent them (see failure_fields in fsm.lua).
]]
local PER = 9
local EVENTS = {COMPLETE = true, FAIL = true, TIMEOUT = true, REQUEUE = true}
local n, bad = layout(0, PER, 3, 2)
local LIMITS_KEY, WAKE_KEY = KEYS[#KEYS - 1], KEYS[#KEYS]
if bad then return bad end
bad = check_levels(n, nil, ATTEMPT_FIELDS)  -- each task's queue key is its level's stream
if bad then return bad end
pools.prefetch_loaded(n, LIMITS_KEY)
local amounts = {}  -- per task: its charges, parsed
for i = 1, n do  -- the whole batch before the first write
  local a = NARGV + (i - 1) * PER
  if not EVENTS[ARGV[a + 1]] then return bad_arg('event', ARGV[a + 1]) end
  if ARGV[a + 6] ~= '-1' and not is_count(ARGV[a + 6]) then
    return bad_arg('delay_ms', ARGV[a + 6])
  end
  if not is_number(ARGV[a + 7], 0, 1) then return bad_arg('jitter', ARGV[a + 7]) end
  if #ARGV[a + 2] > TEXT_MAX then return bad_arg('lease length', #ARGV[a + 2]) end
  if #ARGV[a + 8] > TRACEBACK_MAX then return bad_arg('traceback length', #ARGV[a + 8]) end
  local parsed, why = parse_charges(ARGV[a + 9])
  if not parsed then return bad_arg('charges (' .. why .. ')', string.sub(ARGV[a + 9], 1, 80)) end
  amounts[i] = parsed
end
local out = {}
local wake = {}
for i = 1, n do
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
      local before = RELEASES
      t.charges, t.amounts = ARGV[a + 9], amounts[i]
      end_attempt(t, event, body, etype, retryable, delay, jitter,
        failure_fields(event, etype, ARGV[a + 8]))
      out[i] = {1, t.state}
      if RELEASES > before then out[i][3] = 1 end
      if t.owner ~= '' and pools.owner_limit(LIMITS_KEY, t.queue, t.owner) ~= nil then
        wake[t.queue] = true
      end
    end
  end
end
for queue in pairs(wake) do
  redis.call('XADD', WAKE_KEY, 'MAXLEN', '~', 100, '*', 'q', queue)
end
return out
