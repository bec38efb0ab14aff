--[[ wf_start.lua — START: create a workflow, RUNNING at its first stage (no tasks yet).

The first stage's tasks are created by wf_spawn.lua right after (by the caller, or by the
driver if the caller died in between), like every later stage's.

KEYS: common (see fsm.lua), then
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]   id              the workflow id
  ARGV[8]   definition      the definition's name
  ARGV[9]   owner           '' = none
  ARGV[10]  input           JSON
  ARGV[11]  plan            JSON snapshot of the definition (stages, their tasks)
  ARGV[12]  n_stages        number of stages in the plan
  ARGV[13]  first_stage     name of stage 0
  ARGV[14]  need            number of tasks of stage 0
  ARGV[15]  restarted_from  id of the finished workflow this one starts over ('' = none)
Returns: {code, status, drive, message}
   1  created (drive = 1: stage 0 is to be spawned)
   0  a workflow with this id exists already: nothing written (idempotent repeat)
Events: START ('' -> RUNNING).
]]
local _, bad = layout(11, 0, 0, WF_NKEYS)
if bad then return bad end
local id, def, owner, input, plan = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local n_stages, first, need, from_id = tonumber(ARGV[12]), ARGV[13], tonumber(ARGV[14]), ARGV[15]
local existing = wf_load()
if existing ~= nil then return reply(0, existing, 'workflow exists already') end
local w = {status = '', id = id, owner = owner, stage = 0, stage_name = first, version = 1,
  spawned = '', need = need, done = 0, nfailed = 0, retries = 0, n_stages = n_stages}
local fields = {'id', id, 'def', def, 'stage', 0, 'stage_name', first, 'version', 1,
  'spawned', '', 'need', need, 'done', 0, 'nfailed', 0, 'retries', 0, 'n_stages', n_stages,
  'plan', plan, 'input', input, 'created_at', NOW, 'reason', ''}
if owner ~= '' then fields[#fields + 1] = 'owner'; fields[#fields + 1] = owner end
if from_id ~= '' then fields[#fields + 1] = 'restarted_from'; fields[#fields + 1] = from_id end
-- the index's order is the order of starts: a start in the millisecond of the newest entry
-- (or, the clock having gone back, before it) is indexed 1 ms after it, so that newest
-- first never depends on ids; created_at keeps NOW
local newest = redis.call('ZREVRANGE', WF_INDEX, 0, 0, 'WITHSCORES')[2]
local indexed = NOW
if newest and tonumber(newest) >= NOW then indexed = tonumber(newest) + 1 end
redis.call('ZADD', WF_INDEX, indexed, id)
redis.call('SADD', WF_ACTIVE, id)
wf_transition(w, 'START', 'RUNNING', 'started: ' .. def, fields, {'def', def})
return reply(1, w, '')
