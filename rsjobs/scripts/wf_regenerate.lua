--[[ wf_regenerate.lua — REGENERATE: open a new version from a stage already reached.

Version v becomes v + 1 and the workflow goes back to RUNNING at the given stage (its tasks
are spawned next: drive = 1). Every open task (any older version, any stage) is cancelled
(CANCEL transition; a running handler is told at once), so an older version's late result
finds its task CANCELLED and is refused. The slots and assets of the stages before the
regenerated one are carried into the new version (asset field `carried_from` = the version
that made it); those of the regenerated stage and later stay with their own version.
Their tasks are superseded: the amounts of each one's succeeded attempt move from the
category ok to superseded in the costs hash (supersede in fsm.lua), once per task (a slot
left behind is never a current slot again, and a carried one belongs to the new version).
The caller names the open set it read and the tasks of the slots it leaves behind (the
slots of the current version from the regenerated stage on): another open set or another
set of slots (a concurrent change) is stale.

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua)
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]   stage           index of the stage to regenerate (<= the current stage)
  ARGV[8]   reason          why ('' = none)
  ARGV[9]   max_versions    a workflow never goes past this version
  ARGV[10]  expect_version  '' = any; else refused when the version moved on
  per task:
    id    the task's id
    role  open (an open task: cancelled) | left (the task of a slot left behind:
          superseded); a task that is both is named twice
Returns: {code, status, drive, message}: 1 applied, -1 no such workflow, -2 refused
  (recorded), -5 stale (nothing written).
Events: REGENERATE (RUNNING | WAITING_CONFIRMATION | PARTIALLY_FAILED | READY_TO_PUBLISH
  -> RUNNING; extra fields from_version, cancelled, superseded: how many open tasks and
  succeeded tasks it replaced); CANCEL of each open task.
]]
local n, bad = layout(6, 2, 3, WF_NKEYS)
if bad then return bad end
local target, reason = tonumber(ARGV[7]), ARGV[8]
local max_versions, ev = tonumber(ARGV[9]), ARGV[10]
local FIRST = NWARG + 5
-- the items by role: task index -> id
local open, left, n_open, n_left = {}, {}, 0, 0
for i = 1, n do
  local id, role = ARGV[FIRST + 2 * (i - 1)], ARGV[FIRST + 2 * (i - 1) + 1]
  if role == 'open' then
    open[i] = id; n_open = n_open + 1
  elseif role == 'left' then
    left[i] = id; n_left = n_left + 1
  else
    return bad_arg('role', role)
  end
end
local w = wf_load()
if w == nil then return reply(-1, nil, 'no such workflow') end
local function refuse(why)
  wf_reject(w, 'REGENERATE', why, nil)
  return reply(-2, w, why)
end
if not wf_allowed(w.status, 'REGENERATE', 'RUNNING') then
  return refuse('workflow is ' .. w.status)
end
if target == nil or target < 0 or target > w.stage then
  return refuse('stage ' .. tostring(ARGV[7]) .. ' not reached yet (current: ' .. w.stage
    .. ', ' .. w.stage_name .. ')')
end
if ev ~= '' and tonumber(ev) ~= w.version then
  return refuse('stale regenerate for version ' .. ev .. ': the current version is '
    .. w.version)
end
if w.version >= max_versions then
  return refuse('version limit reached (' .. max_versions .. ')')
end
-- the caller's open set and slots left behind are the workflow's (checked before writing)
if redis.call('SCARD', WF_OPEN) ~= n_open then return reply(-5, w, 'open tasks changed') end
for _, id in pairs(open) do
  if redis.call('SISMEMBER', WF_OPEN, id) == 0 then return reply(-5, w, 'open tasks changed') end
end
local slots = redis.call('HGETALL', WF_TASKS)
local behind, n_behind = {}, 0
local prefix_v = w.version .. ':'
for j = 1, #slots, 2 do
  local f = slots[j]
  if string.sub(f, 1, #prefix_v) == prefix_v then
    local s = tonumber(string.match(string.sub(f, #prefix_v + 1), '^(%d+):'))
    if s ~= nil and s >= target and not behind[slots[j + 1]] then
      behind[slots[j + 1]] = true; n_behind = n_behind + 1
    end
  end
end
if n_behind ~= n_left then return reply(-5, w, 'slots changed') end
for _, id in pairs(left) do
  if not behind[id] then return reply(-5, w, 'slots changed') end
end

local old, new = w.version, w.version + 1
local why = 'superseded by version ' .. new .. ' of workflow ' .. w.id
for i in pairs(open) do
  local t = load_task(i, {'entry'})
  if t ~= nil then cancel_task(t, why) end
end
redis.call('DEL', WF_OPEN)
-- (after the cancels: an open task that is also left behind and was still running has no
-- succeeded attempt to move)
local superseded = 0
for i in pairs(left) do
  local t = load_task(i, {})
  if t ~= nil and t.state == 'SUCCEEDED' and supersede(t) then superseded = superseded + 1 end
end
-- carry the earlier stages' slots and assets into the new version
local prefix = old .. ':'
local function carry(key, is_asset)
  local rows = redis.call('HGETALL', key)
  for j = 1, #rows, 2 do
    local f = rows[j]
    if string.sub(f, 1, #prefix) == prefix then
      local rest = string.sub(f, #prefix + 1)
      local s = tonumber(string.match(rest, '^(%d+):'))
      if s ~= nil and s < target then
        local value = rows[j + 1]
        if is_asset then
          local a = cjson.decode(value)
          if a.carried_from == nil then a.carried_from = a.version end
          a.version = new
          value = cjson.encode(a)
        end
        redis.call('HSET', key, new .. ':' .. rest, value)
      end
    end
  end
end
carry(WF_TASKS, false)
carry(WF_ASSETS, true)
w.version = new
redis.call('HSET', WF_KEY, 'version', new)
open_stage(w, target)
local msg = 'version ' .. new .. ' from stage ' .. w.stage_name
if reason ~= '' then msg = msg .. ': ' .. reason end
wf_transition(w, 'REGENERATE', 'RUNNING', msg, nil,
  {'from_version', old, 'cancelled', n_open, 'superseded', superseded})
return reply(1, w, '')
