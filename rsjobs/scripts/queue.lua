--[[ queue.lua — PAUSE_QUEUE or RESUME_QUEUE: hold a whole queue back, or let it go on.

A paused queue still takes tasks (they stay PENDING, or SCHEDULED until due) and its
running tasks go on; workers start nothing of it: they stop reading its stream, and
start.lua hands back a delivery of it that a worker read before it heard of the pause.
The flag is the queue's field in the `paused` hash, a JSON record of who paused it, when
(Redis TIME) and why. Workers hear of a change at once on the control channel
("PAUSE_QUEUE <queue>" / "RESUME_QUEUE <queue>") and read the hash again with every
heartbeat. No task changes state, so no task history gets an entry.

KEYS: common (see fsm.lua), then
  queues  set   the namespace's queue names (a queue paused before its first task is listed)
  paused  hash  queue name -> its pause record {"at": ms, "by": source, "reason": text}
ARGV: common (see fsm.lua), then
  ARGV[5]  event    PAUSE_QUEUE | RESUME_QUEUE
  ARGV[6]  queue    the queue's name
  ARGV[7]  reason   the operator's reason ('' = none)
  ARGV[8]  channel  the control channel workers listen on
Returns: {code, record}
   1  changed: record is the new pause record (PAUSE_QUEUE) or '' (RESUME_QUEUE)
   0  already so (a repeat): record is the pause record in force ('' = not paused);
      nothing written
An error (nothing written) for an unknown event, an empty queue, a reason over 4096 bytes
or no channel.
Events: none (no task moves); "<event> <queue>" on the control channel when it changed.
]]
local _, bad = layout(4, 0, 0, 2)
if bad then return bad end
local event, queue, reason, channel = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local REASON_MAX = 4096
local QUEUES_KEY, PAUSED_KEY = KEYS[NCOMMON + 1], KEYS[NCOMMON + 2]
if event ~= 'PAUSE_QUEUE' and event ~= 'RESUME_QUEUE' then
  return redis.error_reply('rsjobs: unknown queue event ' .. tostring(event))
end
if type(queue) ~= 'string' or queue == '' then return bad_arg('queue', queue) end
if type(reason) ~= 'string' or #reason > REASON_MAX then
  return bad_arg('reason (at most ' .. REASON_MAX .. ' bytes)', type(reason) == 'string' and #reason)
end
if not channel or channel == '' then return bad_arg('channel', channel) end
local current = redis.call('HGET', PAUSED_KEY, queue)
if event == 'PAUSE_QUEUE' then
  if current then return {0, current} end
  local record = cjson.encode({at = NOW, by = SOURCE, reason = reason})
  redis.call('HSET', PAUSED_KEY, queue, record)
  redis.call('SADD', QUEUES_KEY, queue)
  redis.call('PUBLISH', channel, event .. ' ' .. queue)
  return {1, record}
end
if not current then return {0, ''} end
redis.call('HDEL', PAUSED_KEY, queue)
redis.call('PUBLISH', channel, event .. ' ' .. queue)
return {1, ''}
