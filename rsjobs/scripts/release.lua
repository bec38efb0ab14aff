--[[ release.lua — hand back deliveries a worker received but never started (a batch).

A worker that reads several queues at once may receive more entries than it has free
slots; on shutdown it returns those it did not start. The task stays PENDING (no
transition, so no history entry): its delivered entry is acked and deleted and a fresh
entry is added for another worker. The reaper does the same for a dead worker's
unstarted deliveries.

KEYS: common (see fsm.lua), then
  per task: the task keys (see fsm.lua)
ARGV: common (see fsm.lua), then
  per task:
    entry  the delivered stream entry id
Returns: per task 1 when re-queued, 0 when the entry was stale (task gone, no longer
  PENDING, or its entry already replaced: the entry is then only acked and deleted).
  An error (nothing written) when an entry id is malformed.
]]
local n, bad = layout(0, 1, 3, 0)
if bad then return bad end
bad = check_levels(n)  -- each task's queue key is its level's stream
if bad then return bad end
for i = 1, n do  -- a malformed id would fail the XACK at the end of the call
  if not is_entry_id(ARGV[NARGV + i]) then return bad_arg('entry id', ARGV[NARGV + i]) end
end
local out = {}
for i = 1, n do
  local entry = ARGV[NARGV + i]
  local t = load(i, {'entry'})
  if t ~= nil and t.state == 'PENDING' and t.f.entry == entry then
    drop_entry(t.qkey, entry)
    redis.call('HSET', t.key, fld('entry'), push_entry(t))
    out[i] = 1
  else
    if t == nil or t.state ~= 'RUNNING' or t.f.entry ~= entry then
      local _, qkey = task_keys(i)
      drop_entry(qkey, entry)
    end
    out[i] = 0
  end
end
return out
