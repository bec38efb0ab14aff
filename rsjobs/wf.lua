--[[ rsjobs/wf.lua — the workflow state machine: its transition table and the helpers every
workflow script (scripts/wf_*.lua) shares. The loader puts it after fsm.lua, so workflow
scripts move their tasks with fsm.lua's `transition` (ENQUEUE, CANCEL) and `end_attempt`,
and the workflow itself only with `wf_transition` below: the table here is the only place
where a legal workflow transition is defined (rsjobs/workflows/model.py mirrors it).

A workflow runs a fixed list of stages (its `plan`, a JSON snapshot of the Python
definition taken at start). Each stage fans out into tasks, one per item; a stage is
complete when the current task of every item SUCCEEDED and its asset is recorded, which
is decided here, in the same script call that records the last asset.

The workflow keys: the last seven keys of every workflow script, after the common keys
(fsm.lua) and its items' keys:
  wf          hash    the workflow: status, stage, version, counters, plan, input
  wf_history  stream  every workflow transition and every refused action (MAXLEN ~)
  wf_tasks    hash    slot "<version>:<stage>:<item>" -> id of the slot's current task
  wf_assets   hash    slot -> asset JSON {ref, kind, version, stage, item, task, ts}
  wf_open     set     ids of its tasks whose end the workflow has not accounted yet
  wf_active   set     ids of the workflows the driver must visit (not finished, or
                      finished with open tasks left to cancel)
  wf_index    zset    every workflow id by creation time (ms; one started in the newest
                      entry's ms goes 1 ms after it, so the order is the order of starts)
Workflow ARGV, after the common ARGV of fsm.lua (then the script's own from ARGV[7]):
  ARGV[5]  channel      pub/sub channel on which running workers hear "CANCEL <id>"
  ARGV[6]  history_max  approximate MAXLEN of the workflow's history stream
A new task of a workflow (wf_spawn.lua, wf_retry.lua) is described by seven values, the
five of enqueue.lua and two of its workflow (see create_task below): id, type, queue,
payload, options, item, kind.

Workflow hash fields: id, def, owner, status, stage (index, 0-based), stage_name, version,
spawned ("<version>:<stage>" whose tasks exist), need (items of the stage), done (assets
recorded at this version and stage), nfailed (failed tasks awaiting a retry), retries
(retries used at this version and stage), n_stages, plan, input, message, reason,
created_at, updated_at, finished_at, published_version.

History entries: ev, from, to, src, v (version), stage, ts (Redis TIME, ms), msg, rej=1 on
refusals, and extra fields (task, item, ref...); each is noted on the events stream (KEYS[1])
as wf (the workflow id), hid (the history entry id), ev (see wf_record). Besides transitions, two notes that leave
the status as it is: SPAWN (a stage's tasks were created) and ASSET (an asset recorded).
Replies of workflow scripts: {code, status, drive, message}; drive = 1 when the workflow
needs the driver now (a stage to spawn, or tasks of a finished workflow to cancel).
]]

local WF_TERMINAL = {PUBLISHED = true, FAILED = true, CANCELLED = true}

-- "FROM|EVENT|TO" for every allowed workflow transition; '' = not created yet.
-- ABORT: the driver cannot go on with the workflow (its next stage's payloads are over the
-- limit, its stored data does not decode...): FAILED, with the reason (wf_abort.lua).
local WF_TRANSITIONS = {
  ['|START|RUNNING'] = true,

  ['RUNNING|ADVANCE|RUNNING'] = true,
  ['RUNNING|GATE|WAITING_CONFIRMATION'] = true,
  ['RUNNING|READY|READY_TO_PUBLISH'] = true,
  ['RUNNING|TASK_FAILED|PARTIALLY_FAILED'] = true,
  ['RUNNING|TASK_FAILED|FAILED'] = true,
  ['RUNNING|REGENERATE|RUNNING'] = true,
  ['RUNNING|CANCEL|CANCELLED'] = true,
  ['RUNNING|ABORT|FAILED'] = true,

  ['PARTIALLY_FAILED|TASK_FAILED|PARTIALLY_FAILED'] = true,
  ['PARTIALLY_FAILED|TASK_FAILED|FAILED'] = true,
  ['PARTIALLY_FAILED|RETRY|RUNNING'] = true,
  ['PARTIALLY_FAILED|REGENERATE|RUNNING'] = true,
  ['PARTIALLY_FAILED|CANCEL|CANCELLED'] = true,
  ['PARTIALLY_FAILED|ABORT|FAILED'] = true,

  ['WAITING_CONFIRMATION|CONFIRM|RUNNING'] = true,
  ['WAITING_CONFIRMATION|CONFIRM|READY_TO_PUBLISH'] = true,
  ['WAITING_CONFIRMATION|REGENERATE|RUNNING'] = true,
  ['WAITING_CONFIRMATION|CANCEL|CANCELLED'] = true,
  ['WAITING_CONFIRMATION|ABORT|FAILED'] = true,

  ['READY_TO_PUBLISH|PUBLISH|PUBLISHED'] = true,
  ['READY_TO_PUBLISH|REGENERATE|RUNNING'] = true,
  ['READY_TO_PUBLISH|CANCEL|CANCELLED'] = true,
  ['READY_TO_PUBLISH|ABORT|FAILED'] = true,
}

local WF_NKEYS = 7
-- The workflow keys and values of the call, set by begin_wf (a workflow script's call
-- begins with fsm.lua's begin_call, then begin_wf)
local WF_KEY, WF_HKEY, WF_TASKS, WF_ASSETS, WF_OPEN, WF_ACTIVE, WF_INDEX
local CHANNEL, WF_HISTORY_MAX

local function begin_wf()
  local n = #KEYS
  WF_KEY, WF_HKEY = KEYS[n - 6], KEYS[n - 5]
  WF_TASKS, WF_ASSETS, WF_OPEN = KEYS[n - 4], KEYS[n - 3], KEYS[n - 2]
  WF_ACTIVE, WF_INDEX = KEYS[n - 1], KEYS[n]
  CHANNEL, WF_HISTORY_MAX = ARGV[5], tonumber(ARGV[6])
end
local NWARG = 6

-- Task hash fields a workflow script reads besides fsm.lua's ATTEMPT_FIELDS.
local WF_TASK_FIELDS = {'wf', 'wf_version', 'wf_stage', 'wf_item', 'wf_kind', 'error', 'result'}

local function wf_allowed(from, event, to)
  return WF_TRANSITIONS[from .. '|' .. event .. '|' .. to] == true
end

local function slot(version, stage, item)
  return version .. ':' .. stage .. ':' .. item
end

local WF_FIELDS = {'status', 'id', 'owner', 'stage', 'stage_name', 'version', 'spawned',
  'need', 'done', 'nfailed', 'retries', 'n_stages'}

-- The workflow of this call (nil when its hash does not exist). A hash missing a field
-- the scripts need, or with a counter that is not a number, raises here, before anything
-- is written (the driver then moves it to FAILED through wf_abort.lua).
local function wf_load()
  local v = redis.call('HMGET', WF_KEY, unpack(WF_FIELDS))
  if not v[1] then return nil end
  for _, j in ipairs({2, 4, 5, 6, 8, 9, 10, 11, 12}) do
    if not v[j] or (j ~= 2 and j ~= 5 and tonumber(v[j]) == nil) then
      error('rsjobs: corrupt workflow hash ' .. WF_KEY .. ': field ' .. WF_FIELDS[j] .. ' is '
        .. (v[j] and 'not a number' or 'missing'), 0)
    end
  end
  return {status = v[1], id = v[2], owner = v[3] or '', stage = tonumber(v[4]),
    stage_name = v[5], version = tonumber(v[6]), spawned = v[7] or '',
    need = tonumber(v[8]), done = tonumber(v[9]), nfailed = tonumber(v[10]),
    retries = tonumber(v[11]), n_stages = tonumber(v[12])}
end

-- The plan (decoded once per call) and the plan of stage `s` (0-based).
local function wf_plan(w)
  if w.plan == nil then w.plan = cjson.decode(redis.call('HGET', WF_KEY, 'plan')) end
  return w.plan
end

local function stage_plan(w, s)
  return wf_plan(w).stages[s + 1]
end

-- Append one entry to the workflow's history; `extra` is a flat field, value array. The
-- events stream gets a note of it (wf, hid, ev: no copy of the entry, bounded like the
-- task entries) so that the web app's hub wakes the workflow's event streams, which read
-- the entry from the history.
local function wf_record(w, from, to, event, msg, rejected, extra)
  local f = with_note({'ev', event, 'from', from, 'to', to, 'src', SOURCE, 'v', w.version,
    'stage', w.stage_name, 'ts', NOW}, msg, rejected, extra)
  local hid = redis.call('XADD', WF_HKEY, 'MAXLEN', '~', WF_HISTORY_MAX, '*', unpack(f))
  redis.call('XADD', EVENTS_KEY, 'MAXLEN', '~', EVENTS_MAX, '*', 'wf', w.id, 'hid', hid,
    'ev', event)
  return hid
end

-- Record a refused action: the workflow does not change; its history says why.
local function wf_reject(w, event, reason, extra)
  count('wfrej:' .. event, 1)
  return wf_record(w, w.status, w.status, event, reason, true, extra)
end

-- A finished workflow's own keys live for the retention period only.
local function wf_retain()
  if RETENTION_MS > 0 then
    for _, k in ipairs({WF_KEY, WF_HKEY, WF_TASKS, WF_ASSETS, WF_OPEN}) do
      redis.call('PEXPIRE', k, RETENTION_MS)
    end
  end
end

-- The driver forgets a finished workflow once none of its tasks is left open.
local function wf_settle(w)
  if WF_TERMINAL[w.status] and redis.call('SCARD', WF_OPEN) == 0 then
    redis.call('SREM', WF_ACTIVE, w.id)
  end
end

-- A finished workflow's time, start to finish (Redis TIME), in the stats hash's histogram
-- "wfdur:<definition>|<STATUS>|<le>" (bounds: DURATION_LE_MS in fsm.lua) and its sum
-- "wfdur_ms:<definition>|<STATUS>" (rsjobs/metrics.py: rsjobs_workflow_duration_seconds).
local function wf_observe_duration(to)
  local v = redis.call('HMGET', WF_KEY, 'created_at', 'def')
  local ms = math.max(0, NOW - (tonumber(v[1]) or NOW))
  local le = 'inf'
  for j = 1, #DURATION_LE_MS do
    if ms <= DURATION_LE_MS[j] then le = DURATION_LE_MS[j]; break end
  end
  local d = (v[2] or '?') .. '|' .. to
  count('wfdur:' .. d .. '|' .. le, 1)
  count('wfdur_ms:' .. d, ms)
end

-- Apply a workflow transition the table allows. `fields`: extra hash fields to set.
local function wf_transition(w, event, to, msg, fields, extra)
  if not wf_allowed(w.status, event, to) then
    error('rsjobs: illegal workflow transition ' .. w.status .. ' -' .. event .. '-> ' .. to)
  end
  local from = w.status
  local f = {'status', to, 'updated_at', NOW, 'message', msg or ''}
  if fields ~= nil then
    for j = 1, #fields do f[#f + 1] = fields[j] end
  end
  if WF_TERMINAL[to] then
    f[#f + 1] = 'finished_at'; f[#f + 1] = NOW
  end
  redis.call('HSET', WF_KEY, unpack(f))
  count('wfev:' .. event, 1)
  if WF_TERMINAL[to] then wf_observe_duration(to) end
  w.status = to
  local hid = wf_record(w, from, to, event, msg, false, extra)
  if WF_TERMINAL[to] then
    wf_settle(w)
    wf_retain()
  end
  return hid
end

-- Make stage `s` the current one, with fresh counters (its tasks are spawned later).
local function open_stage(w, s)
  local st = stage_plan(w, s)
  w.stage, w.stage_name, w.need, w.done, w.nfailed, w.retries = s, st.name, #st.tasks, 0, 0, 0
  redis.call('HSET', WF_KEY, 'stage', s, 'stage_name', st.name, 'need', w.need, 'done', 0,
    'nfailed', 0, 'retries', 0)
end

local function needs_spawn(w)
  return w.status == 'RUNNING' and w.spawned ~= (w.version .. ':' .. w.stage)
end

-- Whether the driver has work on this workflow now (reply field `drive`).
local function drive_flag(w)
  if w == nil then return 0 end
  if needs_spawn(w) then return 1 end
  if WF_TERMINAL[w.status] and redis.call('SCARD', WF_OPEN) > 0 then return 1 end
  return 0
end

local function reply(code, w, msg)
  local status = ''
  if w ~= nil then status = w.status end
  return {code, status, drive_flag(w), msg or ''}
end

-- fsm.lua's `load` for a task a workflow script only looks at: nil when the hash is gone,
-- and nil plus the error when it is corrupt (`load` refuses it before any write), so one
-- broken task does not fail its workflow's call (the reaper deals with the task itself).
local function load_task(i, names)
  local ok, t = pcall(load, i, names)
  if ok then return t, nil end
  if type(t) == 'table' and t.err then return nil, t.err end
  return nil, tostring(t)
end

-- Whether task `t` (loaded with WF_TASK_FIELDS) is the current task of a slot of the
-- workflow's current version and stage.
local function is_current(w, t)
  return t.f.wf == w.id and tonumber(t.f.wf_version) == w.version
    and tonumber(t.f.wf_stage) == w.stage
    and redis.call('HGET', WF_TASKS, slot(w.version, w.stage, t.f.wf_item)) == t.id
end

-- CANCEL a task from any non-terminal state (as control.lua does); false when terminal.
-- `t` must be loaded with the 'entry' field. A running handler is told at once.
local function cancel_task(t, reason)
  if TERMINAL[t.state] then return false end
  local from = t.state
  if from == 'PENDING' or from == 'RUNNING' then drop_entry(t.qkey, t.f.entry) end
  redis.call('ZREM', SCHED_KEY, member(t))
  redis.call('ZREM', DEADLINES_KEY, member(t))
  if from == 'DEFERRED' then leave_deferred(t, nil) end
  transition(t, 'CANCEL', 'CANCELLED', reason, {'error', 'cancelled: ' .. reason}, nil)
  if from == 'RUNNING' then redis.call('PUBLISH', CHANNEL, 'CANCEL ' .. t.id) end
  return true
end

-- The asset a task result names: a non-empty string (the reference), or an object with a
-- non-empty string `ref` (and optional `kind`, `meta`). nil when it names none.
local function asset_of(t, body)
  local ok, r = pcall(cjson.decode, body or '')
  if not ok then return nil end
  local kind = t.f.wf_kind or ''
  if type(r) == 'string' and r ~= '' then return {ref = r, kind = kind} end
  if type(r) == 'table' and type(r.ref) == 'string' and r.ref ~= '' then
    if type(r.kind) == 'string' and r.kind ~= '' then kind = r.kind end
    local a = {ref = r.ref, kind = kind}
    if r.meta ~= nil then a.meta = r.meta end
    return a
  end
  return nil
end

-- Move on after the last asset of the current stage: wait at its gate, be ready to
-- publish after the last stage, or open the next stage (whose tasks the driver spawns).
local function complete_stage(w)
  local st = stage_plan(w, w.stage)
  if st.gate then
    wf_transition(w, 'GATE', 'WAITING_CONFIRMATION',
      'stage ' .. w.stage_name .. ' complete: waiting for confirmation', nil, nil)
  elseif w.stage + 1 >= w.n_stages then
    wf_transition(w, 'READY', 'READY_TO_PUBLISH', 'all stages complete: ready to publish',
      nil, nil)
  else
    local finished = w.stage_name
    open_stage(w, w.stage + 1)
    wf_transition(w, 'ADVANCE', 'RUNNING',
      'stage ' .. finished .. ' complete; next: ' .. w.stage_name, nil, nil)
  end
end

-- Account for the end of a current task `t` (terminal), once: SUCCEEDED with an asset
-- records the asset (and completes the stage with the last one); any other end counts as
-- a failure: PARTIALLY_FAILED while retries are left, else FAILED.
local function account(w, t, a, why)
  if redis.call('SREM', WF_OPEN, t.id) == 0 then return end
  local item = t.f.wf_item
  if t.state == 'SUCCEEDED' and a ~= nil then
    a.version, a.stage, a.stage_index, a.item = w.version, w.stage_name, w.stage, item
    a.task, a.ts = t.id, NOW
    if redis.call('HSETNX', WF_ASSETS, slot(w.version, w.stage, item), cjson.encode(a)) == 1 then
      w.done = w.done + 1
      redis.call('HSET', WF_KEY, 'done', w.done, 'updated_at', NOW)
    end
    wf_record(w, w.status, w.status, 'ASSET', '', false,
      {'task', t.id, 'item', item, 'ref', a.ref, 'kind', a.kind})
    if w.done >= w.need and w.status == 'RUNNING' then complete_stage(w) end
    return
  end
  w.nfailed = w.nfailed + 1
  redis.call('HSET', WF_KEY, 'nfailed', w.nfailed)
  local max_retries = tonumber(stage_plan(w, w.stage).max_retries) or 0
  local msg = 'task ' .. t.id .. ' (' .. item .. ') ended ' .. t.state
  if why ~= nil and why ~= '' then msg = msg .. ': ' .. why end
  local extra = {'task', t.id, 'item', item}
  if w.retries >= max_retries then
    local reason = msg .. '; no retries left (' .. w.retries .. '/' .. max_retries .. ')'
    wf_transition(w, 'TASK_FAILED', 'FAILED', reason, {'reason', reason}, extra)
  else
    wf_transition(w, 'TASK_FAILED', 'PARTIALLY_FAILED', msg, nil, extra)
  end
end

-- Whether the tasks this call names (ids in ARGV[first_arg ...], one per task from task
-- index 1) are exactly the workflow's open set. Callers read the set, then call; a
-- concurrent change makes the call answer "stale" (-5) without writing anything.
local function matches_open(first_arg, n)
  if redis.call('SCARD', WF_OPEN) ~= n then return false end
  for i = 1, n do
    if redis.call('SISMEMBER', WF_OPEN, ARGV[first_arg + i - 1]) == 0 then return false end
  end
  return true
end

-- Cancel every open task named in this call (task indexes 1..n), and empty the open set.
local function cancel_open(n, reason)
  for i = 1, n do
    local t = load_task(i, {'entry'})
    if t ~= nil then cancel_task(t, reason) end
  end
  redis.call('DEL', WF_OPEN)
end

-- Number of ARGV values describing one task to create (see create_task).
local SPEC = 7

-- The options of the task to create from the SPEC values at ARGV[a + 1 ...], at task
-- index `i` (checked before the script's first write): the table, or nil and what is
-- wrong (its queue key must be the stream of its queue and priority).
local function check_spec(a, i)
  for j = 1, 3 do
    if (ARGV[a + j] or '') == '' then return nil, 'empty id, type or queue' end
  end
  if (ARGV[a + 6] or '') == '' then return nil, 'empty item' end
  local o, why = task_options(ARGV[a + 5])
  if o ~= nil and not new_task_keys_ok(i, ARGV[a + 3], o) then
    return nil, 'queue key (not the stream of its queue and priority)'
  end
  return o, why
end

-- ENQUEUE the task at task index `i` for the current version and stage, from the SPEC
-- values at ARGV[a + 1 ...] (id, type, queue, payload, options, item, kind) and its
-- checked options `o`. Its owner is the workflow's; it has no dedup key, delay or
-- queue-wait deadline; it keeps its stage's qualified name (wf_stage_name). It becomes the
-- current task of its slot and joins the open set.
-- `extra_fields` (may be nil) are more task hash fields.
local function create_task(w, i, a, o, msg, extra_fields)
  local id, typ, queue, item = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 6]
  o.owner, o.dedup, o.delay_ms, o.wait_timeout_ms = w.owner, nil, nil, nil
  -- (wf_stage_name: "<definition>/<stage>", the task's stage dimension in the costs hash,
  -- see account_attempt in fsm.lua)
  local sname = tostring(wf_plan(w).definition or '?') .. '/' .. w.stage_name
  local more = {'wf', w.id, 'wf_version', w.version, 'wf_stage', w.stage, 'wf_item', item,
    'wf_kind', ARGV[a + 7], 'wf_stage_name', sname}
  if extra_fields ~= nil then
    for j = 1, #extra_fields do more[#more + 1] = extra_fields[j] end
  end
  new_task(i, id, typ, queue, ARGV[a + 4], o, msg, more, {'wf', w.id})
  redis.call('HSET', WF_TASKS, slot(w.version, w.stage, item), id)
  redis.call('SADD', WF_OPEN, id)
  return id
end
