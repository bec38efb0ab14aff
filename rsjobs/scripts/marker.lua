--[[ marker.lua — the namespace's layout marker: read it, and set it on a namespace that
holds no data yet (rsjobs/store/marker.py).

The layout is the encoding of the namespace's task data (2: a task hash holds its history
and names its common fields short). A namespace written by an earlier rsjobs has no
marker: `rsjobs migrate` converts its tasks (migrate.lua) and then sets it. Here the
marker is set only when the namespace holds none of the keys its tasks leave behind: the
events stream, the stats hash, the scheduled and deadlines zsets (the common KEYS: every
task's ENQUEUE writes the first two, and nothing deletes them) and the dead-letter stream.
So the first process or client of a new namespace marks it, and a namespace holding data
of an earlier layout is never marked by mistake.

KEYS: common (see fsm.lua), then
  layout      string  the namespace's layout marker
  deadletter  stream  the dead-letter stream (looked at, not written)
ARGV: common (see fsm.lua), then
  ARGV[5]  current  the layout this rsjobs writes
Returns: {found, marked}: found, the marker after the call ('' when there is none: the
  namespace holds data and no marker); marked, 1 when this call set it.
  An error (nothing written) when current is malformed.
]]
local _, bad = layout(1, 0, 0, 2)
if bad then return bad end
local current = ARGV[5]
if not is_count(current) then return bad_arg('current', current) end
local LAYOUT_KEY, DEADLETTER_KEY = KEYS[NCOMMON + 1], KEYS[NCOMMON + 2]
local found = redis.call('GET', LAYOUT_KEY)
if found then return {found, 0} end
if redis.call('EXISTS', EVENTS_KEY, STATS_KEY, SCHED_KEY, DEADLINES_KEY, DEADLETTER_KEY) > 0 then
  return {'', 0}
end
redis.call('SET', LAYOUT_KEY, current)
return {current, 1}
