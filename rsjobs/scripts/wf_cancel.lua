--[[ wf_cancel.lua — CANCEL: the user stops the workflow; every open task is cancelled.

The caller names the open set it read: another set (a concurrent change) is stale.
A repeated cancel answers 0 and changes nothing (recorded as refused, like a cancel of a
PUBLISHED or FAILED workflow, which answers -2).

KEYS: common (see fsm.lua), then
  per open task: the task keys (see fsm.lua)
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]  reason   why ('' = none); kept as the workflow's terminated reason
  per open task:
    id  the open task's id
Returns: {code, status, drive, message}: 1 applied, 0 already CANCELLED, -1 no such
  workflow, -2 refused (finished otherwise), -5 stale (nothing written).
Events: CANCEL (any non-terminal status -> CANCELLED); CANCEL of each open task.
]]
local n, bad = layout(3, 1, 3, WF_NKEYS)
if bad then return bad end
local reason = ARGV[7]
local FIRST = NWARG + 2
local w = wf_load()
if w == nil then return reply(-1, nil, 'no such workflow') end
if w.status == 'CANCELLED' then
  wf_reject(w, 'CANCEL', 'already CANCELLED', nil)
  return reply(0, w, 'already CANCELLED')
end
if WF_TERMINAL[w.status] then
  wf_reject(w, 'CANCEL', 'workflow is ' .. w.status, nil)
  return reply(-2, w, 'workflow is ' .. w.status)
end
if not matches_open(FIRST, n) then return reply(-5, w, 'open tasks changed') end
local why = 'cancelled'
if reason ~= '' then why = reason end
cancel_open(n, 'workflow ' .. w.id .. ' cancelled')
wf_transition(w, 'CANCEL', 'CANCELLED', why, {'reason', why}, {'cancelled', n})
return reply(1, w, '')
