--[[ wf_spawn.lua — create the tasks of the current stage and version, exactly once.

The guard is the workflow's `spawned` field: "<version>:<stage>" of the last stage whose
tasks were created. Tasks are created only while the workflow is RUNNING at the version and
stage the caller read (its payloads were built from that version's assets), and only when
`spawned` does not name them yet; the same call sets it. So a repeated or concurrent spawn
(a worker and the driver, two drivers) creates nothing twice, and a spawn prepared before
a regenerate or cancel creates nothing at all.

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua; of each task to create, ids not in use)
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]  version   the workflow version the caller read
  ARGV[8]  stage     the stage index the caller read
  per task (see create_task in wf.lua):
    id       the new task's id
    type     its handler's name
    queue    its queue
    payload  JSON
    options  JSON object (see task_options in fsm.lua)
    item     its item in the stage
    kind     the kind of asset it makes
Returns: {code, status, drive, message}
   1  created (one ENQUEUE per task; their ids are the current tasks of their slots)
   0  nothing to do: this stage and version is spawned already
  -1  no such workflow
  -5  stale: the workflow is no longer RUNNING at that version and stage, or the caller
      passed the wrong number of tasks, or an id is in use; nothing written
Events: ENQUEUE ('' -> PENDING) per task; a SPAWN note in the workflow's history.
]]
local n, bad = layout(4, SPEC, 3, WF_NKEYS)
if bad then return bad end
local version, stage = tonumber(ARGV[7]), tonumber(ARGV[8])
local w = wf_load()
if w == nil then return reply(-1, nil, 'no such workflow') end
if w.status ~= 'RUNNING' or w.version ~= version or w.stage ~= stage then
  return reply(-5, w, 'workflow is ' .. w.status .. ' at version ' .. w.version .. ', stage '
    .. w.stage_name)
end
if not needs_spawn(w) then return reply(0, w, 'already spawned') end
if n ~= w.need then return reply(-5, w, 'stage needs ' .. w.need .. ' tasks, got ' .. n) end
local opts = {}
for i = 1, n do
  local key = task_keys(i)
  if redis.call('EXISTS', key) == 1 then return reply(-5, w, 'task id in use') end
  local o, why = check_spec(NWARG + 2 + (i - 1) * SPEC, i)
  if o == nil then return bad_arg(why .. ' (task ' .. i .. ')', ARGV[NWARG + 2 + i * SPEC - 2]) end
  opts[i] = o
end
local items = {}
for i = 1, n do
  local a = NWARG + 2 + (i - 1) * SPEC
  create_task(w, i, a, opts[i], 'stage ' .. w.stage_name .. ' of workflow ' .. w.id
    .. ' (version ' .. w.version .. ')', nil)
  items[#items + 1] = ARGV[a + 6]
end
w.spawned = w.version .. ':' .. w.stage
redis.call('HSET', WF_KEY, 'spawned', w.spawned, 'updated_at', NOW)
wf_record(w, w.status, w.status, 'SPAWN', n .. ' tasks: ' .. table.concat(items, ', '), false,
  {'tasks', n})
return reply(1, w, '')
