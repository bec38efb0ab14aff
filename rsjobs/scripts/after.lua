--[[ after.lua — ENQUEUE a successor: a task that waits (WAITING) for its predecessors.

The new task waits until every predecessor SUCCEEDED, then is RELEASEd onto its queue with
their results (successors.lua); a predecessor that fails, times out or is cancelled cancels
it with that reason, or, under the policy "always" (option after_policy), it is released
once every predecessor finished, however it ended. Each predecessor notes the new task in
its successors (sc); one already finished counts at once: SUCCEEDED is counted, another
end cancels it (or is counted, under "always"), so that a successor of finished tasks is
released (or cancelled) by this call.
Checks first (nothing written when one fails): 1 to AFTER_MAX distinct predecessors (see
fsm.lua), none the new task itself; each one a task of the new task's owner (one that does
not exist and one of another owner get the same answer, -1, so that an owner cannot probe
the ids of another's), not a workflow's task, and, unless finished, with fewer than
SUCCESSORS_MAX successors.

KEYS: common (see fsm.lua), then
  per predecessor:
    predecessor  hash  its task hash
  task     hash    the new task
  queue    stream  its queue's stream
  dedup    string  its dedup key (the unused "dedup:" key when it has none)
  waiting  zset    "<queue>:<id>" of every WAITING task, by the time it was created (ms)
ARGV: common (see fsm.lua), then
  ARGV[5]  id       the new task's id (letters, digits, '_.-')
  ARGV[6]  type     its handler's name
  ARGV[7]  queue    its queue
  ARGV[8]  payload  JSON
  ARGV[9]  options  JSON object (see task_options in fsm.lua; enqueue.lua's, and
                    after_policy: succeeded | always); delay_ms and wait_timeout_ms start
                    at its release
  per predecessor:
    id  its id, in the order the successor lists them (checked against its hash)
Returns: {code, id, state, message}
   1  created: the new task's id and state (WAITING; PENDING or SCHEDULED when every
      predecessor had succeeded; CANCELLED when one had not)
   0  the dedup key (or the id) already names a live task: its id and state ('' when
      named by the dedup key); nothing written
  -1  unknown predecessor: message is the id named; nothing written
  -2  refused predecessor: message says why (a workflow's task, or it has SUCCESSORS_MAX
      successors); nothing written
An error (nothing written) when a value is malformed: an empty type or queue, an id that
is not one, options that task_options refuses, no predecessor or more than AFTER_MAX, one
named twice or the new task itself.
Events: ENQUEUE ('' -> WAITING), then RELEASE (WAITING -> PENDING | SCHEDULED) or CANCEL
  (WAITING -> CANCELLED) when the predecessors already decide it.
]]
local n, bad = layout(5, 1, 1, 4)
if bad then return bad end
local id, typ, queue, payload = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local TK = {KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1]}
local WAITING_KEY = KEYS[#KEYS]
if not is_task_id(id) then return bad_arg('id', id) end
if typ == '' or queue == '' then return bad_arg('empty type or queue', id) end
local o, why = task_options(ARGV[9])
if o == nil then return bad_arg(why, ARGV[9]) end
if n < 1 or n > AFTER_MAX then
  return bad_arg('number of predecessors (1 to ' .. AFTER_MAX .. ')', n)
end
local pids, named = {}, {}
for i = 1, n do
  local pid = ARGV[NARGV + 5 + i]
  if not is_task_id(pid) then return bad_arg('predecessor id', pid) end
  if pid == id then return bad_arg('predecessor (the new task itself)', pid) end
  if named[pid] then return bad_arg('predecessor (named twice)', pid) end
  named[pid] = true
  pids[i] = pid
end

-- a dedup key (or id) already in use answers with the existing task, as enqueue.lua does
local dedup = o.dedup or ''
if dedup ~= '' then
  local existing = redis.call('GET', TK[3])
  if existing then return {0, existing, '', ''} end
end
if redis.call('EXISTS', TK[1]) == 1 then
  return {0, id, redis.call('HGET', TK[1], fld('state')) or '', ''}
end

-- the predecessors, all checked before the first write
local owner = o.owner or ''
local preds = {}
for i = 1, n do
  local p = load({KEYS[NCOMMON + i], '', ''}, {'result', 'error'})
  if p == nil or p.id ~= pids[i] or p.owner ~= owner then return {-1, '', '', pids[i]} end
  if p.wf ~= '' then
    return {-2, '', '', 'predecessor ' .. pids[i] .. ' is a task of workflow ' .. p.wf
      .. ': a workflow orders its tasks by its stages'}
  end
  if not TERMINAL[p.state] and list_len(p.succ) >= SUCCESSORS_MAX then
    return {-2, '', '', 'predecessor ' .. pids[i] .. ' has ' .. SUCCESSORS_MAX
      .. ' successors already'}
  end
  preds[i] = p
end

o.after = pids
local t = new_task(TK, id, typ, queue, payload, o, '', nil, nil)
t.f = {after = table.concat(pids, ','), after_policy = o.after_policy or '',
  release_delay_ms = o.delay_ms or 0, release_wait_ms = o.wait_timeout_ms or 0}
redis.call('ZADD', WAITING_KEY, NOW, member(t))
-- the finished predecessors count at once, in the order given
for i = 1, n do
  local p = preds[i]
  if TERMINAL[p.state] and t.state == 'WAITING' then
    count_predecessor(t, WAITING_KEY, p.id, p.state, p.f.result, p.f.error)
  end
end
-- the others note it, while it waits (a cancelled successor has nothing to wait for)
if t.state == 'WAITING' then
  for i = 1, n do
    local p = preds[i]
    if not TERMINAL[p.state] then
      local sc = t.id
      if p.succ ~= '' then sc = p.succ .. ',' .. t.id end
      redis.call('HSET', p.key, fld('successors'), sc)
    end
  end
end
return {1, id, t.state, ''}
