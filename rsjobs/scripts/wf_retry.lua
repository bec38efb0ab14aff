--[[ wf_retry.lua — RETRY: re-run only the failed tasks of the current stage.

A PARTIALLY_FAILED workflow has `nfailed` slots of its current version and stage whose task
ended without an asset (FAILED, TIMED_OUT, CANCELLED by someone). Each gets a new task
(ENQUEUE, with `wf_retry_of` = the failed task; the failed one gets `wf_retried_as`), which
becomes the current task of its slot. The tasks that succeeded keep their assets; the
workflow returns to RUNNING. The caller names every failed slot: a call naming another set
(a concurrent change) is stale and writes nothing.

KEYS: common (see fsm.lua), then
  per failed slot:
    failed_task     hash    the failed task (its history included)
    failed_queue    stream  its queue's stream
    failed_dedup    string  the unused "dedup:" key (workflow tasks have none)
    task            hash    the new task (its id not in use)
    queue           stream  its queue's stream
    dedup           string  the unused "dedup:" key
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]  version   the version the caller read
  ARGV[8]  stage     the stage index the caller read
  ARGV[9]  message   note from the caller ('' = none)
  per failed slot (the new task: see create_task in wf.lua):
    failed_id  the failed task's id
    id         the new task's id
    type       its handler's name
    queue      its queue
    payload    JSON
    options    JSON object (see task_options in fsm.lua)
    item       its item in the stage (the failed task's)
    kind       the kind of asset it makes
Returns: {code, status, drive, message}: 1 applied, -1 no such workflow, -2 refused
  (recorded; e.g. nothing failed), -5 stale (nothing written).
Events: RETRY (PARTIALLY_FAILED -> RUNNING); ENQUEUE per new task.
]]
local PER = 1 + SPEC
local pairs_n, bad = layout(5, PER, 6, WF_NKEYS)
if bad then return bad end
local version, stage, note = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local w = wf_load()
if w == nil then return reply(-1, nil, 'no such workflow') end
if w.status ~= 'PARTIALLY_FAILED' then
  local why = 'workflow is ' .. w.status .. ': nothing to retry'
  wf_reject(w, 'RETRY', why, nil)
  return reply(-2, w, why)
end
if w.version ~= version or w.stage ~= stage then return reply(-5, w, 'workflow moved on') end
if pairs_n ~= w.nfailed then
  return reply(-5, w, w.nfailed .. ' failed tasks, ' .. pairs_n .. ' named')
end
-- checks first: each named task is the failed current task of its slot; new ids unused
local failed, opts = {}, {}
for p = 1, pairs_n do
  local a = NWARG + 3 + (p - 1) * PER
  local o, why = check_spec(a + 1, 2 * p)
  if o == nil then return bad_arg(why .. ' (slot ' .. p .. ')', ARGV[a + 6]) end
  opts[p] = o
  local old = load_task(2 * p - 1, WF_TASK_FIELDS)  -- nil: gone or corrupt
  local item = ARGV[a + 7]
  local cur = redis.call('HGET', WF_TASKS, slot(w.version, w.stage, item))
  if cur ~= ARGV[a + 1] or redis.call('SISMEMBER', WF_OPEN, cur) == 1 then
    return reply(-5, w, 'slot ' .. item .. ' is not failed')
  end
  if old ~= nil and (old.state == 'SUCCEEDED' or not TERMINAL[old.state]) then
    return reply(-5, w, 'task ' .. old.id .. ' is ' .. old.state)
  end
  if redis.call('EXISTS', (task_keys(2 * p))) == 1 then return reply(-5, w, 'id in use') end
  failed[p] = old
end
local items = {}
for p = 1, pairs_n do
  local a = NWARG + 3 + (p - 1) * PER
  local old_id = ARGV[a + 1]
  local new_id = create_task(w, 2 * p, a + 1, opts[p], 'retry of task ' .. old_id,
    {'wf_retry_of', old_id})
  if failed[p] ~= nil then redis.call('HSET', failed[p].key, 'wf_retried_as', new_id) end
  items[#items + 1] = ARGV[a + 7]
end
w.retries, w.nfailed = w.retries + 1, 0
redis.call('HSET', WF_KEY, 'retries', w.retries, 'nfailed', 0)
local max_retries = tonumber(stage_plan(w, w.stage).max_retries) or 0
local msg = note
if msg == '' then
  msg = 'retrying ' .. pairs_n .. ' failed tasks (' .. table.concat(items, ', ') .. '), retry '
    .. w.retries .. '/' .. max_retries
end
wf_transition(w, 'RETRY', 'RUNNING', msg, nil, {'tasks', pairs_n})
return reply(1, w, '')
