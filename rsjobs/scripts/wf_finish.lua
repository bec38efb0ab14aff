--[[ wf_finish.lua — a worker ends an attempt of a workflow's task, and the workflow
accounts for it in the same step (one task per call; plain tasks use finish.lua).

The task moves exactly as in finish.lua (fsm.lua: check_lease, then end_attempt). Then:
  * the lease holder's result is accepted only from the current task of a slot of the
    workflow's current version and stage, while the workflow is not finished. Otherwise
    (an older version after a regenerate, a finished workflow) it is refused on both
    histories and the task ends CANCELLED instead: a late result never lands.
  * COMPLETE must name an asset: a reference string, or an object with a string "ref"
    (optional "kind", "meta"); a result naming none ends the attempt as a non-retryable
    FAIL (error type AssetError).
  * when the attempt ends the task (SUCCEEDED, FAILED, TIMED_OUT), the workflow accounts
    for it: the asset is recorded under "<version>:<stage>:<item>", and the last asset of
    the stage completes it (GATE, READY or ADVANCE) in this same call; a failure moves the
    workflow to PARTIALLY_FAILED (retries left) or FAILED (see account in wf.lua).
A refused result from a worker that lost its lease (check_lease: -2, -3) is also recorded
in the workflow's history as a refused RESULT.

KEYS: common (see fsm.lua), then
  per task (one): the task keys (see fsm.lua)
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  per task (one; as finish.lua's):
    event       COMPLETE | FAIL | TIMEOUT | REQUEUE
    lease       the lease token START issued to this worker
    body        COMPLETE: result (JSON); FAIL/TIMEOUT/REQUEUE: the error or reason text
    error_type  exception class name ('' for COMPLETE)
    retryable   '1' or '0'
    delay_ms    retry delay override, '-1' = the task's exponential backoff
    jitter      random number in [0, 1) for the backoff jitter
    traceback   FAIL: the bounded traceback of the handler's exception ('' = none)
    charges     what the handler charged to the attempt ('' = nothing; as finish.lua's):
                accounted with the attempt, also when the workflow refuses its result
Returns: {code, task state, workflow status, drive, message}
   1  applied
   2  a repeated COMPLETE from the lease holder of a SUCCEEDED task: nothing written
  -1  the task no longer exists
  -2  refused: the task is no longer RUNNING;  -3  refused: RUNNING under another lease
  -4  refused by the workflow (message says why): the task is now CANCELLED
  drive = 1 when the workflow needs the driver now (spawn the next stage, or cancel the
  open tasks of a workflow that just FAILED): the worker then calls it at once.
An error (nothing written) when the event, delay, jitter, traceback or charges are
malformed (as in finish.lua).
Events: the task's COMPLETE / FAIL / TIMEOUT / REQUEUE (or CANCEL); the workflow's ASSET
  note, GATE, READY, ADVANCE, TASK_FAILED; refused RESULT entries.
]]
local _, bad = layout(2, 9, 3, WF_NKEYS, 1)
if bad then return bad end
local EVENTS = {COMPLETE = true, FAIL = true, TIMEOUT = true, REQUEUE = true}
if not EVENTS[ARGV[7]] then return bad_arg('event', ARGV[7]) end
if ARGV[12] ~= '-1' and not is_count(ARGV[12]) then return bad_arg('delay_ms', ARGV[12]) end
if not is_number(ARGV[13], 0, 1) then return bad_arg('jitter', ARGV[13]) end
if #ARGV[8] > TEXT_MAX then return bad_arg('lease length', #ARGV[8]) end
if #ARGV[14] > TRACEBACK_MAX then return bad_arg('traceback length', #ARGV[14]) end
local charged, why_charges = parse_charges(ARGV[15])
if not charged then
  return bad_arg('charges (' .. why_charges .. ')', string.sub(ARGV[15], 1, 80))
end
local event, lease, body = ARGV[7], ARGV[8], ARGV[9]
local etype, retryable = ARGV[10], ARGV[11] == '1'
local delay, jitter = tonumber(ARGV[12]), tonumber(ARGV[13])
local names = {}
for _, f in ipairs(ATTEMPT_FIELDS) do names[#names + 1] = f end
for _, f in ipairs(WF_TASK_FIELDS) do names[#names + 1] = f end
local t = load(1, names)
if t == nil then return {-1, '', '', 0, 'no such task'} end
local w = wf_load()
local wstatus = ''
if w ~= nil then wstatus = w.status end

local refused = check_lease(t, event, lease)
if refused ~= nil then
  if refused[1] < 0 and w ~= nil then
    wf_reject(w, 'RESULT', 'late ' .. event .. ' of task ' .. t.id .. ' (' .. (t.f.wf_item or '?')
      .. ', version ' .. (t.f.wf_version or '?') .. '): task is ' .. t.state,
      {'task', t.id, 'item', t.f.wf_item or ''})
  end
  return {refused[1], refused[2], wstatus, drive_flag(w), ''}
end
t.charges, t.amounts = ARGV[15], charged

-- the lease holds: does the workflow still take this task's result?
local why = nil
if w == nil then
  why = 'workflow ' .. (t.f.wf or '?') .. ' does not exist'
elseif WF_TERMINAL[w.status] then
  why = 'workflow is ' .. w.status
elseif tonumber(t.f.wf_version) ~= w.version then
  why = 'version ' .. (t.f.wf_version or '?') .. ' is not current (current: ' .. w.version .. ')'
elseif not is_current(w, t) then
  why = 'not the current task of its stage'
end
if why ~= nil then
  reject(t, event, 'result refused: ' .. why)
  cancel_task(t, 'result refused: ' .. why)
  if w ~= nil then
    redis.call('SREM', WF_OPEN, t.id)
    wf_reject(w, 'RESULT', event .. ' of task ' .. t.id .. ' (' .. (t.f.wf_item or '?')
      .. ', version ' .. (t.f.wf_version or '?') .. ') refused: ' .. why,
      {'task', t.id, 'item', t.f.wf_item or ''})
    wf_settle(w)
  end
  return {-4, t.state, wstatus, drive_flag(w), why}
end

local a = nil
if event == 'COMPLETE' then
  a = asset_of(t, body)
  if a == nil then
    event, etype, retryable = 'FAIL', 'AssetError', false
    body = 'the result names no asset: return a reference string or {"ref": ...}'
  end
end
end_attempt(t, event, body, etype, retryable, delay, jitter,
  failure_fields(event, etype, ARGV[14]))
if TERMINAL[t.state] then
  local reason = ''
  if t.state ~= 'SUCCEEDED' then reason = string.sub(body, 1, 300) end
  account(w, t, a, reason)
end
return {1, t.state, w.status, drive_flag(w), ''}
