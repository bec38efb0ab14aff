--[[ heartbeat.lua — HEARTBEAT / PROGRESS for a worker's running tasks (a batch).

Renews each lease and, in the same step, the idle time of its stream entry (XCLAIM to the
same consumer), so "idle longer than the lease" always means "the owner stopped beating".

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua)
ARGV: common (see fsm.lua), then
  ARGV[5]  consumer   the worker's consumer name
  ARGV[6]  lease_ms   new lease duration from now
  per task:
    lease     the lease token START issued
    entry     its stream entry id
    progress  '' = no change, else 0-100
    message   the progress message
Returns: per task one word the worker acts on:
  OK        lease renewed (and progress recorded)
  LOST      RUNNING under another lease: stop, the result would be refused
  GONE      the task no longer exists
  <STATE>   the task left RUNNING (CANCELLED, PAUSED, ...): stop the handler
An error (nothing written) when lease_ms, an entry id or a progress value is malformed, or
a lease or message is longer than TEXT_MAX (fsm.lua) bytes.
Events: PROGRESS (RUNNING -> RUNNING) when a progress value is given; a refused HEARTBEAT
  or PROGRESS is recorded with rej=1 (and the attempt its lease names).
]]
local PER = 4
local n, bad = layout(2, PER, 3, 0)
if bad then return bad end
local LEASE_FIELDS = {'lease'}
bad = check_levels(n, nil, LEASE_FIELDS)  -- each task's queue key is its level's stream
if bad then return bad end
local consumer, lease_ms = ARGV[5], tonumber(ARGV[6])
if not consumer or consumer == '' then return bad_arg('consumer', consumer) end
if not is_count(ARGV[6]) or lease_ms < 1 then return bad_arg('lease_ms', ARGV[6]) end
for i = 1, n do  -- the whole batch before the first write
  local a = NARGV + 2 + (i - 1) * PER
  if not is_entry_id(ARGV[a + 2]) then return bad_arg('entry id', ARGV[a + 2]) end
  if ARGV[a + 3] ~= '' and not is_number(ARGV[a + 3], 0, 100) then
    return bad_arg('progress', ARGV[a + 3])
  end
  -- both end up in history entries
  if #ARGV[a + 1] > TEXT_MAX or #ARGV[a + 4] > TEXT_MAX then
    return bad_arg('lease or message length', #ARGV[a + 4])
  end
end
local out = {}
for i = 1, n do
  local a = NARGV + 2 + (i - 1) * PER
  local lease, entry, progress, msg = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local event = 'HEARTBEAT'
  if progress ~= '' then event = 'PROGRESS' end
  local t = load(i, LEASE_FIELDS)
  if t == nil then
    out[i] = 'GONE'
  elseif t.state ~= 'RUNNING' then
    reject(t, event, 'task is ' .. t.state .. ' (lease ' .. lease .. ')', lease_attempt(lease))
    out[i] = t.state
  elseif t.f.lease ~= lease then
    reject(t, event, 'lease lost: ' .. lease .. ' no longer holds the task', lease_attempt(lease))
    out[i] = 'LOST'
  else
    redis.call('HSET', t.key, 'lease_expires_at', NOW + lease_ms)
    redis.call('XCLAIM', t.qkey, GROUP, consumer, 0, entry, 'JUSTID')
    if progress ~= '' then
      redis.call('HSET', t.key, 'progress', progress, 'progress_msg', msg, fld('updated_at'), NOW)
      record(t, 'RUNNING', 'RUNNING', 'PROGRESS', msg, false, {'p', progress})
    end
    out[i] = 'OK'
  end
end
return out
