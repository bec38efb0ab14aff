--[[ control.lua — CANCEL, PAUSE or RESUME of one task, on behalf of a user or the API.

KEYS: common (see fsm.lua), then the four task keys.
ARGV: common, then
  ARGV[5]  event     CANCEL | PAUSE | RESUME
  ARGV[6]  message   reason given by the caller ('' = none)
  ARGV[7]  channel   pub/sub channel on which running workers hear "<EVENT> <id>"
Returns: {code, state}
   1  applied; state is the new state
   0  nothing to do: the task is already in the state asked for (idempotent repeat)
  -1  no such task
  -2  refused (the task is terminal, or the event does not apply): state is unchanged
Events: CANCEL (-> CANCELLED), PAUSE (-> PAUSED), RESUME (PAUSED -> PENDING); refused ones
  are recorded with rej=1. A RUNNING task's entry is acked and its worker notified.
]]
local event, msg, channel = ARGV[5], ARGV[6], ARGV[7]
local TARGET = {CANCEL = 'CANCELLED', PAUSE = 'PAUSED', RESUME = 'PENDING'}
local t = load(1, {'entry'})
if t == nil then return {-1, ''} end
local to = TARGET[event]
if to == nil then return redis.error_reply('rsjobs: unknown control event ' .. tostring(event)) end
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
if from == 'PENDING' then
  drop_entry(t.qkey, t.f.entry)
elseif from == 'SCHEDULED' then
  redis.call('ZREM', SCHED_KEY, member(t))
elseif from == 'RUNNING' then
  drop_entry(t.qkey, t.f.entry)
  redis.call('ZREM', DEADLINES_KEY, member(t))
end
if event == 'RESUME' then
  fields = {'entry', push_entry(t)}
elseif event == 'CANCEL' then
  fields = {'error', 'cancelled' .. ((msg ~= '' and (': ' .. msg)) or '')}
end
transition(t, event, to, msg, fields, nil)
if from == 'RUNNING' then
  redis.call('PUBLISH', channel, event .. ' ' .. t.id)
end
return {1, to}
