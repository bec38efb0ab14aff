--[[ control.lua — CANCEL, PAUSE or RESUME of one task, on behalf of a user or the API.

KEYS: common (see fsm.lua), then
  per task (one): the task keys (see fsm.lua)
  waiting  zset  "<queue>:<id>" of every WAITING task (a cancelled one leaves it)
ARGV: common (see fsm.lua), then
  ARGV[5]  event     CANCEL | PAUSE | RESUME
  ARGV[6]  message   reason given by the caller ('' = none)
  ARGV[7]  channel   pub/sub channel on which running workers hear "<EVENT> <id>"
Returns: {code, state} ({code, state, 1} when a cancel wrote the task's release entry: it
  has successors, and the caller runs the release step, successors.lua):
   1  applied; state is the new state
   0  nothing to do: the task is already in the state asked for (idempotent repeat)
  -1  no such task
  -2  refused (the task is terminal, or the event does not apply): state is unchanged
An error (nothing written) for an unknown event, a message over 4096 bytes or no channel.
Events: CANCEL (-> CANCELLED), PAUSE (-> PAUSED), RESUME (PAUSED -> PENDING); refused ones
  are recorded with rej=1 (coalesced, see reject in fsm.lua); PAUSE of a WAITING task is
  refused (it holds nothing to pause: its predecessors decide when it runs). A RUNNING task's entry is
  acked and its worker notified. RESUME of a task never started re-indexes its queue-wait
  deadline (a pause does not stop that clock).
]]
local _, bad = layout(3, 0, 3, 1, 1)
if bad then return bad end
local event, msg, channel = ARGV[5], ARGV[6], ARGV[7]
local TARGET = {CANCEL = 'CANCELLED', PAUSE = 'PAUSED', RESUME = 'PENDING'}
local MSG_MAX = 4096
local to = TARGET[event]
if to == nil then return redis.error_reply('rsjobs: unknown control event ' .. tostring(event)) end
if type(msg) ~= 'string' or #msg > MSG_MAX then
  return bad_arg('message (at most ' .. MSG_MAX .. ' bytes)', type(msg) == 'string' and #msg)
end
if not channel or channel == '' then return bad_arg('channel', channel) end
local t = load(1, {'entry', 'expires_at'})
if t == nil then return {-1, ''} end
if not allowed(t.state, event, to) then
  if t.state == to and event ~= 'RESUME' then
    reject(t, event, 'already ' .. t.state)
    return {0, t.state}
  end
  reject(t, event, 'task is ' .. t.state)
  return {-2, t.state}
end
local from = t.state
local fields = {}
if from == 'WAITING' then
  redis.call('ZREM', KEYS[#KEYS], member(t))
elseif from == 'PENDING' then
  drop_entry(t.qkey, t.f.entry)
elseif from == 'SCHEDULED' then
  redis.call('ZREM', SCHED_KEY, member(t))
elseif from == 'RUNNING' then
  drop_entry(t.qkey, t.f.entry)
  redis.call('ZREM', DEADLINES_KEY, member(t))
elseif from == 'DEFERRED' then
  leave_deferred(t, nil)  -- its longest wait; its poll, if any, is dropped when claimed
end
if event == 'RESUME' then
  fields = {'entry', push_entry(t)}
  local expires = tonumber(t.f.expires_at) or 0
  if t.attempt == 0 and expires > 0 then
    -- a pause does not stop the queue-wait clock: the reaper dropped the deadline of the
    -- PAUSED task; index it again (start.lua also expires it if it is due)
    redis.call('ZADD', DEADLINES_KEY, expires, member(t))
  end
elseif event == 'CANCEL' then
  fields = {'error', 'cancelled' .. ((msg ~= '' and (': ' .. msg)) or '')}
end
transition(t, event, to, msg, fields, nil)
if from == 'RUNNING' then
  redis.call('PUBLISH', channel, event .. ' ' .. t.id)
end
return with_released({1, to})
