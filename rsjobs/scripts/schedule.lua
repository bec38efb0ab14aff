--[[ schedule.lua — fire one due tick of a recurring schedule: ENQUEUE its task and move
the schedule to its next tick, exactly once however many reapers call it (rsjobs/schedules).

The caller (the reaper) read the schedule's settings and its due time, and computed the
next tick after now from them (a cron expression needs a parser this script has not). The
tick fires only when the schedule is still those settings and still due at that time: a
second caller of the same tick, or one that read settings replaced since, finds the due
time moved or the settings changed, and nothing is written.

KEYS: common (see fsm.lua), then
  per task (one): the task keys (see fsm.lua)
  schedules      hash  schedule name -> its settings (JSON)
  schedules_due  zset  schedule name by its next tick (ms)
  schedules_log  hash  "<name>:fired" / "<name>:skipped" counts, "<name>:last" (task id),
                       "<name>:last_at" (tick time, ms)
ARGV: common (see fsm.lua), then
  ARGV[5]   name      the schedule's name
  ARGV[6]   settings  its settings as the caller read them (JSON text)
  ARGV[7]   due       the tick the caller fires (ms; its score as the caller read it)
  ARGV[8]   next      the tick after now (ms, > due)
  ARGV[9]   skipped   ticks missed between due and now that are not fired (>= 0)
  per task (one):
    id       the new task's id
    type     its handler's name
    queue    its queue
    payload  JSON
    options  JSON object (see task_options in fsm.lua)
Returns: {fired, id}: fired 1 and the new task's id, or 0 and '' when the tick is not
  this caller's to fire (already fired, schedule removed or changed).
  An error (nothing written) when a value is malformed.
Events: ENQUEUE ('' -> PENDING), history message "schedule <name> tick <due>".
]]
local PER = 5
local _, bad = layout(5, PER, 3, 3, 1)
if bad then return bad end
local SCHEDULES_KEY, DUE_KEY, LOG_KEY = KEYS[NCOMMON + 4], KEYS[NCOMMON + 5], KEYS[NCOMMON + 6]
local name, settings, due, nxt, skipped = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if name == '' then return bad_arg('name', name) end
if not is_count(due) then return bad_arg('due', due) end
if not is_count(nxt) or tonumber(nxt) <= tonumber(due) then return bad_arg('next', nxt) end
if not is_count(skipped) then return bad_arg('skipped', skipped) end
local a = NARGV + 5
local id, typ, queue, payload = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
for j = 1, 3 do
  if ARGV[a + j] == '' then return bad_arg('empty id, type or queue', j) end
end
local o, why = task_options(ARGV[a + 5])
if o == nil then return bad_arg(why, ARGV[a + 5]) end
if (o.dedup or '') ~= '' or (o.delay_ms or 0) > 0 then
  return bad_arg('options (a tick runs now, without a dedup key)', ARGV[a + 5])
end
if not new_task_keys_ok(1, queue, o) then
  return bad_arg('queue key (not the stream of the queue and priority)', queue)
end
-- the tick is this call's only if the schedule is as read and due at that time
if redis.call('HGET', SCHEDULES_KEY, name) ~= settings then return {0, ''} end
local score = redis.call('ZSCORE', DUE_KEY, name)
if not score or tonumber(score) ~= tonumber(due) then return {0, ''} end
local key = task_keys(1)
if redis.call('EXISTS', key) == 1 then return bad_arg('id (a task has it)', id) end
redis.call('ZADD', DUE_KEY, tonumber(nxt), name)
new_task(1, id, typ, queue, payload, o, 'schedule ' .. name .. ' tick ' .. due, nil, nil)
redis.call('HINCRBY', LOG_KEY, name .. ':fired', 1)
if tonumber(skipped) > 0 then
  redis.call('HINCRBY', LOG_KEY, name .. ':skipped', tonumber(skipped))
end
redis.call('HSET', LOG_KEY, name .. ':last', id, name .. ':last_at', due)
return {1, id}
