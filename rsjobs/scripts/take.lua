--[[ take.lua — a worker takes work: up to `most` work entries of its queues, highest
priority first, within the queues' limits (no task changes state: start.lua starts them).

Each queue has a stream per priority level it uses (see level_of in fsm.lua). The
candidates are the undelivered entries of every level, and the queue's parked tasks that
may start now (see `pools` in fsm.lua): those in `parked` whose owner is under its limit,
those in `throttled` whose reserved time has come. They are taken by effective priority:
a task's level plus one for every age_ms it has waited since its entry was queued (aging:
no task starves; 0 = no aging), then oldest first. A new entry is delivered to the
consumer with XREADGROUP; a parked one is claimed from ~waiting (XCLAIM) and leaves its
zset. An owner's tasks count against its limit while RUNNING (KEYS[16]) and, handed out
to a worker and not started yet, as that worker's claims (its field of `claims`:
"<expiry> <owner>=<n>:<expiry> ...", each owner's for CLAIM_MS from the take that first
handed out its task, not extended by later takes; start.lua takes them off): so two
workers do not both take an owner's last slot. A new entry whose owner (its `o` field) is at its
limit is *blocked*: it is passed over (no head-of-line blocking) and parked in `parked`,
as start.lua would. A level's entries are delivered straight (XREADGROUP) in a run while
no other candidate can go before them, the blocked ones among them parked at once;
otherwise they are read ahead (XRANGE) and delivered up to the last one handed out, the
blocked ones among them parked, those after it left on their stream, undelivered, until
their owner has room. A call passes over at most park_max blocked entries in a row
(AFTER_TAKEN once it handed out something); when it handed out nothing by then, it parks
them (so that a long run of one owner's tasks does not hold up the tasks behind it) and
answers `more`. A throttled task
whose owner is at its limit moves to `parked` (its reserved time stays its own). While
the queue's own rate limit admits nothing, its new entries are left undelivered. A
stream without the group gets it (from id 0).

The short way, when no queue of the call has a throttled task or a rate of its own, has
parked tasks only if it is the call's only queue (and no more than PARKED_READ_ALL), and
either has streams of level 0 only, or (the call's only queue) no entry below its highest
level has waited age_ms yet, nor a parked task that may start now (so that aging changes
no order: the common case): level by level, highest first, the level's parked tasks whose
owners have room (oldest first: a parked entry was delivered before every new entry of
its stream, so it goes before them), then its new entries, delivered in their order with
XREADGROUP, no more than the call hands out, the blocked ones among them parked at once
(at most park_max in a row; none taken by then: `more`).

When nothing is handed out, the worker waits with XREAD BLOCK on the streams and the wake
stream from the cursors returned (a new entry, or an attempt ending whose owner has a
limit, wakes it: finish.lua) for at most the time until next_due.

KEYS: common (see fsm.lua), then
  per queue:
    parked     zset    the queue's tasks parked on their owner's limit
    throttled  zset    the queue's tasks waiting on a rate limit, by their reserved time
    claims     hash    consumer -> its tasks handed out and not started yet, per owner
                       with a limit (see pools.read_claims in fsm.lua)
    level0     stream  the queue's stream of priority 0 ("queue:<name>")
    level1     stream  of priority 1 ("queue:<name>|p1"), and so on
    level2     stream  of priority 2
    level3     stream  of priority 3
    level4     stream  of priority 4
    level5     stream  of priority 5
    level6     stream  of priority 6
    level7     stream  of priority 7
    level8     stream  of priority 8
    level9     stream  of priority 9
  limits  hash    the limits' settings (see `pools` in fsm.lua)
  rates   hash    the token buckets' state
  wake    stream  an entry per attempt end that may let a held task start (finish.lua)
ARGV: common (see fsm.lua), then
  ARGV[5]  consumer  the worker's consumer name (not ~waiting)
  ARGV[6]  most      the most entries to hand out (the worker's free slots, >= 1)
  ARGV[7]  age_ms    a waiting task's priority rises by one level per age_ms (0: never)
  ARGV[8]  park_max  the most blocked entries one call passes over in a row (>= 1)
  per queue:
    queue  its name
Returns: {taken, cursors, next_due, more, wake, held}
  taken    flat: queue index (1-based), priority, entry id, task id, for each entry handed
           out, in the order to start them
  cursors  flat: per queue, per level 0..9, the entry id after which XREAD waits for new
           entries ('0-0' for a stream that does not exist yet); all '0-0' when the call
           hands out something (the worker then does not wait)
  next_due the earliest time (ms) a throttled task's time comes or a rate-held queue
           admits again (0: none)
  more     1 when the call parked park_max entries and handed out none, or passed over
           a parked task that had moved on: call again
  wake     the wake stream's last entry id ('0-0': none, or something handed out), the
           cursor to wait on it from
  held     1 when an owner's limit held some task back, or an owner reached its limit
           (the worker then lets its own ends land before it takes again: they free slots)
An error (nothing written) when the consumer, most, age_ms or park_max is malformed.
Events: none (no task changes state).
]]
-- a queue's keys: waiting, throttled, claims, and a stream per level (MAX_PRIORITY + 1)
local PER_QUEUE = 13
local nq, bad = layout(4, 1, PER_QUEUE, 3)
if bad then return bad end
local LIMITS_KEY, RATES_KEY, WAKE_KEY = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local consumer, want, age_ms, park_max = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]),
  tonumber(ARGV[8])
if type(consumer) ~= 'string' or consumer == '' or consumer == WAITING_CONSUMER
    or #consumer > TEXT_MAX then
  return bad_arg('consumer', consumer)
end
if not is_count(ARGV[6]) or want < 1 or want > 10000 then return bad_arg('most', ARGV[6]) end
if not is_count(ARGV[7]) then return bad_arg('age_ms', ARGV[7]) end
if not is_count(ARGV[8]) or park_max < 1 then return bad_arg('park_max', ARGV[8]) end
for q = 1, nq do
  if type(ARGV[8 + q]) ~= 'string' or ARGV[8 + q] == '' then return bad_arg('queue', ARGV[8 + q]) end
end

-- entries read ahead per level: its head first (most calls take from one level or
-- two), then what the call still needs (reading an entry costs about as much as
-- delivering it)
local PEEK_FIRST = 1
local MAX_OWNERS = 64
-- blocked entries passed over in a row once something was handed out
local AFTER_TAKEN = 32
-- how long a claim counts against its owner's limit (a worker starts what it took at
-- once; a claim it never started, being gone, expires)
local CLAIM_MS = 10000

local function entry_ms(id)
  return tonumber(string.match(id, '^(%d+)%-')) or NOW
end

-- The fields of a stream entry as a table.
local function fields_of_entry(raw)
  local f = {}
  for j = 1, #raw, 2 do f[raw[j]] = raw[j + 1] end
  return f
end

-- A work entry's task id and owner ('' when it has none), from its flat field list.
local function id_and_owner(raw)
  local id, owner = '', ''
  for j = 1, #raw, 2 do
    if raw[j] == 'id' then id = raw[j + 1] elseif raw[j] == 'o' then owner = raw[j + 1] end
  end
  return id, owner
end

-- RUNNING tasks of (queue, owner), its claims, and those handed out by this call; and
-- each owner's state in a queue, read once: {f = field, limit = n or false, busy = n}
local running, handed, claims = {}, {}, {}
local state = {}

local function owner_state(queue, owner)
  local byq = sub_table(state, queue)
  local s = byq[owner]
  if s == nil then
    local f = queue .. '|' .. owner
    s = {f = f, limit = pools.owner_limit(LIMITS_KEY, queue, owner) or false}
    if s.limit then
      running[f] = running[f] or tonumber(redis.call('HGET', RUNNING_KEY, f)) or 0
    end
    byq[owner] = s
  end
  return s
end
-- Read the limits and RUNNING counts of the owners `owners` (a list) of `queue` that this
-- call has not read yet, with one HMGET each (owner_state then finds them).
local function learn_owners(queue, owners)
  if #owners == 0 then return end
  pools.prefetch_limits(LIMITS_KEY, queue, owners)
  local need = {}
  for _, owner in ipairs(owners) do
    local f = queue .. '|' .. owner
    if pools.owner_limit(LIMITS_KEY, queue, owner) and running[f] == nil then
      need[#need + 1] = f
    end
  end
  pools.read_running(need, running)
end
-- An owner's tasks that count against its limit (state `s`): RUNNING, claimed, handed out.
local function busy_of(s)
  local f = s.f
  return (running[f] or 0) + (claims[f] or 0) + (handed[f] or 0)
end
local function busy(queue, owner)
  return busy_of(owner_state(queue, owner))
end
local held = 0
local function at_limit(queue, owner)
  if owner == nil or owner == '' then return false end
  local s = owner_state(queue, owner)
  if s.limit and busy_of(s) >= s.limit then
    held = 1
    return true
  end
  return false
end
-- this consumer's claims per queue (owner -> n) and their expiries (owner -> ms), written
-- back at the end
local mine, mine_exp = {}, {}
-- Hand out a task of `owner`: counted, and claimed when the owner has a limit.
local function hand(qi, queue, owner)
  if owner ~= nil and owner ~= '' then
    local s = owner_state(queue, owner)
    handed[s.f] = (handed[s.f] or 0) + 1
    if s.limit then
      local m, e = mine[qi], mine_exp[qi]
      m[owner] = (m[owner] or 0) + 1
      -- an owner's claim expires CLAIM_MS after its first task was handed out (never
      -- moved on: see pools.read_claims)
      e[owner] = e[owner] or (NOW + CLAIM_MS)
      if busy_of(s) >= s.limit then held = 1 end
    end
  end
end

-- what this call hands out: {queue index, priority, entry, task id}
local taken = {}

-- The sources of candidates: each has a head (a candidate: p priority, ms queued, ...)
-- and next() to move past it.
local sources = {}
local cursors = {}
local next_due = 0
local function due_at(ms)
  if ms > NOW and (next_due == 0 or ms < next_due) then next_due = ms end
end

-- A level's stream: its undelivered entries, read ahead PEEK at a time.
local function stream_source(qi, queue, p, skey)
  local src = {kind = 's', qi = qi, queue = queue, p = p, key = skey, buf = {}, pos = 1,
    picked = {}, last = nil, done = false}
  local groups = redis.pcall('XINFO', 'GROUPS', skey)
  local last = nil
  if type(groups) == 'table' and groups.err == nil then
    for _, g in ipairs(groups) do
      local gf = fields_of_entry(g)
      if gf.name == GROUP then last = gf['last-delivered-id'] end
    end
  end
  if last == nil then
    redis.call('XGROUP', 'CREATE', skey, GROUP, '0')
    last = '0-0'
  end
  src.after = last
  src.cursor = last
  src.peek = PEEK_FIRST
  function src.fill()
    if src.done then return end
    local rows = redis.call('XRANGE', skey, '(' .. src.after, '+', 'COUNT', src.peek)
    -- (next: what the call may still take, and the blocked ones it may pass over)
    src.buf, src.pos, src.peek = rows, 1, math.max(8, want - #taken + 4)
    if #rows == 0 then src.done = true else src.after = rows[#rows][1] end
  end
  function src.head()
    if src.pos > #src.buf then src.fill() end
    local row = src.buf[src.pos]
    if row == nil then return nil end
    local id, owner = id_and_owner(row[2])
    return {p = p, ms = entry_ms(row[1]), entry = row[1], owner = owner, id = id}
  end
  function src.next() src.pos = src.pos + 1 end
  return src
end

-- The queue's waiting tasks of one owner under its limit, in their order.
local function waiting_source(qi, queue, wkey, owner, rows, skeys)
  local src = {kind = 'w', qi = qi, queue = queue, key = wkey, owner = owner, rows = rows,
    pos = 1, skeys = skeys}
  function src.head()
    local m = src.rows[src.pos]
    if m == nil then return nil end
    local d, sortable, id = string.match(m, '^.*|(%d)(%d+%-%d+)|([^|]*)$')
    if d == nil then return {bad = m} end
    local p = MAX_PRIORITY - tonumber(d)
    local entry = pools.entry_of(sortable)
    return {p = p, ms = entry_ms(entry), entry = entry, owner = owner, id = id, m = m}
  end
  function src.next() src.pos = src.pos + 1 end
  return src
end

-- The queue's throttled tasks whose time has come.
local function throttled_source(qi, queue, tkey, rows)
  local src = {kind = 't', qi = qi, queue = queue, key = tkey, rows = rows, pos = 1}
  function src.head()
    local m = src.rows[src.pos]
    if m == nil then return nil end
    local d, sortable, id = string.match(m, '^(%d)(%d+%-%d+)|(.*)$')
    if d == nil then return {bad = m} end
    local entry = pools.entry_of(sortable)
    return {p = tonumber(d), ms = entry_ms(entry), entry = entry, id = id, m = m}
  end
  function src.next() src.pos = src.pos + 1 end
  return src
end

local queues = {}
-- whether every queue takes the short way (see the header), and the levels each has a
-- stream of, highest first
local short = true
for qi = 1, nq do
  local b = NCOMMON + (qi - 1) * PER_QUEUE
  local queue = ARGV[8 + qi]
  local qs = {name = queue, streams = {}, admit = pools.admissible(RATES_KEY, LIMITS_KEY,
    'r|' .. queue)}
  queues[qi] = qs
  -- the live claims, by owner (expired ones dropped; this consumer's are counted and
  -- kept in mine[qi], written back with what this call hands out)
  mine[qi], mine_exp[qi] = {}, {}
  local cl = redis.call('HGETALL', KEYS[b + 3])
  local gone = {}
  for j = 1, #cl, 2 do
    local exp, counts, exps = pools.read_claims(cl[j + 1])
    if exp <= NOW then
      gone[#gone + 1] = cl[j]
    else
      for owner, c in pairs(counts) do
        if exps[owner] > NOW then  -- (an owner's expired claim is dropped)
          local f = queue .. '|' .. owner
          claims[f] = (claims[f] or 0) + c
          if cl[j] == consumer then
            mine[qi][owner], mine_exp[qi][owner] = c, exps[owner]
          end
        end
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', KEYS[b + 3], unpack(gone)) end
  if short then
    -- (an empty zset does not exist)
    short = qs.admit >= 1e9
    if short and redis.call('EXISTS', KEYS[b + 1], KEYS[b + 2]) > 0 then
      -- parked tasks: the short way still, for the call's only queue (see parked_by_level)
      short = nq == 1 and redis.call('EXISTS', KEYS[b + 2]) == 0
      qs.parked = short
    end
  end
  if short then
    qs.levels = {0}
    if redis.call('EXISTS', KEYS[b + 5], KEYS[b + 6], KEYS[b + 7], KEYS[b + 8], KEYS[b + 9],
        KEYS[b + 10], KEYS[b + 11], KEYS[b + 12], KEYS[b + 13]) > 0 then
      -- several levels: taken highest first while no entry below the highest level has
      -- waited age_ms (a stream's first entry is its oldest): aging changes no order yet
      qs.levels = {}
      short = nq == 1
      for p = MAX_PRIORITY, 0, -1 do
        local first = short and redis.call('XRANGE', KEYS[b + 4 + p], '-', '+', 'COUNT', 1)[1]
        if first then
          if #qs.levels > 0 and age_ms > 0 and NOW - entry_ms(first[1]) >= age_ms then
            short = false
          end
          qs.levels[#qs.levels + 1] = p
        end
      end
    end
  end
end

-- this consumer's claims, with what it was handed now
local function write_mine()
  for qi = 1, nq do
    if next(mine[qi]) ~= nil then
      pools.write_claims(KEYS[NCOMMON + (qi - 1) * PER_QUEUE + 3], consumer, mine[qi],
        mine_exp[qi])
    end
  end
end

-- The wake stream's last entry id.
local function wake_id()
  if #taken > 0 then return '0-0' end
  local w = redis.call('XREVRANGE', WAKE_KEY, '+', '-', 'COUNT', 1)[1]
  return (w and w[1]) or '0-0'
end

-- Deliver up to `count` new entries of stream `skey` to `who` (the group made when the
-- stream has none): their rows.
local function deliver(skey, who, count)
  local got = redis.pcall('XREADGROUP', 'GROUP', GROUP, who, 'COUNT', count, 'STREAMS', skey,
    '>')
  if type(got) == 'table' and got.err then
    redis.call('XGROUP', 'CREATE', skey, GROUP, '0')
    got = redis.call('XREADGROUP', 'GROUP', GROUP, who, 'COUNT', count, 'STREAMS', skey, '>')
  end
  -- {{stream, rows}} (fakeredis, of the Lua tests, answers {stream, rows})
  if got and type(got[1]) == 'table' then return got[1][2] or {} end
  if got then return got[2] or {} end
  return {}
end

local blocked_since, more, scan_off = 0, 0, false

-- The most blocked entries passed over in a row before the call stops reading streams
-- (having handed out something, a few in a row are enough: what follows them is read
-- again by the next call; having handed out nothing, park_max).
local function block_bound()
  if #taken > 0 then return math.min(park_max, AFTER_TAKEN) end
  return park_max
end

-- Park delivered entries (their ids, and their members in the waiting zset of queue qi
-- as a flat score, member list): held by ~waiting.
local function park_entries(qi, skey, ids, members)
  if #ids > 0 then
    ids[#ids + 1] = 'JUSTID'
    redis.call('XCLAIM', skey, GROUP, WAITING_CONSUMER, 0, unpack(ids))
    redis.call('ZADD', KEYS[NCOMMON + (qi - 1) * PER_QUEUE + 1], unpack(members))
  end
end

-- A run of new entries of the stream `skey` (of queue qi, priority p) delivered straight
-- to the consumer in their order, while the call wants more, the queue's rate admits and
-- fewer than block_bound() blocked entries came in a row; the blocked ones (owner at its
-- limit) are parked at once, as start.lua would. Returns the last entry read (nil: none),
-- whether the stream has no new entry left, and whether the bound was reached.
local function direct(qi, p, skey)
  local qs = queues[qi]
  local last, drained, bounded = nil, false, false
  while #taken < want and qs.admit > 0 and not drained and not bounded do
    local count = math.min(want - #taken, qs.admit)
    local rows = deliver(skey, consumer, count)
    drained = #rows < count
    -- (the owners this call has not met yet: their limits and counts read together)
    local known, seen, fresh, tids, towners = state[qs.name] or {}, {}, {}, {}, {}
    for j, row in ipairs(rows) do
      local id, owner = id_and_owner(row[2])
      tids[j], towners[j] = id, owner
      if owner ~= '' and known[owner] == nil and not seen[owner] then
        seen[owner] = true
        fresh[#fresh + 1] = owner
      end
    end
    learn_owners(qs.name, fresh)
    local ids, members = {}, {}
    for j, row in ipairs(rows) do
      last = row[1]
      local id, owner = tids[j], towners[j]
      if at_limit(qs.name, owner) then
        ids[#ids + 1] = row[1]
        members[#members + 1] = 0
        members[#members + 1] = pools.waiting_member(owner, p, row[1], id)
        blocked_since = blocked_since + 1
      else
        blocked_since = 0
        hand(qi, qs.name, owner)
        qs.admit = qs.admit - 1
        taken[#taken + 1] = {qi, p, row[1], id}
      end
    end
    park_entries(qi, skey, ids, members)
    bounded = blocked_since >= block_bound()
  end
  return last, drained, bounded
end

-- The parked entries this call hands out, claimed for the consumer together at the end
-- (per stream: {entry, index in taken, queue index, owner}), and the members leaving
-- their zsets (per zset). A member names an entry held by ~waiting or none (it leaves
-- its zset in the call that claims the entry from ~waiting); one whose entry is pending
-- no more is stale (its task moved on): the claim leaves it out.
local unparked, unlisted = {}, {}
local function unlist(zkey, m)
  local l = sub_table(unlisted, zkey)
  l[#l + 1] = m
end
local function unpark(skey, entry, qi, owner)
  local l = sub_table(unparked, skey)
  l[#l + 1] = {entry, #taken, qi, owner}
end

-- The parked entries handed out leave their zsets and are claimed; a stale one is no
-- longer handed out (its claim given back, and `more`: what it left out made room).
local function settle_unparked()
  for zkey, members in pairs(unlisted) do redis.call('ZREM', zkey, unpack(members)) end
  local stale = false
  for skey, list in pairs(unparked) do
    local ids = {}
    for j, u in ipairs(list) do ids[j] = u[1] end
    ids[#ids + 1] = 'JUSTID'
    local got = redis.call('XCLAIM', skey, GROUP, consumer, 0, unpack(ids))
    if #got < #list then
      local ok = {}
      for _, e in ipairs(got) do ok[e] = true end
      for _, u in ipairs(list) do
        if not ok[u[1]] then
          taken[u[2]] = false
          stale = true
          local owner, counts = u[4], mine[u[3]]
          if owner ~= '' and counts[owner] then counts[owner] = counts[owner] - 1 end
        end
      end
    end
  end
  if stale then
    local kept = {}
    for _, t in ipairs(taken) do if t then kept[#kept + 1] = t end end
    taken = kept
    more = 1
  end
end

-- The parked tasks of queue qi (its parked zset `wkey`) that may start now, for the
-- short way: each owner's first ones, as many as it has room for, by level
-- (p -> candidates {entry, id, owner, m, key}, oldest first). A parked entry was
-- delivered before every new entry of its stream: it goes before them, in its level.
-- Returns nil when the zset is too large to read whole (the long way reads it owner by
-- owner). (Aging needs no check here: a parked entry stays on its stream, so the short
-- way's check of each level's oldest entry covers it.)
local PARKED_READ_ALL = 256
local function parked_by_level(queue, wkey)
  if redis.call('ZCARD', wkey) > PARKED_READ_ALL then return nil end
  local ms = redis.call('ZRANGEBYLEX', wkey, '-', '+')
  -- the owners' settings and RUNNING counts, read in one call each
  local owners, seen, of = {}, {}, {}
  for j, m in ipairs(ms) do
    local owner = string.match(m, '^([^|]*)|')
    of[j] = owner
    if owner ~= nil and owner ~= '' and not seen[owner] then
      seen[owner] = true
      owners[#owners + 1] = owner
    end
  end
  learn_owners(queue, owners)
  -- (only the members of owners with room are read further)
  local levels, room, bad = {}, {}, {}
  for j, m in ipairs(ms) do
    local owner = of[j]
    local r = owner ~= nil and owner ~= '' and room[owner]
    if r == nil then
      local limit = pools.owner_limit(LIMITS_KEY, queue, owner)
      r = want
      if limit then r = math.min(want, limit - busy(queue, owner)) end
      if r <= 0 then held = 1 end
      room[owner] = r
    end
    if r == false then
      bad[#bad + 1] = m  -- not a member rsjobs writes
    elseif r > 0 then
      local d, sortable, id = string.match(m, '^[^|]*|(%d)(%d+%-%d+)|([^|]*)$')
      if d == nil then
        bad[#bad + 1] = m
      else
        local l = sub_table(levels, MAX_PRIORITY - tonumber(d))
        l[#l + 1] = {entry = pools.entry_of(sortable), id = id, owner = owner, m = m,
          key = sortable}
        room[owner] = r - 1
      end
    end
  end
  if #bad > 0 then redis.call('ZREM', wkey, unpack(bad)) end
  for _, l in pairs(levels) do
    if #l > 1 then table.sort(l, function(a, b) return a.key < b.key end) end
  end
  return levels
end

-- the parked tasks that may start now, by level, for the short way (nil: it is not for it)
local NONE = {}
for qi = 1, nq do
  local qs = queues[qi]
  if short and qs.parked then
    local pl = parked_by_level(qs.name, KEYS[NCOMMON + (qi - 1) * PER_QUEUE + 1])
    local known = {}
    for _, p in ipairs(qs.levels) do known[p] = true end
    for p in pairs(pl or NONE) do
      if not known[p] then pl = nil end  -- (a level without its stream: the long way)
    end
    if pl == nil then short = false else qs.parked_levels = pl end
  end
end

if short then
  -- The short way: each level's parked tasks that may start (see parked_by_level),
  -- then its new entries, highest level first, the new ones delivered in their order
  -- (direct).
  local cur = {}
  local bounded = false
  for qi = 1, nq do
    local b = NCOMMON + (qi - 1) * PER_QUEUE
    local top = {}
    local qs = queues[qi]
    local parked = qs.parked_levels
    for _, p in ipairs(qs.levels) do
      local skey = KEYS[b + 4 + p]
      if p > 0 or redis.call('EXISTS', skey) == 1 then
        -- the level's parked tasks that may start first (older than its new entries)
        for _, c in ipairs(parked and parked[p] or NONE) do
          if #taken >= want then break end
          if not at_limit(qs.name, c.owner) then
            hand(qi, qs.name, c.owner)
            taken[#taken + 1] = {qi, p, c.entry, c.id}
            unpark(skey, c.entry, qi, c.owner)
            unlist(KEYS[b + 1], c.m)
          end
        end
        if not bounded and #taken < want then
          local _, _, bd = direct(qi, p, skey)
          bounded = bd
        end
        if #taken == 0 then
          local last = redis.call('XREVRANGE', skey, '+', '-', 'COUNT', 1)[1]
          if last then top[p] = last[1] end
        end
      end
    end
    for p = 0, MAX_PRIORITY do cur[#cur + 1] = top[p] or '0-0' end
  end
  settle_unparked()
  write_mine()
  local out = {}
  for _, t in ipairs(taken) do
    out[#out + 1] = t[1]; out[#out + 1] = t[2]; out[#out + 1] = t[3]; out[#out + 1] = t[4]
  end
  if #taken == 0 and bounded then more = 1 end
  return {out, cur, 0, more, wake_id(), held}
end

for qi = 1, nq do
  local b = NCOMMON + (qi - 1) * PER_QUEUE
  local queue = ARGV[8 + qi]
  local wkey, tkey = KEYS[b + 1], KEYS[b + 2]
  local skeys = {}
  local qs = queues[qi]
  for p = 0, MAX_PRIORITY do
    local skey = KEYS[b + 4 + p]
    skeys[p] = skey
    if redis.call('EXISTS', skey) == 1 then
      local src = stream_source(qi, queue, p, skey)
      qs.streams[p] = src
      sources[#sources + 1] = src
    end
  end
  qs.skeys = skeys
  -- throttled tasks whose time has come (their rate slot is theirs already)
  local due = redis.call('ZRANGEBYSCORE', tkey, '-inf', NOW, 'LIMIT', 0, want)
  if #due > 0 then sources[#sources + 1] = throttled_source(qi, queue, tkey, due) end
  local later = redis.call('ZRANGEBYSCORE', tkey, '(' .. NOW, '+inf', 'LIMIT', 0, 1, 'WITHSCORES')
  if later[2] then due_at(tonumber(later[2])) end
  -- the owners with waiting tasks, each with as many as it has room for
  local m = redis.call('ZRANGEBYLEX', wkey, '-', '+', 'LIMIT', 0, 1)[1]
  local owners = 0
  while m ~= nil and owners < MAX_OWNERS do
    owners = owners + 1
    local owner = string.match(m, '^([^|]*)|')
    if owner == nil then
      redis.call('ZREM', wkey, m)  -- not a member rsjobs writes
      owner = m
    else
      local limit = pools.owner_limit(LIMITS_KEY, queue, owner)
      local room = want
      if limit ~= nil then room = math.min(want, limit - busy(queue, owner)) end
      if room <= 0 then held = 1 end
      if room > 0 then
        local rows = redis.call('ZRANGEBYLEX', wkey, '[' .. owner .. '|', '(' .. owner .. '|~',
          'LIMIT', 0, room)
        sources[#sources + 1] = waiting_source(qi, queue, wkey, owner, rows, skeys)
      end
    end
    m = redis.call('ZRANGEBYLEX', wkey, '(' .. owner .. '|~', '+', 'LIMIT', 0, 1)[1]
  end
end

-- Whether candidate a goes before b: higher effective priority, then older, then higher
-- level.
local function eff(c)
  if c.eff == nil then
    c.eff = c.p
    if age_ms > 0 then c.eff = c.p + math.floor(math.max(0, NOW - c.ms) / age_ms) end
  end
  return c.eff
end
local function before(a, b)
  local ea, eb = eff(a), eff(b)
  if ea ~= eb then return ea > eb end
  if a.ms ~= b.ms then return a.ms < b.ms end
  return a.p > b.p
end

-- A source's head, read once until it moves on (false: none left).
local function head_of(src)
  if src.c == nil then src.c = src.head() or false end
  return src.c or nil
end
local function advance(src)
  src.next()
  src.c = nil
end

-- Whether a parked entry is still held by ~waiting (its task may have moved on: then
-- its member is stale).
local function still_held(skey, entry)
  local pe = redis.call('XPENDING', skey, GROUP, entry, entry, 1, WAITING_CONSUMER)
  return #pe == 1
end


local all_sources = sources

-- A new entry `c` of stream source `src` picked: handed out, or blocked (its owner is
-- at its limit). Returns false when the streams are not to be read further this call.
local function pick_entry(src, c)
  local qs = queues[src.qi]
  if at_limit(qs.name, c.owner) then
    src.picked[#src.picked + 1] = {c, false}
    blocked_since = blocked_since + 1
    if blocked_since >= block_bound() then
      -- passed over enough for one call: stop reading the streams; when nothing was
      -- handed out, park what was passed over (a long run of one owner's tasks must
      -- not hold up the others behind it) and the worker calls again at once
      for _, s in ipairs(all_sources) do if s.kind == 's' then s.off = true end end
      if #taken == 0 then
        scan_off = true
        more = 1
      end
      return false
    end
  else
    blocked_since = 0
    src.picked[#src.picked + 1] = {c, true}
    src.last_taken = #src.picked
    hand(src.qi, qs.name, c.owner)
    qs.admit = qs.admit - 1
    taken[#taken + 1] = {src.qi, c.p, c.entry, c.id}
  end
  return true
end
local guard = 0
while #taken < want do
  guard = guard + 1
  if guard > 100000 then break end
  local best, bsrc = nil, nil
  local live = {}  -- the sources still in play (those done with leave the loop)
  for _, src in ipairs(sources) do
    local ok = not src.off
    if src.kind == 's' then
      ok = ok and queues[src.qi].admit > 0
    elseif src.kind == 'w' and ok and at_limit(src.queue, src.owner) then
      -- (an owner's waiting tasks wait while it is at its limit)
      ok, src.off = false, true
    end
    local c = ok and head_of(src) or nil
    while c ~= nil and c.bad ~= nil do  -- a member rsjobs does not write: dropped
      redis.call('ZREM', src.key, c.bad)
      advance(src)
      c = head_of(src)
    end
    if c ~= nil then
      live[#live + 1] = src
      if best == nil or before(c, best) then best, bsrc = c, src end
    elseif src.kind ~= 's' or src.off or src.c == false then
      src.done_with = true
    else
      live[#live + 1] = src  -- (held back by the rate for now)
    end
  end
  sources = live
  if best == nil then break end
  advance(bsrc)
  local qs = queues[bsrc.qi]
  if bsrc.kind == 's' then
    -- a run: while no other source's head can go before this level's entries (its
    -- level alone outranks them: aging only raises its entries), take them one after
    -- the other without comparing every source again
    local run = true
    for _, src in ipairs(sources) do
      if src ~= bsrc and src.c and eff(src.c) >= bsrc.p then run = false end
    end
    if run and #bsrc.picked == 0 then
      -- the whole run, from its head: delivered straight (direct), not read ahead; the
      -- read-ahead buffer then goes on after what was delivered
      local last, drained, bounded = direct(bsrc.qi, bsrc.p, bsrc.key)
      bsrc.buf, bsrc.pos, bsrc.c = {}, 1, nil
      if last ~= nil then bsrc.after, bsrc.cursor = last, last end
      bsrc.done = drained
      if bounded then
        for _, s in ipairs(all_sources) do if s.kind == 's' then s.off = true end end
        if #taken == 0 then
          scan_off = true
          more = 1
        end
      end
    else
      local go = pick_entry(bsrc, best)
      while run and go and #taken < want and qs.admit > 0 and not bsrc.off do
        local c = head_of(bsrc)
        if c == nil then break end
        advance(bsrc)
        go = pick_entry(bsrc, c)
      end
    end
  else
    local skey = qs.skeys[best.p]
    unlist(bsrc.key, best.m)
    local owner = best.owner
    if bsrc.kind == 't' then
      local row = redis.call('XRANGE', skey, best.entry, best.entry)[1]
      owner = (row and fields_of_entry(row[2]).o) or ''
    end
    if bsrc.kind == 't' and at_limit(qs.name, owner) then
      -- its time has come but its owner is at its limit: it waits on that now
      if still_held(skey, best.entry) then
        redis.call('ZADD', KEYS[NCOMMON + (bsrc.qi - 1) * PER_QUEUE + 1], 0,
          pools.waiting_member(owner, best.p, best.entry, best.id))
      end
    else
      hand(bsrc.qi, qs.name, owner)
      if bsrc.kind == 'w' then qs.admit = qs.admit - 1 end
      taken[#taken + 1] = {bsrc.qi, best.p, best.entry, best.id}
      unpark(skey, best.entry, bsrc.qi, owner)
    end
  end
end

settle_unparked()

-- deliver the new entries picked, per level in order, up to the last one handed out
-- (or every one, when enough were passed over), and park the blocked among them; the
-- blocked ones after it stay on the stream
local park_all = scan_off
for _, src in ipairs(all_sources) do
  if src.kind == 's' and #src.picked > 0 then
    local upto = src.last_taken or 0
    if park_all then upto = #src.picked end
    if upto < #src.picked then src.left = true end
    if upto > 0 then
      local want_last = src.picked[upto][1].entry
      local rows = deliver(src.key, consumer, upto)
      local last = rows[#rows] and rows[#rows][1]
      if last ~= want_last then
        error('rsjobs: take.lua read ' .. tostring(last) .. ' from ' .. src.key .. ', not '
          .. want_last, 0)
      end
      src.cursor = last
      local ids, members = {}, {}
      for j = 1, upto do
        local c, handed_out = src.picked[j][1], src.picked[j][2]
        if not handed_out then
          ids[#ids + 1] = c.entry
          members[#members + 1] = 0
          members[#members + 1] = pools.waiting_member(c.owner, c.p, c.entry, c.id)
        end
      end
      park_entries(src.qi, src.key, ids, members)
    end
  end
end

write_mine()

local out = {}
for _, t in ipairs(taken) do
  out[#out + 1] = t[1]; out[#out + 1] = t[2]; out[#out + 1] = t[3]; out[#out + 1] = t[4]
end
local cur = {}
for qi = 1, nq do
  local qs = queues[qi]
  local held_back = qs.admit <= 0
  if held_back then
    -- its rate admits nothing now: wake when it does
    local s = pools.rate_setting(LIMITS_KEY, 'r|' .. qs.name)
    if s then due_at(math.ceil(math.max(pools.tat_of(RATES_KEY, 'r|' .. qs.name), NOW) - s[2])) end
  end
  for p = 0, MAX_PRIORITY do
    local src = qs.streams[p]
    local c = '0-0'
    if src ~= nil and #taken == 0 then
      c = src.cursor
      if held_back or src.off or src.left then
        -- entries left undelivered on purpose: wait for newer ones only
        local top = redis.call('XREVRANGE', src.key, '+', '-', 'COUNT', 1)[1]
        if top then c = top[1] end
      end
    end
    cur[#cur + 1] = c
  end
end
return {out, cur, next_due, more, wake_id(), held}
