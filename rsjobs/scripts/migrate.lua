--[[ migrate.lua — convert tasks written in the namespace's previous layout (1: each task's
history in a stream of its own, every field under its long name) to this one (2), each
task atomically (`rsjobs migrate`, rsjobs/store/migrate.py).

A task is in layout 1 when its hash has the field `state` and no `s`. Its conversion:
  * fields: renamed to their short names (FIELD); those at their default left out, as
    new_task leaves them out (attempt 0, failures 0, max_attempts 3, timeout_ms 0, the
    backoff's defaults, progress 0); empty ones dropped (they read as missing). A terminal
    task drops what its end drops in this layout: its work entry, lease expiry and
    execution deadline, and its started_at, updated_at, finished_at and consumer where its
    history gives the same values back (record.py derives them from it); a SUCCEEDED
    task's progress of 100 and null result (what readers assume when they are missing).
  * history: entry n of the stream (oldest first) becomes the field h<n>, one line in the
    format of append_entry (event, state after, source, attempt, ms after created_at,
    refusal mark, extra fields, message; START's worker as w), hn counts them. The refusal
    bookkeeping names entries by their number from now on: `refusals` (<EVENT>:<attempt>=
    <stream id>,...), `rep:<stream id>` and `rep_ts:<stream id>` are renamed (a stream id
    that is no entry of the history is left as it is).
  * then the history stream is deleted. The hash is changed in place (new fields first,
    then the old ones deleted, so it never is empty): its TTL (retention) stays.
A running task keeps its lease (l), consumer, work entry (e), lease expiry and deadlines,
so that its worker, once upgraded, completes it. Queue streams, schedule, deadlines, dedup
keys and workflow keys are not touched: their encoding is the same in both layouts.
Nothing goes to the events stream or the counters: no task changes state.

Everything of a task is read and checked before its first write: a task that cannot be
converted is reported with the reason and left as it is, whole. A task already converted
is reported NEW, so a second run changes nothing.

KEYS: common (see fsm.lua), then
  per task:
    task     hash    the task
    history  stream  its history stream of layout 1 (the task key and ":history")
ARGV: common (see fsm.lua), then
  ARGV[5]  dry_run  1: check and report only, nothing written; 0: convert
Returns: per task {outcome, detail}, the outcome one of:
  CONVERTED      converted; detail: its number of history entries
  WOULD_CONVERT  (a dry run) it would be converted; detail: the same
  NEW            in layout 2 already
  GONE           no such key (it expired since it was found)
  SKIPPED        a task of layout 1 that cannot be converted; detail: why (nothing written)
  FOREIGN        not a task hash of layout 1; detail: what it is (nothing written)
An error (nothing written) when dry_run is malformed.
]]
local n, bad = layout(1, 0, 2, 0)
if bad then return bad end
local dry = ARGV[5]
if dry ~= '0' and dry ~= '1' then return bad_arg('dry_run', dry) end

-- Fields left out when at their default (new_task, end_attempt read them back so).
local DEFAULTS = {attempt = 0, failures = 0, max_attempts = MAX_ATTEMPTS, timeout_ms = 0,
  backoff_base_ms = BACKOFF_BASE_MS, backoff_max_ms = BACKOFF_MAX_MS, progress = 0}
-- Fields a terminal task drops whatever they hold (see TERMINAL_DROP).
local ENDED = {entry = true, lease_expires_at = true, deadline_at = true}
-- The fields of a layout 1 history entry that the line format has a place of its own for;
-- every other field is an extra field.
local CORE = {ev = true, from = true, to = true, src = true, att = true, ts = true,
  msg = true, rej = true}
-- The most arguments one HSET / HDEL of this script takes (Lua's unpack has a limit).
local CHUNK = 400

local function same_number(a, b)
  return a ~= nil and b ~= nil and tonumber(a) ~= nil and tonumber(a) == tonumber(b)
end

local function hash_of(key)
  local raw = redis.call('HGETALL', key)
  local h = {}
  for j = 1, #raw, 2 do h[raw[j]] = raw[j + 1] end
  return h
end

-- The history stream as entries n -> line, and what a terminal task's reader derives from
-- it (record.py, _from_history). Returns nil and why when an entry cannot be written in
-- the line format, or would not read back as it was.
local function fold(rows, created, state)
  local out = {lines = {}, number = {}, started = nil, worker = '', finished = nil}
  local before = ''
  for i, row in ipairs(rows) do
    local id, flat = row[1], row[2]
    local e, extra = {}, {}
    for j = 1, #flat, 2 do
      if CORE[flat[j]] then e[flat[j]] = flat[j + 1] else
        extra[#extra + 1] = flat[j]; extra[#extra + 1] = flat[j + 1]
      end
    end
    local where = 'history entry ' .. id .. ': '
    local src = e.src or ''
    if e.ev == nil or e.ev == '' then return nil, where .. 'no event' end
    if e.to == nil or e.to == '' then return nil, where .. 'no state after it' end
    if (e.from or '') ~= before then
      return nil, where .. 'from ' .. tostring(e.from) .. ', but the entry before left '
        .. (before == '' and 'no state' or before)
    end
    if not is_count(e.att) then return nil, where .. 'attempt ' .. tostring(e.att) end
    if not is_count(e.ts) then return nil, where .. 'time ' .. tostring(e.ts) end
    if e.rej ~= nil and e.rej ~= '1' then return nil, where .. 'rej=' .. e.rej end
    if src == '' and USUAL_SOURCE[e.ev] then return nil, where .. 'no source' end
    local rejected = e.rej == '1'
    local shown = e.to
    if not rejected and implied(e.ev) == e.to then shown = '' end
    if USUAL_SOURCE[e.ev] == src then src = '' end
    local p = {esc(e.ev), esc(shown), esc(src), e.att, tonumber(e.ts) - created}
    if rejected then p[#p + 1] = '!' end
    local worker = ''
    for j = 1, #extra, 2 do
      local name = extra[j]
      -- (a name holding '=' would not split back; 'w' reads back as worker)
      if name == '' or string.find(name, '=', 1, true) or name == 'w' then
        return nil, where .. 'extra field ' .. string.format('%q', name)
      end
      if name == 'worker' and e.ev == 'START' then
        name = 'w'
        worker = extra[j + 1]
      end
      p[#p + 1] = esc(name) .. '=' .. esc(extra[j + 1])
    end
    local line = table.concat(p, ' ')
    if e.msg ~= nil and e.msg ~= '' then line = line .. '|' .. e.msg end
    if not rejected then
      if e.ev == 'START' then out.started, out.worker = e.ts, worker end
      if TERMINAL[e.to] and not TERMINAL[before] then out.finished = e.ts end
    end
    out.lines[i] = line
    out.number[id] = i
    before = e.to
  end
  if #rows > 0 and before ~= state then
    return nil, 'its history ends in ' .. before .. ', its state is ' .. state
  end
  return out, nil
end

-- `refusals` with its stream ids replaced by entry numbers (those it knows).
local function renumber(list, number)
  local parts = {}
  for item in string.gmatch(list, '[^,]+') do
    local k, id = string.match(item, '^(.-)=([^=]*)$')
    if k ~= nil and number[id] ~= nil then item = k .. '=' .. number[id] end
    parts[#parts + 1] = item
  end
  return table.concat(parts, ',')
end

-- What to write for one task: {set = {field, value, ...}, del = {field, ...}, entries},
-- or nil and the reply (NEW, GONE, SKIPPED, FOREIGN) when there is nothing to convert.
local function plan(key, hkey)
  local kt = redis.call('TYPE', key).ok
  if kt == 'none' then return nil, {'GONE', ''} end
  if kt ~= 'hash' then return nil, {'FOREIGN', 'its key is a ' .. kt .. ', not a hash'} end
  local h = hash_of(key)
  local ht = redis.call('TYPE', hkey).ok
  if h.s ~= nil then
    if ht ~= 'none' then
      return nil, {'FOREIGN', 'in layout 2 already, with a history ' .. ht
        .. ' of layout 1 beside it: both left as they are'}
    end
    return nil, {'NEW', ''}
  end
  if h.state == nil then
    return nil, {'FOREIGN', 'no state field: not a task of either layout'}
  end
  if ht ~= 'stream' and ht ~= 'none' then
    return nil, {'SKIPPED', 'its history is a ' .. ht .. ', not a stream'}
  end
  if not is_count(h.created_at) then
    return nil, {'SKIPPED', 'created_at ' .. tostring(h.created_at) .. ' is not a time'}
  end
  for long, short in pairs(FIELD) do
    if h[short] ~= nil then
      return nil, {'SKIPPED', 'it has both ' .. long .. ' and ' .. short}
    end
  end
  for name in pairs(h) do
    if name == 'hn' or string.match(name, '^h%d+$') then
      return nil, {'SKIPPED', 'it has a field ' .. name .. ' already'}
    end
  end
  local rows = {}
  if ht == 'stream' then rows = redis.call('XRANGE', hkey, '-', '+') end
  local hist, why = fold(rows, tonumber(h.created_at), h.state)
  if hist == nil then return nil, {'SKIPPED', why} end

  local terminal = TERMINAL[h.state]
  -- what a reader of this layout takes for a terminal task's last update when u is gone
  local updated = h.updated_at
  if terminal and same_number(updated, hist.finished) then updated = nil end
  local function dropped(name, v)
    if v == '' then return true end
    local default = DEFAULTS[name]
    if name == 'progress' and h.state == 'SUCCEEDED' then default = 100 end
    if default ~= nil and same_number(v, default) then return true end
    if not terminal then return false end
    if ENDED[name] then return true end
    if name == 'started_at' then return same_number(v, hist.started) end
    if name == 'consumer' then return v == hist.worker end
    if name == 'updated_at' then return updated == nil end
    if name == 'finished_at' then return same_number(v, updated or hist.finished) end
    return name == 'result' and v == 'null' and h.state == 'SUCCEEDED'
  end
  local set, del = {}, {}
  for name, v in pairs(h) do
    local to = FIELD[name] or name
    if name == 'refusals' then
      v = renumber(v, hist.number)
    else
      for _, kind in ipairs({'rep', 'rep_ts'}) do
        local id = string.match(name, '^' .. kind .. ':(.*)$')
        if id ~= nil and hist.number[id] ~= nil then to = kind .. ':' .. hist.number[id] end
      end
    end
    if dropped(name, v) then
      del[#del + 1] = name
    elseif to ~= name or v ~= h[name] then
      if to ~= name then del[#del + 1] = name end
      set[#set + 1] = to; set[#set + 1] = v
    end
  end
  for i, line in ipairs(hist.lines) do
    set[#set + 1] = 'h' .. i; set[#set + 1] = line
  end
  if #hist.lines > 0 then set[#set + 1] = 'hn'; set[#set + 1] = #hist.lines end
  return {set = set, del = del, entries = #hist.lines, stream = ht == 'stream'}, nil
end

local function chunked(cmd, key, list)
  for j = 1, #list, CHUNK do
    redis.call(cmd, key, unpack(list, j, math.min(j + CHUNK - 1, #list)))
  end
end

local out = {}
for i = 1, n do
  local key, hkey = KEYS[NCOMMON + 2 * i - 1], KEYS[NCOMMON + 2 * i]
  local todo, reply = plan(key, hkey)
  if todo == nil then
    out[i] = reply
  elseif dry == '1' then
    out[i] = {'WOULD_CONVERT', tostring(todo.entries)}
  else
    -- (the state field is renamed, so todo.set is never empty: the hash is never left
    -- without fields between the two calls, and keeps its TTL)
    chunked('HSET', key, todo.set)
    chunked('HDEL', key, todo.del)
    if todo.stream then redis.call('DEL', hkey) end
    out[i] = {'CONVERTED', tostring(todo.entries)}
  end
end
return out
