--[[ deadline.lua — TIMEOUT / EXPIRE: enforce deadlines that passed (a batch), by the reaper.

Candidates come from the deadlines zset (members "<queue>:<id>"), which holds:
  * the execution deadline of a RUNNING attempt (start.lua: deadline_at), and
  * the queue-wait deadline of a task not started yet (enqueue.lua: expires_at, when the
    task was submitted with wait_timeout_ms > 0).
Each candidate is re-checked here against its hash and Redis TIME, so an early or stale
member is harmless:
  * RUNNING and deadline_at + grace_ms <= now: TIMEOUT, the same retry policy as a worker's
    TIMEOUT in finish.lua (RUNNING -> SCHEDULED with backoff while failures < max_attempts,
    else TIMED_OUT). This catches a hung or frozen worker whose own timer cannot fire; the
    grace lets a live worker report its own timeout first. Its late result is refused by
    finish.lua; its next heartbeat tells it to stop.
  * PENDING or SCHEDULED, never started (attempt 0), expires_at <= now: EXPIRE -> TIMED_OUT.
  * DEFERRED and wait_until <= now (its longest wait, defer.lua): TIMEOUT, the same retry
    policy (DEFERRED -> SCHEDULED with backoff, else TIMED_OUT); an outside result that
    comes later is refused by resolve.lua and recorded. No grace: no worker is involved.
  * due later than the member's score: the member is re-scored to that time.
  * anything else (task gone, PAUSED, finished, started without a deadline): ZREM.

KEYS: common (see fsm.lua), then
  per candidate: the task keys (see fsm.lua; with the task's real dedup key, so a
    TIMED_OUT task's dedup key expires with it)
ARGV: common (see fsm.lua), then
  ARGV[5]  grace_ms   how long past deadline_at a RUNNING attempt is left to its worker
  per candidate:
    member  its deadlines zset member "<queue>:<id>"
    jitter  a random number in [0, 1) (backoff jitter)
Returns: per candidate one word:
  RETRY      TIMEOUT -> SCHEDULED (a new attempt after the backoff)
  TIMED_OUT  TIMEOUT -> TIMED_OUT (attempts exhausted)
  EXPIRED    EXPIRE -> TIMED_OUT (not started within its queue-wait deadline)
  LATER      not due yet: member re-scored
  STALE      member removed, nothing else done
An error (nothing written) when grace_ms or a jitter is malformed.
Events: TIMEOUT (RUNNING | DEFERRED -> SCHEDULED | TIMED_OUT), EXPIRE (PENDING | SCHEDULED -> TIMED_OUT).
]]
local NARG, PER = 5, 2
local n, bad = layout(1, PER, 3, 0)
if bad then return bad end
bad = check_levels(n)  -- each task's queue key is its level's stream
if bad then return bad end
local grace = tonumber(ARGV[5])
if not is_count(ARGV[5]) then return bad_arg('grace_ms', ARGV[5]) end
for i = 1, n do  -- the whole batch before the first write
  local jitter = ARGV[NARG + (i - 1) * PER + 2]
  if not is_number(jitter, 0, 1) then return bad_arg('jitter', jitter) end
end
local out = {}
for i = 1, n do
  local a = NARG + (i - 1) * PER
  local m, jitter = ARGV[a + 1], tonumber(ARGV[a + 2])
  local t = load(i, {'lease', 'entry', 'failures', 'max_attempts', 'backoff_base_ms',
    'backoff_max_ms', 'deadline_at', 'expires_at', 'consumer', 'started_at', 'created_at', 'wait_until',
    'external_id', 'provider'})
  if t == nil then
    redis.call('ZREM', DEADLINES_KEY, m)
    out[i] = 'STALE'
  elseif t.state == 'RUNNING' and (tonumber(t.f.deadline_at) or 0) > 0 then
    local deadline = tonumber(t.f.deadline_at)
    if deadline + grace > NOW then
      redis.call('ZADD', DEADLINES_KEY, deadline + grace, m)
      out[i] = 'LATER'
    else
      local worker = t.f.consumer or ''
      local body = 'execution deadline passed ' .. (NOW - deadline) .. ' ms ago (ran '
        .. (NOW - (tonumber(t.f.started_at) or NOW)) .. ' ms); worker ' .. worker
        .. ' did not end the attempt'
      end_attempt(t, 'TIMEOUT', body, 'TimeoutError', true, -1, jitter, {'worker', worker}, nil)
      if t.state == 'SCHEDULED' then out[i] = 'RETRY' else out[i] = 'TIMED_OUT' end
    end
  elseif t.state == 'DEFERRED' and (tonumber(t.f.wait_until) or 0) > 0 then
    local until_ms = tonumber(t.f.wait_until)
    if until_ms > NOW then
      redis.call('ZADD', DEADLINES_KEY, until_ms, m)
      out[i] = 'LATER'
    else
      local ext = (t.f.provider or '?') .. '/' .. (t.f.external_id or '?')
      local body = 'longest wait passed ' .. (NOW - until_ms) .. ' ms ago: no result from '
        .. ext
      leave_deferred(t, nil)
      end_attempt(t, 'TIMEOUT', body, 'DeferTimeout', true, -1, jitter, {'x', t.f.external_id or ''},
        nil)
      if t.state == 'SCHEDULED' then out[i] = 'RETRY' else out[i] = 'TIMED_OUT' end
    end
  elseif (t.state == 'PENDING' or t.state == 'SCHEDULED') and t.attempt == 0
      and (tonumber(t.f.expires_at) or 0) > 0 then
    local expires = tonumber(t.f.expires_at)
    if expires > NOW then
      redis.call('ZADD', DEADLINES_KEY, expires, m)
      out[i] = 'LATER'
    else
      redis.call('ZREM', DEADLINES_KEY, m)
      expire(t, '', nil)
      out[i] = 'EXPIRED'
    end
  else
    redis.call('ZREM', DEADLINES_KEY, m)
    out[i] = 'STALE'
  end
end
return out
