--[[ successors.lua — the release step: count the ends of finished predecessors for their
successors (a batch of release entries): RELEASE, CANCEL, or count and wait on.

Each entry of the release stream (KEYS[14], written by note_release in fsm.lua with the
predecessor's first terminal transition) names a finished predecessor, its state, its
result or error, and its successors. For each successor still WAITING that has not counted
this predecessor yet, count_predecessor (fsm.lua) records its end: the successor is
cancelled with the predecessor's id and state as the reason (it did not succeed, policy
"succeeded"), released onto its queue (it was the last one awaited), or waits on. The entry
is then deleted. Idempotent and exactly once: an entry already deleted (another call
handled it) is skipped, and a successor that counted the predecessor (or is not WAITING)
is left as it is; so two calls of the same entries at once release each successor once.
The caller passes, per entry, every successor the entry names, in its order, with the
task keys it read from the successor's hash (a successor gone or not readable any more is
skipped: GONE).

KEYS: common (see fsm.lua), then
  per successor: the task keys (see fsm.lua; with its real dedup key)
  waiting  zset  "<queue>:<id>" of every WAITING task, by the time it was created (ms)
ARGV: common (see fsm.lua), then
  per successor:
    entry  the release entry naming its predecessor
    id     the successor's id
Returns: {words, handled, written}: per successor RELEASED, CANCELLED, COUNTED (recorded,
  it waits for others), STALE (not WAITING, or counted already: nothing written), GONE
  (no such task, or its hash does not read) or DONE (the entry was handled by an earlier
  call); handled: entries handled and deleted; written: release entries this call wrote
  (successors cancelled that have successors of their own: the caller runs the step again).
An error (nothing written) when an entry or successor id is malformed, or the successors
passed for an entry are not the ones it names in its order (or not consecutive).
Events: RELEASE (WAITING -> PENDING | SCHEDULED), CANCEL (WAITING -> CANCELLED; history
  fields pred, pred_state).
]]
local n, bad = layout(0, 2, 3, 1)
if bad then return bad end
local WAITING_KEY = KEYS[#KEYS]

-- the entries, each with its run of successors: checked before the first write
local runs, seen = {}, {}
for i = 1, n do
  local a = NARGV + (i - 1) * 2
  local entry, sid = ARGV[a + 1], ARGV[a + 2]
  if not is_entry_id(entry) then return bad_arg('entry id', entry) end
  if not is_task_id(sid) then return bad_arg('successor id', sid) end
  local run = runs[#runs]
  if run == nil or run.entry ~= entry then
    if seen[entry] then return bad_arg('entry (its successors are not consecutive)', entry) end
    seen[entry] = true
    run = {entry = entry, first = i, ids = {}}
    runs[#runs + 1] = run
  end
  run.ids[#run.ids + 1] = sid
  run.last = i
end
for _, run in ipairs(runs) do
  local rows = redis.call('XRANGE', RELEASE_KEY, run.entry, run.entry)
  if #rows > 0 then
    local f, raw = {}, rows[1][2]
    for j = 1, #raw, 2 do f[raw[j]] = raw[j + 1] end
    if not is_task_id(f.id) or not TERMINAL[f.s] or table.concat(run.ids, ',') ~= f.sc then
      return bad_arg('successors of entry ' .. run.entry .. ' (not the ones it names)',
        table.concat(run.ids, ','))
    end
    run.pid, run.state, run.result, run.err = f.id, f.s, f.r, f.err
  end
end

local words, handled = {}, 0
for _, run in ipairs(runs) do
  for i = run.first, run.last do
    if run.pid == nil then
      words[i] = 'DONE'
    else
      -- (a hash that does not read, written by something else, is skipped, not a failed
      -- call: the entry must not come back forever)
      local ok, t = pcall(load, i, SUCCESSOR_FIELDS)
      if not ok or t == nil or t.id ~= run.ids[i - run.first + 1] then
        words[i] = 'GONE'
      else
        words[i] = count_predecessor(t, WAITING_KEY, run.pid, run.state, run.result, run.err)
      end
    end
  end
  if run.pid ~= nil then
    redis.call('XDEL', RELEASE_KEY, run.entry)
    handled = handled + 1
  end
end
return {words, handled, RELEASES}
