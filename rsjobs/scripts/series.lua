--[[ series.lua — sample each queue's counters once a minute (the reaper's; writes nothing
else): the per-minute series GET /queues/{name}/series shows are the differences between
consecutive samples (rsjobs/store/series.py). No task is read: a sample costs the same for
a queue of ten tasks as for one of ten million.

A queue's samples are one stream, an entry per minute with the id "<minute start ms>-0"
(the minute of Redis TIME), so a minute holds at most one sample however many reapers
call this: a queue whose stream already has an entry of this minute (or a later one) is
skipped. Its fields are the queue's counters from the stats hash (KEYS[2]):
  n   tasks ever enqueued on it (the sum of its "<queue>:<STATE>" counts: a task enters
      one state and moves, terminal counts are never decreased)
  st  attempts started ("started:<queue>", counted by transition in fsm.lua)
  ok, f, c, to  tasks that reached SUCCEEDED, FAILED, CANCELLED, TIMED_OUT
  p   its PENDING count now
  age ms since its oldest undelivered work entry was queued (0: none waits)
Entries older than keep_ms before this minute are trimmed (MINID ~), so a stream holds
about keep_ms / 60000 entries, whatever the number of tasks.

KEYS: common (see fsm.lua), then
  per queue:
    series  stream  the queue's samples
ARGV: common (see fsm.lua), then
  ARGV[5]  keep_ms  how long samples are kept (ms, an integer >= 60000)
  per queue:
    queue   its name
    oldest  when its oldest undelivered work entry was queued (ms, Redis TIME; 0: none)
Returns: {sampled, minute}: how many queues got a sample now (0: this minute's were taken
  already), and the minute's start (ms).
An error (nothing written) when keep_ms or an oldest value is not a count, or a queue
name is empty.
Events: none (no task changes state).
]]
local n, bad = layout(1, 2, 1, 0)
if bad then return bad end
if not is_count(ARGV[5]) or tonumber(ARGV[5]) < 60000 then return bad_arg('keep_ms', ARGV[5]) end
for i = 1, n do
  local name, oldest = ARGV[5 + 2 * i - 1], ARGV[5 + 2 * i]
  if type(name) ~= 'string' or name == '' then return bad_arg('queue', name) end
  if not is_count(oldest) then return bad_arg('oldest', oldest) end
end
local keep = tonumber(ARGV[5])
local minute = NOW - NOW % 60000
local STATES = {'PENDING', 'SCHEDULED', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED',
  'CANCELLED', 'TIMED_OUT'}
local sampled = 0
for i = 1, n do
  local key = KEYS[NCOMMON + i]
  local name, oldest = ARGV[5 + 2 * i - 1], tonumber(ARGV[5 + 2 * i])
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  local last_ms = last and tonumber(string.match(last[1], '^(%d+)%-')) or -1
  if last_ms < minute then
    local fields = {}
    for j = 1, #STATES do fields[j] = name .. ':' .. STATES[j] end
    fields[#fields + 1] = 'started:' .. name
    local v = redis.call('HMGET', STATS_KEY, unpack(fields))
    local c = {}
    local total = 0
    for j = 1, #fields do
      c[j] = tonumber(v[j]) or 0
      if j <= #STATES then total = total + c[j] end
    end
    local age = 0
    if oldest > 0 then age = math.max(0, NOW - oldest) end
    redis.call('XADD', key, 'MINID', '~', math.max(0, minute - keep), minute .. '-0',
      'n', total, 'st', c[9], 'ok', c[5], 'f', c[6], 'c', c[7], 'to', c[8], 'p', c[1],
      'age', age)
    sampled = sampled + 1
  end
end
return {sampled, minute}
