--[[ wf_abort.lua — ABORT: the driver gives up on a workflow it cannot go on with.

The driver calls this after driving a workflow failed and its stored data was found
defective (rsjobs/workflows/abort.py): the next stage's task payloads are over the limit,
its plan or input does not decode, its hash misses fields... The workflow is read field by
field here (nothing below needs its plan or counters), so a broken hash can still move:
  * a non-terminal status: ABORT -> FAILED, the reason kept as its terminated reason;
    every open task named is cancelled (one whose hash is corrupt is only dropped from
    the open set); it leaves the active set. Missing id / stage_name fields and counters
    that do not parse are written (counters as 0), so the FAILED workflow still reads
    and refuses late results like any other.
  * a terminal status: nothing written (0).
  * no status, an unknown one, or keys of the wrong type: the table has no move for it.
    Its open tasks are cancelled as above, it is dropped from the active set (so the
    driver stops visiting it), and a refused ABORT in its history says why (when its
    history can be written).
The caller names the open set it read: another set (a concurrent change) is stale.

KEYS: common (see fsm.lua), then
  per open task: the task keys (see fsm.lua)
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]  wf_id   the workflow id
  ARGV[8]  reason  why it cannot go on
  per open task:
    id  the open task's id
Returns: {code, status, drive, message}: 1 aborted (now FAILED), 0 already finished
  (nothing written), -1 no such workflow (dropped from the active set), -3 quarantined
  (dropped from the active set without a transition), -5 stale (nothing written).
Events: ABORT (RUNNING | PARTIALLY_FAILED | WAITING_CONFIRMATION | READY_TO_PUBLISH ->
  FAILED); CANCEL of each open task; a refused ABORT for a quarantined workflow.
]]
local n, bad = layout(4, 1, 3, WF_NKEYS)
if bad then return bad end
local wf_id, reason = ARGV[NWARG + 1], ARGV[NWARG + 2]
local FIRST = NWARG + 3
local COUNTERS = {'stage', 'version', 'need', 'done', 'nfailed', 'retries', 'n_stages'}

local function key_type(k)
  return redis.call('TYPE', k).ok
end

local ktype = key_type(WF_KEY)
if ktype == 'none' then
  redis.call('SREM', WF_ACTIVE, wf_id)
  return {-1, '', 0, 'no such workflow'}
end
local htype, otype = key_type(WF_HKEY), key_type(WF_OPEN)
local v = {}
if ktype == 'hash' then
  v = redis.call('HMGET', WF_KEY, 'status', 'id', 'version', 'stage', 'stage_name')
end
local status = v[1] or ''
if WF_TERMINAL[status] then return {0, status, 0, 'workflow is ' .. status} end
local w = {status = status, id = wf_id, owner = '', stage = tonumber(v[4]) or 0,
  stage_name = v[5] or '', version = tonumber(v[3]) or 0, spawned = '', need = 0, done = 0,
  nfailed = 0, retries = 0, n_stages = 0}
local writable = ktype == 'hash' and (htype == 'stream' or htype == 'none')
local open_ok = otype == 'set' or otype == 'none'
if open_ok and not matches_open(FIRST, n) then return {-5, status, 0, 'open tasks changed'} end

if not (writable and open_ok and wf_allowed(status, 'ABORT', 'FAILED')) then
  if open_ok then cancel_open(n, 'workflow ' .. wf_id .. ' is quarantined') end
  redis.call('SREM', WF_ACTIVE, wf_id)
  local why = 'quarantined: ' .. reason
  if writable then wf_reject(w, 'ABORT', why, nil) end
  return {-3, status, 0, why}
end

cancel_open(n, 'workflow ' .. wf_id .. ' failed: ' .. string.sub(reason, 1, 200))
local fields = {'reason', reason}
if v[2] ~= wf_id then fields[#fields + 1] = 'id'; fields[#fields + 1] = wf_id end
if not v[5] then fields[#fields + 1] = 'stage_name'; fields[#fields + 1] = '' end
-- a FAILED workflow still answers (late results refused, its status read): counters that
-- do not parse are written as 0
local counters = redis.call('HMGET', WF_KEY, unpack(COUNTERS))
for j, name in ipairs(COUNTERS) do
  if tonumber(counters[j]) == nil then fields[#fields + 1] = name; fields[#fields + 1] = 0 end
end
wf_transition(w, 'ABORT', 'FAILED', reason, fields, {'cancelled', n})
return reply(1, w, '')
