--[[ promote.lua — PROMOTE: due SCHEDULED tasks (delay or retry backoff) back to PENDING.

KEYS: common (see fsm.lua), then
  per candidate: the task keys (see fsm.lua)
ARGV: common (see fsm.lua), then
  per candidate:
    member  its scheduled zset member "<queue>:<id>"
Candidates come from the scheduled zset; each is re-checked here against Redis TIME and
its own state, so a stale or early candidate is harmless. A candidate never started whose
queue-wait deadline (expires_at) has passed is expired instead (EXPIRE -> TIMED_OUT), due
or not: it can no longer start in time.
Returns: {promoted, next_due_ms}: how many were promoted, and the score of the earliest
  member still scheduled (-1 when none).
Events: PROMOTE (SCHEDULED -> PENDING), EXPIRE (SCHEDULED -> TIMED_OUT).
]]
local n, bad = layout(0, 1, 3, 0)
if bad then return bad end
bad = check_levels(n)  -- each task's queue key is its level's stream
if bad then return bad end
local promoted = 0
for i = 1, n do
  local t = load(i, {'due_at', 'expires_at', 'created_at'})
  if t == nil then
    redis.call('ZREM', SCHED_KEY, ARGV[NARGV + i])
  else
    if t.state == 'SCHEDULED' and wait_expired(t) then
      expire(t, ', at PROMOTE', nil)
    elseif t.state == 'SCHEDULED' then
      if (tonumber(t.f.due_at) or 0) <= NOW then
        redis.call('ZREM', SCHED_KEY, member(t))
        transition(t, 'PROMOTE', 'PENDING', '', {'entry', push_entry(t)}, nil)
        promoted = promoted + 1
      end
    else
      redis.call('ZREM', SCHED_KEY, member(t))
    end
  end
end
local nxt = redis.call('ZRANGE', SCHED_KEY, 0, 0, 'WITHSCORES')
local next_due = -1
if nxt[2] then next_due = tonumber(nxt[2]) end
return {promoted, next_due}
