--[[ wf_sync.lua — the driver's reconciliation of one workflow with its open tasks.

Task ends that did not pass through wf_finish.lua (the reaper's RECLAIM -> FAILED,
TIMEOUT -> TIMED_OUT, DEADLETTER, EXPIRE; a cancel through the task API; a SUCCEEDED
reached through finish.lua) are accounted here, from the persisted task hashes, exactly
as wf_finish.lua would have (account in wf.lua: assets from the stored result, failures,
stage completion). Open tasks that are no longer current (the workflow finished, or they
belong to an older version or stage) are cancelled if still unfinished and dropped from
the open set. A current task whose hash is gone (expired) or corrupt (fsm.lua's `load`
refuses it) counts as failed. A finished workflow leaves the active set once nothing of it
is open.
Idempotent: a second call finds nothing left to do. The caller names the open set it
read: another set (a concurrent change) is stale.

KEYS: common (see fsm.lua), then
  per open task: the task keys (see fsm.lua)
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]  wf_id  the workflow id
  per open task:
    id  the open task's id
Returns: {code, status, drive, message}: 1 done (drive = 1: a stage is to be spawned),
  -1 no such workflow (it is dropped from the active set), -5 stale.
Events: as wf_finish.lua's accounting (ASSET, GATE, READY, ADVANCE, TASK_FAILED); CANCEL of
  tasks that are no longer current.
]]
local n, bad = layout(3, 1, 3, WF_NKEYS)
if bad then return bad end
local wf_id = ARGV[NWARG + 1]
local FIRST = NWARG + 2
local w = wf_load()
if w == nil then
  redis.call('SREM', WF_ACTIVE, wf_id)
  return reply(-1, nil, 'no such workflow')
end
if not matches_open(FIRST, n) then return reply(-5, w, 'open tasks changed') end

-- The item of the current slot whose task is `id` (nil when it is no current task).
local function current_item(id)
  local prefix = w.version .. ':' .. w.stage .. ':'
  local rows = redis.call('HGETALL', WF_TASKS)
  for j = 1, #rows, 2 do
    if rows[j + 1] == id and string.sub(rows[j], 1, #prefix) == prefix then
      return string.sub(rows[j], #prefix + 1)
    end
  end
  return nil
end

local names = {'entry'}
for _, f in ipairs(WF_TASK_FIELDS) do names[#names + 1] = f end
for i = 1, n do
  local id = ARGV[FIRST + i - 1]
  local t, broken = load_task(i, names)
  if t == nil then
    -- its hash is gone (expired after the retention period) or corrupt: nothing can come
    -- of it for the workflow
    local item = nil
    if not WF_TERMINAL[w.status] then item = current_item(id) end
    if item ~= nil then
      local why = 'task record expired'
      if broken ~= nil then why = string.sub('task record unreadable: ' .. broken, 1, 300) end
      account(w, {id = id, state = 'FAILED', f = {wf_item = item}}, nil, why)
    else
      redis.call('SREM', WF_OPEN, id)
    end
  elseif WF_TERMINAL[w.status] or not is_current(w, t) then
    local why = 'workflow is ' .. w.status
    if not WF_TERMINAL[w.status] then why = 'no longer current in workflow ' .. w.id end
    cancel_task(t, why)
    redis.call('SREM', WF_OPEN, id)
  elseif TERMINAL[t.state] then
    local a = nil
    local why = t.f.error or ''
    if t.state == 'SUCCEEDED' then
      a = asset_of(t, t.f.result)
      if a == nil then why = 'the result names no asset' end
    end
    account(w, t, a, string.sub(why, 1, 300))
  end
end
wf_settle(w)
return reply(1, w, '')
