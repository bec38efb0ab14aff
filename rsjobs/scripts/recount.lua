--[[ recount.lua — the reaper's repair of one queue's per-owner RUNNING counts (KEYS[16]).

transition() keeps the counts exact on every change of state (see count_running in
fsm.lua); a task that leaves RUNNING without one (its hash deleted by hand, a restore of
part of the data) would hold its owner's slot for ever. This recounts them from the truth:
every RUNNING task's work entry is pending in its queue's group under a worker's consumer,
so the caller reads those entries (every level's pending list but the ~waiting
consumer's) and names each with its task's keys; the script checks that the pending lists
hold exactly those entries now (else the queue moved meanwhile: nothing is written, the
caller tries again later), counts the RUNNING tasks per owner among them, and sets the
queue's fields to those counts. No task changes state.

KEYS: common (see fsm.lua), then
  per entry: the task keys (see fsm.lua; of the task the entry carries)
  level0  stream  the queue's stream of priority 0, and of each other level:
  level1  stream  priority 1
  level2  stream  priority 2
  level3  stream  priority 3
  level4  stream  priority 4
  level5  stream  priority 5
  level6  stream  priority 6
  level7  stream  priority 7
  level8  stream  priority 8
  level9  stream  priority 9
ARGV: common (see fsm.lua), then
  ARGV[5]  queue  the queue's name
  per entry:
    entry  the pending entry id (on its task's level stream, its task keys' queue key)
Returns: {code, fixed}: code 1 and how many owners' counts were wrong (now right), or 0
  and 0 when the pending lists are not what the caller read (nothing written).
An error (nothing written) when the queue or an entry id is malformed.
Events: none (no task changes state).
]]
local n, bad = layout(1, 1, 3, 10)
if bad then return bad end
local queue = ARGV[5]
if type(queue) ~= 'string' or queue == '' then return bad_arg('queue', queue) end
for i = 1, n do
  if not is_entry_id(ARGV[NARGV + 1 + i]) then return bad_arg('entry id', ARGV[NARGV + 1 + i]) end
end
bad = check_levels(n, queue)
if bad then return bad end

-- the entries pending under a worker (not ~waiting) now, on every level
local held = 0
for j = 1, 10 do
  local skey = KEYS[#KEYS - 10 + j]
  if redis.call('EXISTS', skey) == 1 then
    local s = redis.pcall('XPENDING', skey, GROUP)
    if type(s) == 'table' and s.err == nil and tonumber(s[1]) and tonumber(s[1]) > 0 then
      held = held + tonumber(s[1])
      for _, c in ipairs(s[4] or {}) do
        if c[1] == WAITING_CONSUMER then held = held - tonumber(c[2]) end
      end
    end
  end
end
-- the caller's entries must be all of them
local named = 0
for i = 1, n do
  local _, qkey = task_keys(i)
  local entry = ARGV[NARGV + 1 + i]
  local pe = redis.call('XPENDING', qkey, GROUP, entry, entry, 1)
  if #pe == 1 and pe[1][2] ~= WAITING_CONSUMER then named = named + 1 end
end
if named ~= held then return {0, 0} end

local counts = {}
for i = 1, n do
  local t = load(i, {'entry'})
  if t ~= nil and t.state == 'RUNNING' and t.f.entry == ARGV[NARGV + 1 + i] and t.owner ~= '' then
    local f = running_field(t)
    counts[f] = (counts[f] or 0) + 1
  end
end
local fixed = 0
local prefix = queue .. '|'
local have = redis.call('HGETALL', RUNNING_KEY)
for j = 1, #have, 2 do
  local f, v = have[j], tonumber(have[j + 1])
  if string.sub(f, 1, #prefix) == prefix and v ~= counts[f] then
    fixed = fixed + 1
    if counts[f] then redis.call('HSET', RUNNING_KEY, f, counts[f]) else redis.call('HDEL', RUNNING_KEY, f) end
  end
  counts[f] = nil
end
for f, c in pairs(counts) do
  fixed = fixed + 1
  redis.call('HSET', RUNNING_KEY, f, c)
end
return {1, fixed}
