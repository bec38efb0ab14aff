--[[ quarantine.lua — DEADLETTER a task whose data breaks a script, or take it out of an index.

The reaper calls this for one task after a script failed on that task alone and the task's
stored data was found defective (a hash without its id or queue, a field that does not
parse, a key of the wrong type...). The task is read field by field here, not with
fsm.lua's `load`, which refuses such a hash.
  * PENDING, SCHEDULED, RUNNING or DEFERRED, with a hash: DEADLETTER ->
    FAILED, with the reason; its work entry, deadline and schedule are dropped and an
    entry is added to the dead-letter stream. A missing id or queue field is restored
    from the caller's (the index named both), so the task reads and re-queues like any
    other. This does not depend on the reference still being in its index: a script that
    failed half-way may have dropped it already.
  * otherwise (PAUSED or finished, an unknown state, a key of the wrong type) while the
    reference is still in its index: the reference is removed and an entry on the
    dead-letter stream records what was done (there is no transition to make).
  * the hash is gone, or the reference left its index meanwhile: nothing to do.

KEYS: common (see fsm.lua), then
  per task (one): the task keys (see fsm.lua; the queue stream of the caller's queue and
    the task's priority, the task's real dedup key)
  deadletter  stream  dead-lettered tasks, trimmed with MAXLEN ~
ARGV: common (see fsm.lua), then
  ARGV[5]   task_id         the task's id (from the index)
  ARGV[6]   queue           its queue (from the hash when it has one, else from the index)
  ARGV[7]   indexed_in      where the reference is: queue | deadlines | scheduled
  ARGV[8]   ref             the work entry id (queue) or the zset member
  ARGV[9]   step            what failed on it: recovery | deadlines | promotion
  ARGV[10]  why             the defects found and the error the script raised
  ARGV[11]  deadletter_max  approximate MAXLEN of the dead-letter stream
Returns: {outcome, state}: outcome DEADLETTERED (DEADLETTER -> FAILED), REMOVED (reference
  taken out of its index, recorded on the dead-letter stream) or GONE (nothing to do);
  state: the task's state after the call ('' when it has none).
Events: DEADLETTER (PENDING | SCHEDULED | RUNNING | DEFERRED -> FAILED), extra fields step,
  dl.
]]
local _, bad = layout(7, 0, 3, 1, 1)
if bad then return bad end
local tid, queue, index, ref = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local step, why, dl_max = ARGV[9], ARGV[10], tonumber(ARGV[11])
if not is_count(ARGV[11]) then return bad_arg('deadletter_max', ARGV[11]) end
local key, qkey, dkey = task_keys(1)
local DEADLETTER_KEY = KEYS[NCOMMON + 4]

local function key_type(k)
  return redis.call('TYPE', k).ok
end

local function in_index()
  if index == 'queue' then
    return key_type(qkey) == 'stream' and #redis.call('XRANGE', qkey, ref, ref, 'COUNT', 1) > 0
  elseif index == 'deadlines' then
    return redis.call('ZSCORE', DEADLINES_KEY, ref) ~= false
  elseif index == 'scheduled' then
    return redis.call('ZSCORE', SCHED_KEY, ref) ~= false
  end
  return false
end

local function remove_ref()
  if index == 'queue' then
    drop_entry(qkey, ref)
  elseif index == 'deadlines' then
    redis.call('ZREM', DEADLINES_KEY, ref)
  else
    redis.call('ZREM', SCHED_KEY, ref)
  end
end

local ktype = key_type(key)
if ktype == 'none' then
  if in_index() then remove_ref() end
  return {'GONE', ''}
end

-- read what can be read; nothing below raises on a missing or garbled field
local f = {state = '', id = '', queue = '', attempt = 0, type = '', entry = '', consumer = '',
  deliveries = 0, dedup = '', wf = ''}
if ktype == 'hash' then
  local v = redis.call('HMGET', key, fld('state'), 'id', fld('queue'), fld('attempt'),
    fld('type'), fld('entry'), 'consumer', 'deliveries', 'dedup', fld('created_at'), 'hn', 'wf',
    'owner', 'labels', fld('successors'), fld('started_at'), 'wf_stage_name', fld('priority'))
  f = {state = v[1] or '', id = v[2] or '', queue = v[3] or '', attempt = tonumber(v[4]) or 0,
    type = v[5] or '', entry = v[6] or '', consumer = v[7] or '',
    deliveries = tonumber(v[8]) or 0, dedup = v[9] or '', created = tonumber(v[10]),
    hn = tonumber(v[11]), wf = v[12] or '', owner = v[13] or '', labels = v[14] or '',
    succ = v[15] or '', started = tonumber(v[16]), sname = v[17] or '',
    priority = priority_of(v[18]) or 0}
  if f.hn == nil or f.hn ~= math.floor(f.hn) or f.hn < 0 then
    -- a garbled count: the next entry goes after the last one there, overwriting none
    f.hn = 0
    for _, name in ipairs(redis.call('HKEYS', key)) do
      local n = tonumber(string.match(name, '^h(%d+)$'))
      if n and n > f.hn then f.hn = n end
    end
  end
end
local movable = ktype == 'hash'
  and allowed(f.state, 'DEADLETTER', 'FAILED') and (f.queue == '' or f.queue == queue)
local reason = string.sub('quarantined: ' .. step .. ' failed on this task: ' .. why, 1, 1000)

if not movable then
  if not in_index() then return {'GONE', f.state} end
  remove_ref()
  local what = 'reference removed from ' .. index .. ' (task is '
  if ktype ~= 'hash' then
    what = what .. 'a ' .. ktype .. ', not a hash)'
  else
    what = what .. (f.state ~= '' and f.state or 'without a state') .. ')'
  end
  redis.call('XADD', DEADLETTER_KEY, 'MAXLEN', '~', dl_max, '*', 'id', tid, 'q', queue,
    'type', f.type, 'from', f.state, 'worker', f.consumer, 'deliveries', f.deliveries,
    'att', f.attempt, 'ts', NOW, 'reason', reason .. '; ' .. what, 'step', step,
    'action', 'REMOVED')
  return {'REMOVED', f.state}
end

local t = {key = key, qkey = qkey, dkey = dkey, id = tid, queue = queue,
  state = f.state, attempt = f.attempt, dedup = f.dedup, created = f.created, hn = f.hn or 0,
  wf = f.wf, owner = f.owner, labels = f.labels, succ = f.succ or '', type = f.type,
  started = f.started, sname = f.sname, priority = f.priority or 0, f = {}}
if index == 'queue' then drop_entry(qkey, ref) end
if f.entry ~= '' and f.entry ~= ref then drop_entry(qkey, f.entry) end
redis.call('ZREM', DEADLINES_KEY, member(t))
redis.call('ZREM', SCHED_KEY, member(t))
if index ~= 'queue' then remove_ref() end
local dl = redis.call('XADD', DEADLETTER_KEY, 'MAXLEN', '~', dl_max, '*', 'id', tid, 'q', queue,
  'type', f.type, 'from', f.state, 'worker', f.consumer, 'deliveries', f.deliveries,
  'att', f.attempt, 'ts', NOW, 'reason', reason, 'step', step, 'action', 'DEADLETTER')
local fields = {'error', reason, 'error_type', 'DeadLetter', 'deadletter', dl}
if f.id ~= tid then fields[#fields + 1] = 'id'; fields[#fields + 1] = tid end
if f.queue ~= queue then fields[#fields + 1] = 'q'; fields[#fields + 1] = queue end
transition(t, 'DEADLETTER', 'FAILED', reason, fields, {'step', step, 'dl', dl})
return {'DEADLETTERED', t.state}
