--[[ wf_read.lua — read a workflow's keys as of one moment (writes nothing).

The readers that need several of a workflow's keys consistent with each other (the
status document: its hash with the slots and assets of the same moment; a retry: which
slots' tasks are still open) read them in one call here rather than in a MULTI: a
script runs where its keys' slot lives on a cluster, like every other. The store calls it
read-only (FCALL_RO of its function, flagged no-writes, on Redis >= 7.0, where the server
refuses any write from it; a plain EVALSHA before 7.0, see rsjobs/store/scripts.py): it reads, and fsm.lua's
finish_call has nothing to write after it (no counter, event or history entry).

KEYS: common (see fsm.lua), then
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]  view  what to read: "state" (the hash, slots and assets) or "open" (the slots
                 and the open set)
Returns: {workflow, slots, assets, open}: the field/value lists of the workflow hash (empty:
  no such workflow), its slots hash and its assets hash, and the members of its open set;
  a part the view does not read is empty ("state": open; "open": workflow and assets).
An error (nothing read) when view is neither, or a key read is not of its type.
Events: none.
]]
local _, bad = layout(3, 0, 0, WF_NKEYS)
if bad then return bad end
local view = ARGV[NWARG + 1]
if view ~= 'state' and view ~= 'open' then return bad_arg('view', view) end
if view == 'state' then
  return {redis.call('HGETALL', WF_KEY), redis.call('HGETALL', WF_TASKS),
    redis.call('HGETALL', WF_ASSETS), {}}
end
return {{}, redis.call('HGETALL', WF_TASKS), {}, redis.call('SMEMBERS', WF_OPEN)}
