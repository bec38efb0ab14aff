--[[ link.lua — link a re-queued dead letter and its clone, both ways (no transition).

`rsjobs deadletter requeue` submits a clone of a dead-lettered task through the normal
enqueue path, then calls this script: the original gets `requeued_as` = clone id and the
clone gets `requeued_from` = original id. Only existing hashes are written, so a task that
expired in between is not resurrected as a stub.

KEYS: common (see fsm.lua), then
  per task (two, the original then the clone): the task keys (see fsm.lua)
ARGV: common (see fsm.lua)
Returns: {code, clone id}
   1  linked (a link to an earlier clone, which expired, is replaced)
   0  already linked to this clone (a repeated or concurrent requeue): nothing written
  -1  the original no longer exists
  -2  the clone no longer exists
]]
local _, bad = layout(0, 0, 3, 0, 2)
if bad then return bad end
local orig = load(1, {'requeued_as'})
local clone = load(2, {})
if orig == nil then return {-1, ''} end
if clone == nil then return {-2, ''} end
if orig.f.requeued_as == clone.id then return {0, clone.id} end
redis.call('HSET', orig.key, 'requeued_as', clone.id)
redis.call('HSET', clone.key, 'requeued_from', orig.id)
return {1, clone.id}
