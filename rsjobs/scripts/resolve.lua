--[[ resolve.lua — an outside result ends the wait of a DEFERRED task (one task): COMPLETE
or FAIL (a provider's callback, a client call, a poller's answer), or AGAIN (a poller
found the outside job still running: its next poll is scheduled).

Fenced like a worker's result: it applies only to the task's current attempt, while it is
DEFERRED, and (when the caller names one) to its current external id. Anything else is
refused and recorded (coalesced, see reject in fsm.lua): an attempt that is over (timed
out past its longest wait, failed and retried, cancelled, superseded by a workflow's
regenerate, which cancels it). A repeat of the result that ended the wait (the same
attempt and event, see `resolved` in fsm.lua) is answered with the task's state and
writes nothing. A FAIL follows the task's retry policy (end_attempt in fsm.lua:
SCHEDULED after the backoff, or FAILED); a COMPLETE stores the result. A workflow's task
is then accounted by the workflow driver (wf_sync.lua), which the caller wakes.

KEYS: common (see fsm.lua), then
  per task (one): the task keys (see fsm.lua; with its real dedup key)
  external  string  the external key of the task's wait (defer.lua): it expires with the
                    task when the result makes the task terminal
  polls     zset    "<queue>:<id>" of polled DEFERRED tasks, by next poll (ms)
ARGV: common (see fsm.lua), then
  ARGV[5]   event        COMPLETE | FAIL | AGAIN
  ARGV[6]   attempt      the attempt the result is for ('' = the task's current one)
  ARGV[7]   external_id  the outside job's id the result names ('' = any)
  ARGV[8]   body         COMPLETE: result (JSON); FAIL: the error text; AGAIN: ''
  ARGV[9]   error_type   FAIL: a name for the error ('' for COMPLETE)
  ARGV[10]  retryable    '1' or '0' (FAIL only)
  ARGV[11]  jitter       random number in [0, 1) for the backoff jitter
  ARGV[12]  via          callback | poll | api: how the result came (history field via, when
                         it is not the call's source)
  ARGV[13]  charges      COMPLETE / FAIL: what the outside job cost ('' = nothing; see
                         parse_charges in fsm.lua), accounted with the attempt; '' for AGAIN
Returns: {code, state} ({code, state, 1} when the end wrote the task's release entry: it
  has successors, and the caller runs the release step, successors.lua):
   1  applied; state is the new state (SUCCEEDED, SCHEDULED, FAILED; AGAIN: DEFERRED)
   2  a repeat of the result that ended the wait: nothing written
  -1  the task no longer exists
  -2  refused (recorded): the task is not DEFERRED (finished, timed out, cancelled...)
  -3  refused (recorded): the result is for another attempt or external id
A result that finds the wait over by Redis TIME (wait_until passed, the reaper has not
swept it yet) times the attempt out first (TIMEOUT, as deadline.lua would), then is
refused (-2).
An error (nothing written) when the event, attempt, external id, error type, jitter, via
or charges are malformed (or charges come with AGAIN). The charges of a refused result
are not recorded.
Events: COMPLETE (DEFERRED -> SUCCEEDED), FAIL (DEFERRED -> SCHEDULED | FAILED), TIMEOUT
  (DEFERRED -> SCHEDULED | TIMED_OUT, past the longest wait); refused
  ones recorded with rej=1. AGAIN is no event (a poll is no transition) and its refusals
  are not recorded: a stale poll's member is dropped.
]]
local _, bad = layout(9, 0, 3, 2, 1)
if bad then return bad end
local XKEY, POLLS_KEY = KEYS[#KEYS - 1], KEYS[#KEYS]
local event, att_arg, ext, body = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local etype, retryable, via = ARGV[9], ARGV[10] == '1', ARGV[12]
local EVENTS = {COMPLETE = true, FAIL = true, AGAIN = true}
local VIA = {callback = true, poll = true, api = true}
if not EVENTS[event] then return bad_arg('event', event) end
if att_arg ~= '' and not is_count(att_arg) then return bad_arg('attempt', att_arg) end
if ext ~= '' and not is_external(ext) then return bad_arg('external_id', ext) end
if #etype > 200 then return bad_arg('error_type length', #etype) end
if not is_number(ARGV[11], 0, 1) then return bad_arg('jitter', ARGV[11]) end
if not VIA[via] then return bad_arg('via', via) end
local charged, why = parse_charges(ARGV[13])
if not charged or (event == 'AGAIN' and ARGV[13] ~= '') then
  return bad_arg('charges (' .. (why or 'none with AGAIN') .. ')', string.sub(ARGV[13], 1, 80))
end
local jitter = tonumber(ARGV[11])

local names = {'external_id', 'provider', 'poll_ms', 'resolved', 'wait_until'}
for _, f in ipairs(ATTEMPT_FIELDS) do names[#names + 1] = f end
local t = load(1, names)
if t == nil then return {-1, ''} end
local att = t.attempt
if att_arg ~= '' then att = tonumber(att_arg) end
local named = ext == '' or ext == t.f.external_id
if event ~= 'AGAIN' and named and t.f.resolved == att .. string.sub(event, 1, 1) then
  return {2, t.state}  -- the result that ended the wait, again
end
local what = event .. ' via ' .. via .. ' (attempt ' .. att .. ', external id '
  .. (ext ~= '' and ext or (t.f.external_id or '?')) .. ')'
if t.state ~= 'DEFERRED' then
  if event == 'AGAIN' then
    redis.call('ZREM', POLLS_KEY, member(t))
  else
    reject(t, event, what .. ': task is ' .. t.state, att)
  end
  return {-2, t.state}
end
if att ~= t.attempt or not named then
  if event ~= 'AGAIN' then
    reject(t, event, what .. ': not the current wait (attempt ' .. t.attempt .. ', external id '
      .. (t.f.external_id or '?') .. ')', att)
  end
  return {-3, t.state}
end
local until_ms = tonumber(t.f.wait_until) or 0
if until_ms > 0 and until_ms <= NOW then
  -- past its longest wait: the deadline holds here, not only at the reaper's next sweep
  -- (deadline.lua): TIMEOUT, then the result is refused as any later one
  leave_deferred(t, POLLS_KEY)
  end_attempt(t, 'TIMEOUT', 'longest wait passed ' .. (NOW - until_ms) .. ' ms ago: no result '
    .. 'from ' .. (t.f.provider or '?') .. '/' .. (t.f.external_id or '?') .. ' in time',
    'DeferTimeout', true, -1, jitter, {'x', t.f.external_id or ''}, nil)
  if event ~= 'AGAIN' then reject(t, event, what .. ': past its longest wait', att) end
  return with_released({-2, t.state})
end
if event == 'AGAIN' then
  local every = tonumber(t.f.poll_ms) or 0
  if every > 0 then redis.call('ZADD', POLLS_KEY, NOW + every, member(t)) end
  return {1, t.state}
end
leave_deferred(t, POLLS_KEY)
redis.call('HSET', t.key, 'xd', att .. string.sub(event, 1, 1))
-- (via: how the result came, when the source does not say it already)
local extra = nil
if via ~= SOURCE then extra = {'via', via} end
t.charges, t.amounts = ARGV[13], charged
end_attempt(t, event, body, etype, retryable, -1, jitter, extra, nil)
if TERMINAL[t.state] and RETENTION_MS > 0 then
  local holder = redis.call('GET', XKEY)
  if holder == att .. ' ' .. t.queue .. ' ' .. t.id then
    redis.call('PEXPIRE', XKEY, RETENTION_MS)
  end
end
return with_released({1, t.state})
