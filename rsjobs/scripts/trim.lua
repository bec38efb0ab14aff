--[[ trim.lua — the reaper's trim of the list indexes (see index_move in fsm.lua).

A finished task's hash expires after the retention period (ARGV[3]); its entries in the
list indexes go with it here: the done:<STATE> streams lose their entries older than the
retention period (the transitions trim them too, approximately, while tasks keep
finishing: this removes the rest, and a stream left empty is deleted), and each tags:trim
entry older than it has its tasks' tags members removed, then is deleted itself (an entry
names the tasks one call finished: each task's fields begin with its id). Nothing
is trimmed when the retention period is 0 (tasks are kept forever).

KEYS: common (see fsm.lua)
ARGV: common (see fsm.lua), then
  ARGV[5]  most  tags:trim entries are handled until this many tasks were (an integer
                >= 1; an entry names at most 32: see TRIMS in fsm.lua), read a few
                entries at a time
Returns: {handled, members, done, more}: tags:trim entries handled, tags members removed,
  done:<STATE> entries removed; more = 1 when it stopped at `most` with entries left (call
  again).
An error (nothing written) when most is not an integer >= 1.
Events: none (no task changes state).
]]
local _, bad = layout(1, 0, 0, 0)
if bad then return bad end
if not is_count(ARGV[5]) or tonumber(ARGV[5]) < 1 then return bad_arg('most', ARGV[5]) end
local most = tonumber(ARGV[5])
if RETENTION_MS == 0 then return {0, 0, 0, 0} end
local cutoff = NOW - RETENTION_MS
if cutoff <= 0 then return {0, 0, 0, 0} end

-- a stream emptied by a trim is deleted: an empty stream key would stay forever
local function drop_if_empty(key)
  if redis.call('XLEN', key) == 0 then redis.call('DEL', key) end
end

local members, ids = 0, {}
-- the tags members of the task whose fields `e` holds ({id, c, o, l}) leave the index
local function untag(e)
  -- labels that do not decode (written by something else) leave only the owner's member
  local labels = e.l and decode_labels(e.l) or nil
  local gone = tag_members(tags_of(e.o, labels), tonumber(e.c) or 0, e.id)
  if #gone > 0 then members = members + redis.call('ZREM', TAGS_KEY, unpack(gone)) end
end
-- entries read PAGE at a time (an entry names up to 32 tasks: reading `most` entries
-- at once could read many more than the call handles)
local PAGE = 32
local tasks, from, left = 0, '-', false
while tasks < most and #ids < most do
  local count = math.min(PAGE, most - #ids)
  local rows = redis.call('XRANGE', TAGS_TRIM_KEY, from, '(' .. cutoff .. '-0', 'COUNT', count)
  local stopped = false
  for _, row in ipairs(rows) do
    if tasks >= most then
      stopped = true
      break
    end
    local f, e = row[2], nil
    for j = 1, #f, 2 do
      if f[j] == 'id' then
        if e then untag(e) end
        e = {id = f[j + 1]}
        tasks = tasks + 1
      elseif e then
        e[f[j]] = f[j + 1]
      end
    end
    if e then untag(e) end
    ids[#ids + 1] = row[1]
    from = '(' .. row[1]
  end
  -- entries left: those passed over, or maybe more after a full page
  left = stopped or #rows == count
  if not left then break end
end
if #ids > 0 then
  redis.call('XDEL', TAGS_TRIM_KEY, unpack(ids))
  drop_if_empty(TAGS_TRIM_KEY)
end

local done = 0
for _, state in ipairs({'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT'}) do
  local key = DONE_KEYS[state]
  done = done + redis.call('XTRIM', key, 'MINID', cutoff)
  drop_if_empty(key)
end
local more = 0
if left then more = 1 end
return {#ids, members, done, more}
