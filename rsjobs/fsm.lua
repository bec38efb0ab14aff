--[[ rsjobs/fsm.lua — the task state machine: the transition table and the helpers every
transition script shares. The loader prepends this file to each script in scripts/, so the
table below is the only place where a legal transition is defined.

Common KEYS (every transition script):
  KEYS[1]  events     stream  every transition of every task, trimmed with MAXLEN ~
  KEYS[2]  stats      hash    "<queue>:<STATE>" counts, "ev:<EVENT>" / "rej:<EVENT>" counters,
                              "started:<queue>" attempts started (for scripts/series.lua),
                              task durations "dur:<queue>:<STATE>:<le>", "dur_ms:<queue>:<STATE>"
                              (see observe_duration), attempt durations "adur:<dim>|<name>|<le>",
                              "adur_ms:<dim>|<name>" and retries "retry:<dim>|<name>" per
                              queue, type and stage (see account_attempt); workflow
                              durations "wfdur:<def>|<STATUS>|<le>", "wfdur_ms:<def>|<STATUS>"
                              (wf_observe_duration in wf.lua)
  KEYS[3]  scheduled  zset    "<queue>:<id>" scored by due time (ms)
  KEYS[4]  deadlines  zset    "<queue>:<id>" scored by execution deadline (ms)
  KEYS[5..8]  done    stream  one per terminal state (SUCCEEDED, FAILED, CANCELLED,
                              TIMED_OUT): an entry "<queue> <id>" per task reaching it
  KEYS[9]  paused_tasks zset  "<queue>:<id>" of PAUSED tasks, scored by when paused
  KEYS[10] tags       zset    the owner and label index (score 0, text order)
  KEYS[11] tags_trim  stream  finished tasks with tags, for the reaper's trim
  KEYS[12] hooks      stream  a task's changes of state that a hook or webhook listens for
                              (see note_hook); read by `rsjobs hooks` through its group
  KEYS[13] hooks_on   hash    listener -> the states it listens for ("*" = all); empty:
                              nothing is written to KEYS[12]
  KEYS[14] release    stream  finished predecessors whose successors wait on them: an entry
                              per predecessor (with successors) reaching a terminal state:
                              id, q, s (the state), sc (its successors), r (result) or err
                              (see note_release); scripts/successors.lua consumes them
  KEYS[15] costs      hash    "<dim>|<name>|<unit>|<category>": attempts, run time (run_ms),
                              deferred wait (wait_ms) and charges (millionths of their unit)
                              per queue, type, owner and stage (see account_attempt)
  KEYS[16] running    hash    "<queue>|<owner>" -> its RUNNING tasks (per-owner limits;
                              kept by transition, see count_running)
(KEYS[5..11] are the list indexes: see index_move.)
The task keys, three per task (a script's items: its tasks, entries, members... follow the
common KEYS, each with its keys; then the script's own keys, if any):
  task       hash    the task, its history included (see append_entry)
  queue      stream  the stream of its queue's priority level: "queue:<name>" for
                     priority 0, "queue:<name>|p<N>" for N > 0 (see level_of; load and
                     check_levels refuse any other)
  dedup      string  its dedup key (the unused "dedup:" key when it has none)

Common ARGV:
  ARGV[1]  source      who acts: worker | reaper | api | user
  ARGV[2]  events_max  approximate MAXLEN of the events stream
  ARGV[3]  retention   ms a finished task (hash, history, dedup key) is kept; 0 = forever
  ARGV[4]  group       the consumer group of the queue streams
Script-specific ARGV follow from ARGV[5]: first the script's own values, then the values of
each item, in the item order of KEYS.

Each header names every KEYS and ARGV of its script in this form (rsjobs/store/layout.py
packs the calls by the same names, and a test checks that the two agree), and each script
checks #KEYS and #ARGV against it with layout() before anything else.

Every transition, and every rejected attempt at one, is an entry of the task's history,
kept in the task hash itself (field h<n> for entry n, see record): event, state after it,
source, attempt, time (Redis TIME), and msg / refused / extra fields where they apply. The
events stream gets the task id and the entry number (id, hid) of each entry (and wf,
the workflow id, for a workflow's task): readers
(the web app's hub, Client.wait) learn from it that something happened and read the entry
from the task. Refusals are coalesced (see reject): the first refusal of an event while
the task stays in one state is an entry; repeats of it are counted on the task hash, so no
sender can grow a history. Checks come before the
first write of each task: Redis does not roll a script back.
Counters (KEYS[2]) and costs (KEYS[15]) are summed per field while the script runs and
written once per field when it ends, and dropped work entries are acked and deleted then
with one XACK and one XDEL per queue stream (see `count`, `cost`, `drop_entry` and
`finish_call`; the loader wraps every script body so that this happens whether it returns
or raises). A batch of N transitions costs a few HINCRBYs and one XACK and XDEL, not 3N
and N of each.
]]

local TERMINAL = {SUCCEEDED = true, FAILED = true, CANCELLED = true, TIMED_OUT = true}

-- The transition table: "FROM|EVENT|TO" for every allowed transition, one per line.
-- '' is the state of a task that does not exist yet. Terminal states are never left: the
-- only events they accept, RETRY and REPLAY, lead back to them.
-- (A flat set of constant strings: cheap to build on every script call.)
local TRANSITIONS = {
  ['|ENQUEUE|PENDING'] = true,
  ['|ENQUEUE|SCHEDULED'] = true,
  ['|ENQUEUE|WAITING'] = true,

  -- WAITING: a successor waits for its predecessors (after.lua); it has no work entry,
  -- lease or deadline: nothing starts, reclaims or expires it. When its last predecessor
  -- succeeded (or, under the policy "always", finished) it is RELEASEd onto its queue
  -- (SCHEDULED when it has a delay); a predecessor that fails, times out or is cancelled
  -- cancels it (successors.lua). PAUSE is refused: it holds nothing to pause.
  ['WAITING|RELEASE|PENDING'] = true,
  ['WAITING|RELEASE|SCHEDULED'] = true,
  ['WAITING|CANCEL|CANCELLED'] = true,

  ['PENDING|START|RUNNING'] = true,
  ['PENDING|PAUSE|PAUSED'] = true,
  ['PENDING|CANCEL|CANCELLED'] = true,
  ['PENDING|EXPIRE|TIMED_OUT'] = true,
  ['PENDING|DEADLETTER|FAILED'] = true,

  ['SCHEDULED|PROMOTE|PENDING'] = true,
  ['SCHEDULED|PAUSE|PAUSED'] = true,
  ['SCHEDULED|CANCEL|CANCELLED'] = true,
  ['SCHEDULED|EXPIRE|TIMED_OUT'] = true,
  ['SCHEDULED|DEADLETTER|FAILED'] = true,

  ['RUNNING|HEARTBEAT|RUNNING'] = true,
  ['RUNNING|PROGRESS|RUNNING'] = true,
  ['RUNNING|COMPLETE|SUCCEEDED'] = true,
  ['RUNNING|FAIL|SCHEDULED'] = true,
  ['RUNNING|FAIL|FAILED'] = true,
  ['RUNNING|TIMEOUT|SCHEDULED'] = true,
  ['RUNNING|TIMEOUT|TIMED_OUT'] = true,
  ['RUNNING|RECLAIM|PENDING'] = true,
  ['RUNNING|RECLAIM|FAILED'] = true,
  ['RUNNING|REQUEUE|PENDING'] = true,
  ['RUNNING|PAUSE|PAUSED'] = true,
  ['RUNNING|CANCEL|CANCELLED'] = true,
  ['RUNNING|DEADLETTER|FAILED'] = true,
  ['RUNNING|DEFER|DEFERRED'] = true,

  -- DEFERRED: the handler handed the attempt to an outside service (defer.lua); no worker
  -- holds it (no lease, no work entry). A result comes by callback, client or poll
  -- (resolve.lua), fenced by the attempt and the external id; past its longest wait the
  -- reaper times it out (deadline.lua). PAUSE is refused: the outside job runs on.
  ['DEFERRED|COMPLETE|SUCCEEDED'] = true,
  ['DEFERRED|FAIL|SCHEDULED'] = true,
  ['DEFERRED|FAIL|FAILED'] = true,
  ['DEFERRED|TIMEOUT|SCHEDULED'] = true,
  ['DEFERRED|TIMEOUT|TIMED_OUT'] = true,
  ['DEFERRED|CANCEL|CANCELLED'] = true,
  ['DEFERRED|DEADLETTER|FAILED'] = true,

  ['PAUSED|RESUME|PENDING'] = true,
  ['PAUSED|CANCEL|CANCELLED'] = true,

  -- A finished task is never left: RETRY (of a FAILED, TIMED_OUT or CANCELLED one) and
  -- REPLAY (of a SUCCEEDED one) start it over as a new task (retry.lua) and leave the old
  -- one where it is, noting the new task in its history (see note_restart).
  ['FAILED|RETRY|FAILED'] = true,
  ['TIMED_OUT|RETRY|TIMED_OUT'] = true,
  ['CANCELLED|RETRY|CANCELLED'] = true,
  ['SUCCEEDED|REPLAY|SUCCEEDED'] = true,
}

-- The call's KEYS and ARGV, and what follows from them: set by begin_call (at the end of
-- this file) when a call begins. This file is loaded once (a library of functions, see
-- rsjobs/store/scripts.py) and serves every call after it, so whatever a call keeps here
-- is set again, or emptied, by begin_call.
local KEYS, ARGV
local EVENTS_KEY, STATS_KEY, SCHED_KEY, DEADLINES_KEY
local DONE_KEYS = {}  -- terminal state -> its done stream (KEYS[5..8])
local PAUSED_TASKS_KEY, TAGS_KEY, TAGS_TRIM_KEY
local HOOKS_KEY, HOOKS_ON_KEY
local RELEASE_KEY, COSTS_KEY, RUNNING_KEY
local SOURCE, EVENTS_MAX, RETENTION_MS, GROUP
local NCOMMON = 16  -- common KEYS
local NARGV = 4  -- common ARGV

-- The consumer of the queue groups that holds the work entries of tasks waiting on a
-- limit (scripts/start.lua parks them, scripts/take.lua hands them to a worker; the
-- reaper leaves them alone). rsjobs/store/keys.py names it too.
local WAITING_CONSUMER = '~waiting'
-- The priority levels: 0 (the default) .. MAX_PRIORITY, higher first.
local MAX_PRIORITY = 9

-- The table t[k], made (empty) when there is none.
local function sub_table(t, k)
  local v = t[k]
  if v == nil then
    v = {}
    t[k] = v
  end
  return v
end

-- Counter increments of this call: field -> sum, written by finish_call().
local COUNTS = {}
local function count(field, n)
  COUNTS[field] = (COUNTS[field] or 0) + n
end

-- Cost increments of this call (KEYS[15]): field -> sum, written by finish_call() (see
-- account_attempt).
local COSTS = {}
local function cost(field, n)
  COSTS[field] = (COSTS[field] or 0) + n
end

-- Changes of the per-owner RUNNING counts (KEYS[16]) of this call: field -> delta,
-- written by finish_call() (see count_running).
local RUNS = {}

-- Work entries this call removes, per queue stream: {qkey = {entry, ...}}; acked and
-- deleted by finish_call() with one XACK and one XDEL per stream (see drop_entry).
local DROPS = {}

-- The tags:trim fields of the tagged tasks this call finished (see index_move): a list of
-- flat field lists, written by finish_call() with one XADD each (a new list is begun at
-- TRIM_FIELDS_MAX fields: 24 to 32 tasks, 6 to 8 fields each, so that the reaper's trim,
-- which counts tasks, handles a bounded number per call).
local TRIMS = {}
local TRIM_FIELDS_MAX = 192

-- Runs the script body `main`, then writes the counters and removes the dropped entries,
-- also when `main` raised (the writes it made before the error stay: Redis does not roll
-- a script back, so what they imply must be written too).
local function finish_call(main)
  if EVENTS_MAX == nil or RETENTION_MS == nil or GROUP == nil or SOURCE == nil then
    return redis.error_reply('rsjobs: invalid common ARGV (source, events_max, retention, group)')
  end
  local ok, res = pcall(main)
  for field, n in pairs(COUNTS) do
    redis.call('HINCRBY', STATS_KEY, field, n)
  end
  COUNTS = {}
  for field, n in pairs(COSTS) do
    if n ~= 0 then redis.call('HINCRBY', COSTS_KEY, field, n) end
  end
  COSTS = {}
  for f, n in pairs(RUNS) do
    if n ~= 0 and redis.call('HINCRBY', RUNNING_KEY, f, n) <= 0 then
      redis.call('HDEL', RUNNING_KEY, f)  -- none left (a negative count is none too)
    end
  end
  RUNS = {}
  for qkey, entries in pairs(DROPS) do
    redis.call('XACK', qkey, GROUP, unpack(entries))
    redis.call('XDEL', qkey, unpack(entries))
  end
  DROPS = {}
  for _, fields in ipairs(TRIMS) do redis.call('XADD', TAGS_TRIM_KEY, '*', unpack(fields)) end
  TRIMS = {}
  if ok then return res end
  if type(res) == 'table' and res.err then return redis.error_reply(res.err) end
  error(res, 0)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local NOW  -- the call's time (Redis TIME, ms), taken by begin_call

-- Argument checks. A script checks every ARGV value it will use before its first write:
-- a bad one found half way through a batch would raise after writes Redis keeps.
-- bad_arg() is the error reply of a failed check (nothing written).
local function bad_arg(what, value)
  return redis.error_reply('rsjobs: invalid ' .. what .. ': ' .. tostring(value))
end

-- A decimal integer >= 0 of at most 15 digits: exact in Lua and stored as readers parse it.
local function is_count(v)
  return type(v) == 'string' and #v <= 15 and string.match(v, '^%d+$') ~= nil
end

-- A number in [lo, hi] written in decimal (digits, '.', exponent: what Python's float()
-- and Lua's tonumber() both read the same way; no hex, no nan/inf).
local function is_number(v, lo, hi)
  if type(v) ~= 'string' or #v > 32 or not string.match(v, '^[%d%.eE%+%-]+$') then
    return false
  end
  local n = tonumber(v)
  return n ~= nil and n >= lo and n <= hi
end

-- The longest worker-given text a script puts in a history entry (a lease token, a
-- progress message; the worker keeps them far shorter).
local TEXT_MAX = 2048

-- A stream entry id "<ms>-<seq>".
local function is_entry_id(v)
  return type(v) == 'string' and #v <= 41 and string.match(v, '^%d+%-%d+$') ~= nil
end

-- Whether `event` may lead from `from` to `to`.
local function allowed(from, event, to)
  return TRANSITIONS[from .. '|' .. event .. '|' .. to] == true
end

-- The three keys of the i-th task (1-based) of this call: task, queue, dedup. `i` may be
-- the three keys themselves, {task, queue, dedup}: a task that is not one of the call's
-- items (after.lua's new task, which follows its predecessors).
local function task_keys(i)
  if type(i) == 'table' then return i[1], i[2], i[3] end
  local b = NCOMMON + (i - 1) * 3
  return KEYS[b + 1], KEYS[b + 2], KEYS[b + 3]
end

-- The number of items of this call (tasks, entries, members...), after checking #KEYS
-- and #ARGV against the script's layout (its header): `nargs` values after the common
-- ARGV, then `per_arg` values and `per_key` keys per item (the items' keys follow the
-- common ones), and `tail` keys of the script's own after them; `exact`: the number of
-- items when the script takes a fixed number. Returns nil and the error reply when the
-- call does not match: the script returns it before writing anything.
local function layout(nargs, per_arg, per_key, tail, exact)
  local keys, args = #KEYS - NCOMMON - tail, #ARGV - NARGV - nargs
  local n = 0
  if per_key > 0 then
    n = keys / per_key
  elseif per_arg > 0 then
    n = args / per_arg
  end
  if keys < 0 or args < 0 or n ~= math.floor(n) or keys ~= n * per_key
      or args ~= n * per_arg or (exact ~= nil and n ~= exact) then
    return nil, redis.error_reply('rsjobs: invalid layout: ' .. #KEYS .. ' KEYS and ' .. #ARGV
      .. ' ARGV do not match the script\'s header')
  end
  return n, nil
end

-- The name of the task's priority level: its queue's for priority 0, "<queue>|p<N>" for
-- N > 0 (rsjobs/store/keys.py level_name); its queue key is "queue:<level name>".
local function level_of(t)
  local p = t.priority or 0
  if p > 0 then return t.queue .. '|p' .. p end
  return t.queue
end

-- Its member in the scheduled, deadlines, paused:tasks and polls zsets: its level and id
-- (a sweeper builds the task's keys from it).
local function member(t)
  return level_of(t) .. ':' .. t.id
end

-- Whether `qkey` is the stream of the level of a task of `queue` and priority `p`: the
-- key ends with ":queue:<level name>" (compared, not built: keys come through KEYS).
local function is_level_key(qkey, queue, p)
  local name = queue
  if p > 0 then name = queue .. '|p' .. p end
  local tail = ':queue:' .. name
  return type(qkey) == 'string' and string.sub(qkey, -#tail) == tail
end

-- A priority as stored (field pr, absent for 0): the number, or nil when it is not one.
local PRIORITY_TEXT = {['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6,
  ['7'] = 7, ['8'] = 8, ['9'] = 9}
local function priority_of(v)
  if v == nil or v == false or v == '' then return 0 end
  local p = PRIORITY_TEXT[v]
  if p ~= nil then return p end
  p = tonumber(v)
  if p == nil or p ~= math.floor(p) or p < 0 or p > MAX_PRIORITY then return nil end
  return p
end

-- The short names of the task hash's common fields (the README's glossary of task hash
-- fields; rsjobs/store/record.py declares the same): a task hash is a listpack of small
-- values, and its field names are most of its bytes. Scripts name fields by their long
-- names and map them with fld(); every field not listed keeps its long name.
local FIELD = {state = 's', type = 't', queue = 'q', payload = 'p', attempt = 'a',
  max_attempts = 'ma', failures = 'f', created_at = 'c', started_at = 'b', updated_at = 'u',
  lease = 'l', result = 'r', entry = 'e', traceparent = 'tp', tracestate = 'ts',
  external_id = 'x', provider = 'xp', wait_until = 'xu', poll_ms = 'xo', resolved = 'xd',
  after = 'af', after_policy = 'ap', predecessors = 'pd', successors = 'sc',
  release_delay_ms = 'rd', release_wait_ms = 'rw', priority = 'pr'}
local function fld(name)
  return FIELD[name] or name
end

-- A flat field, value array with its field names mapped by fld() (in place).
local function fields_of(f)
  for j = 1, #f, 2 do f[j] = fld(f[j]) end
  return f
end

-- Fields that mean nothing once a task is terminal, deleted when it gets there: its
-- delivery, its lease's expiry, its execution deadline, the consumer holding the lease
-- (the history's START entries name every consumer). The lease itself stays: a repeated
-- COMPLETE of its holder is answered from it.
-- Its start and last update are its history's START and last entry's times.
local TERMINAL_DROP = {'e', 'lease_expires_at', 'deadline_at', 'consumer', 'b', 'u'}

-- Who sends an event as a rule: a history entry of it from that source leaves its source
-- token empty (rsjobs/store/history.py reads it back the same way).
local USUAL_SOURCE = {ENQUEUE = 'api', START = 'worker', COMPLETE = 'worker', FAIL = 'worker',
  PROGRESS = 'worker', REQUEUE = 'worker', DEFER = 'worker'}

-- The state an event leads to when the table allows it only one (START: RUNNING...):
-- a history entry of such an event leaves its state token empty (derived from the table
-- in the same way by rsjobs/store/history.py). Found when first asked, per event: a call
-- looks up an event or two, and deriving the whole table at every call cost about half
-- of what running fsm.lua costs (a take.lua call looks up none).
local IMPLIED = {}
local function implied(event)
  local v = IMPLIED[event]
  if v == nil then
    v = false
    local mid = '|' .. event .. '|'  -- (a row "<from>|<event>|<to>" has two bars)
    for row in pairs(TRANSITIONS) do
      local at = string.find(row, mid, 1, true)
      if at ~= nil then
        local to = string.sub(row, at + #mid)
        if v == false then v = to elseif v ~= to then
          v = false
          break
        end
      end
    end
    IMPLIED[event] = v
  end
  return v
end

-- Complete the fields `f` of a history entry: msg, rej=1 for a refusal, then `extra` (a
-- flat field, value array, may be nil). The workflow history's entries (wf.lua).
local function with_note(f, msg, rejected, extra)
  if msg ~= nil and msg ~= '' then
    f[#f + 1] = 'msg'; f[#f + 1] = msg
  end
  if rejected then
    f[#f + 1] = 'rej'; f[#f + 1] = '1'
  end
  if extra ~= nil then
    for j = 1, #extra do f[#f + 1] = extra[j] end
  end
  return f
end

-- A token of a history entry: '%', ' ', '|', CR and LF percent-escaped (%XX), so that
-- the entry splits back into its tokens.
local function esc(v)
  return (string.gsub(tostring(v), '[%% |\r\n]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end

-- A task's history keeps at most HISTORY_HEAD + HISTORY_TAIL entries in its hash (the
-- ceiling of a task's stored size, whatever a client sends: README, "Task size"): its
-- first HISTORY_HEAD and its last HISTORY_TAIL. An entry that leaves the last ones
-- (entry hn - HISTORY_TAIL, once past the first) is elided: its field (and its refusal
-- repeat counters) deleted, and counted in the field `hx`, one line:
--   <entries elided> <state after the last> <its attempt> <its ms after c>|<EVENT>=<n>,...
-- (a refused one as <EVENT>!=<n>, its repeats included), so that every transition is still
-- accounted for (rsjobs/store/history.py reads it back as one ELIDED entry). Entry numbers
-- go on as before: the elided ones are the numbers HISTORY_HEAD + 1 .. hn - HISTORY_TAIL.
local HISTORY_HEAD, HISTORY_TAIL = 16, 96

-- Whether entry `j` of task `t` is elided.
local function elided(t, j)
  return j > HISTORY_HEAD and j <= (t.hn or 0) - HISTORY_TAIL
end

-- Elide entry `j` of task `t` (see HISTORY_HEAD): the caller's HSET `f` gets the new `hx`.
local function elide_entry(f, t, j)
  local got = redis.call('HMGET', t.key, 'h' .. j, 'rep:' .. j, 'hx')
  if not got[1] then return end  -- (gone already: nothing to count twice)
  redis.call('HDEL', t.key, 'h' .. j, 'rep:' .. j, 'rep_ts:' .. j)
  local head = string.match(got[1], '^([^|]*)') or ''
  local tok = {}
  for w in string.gmatch(head .. ' ', '([^ ]*) ') do tok[#tok + 1] = w end
  local ev, n = tok[1] or '?', 1
  for k = 6, #tok do
    if tok[k] == '!' then ev = ev .. '!'; n = 1 + (tonumber(got[2]) or 0) break end
  end
  local state = tok[2]
  if state == nil or state == '' then state = implied(tok[1] or '') or '' end
  local total, counts = 0, {}
  local order = {}
  if got[3] then
    local line, list = string.match(got[3], '^([^|]*)|?(.*)$')
    total = tonumber(string.match(line, '^(%d+)')) or 0
    for name, c in string.gmatch(list, '([^,=]+)=(%d+)') do
      counts[name] = tonumber(c); order[#order + 1] = name
    end
  end
  if counts[ev] == nil then order[#order + 1] = ev; counts[ev] = 0 end
  counts[ev] = counts[ev] + n
  local parts = {}
  for _, name in ipairs(order) do parts[#parts + 1] = name .. '=' .. counts[name] end
  f[#f + 1] = 'hx'
  f[#f + 1] = (total + 1) .. ' ' .. state .. ' ' .. (tok[4] or '0') .. ' ' .. (tok[5] or '0')
    .. '|' .. table.concat(parts, ',')
end

-- Add the next entry of the task's history to `f`, the hash fields the caller writes with
-- one HSET, and tell the events stream; returns the entry's id (its number, "1", "2"...).
-- Entry n is the hash field h<n>, and hn counts them. Its value is one line of text:
--   <EVENT> <state after> <source> <attempt> <ms after c>[ !][ <name>=<value>...][|<msg>]
-- ('!': a refusal; the state after is left empty when the event leads to one state only
-- (IMPLIED), the source when it is the event's usual one (USUAL_SOURCE); the tokens
-- escaped by esc(); the message is the rest of the line, as written). The state before an entry is the state after the one before it ('' for the
-- first): every change of state is an entry. The events stream gets the task id and the
-- entry's id (and wf for a workflow's task), for every entry after the first. `extra` is a flat array of more field, value pairs (may be nil); `att`
-- the attempt the entry names (nil = the task's current attempt).
local function append_entry(f, t, to, event, msg, rejected, extra, att)
  local shown, src = to, SOURCE
  if not rejected and implied(event) == to then shown = '' end
  if USUAL_SOURCE[event] == src then src = '' end
  local p = {esc(event), esc(shown), esc(src), att or t.attempt or 0, NOW - (t.created or NOW)}
  if rejected then p[#p + 1] = '!' end
  if extra ~= nil then
    for j = 1, #extra, 2 do p[#p + 1] = esc(extra[j]) .. '=' .. esc(extra[j + 1]) end
  end
  local v = table.concat(p, ' ')
  if msg ~= nil and msg ~= '' then v = v .. '|' .. msg end
  local n = (t.hn or 0) + 1
  t.hn = n
  f[#f + 1] = 'h' .. n; f[#f + 1] = v
  f[#f + 1] = 'hn'; f[#f + 1] = n
  -- (a plain comparison for every task but those past the ceiling)
  if n - HISTORY_TAIL > HISTORY_HEAD then elide_entry(f, t, n - HISTORY_TAIL) end
  local hid = tostring(n)
  if n > 1 then
    -- (a task's first entry is no event: no one can be watching a task that did not
    -- exist; whoever looks at it later reads that entry from the task)
    -- (wf: the workflow of a workflow's task (see load), so that the web app's hub wakes
    -- that workflow's event streams when one of its tasks moves)
    if (t.wf or '') == '' then
      redis.call('XADD', EVENTS_KEY, 'MAXLEN', '~', EVENTS_MAX, '*', 'id', t.id, 'hid', hid)
    else
      redis.call('XADD', EVENTS_KEY, 'MAXLEN', '~', EVENTS_MAX, '*', 'id', t.id, 'hid', hid,
        'wf', t.wf)
    end
  end
  return hid
end

-- Append one entry to the task's history (and tell the events stream); returns its id.
-- `from` is the task's state (kept for the callers' sake: the history derives it).
local function record(t, from, to, event, msg, rejected, extra, att)
  local f = {}
  local hid = append_entry(f, t, to, event, msg, rejected, extra, att)
  redis.call('HSET', t.key, unpack(f))
  return hid
end

-- The attempt a lease token "<attempt>:<nonce>" names; 0 when it names none (at most 9
-- digits: the number is written back into history entries, which readers parse as ints).
local function lease_attempt(lease)
  local n = string.match(lease or '', '^(%d+):')
  if n == nil or #n > 9 then return 0 end
  return tonumber(n)
end

-- The history id recorded for refusal key `k` in `list` ("<key>=<history id>,..."), or nil.
local function refusal_entry(list, k)
  if not list or list == '' then return nil end
  local s = ',' .. list .. ','
  local _, j = string.find(s, ',' .. k .. '=', 1, true)
  if j == nil then return nil end
  return string.sub(s, j + 1, string.find(s, ',', j + 1, true) - 1)
end

-- Record a refused event: the state does not change; history says why. `att` is the
-- attempt the refused call names (the one its lease token names; nil = the current one).
-- Coalesced, so that no sender can grow a task's history or hash without bound: the first
-- refusal of an event (for one attempt) while the task stays in one state is a history
-- entry; each later one appends nothing and is counted on the task hash, `rep:<hid>` (how
-- many more) and `rep_ts:<hid>` (Redis TIME of the last), next to that entry's id. The
-- hash field `refusals` lists the entries of the current state ("<EVENT>:<attempt>=<hid>,
-- ..."); the next transition clears it. A history thus holds at most one refusal per
-- event and attempt for each state the task passes through. The `rej:<EVENT>` counter
-- counts every refusal. Returns the history id of the entry that accounts for it.
local function reject(t, event, reason, att)
  count('rej:' .. event, 1)
  att = att or t.attempt or 0
  local k = event .. ':' .. att
  if att < 0 or att > (t.attempt or 0) then k = event .. ':?' end  -- names no attempt
  local list = t.refusals
  if list == nil then list = redis.call('HGET', t.key, 'refusals') end
  local hid = refusal_entry(list, k)
  if hid ~= nil and elided(t, tonumber(hid) or 0) then
    -- its entry was elided (and counted): this refusal is a new entry, in the list instead
    local s = ',' .. list .. ','
    list = string.sub(string.gsub(s, ',' .. k:gsub('%p', '%%%0') .. '=' .. hid .. ',', ',', 1), 2, -2)
    hid = nil
  end
  if hid ~= nil then
    redis.call('HINCRBY', t.key, 'rep:' .. hid, 1)
    redis.call('HSET', t.key, 'rep_ts:' .. hid, NOW)
    return hid
  end
  local f = {}
  hid = append_entry(f, t, t.state, event, reason, true, nil, att)
  local v = k .. '=' .. hid
  if list and list ~= '' then v = list .. ',' .. v end
  f[#f + 1] = 'refusals'; f[#f + 1] = v
  redis.call('HSET', t.key, unpack(f))
  t.refusals = v
  return hid
end

-- Keep a finished task (its hash, which holds its history, and its dedup key) for the
-- retention period only.
local function retain(t)
  if RETENTION_MS > 0 then
    redis.call('PEXPIRE', t.key, RETENTION_MS)
    if t.dedup and t.dedup ~= '' then
      redis.call('PEXPIRE', t.dkey, RETENTION_MS)
    end
  end
end

-- Apply a transition the table allows: state field, counters, history, events, retention.
-- `fields` is a flat array of extra hash fields to set in the same HSET.
-- The upper bounds (ms) of the task duration histogram's buckets (DURATION_BUCKETS in
-- rsjobs/web/metrics.py, which reads them back): a task reaching a terminal state after a
-- START counts one in "dur:<queue>:<STATE>:<le>" (the first bound at or above its START to
-- end time, "inf" past the last) and adds its time to "dur_ms:<queue>:<STATE>". Counted
-- here, in the stats hash, so that the metric is exact and the same for every reader.
local DURATION_LE_MS = {100, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000,
  600000, 1800000, 3600000}

local function observe_duration(t, to)
  local ms = math.max(0, NOW - t.started)
  local le = 'inf'
  for j = 1, #DURATION_LE_MS do
    if ms <= DURATION_LE_MS[j] then le = DURATION_LE_MS[j]; break end
  end
  count('dur:' .. t.queue .. ':' .. to .. ':' .. le, 1)
  count('dur_ms:' .. t.queue .. ':' .. to, ms)
end

-- Cost accounting (KEYS[15]; docs/costs.md; rsjobs/costs.py reads it and derives the same
-- figures per task from its history). Each attempt is accounted once, by the transition
-- that ends it: the one that takes its task out of RUNNING, or out of DEFERRED for an
-- attempt a handler handed to an outside service (DEFER ends only the worker's part: it
-- is accounted with the rest at the end of the wait). An attempt adds, for each dimension
-- of its task (queue, type, owner when it has one, stage for a workflow's task), under the
-- category its end gives (COST_CATEGORY), to the fields "<dim>|<name>|<unit>|<category>":
--   attempts  1
--   run_ms    its worker's time: START to its end (to its DEFER for a deferred attempt),
--             both Redis TIME
--   wait_ms   a deferred attempt's wait: DEFER to its end (no worker holds it meanwhile)
--   <unit>    the charges sent with its end (finish.lua, wf_finish.lua; resolve.lua for an
--             outside result) and with its DEFER, in millionths of the unit (integers: the
--             sums are exact in any order)
-- The charges are also kept on the history entry that carries them (token ch=<text>), so
-- that a task's costs are read back from its history alone: the task hash keeps nothing
-- else for this (a DEFERRED task keeps xh, the number of its DEFER entry, while it waits).
-- The stats hash (KEYS[2]) gets the attempt's time, START to its end (its wait included),
-- in the histogram "adur:<dim>|<name>|<le>" (bounds: DURATION_LE_MS) and "adur_ms:<dim>|
-- <name>", and "retry:<dim>|<name>" when its end retries the task (FAIL, TIMEOUT or
-- RECLAIM to SCHEDULED or PENDING), for the dimensions queue, type and stage (bounded by
-- the names a deployment uses; owners are not: they are in the costs hash only).
-- A regenerate's superseded tasks (wf_regenerate.lua) move the amounts of their succeeded
-- attempt from the category ok to superseded (see supersede).

-- The category of the attempt each event ends (the waste kinds are all but ok).
local COST_CATEGORY = {COMPLETE = 'ok', FAIL = 'failed', TIMEOUT = 'timed_out',
  RECLAIM = 'reclaimed', REQUEUE = 'reclaimed', DEADLETTER = 'failed', CANCEL = 'cancelled',
  PAUSE = 'cancelled'}

-- Charges: '' or "<unit>:<amount>[,<unit>:<amount>...]", each unit once, at most
-- CHARGES_MAX of them; a unit is a lowercase letter then up to 15 of a-z, 0-9, '_', not one
-- of the built-in units; an amount is a decimal >= 0 with at most 9 digits before its point
-- and 6 after (rsjobs/costs.py formats them so). Returns {unit = millionths}, or nil and
-- what is wrong: scripts check charges before their first write.
local CHARGES_MAX, CHARGES_TEXT_MAX = 8, 300
local BUILTIN_UNITS = {attempts = true, run_ms = true, wait_ms = true}
local function parse_charges(text)
  local out = {}
  if text == nil or text == '' then return out, nil end
  if type(text) ~= 'string' or #text > CHARGES_TEXT_MAX then return nil, 'charges too long' end
  local n = 0
  for item in string.gmatch(text .. ',', '([^,]*),') do
    local unit, int, frac = string.match(item, '^([a-z][a-z0-9_]*):(%d+)%.?(%d*)$')
    if unit == nil or #unit > 16 or BUILTIN_UNITS[unit] or #int > 9 or #frac > 6
        or out[unit] ~= nil then
      return nil, 'charge ' .. string.sub(item, 1, 40)
    end
    out[unit] = tonumber(int) * 1000000 + tonumber(frac .. string.rep('0', 6 - #frac))
    n = n + 1
    if n > CHARGES_MAX then return nil, 'more than ' .. CHARGES_MAX .. ' charge units' end
  end
  return out, nil
end

-- The tokens of a history entry's text before its message (see append_entry): event, state
-- after, source, attempt, ms after c, then '!' and the name=value tokens.
local function entry_tokens(v)
  local head = string.match(v or '', '^([^|]*)') or ''
  local out = {}
  for tok in string.gmatch(head .. ' ', '([^ ]*) ') do out[#out + 1] = tok end
  return out
end

-- Of the tokens of an entry: whether it is a refusal, and its charges text ('' = none).
local function entry_charges(tok)
  local refused, ch = false, ''
  for k = 6, #tok do
    if tok[k] == '!' then
      refused = true
    elseif string.sub(tok[k], 1, 3) == 'ch=' then
      ch = string.sub(tok[k], 4)
    end
  end
  return refused, ch
end

-- Add the charges text `ch` to the amounts `into` ({unit = millionths}).
local function add_charges(into, ch)
  for unit, v in pairs(parse_charges(ch) or {}) do into[unit] = (into[unit] or 0) + v end
end

-- The dimensions of task `t` (loaded) but its owner: "<dim>|<name>" for its queue, type
-- and stage.
local function shared_dims(t)
  local d = {'queue|' .. t.queue}
  if (t.type or '') ~= '' then d[#d + 1] = 'type|' .. t.type end
  if (t.sname or '') ~= '' then d[#d + 1] = 'stage|' .. t.sname end
  return d
end

-- All the dimensions of task `t`: shared_dims, and "owner|<owner>" when it has one.
local function cost_dims(t)
  local d = shared_dims(t)
  if (t.owner or '') ~= '' then d[#d + 1] = 'owner|' .. t.owner end
  return d
end

-- The DEFER of the attempt of DEFERRED task `t`: its time (ms, Redis TIME) and charges,
-- from the history entry xh names (nil, '' when it names none that reads).
local function defer_part(t)
  local hid = redis.call('HGET', t.key, 'xh')
  if not hid then return nil, '' end
  local tok = entry_tokens(redis.call('HGET', t.key, 'h' .. hid))
  local ms = tonumber(tok[5])
  if tok[1] ~= 'DEFER' or ms == nil then return nil, '' end
  local _, ch = entry_charges(tok)
  return (t.created or 0) + ms, ch
end

local RETRY_EVENTS = {FAIL = true, TIMEOUT = true, RECLAIM = true}

-- The field names account_attempt adds to, built once per call for each kind of attempt
-- (a batch of like attempts builds them once), in two parts: those of the task's queue,
-- type and stage (by category and duration bucket), and those of its owner (by category;
-- nil for a task without one), so that the tasks of many owners share the first.
-- costs: per dimension, its attempts, run_ms and wait_ms fields (3 each); stats: per
-- dimension but the owner, its adur, adur_ms and retry fields (3 each); units[unit]: the
-- costs fields of a charge unit, per dimension.
local ACCOUNT_FIELDS = {}  -- queue -> type -> stage -> category -> bucket -> fields
local OWNER_FIELDS = {}  -- owner -> category -> fields
local function dim_fields(dims, cat, le)
  local c, st = {}, {}
  for _, d in ipairs(dims) do
    c[#c + 1] = d .. '|attempts|' .. cat
    c[#c + 1] = d .. '|run_ms|' .. cat
    c[#c + 1] = d .. '|wait_ms|' .. cat
    if le ~= nil then
      st[#st + 1] = 'adur:' .. d .. '|' .. le
      st[#st + 1] = 'adur_ms:' .. d
      st[#st + 1] = 'retry:' .. d
    end
  end
  return {costs = c, stats = st, units = {}, dims = dims, cat = cat}
end
local function attempt_fields(t, cat, le)
  local ty, stage = t.type or '', t.sname or ''
  local byle = sub_table(sub_table(sub_table(sub_table(ACCOUNT_FIELDS, t.queue), ty), stage), cat)
  local f = byle[le]
  if f == nil then
    f = dim_fields(shared_dims(t), cat, le)
    byle[le] = f
  end
  local owner = t.owner or ''
  if owner == '' then return f, nil end
  local bycat = sub_table(OWNER_FIELDS, owner)
  local o = bycat[cat]
  if o == nil then
    o = dim_fields({'owner|' .. owner}, cat, nil)
    bycat[cat] = o
  end
  return f, o
end

-- The costs fields of charge unit `unit` for the attempts of fields `f`.
local function unit_fields(f, unit)
  local u = f.units[unit]
  if u == nil then
    u = {}
    for j, d in ipairs(f.dims) do u[j] = d .. '|' .. unit .. '|' .. f.cat end
    f.units[unit] = u
  end
  return u
end

-- Add an attempt's run and wait times (ms; wait nil when it was not deferred) and its
-- charges `amounts` ({unit = millionths} or nil) to the costs fields `f`.
local function add_costs(f, run, wait, amounts)
  local c = f.costs
  for j = 1, #c, 3 do
    cost(c[j], 1)
    cost(c[j + 1], run)
    if wait ~= nil then cost(c[j + 2], wait) end
  end
  if amounts ~= nil then
    for unit, v in pairs(amounts) do
      local u = unit_fields(f, unit)
      for j = 1, #u do cost(u[j], v) end
    end
  end
end

-- Account for the attempt `event` ends as it takes `t` from `from` (RUNNING or DEFERRED)
-- to `to`, with the charges t.charges (a text parse_charges accepted, or nil; t.amounts:
-- what it parsed to, when the caller kept it); returns the history fields `extra` of its
-- entry with the charges token added. DEFER adds the token only: its attempt is accounted
-- when the wait ends.
local function account_attempt(t, event, from, to, extra)
  local charges = t.charges or ''
  if charges ~= '' then
    local e = {}
    for j = 1, #(extra or {}) do e[j] = extra[j] end
    e[#e + 1] = 'ch'; e[#e + 1] = charges
    extra = e
  end
  if event == 'DEFER' then return extra end
  local amounts = nil
  if charges ~= '' then
    amounts = {}
    for unit, v in pairs(t.amounts or parse_charges(charges) or {}) do amounts[unit] = v end
  end
  local started = t.started or NOW
  local run, wait = math.max(0, NOW - started), nil
  if from == 'DEFERRED' then
    local at, ch = defer_part(t)
    wait = 0
    if at ~= nil then
      run, wait = math.max(0, at - started), math.max(0, NOW - at)
    end
    if ch ~= '' then
      amounts = amounts or {}
      add_charges(amounts, ch)
    end
    redis.call('HDEL', t.key, 'xh')
  end
  local ms = run + (wait or 0)
  local le = 'inf'
  for j = 1, #DURATION_LE_MS do
    if ms <= DURATION_LE_MS[j] then le = DURATION_LE_MS[j]; break end
  end
  local f, o = attempt_fields(t, COST_CATEGORY[event] or 'failed', le)
  add_costs(f, run, wait, amounts)
  if o ~= nil then add_costs(o, run, wait, amounts) end
  local st = f.stats
  local retried = RETRY_EVENTS[event] and (to == 'SCHEDULED' or to == 'PENDING')
  for j = 1, #st, 3 do
    count(st[j], 1)
    count(st[j + 1], ms)
    if retried then count(st[j + 2], 1) end
  end
  return extra
end

-- The amounts of the attempt that ended SUCCEEDED task `t` (loaded) with COMPLETE, read
-- back from its history as account_attempt counted them: run_ms, wait_ms (nil when it was
-- not deferred) and charges {unit = millionths}; nil when its history has no COMPLETE.
local function ok_attempt(t)
  local att, done_at, defer_at, start_at = nil, nil, nil, nil
  local amounts = {}
  for j = (t.hn or 0), 1, -1 do
    local tok = entry_tokens(redis.call('HGET', t.key, 'h' .. j))
    local ms = tonumber(tok[5])
    local refused, ch = entry_charges(tok)
    if not refused and ms ~= nil then
      if att == nil then
        if tok[1] == 'COMPLETE' then att, done_at = tok[4], ms; add_charges(amounts, ch) end
      elseif tok[4] == att then
        if tok[1] == 'DEFER' then
          defer_at = ms; add_charges(amounts, ch)
        elseif tok[1] == 'START' then
          start_at = ms; break
        end
      end
    end
  end
  if att == nil then return nil end
  start_at = start_at or done_at
  if defer_at ~= nil then
    return math.max(0, defer_at - start_at), math.max(0, done_at - defer_at), amounts
  end
  return math.max(0, done_at - start_at), nil, amounts
end

-- SUPERSEDED: a regenerate replaced the work of SUCCEEDED task `t` (loaded): the amounts of
-- its succeeded attempt move from ok to superseded in the costs hash. The caller makes it
-- once per task (wf_regenerate.lua: the tasks of the slots it leaves behind). Returns
-- whether there was such an attempt.
local function supersede(t)
  local run, wait, amounts = ok_attempt(t)
  if run == nil then return false end
  for _, d in ipairs(cost_dims(t)) do
    local function move(unit, v)
      cost(d .. '|' .. unit .. '|ok', -v)
      cost(d .. '|' .. unit .. '|superseded', v)
    end
    move('attempts', 1)
    move('run_ms', run)
    if wait ~= nil then move('wait_ms', wait) end
    for unit, v in pairs(amounts) do move(unit, v) end
  end
  return true
end

-- The list indexes (KEYS[5..11]; rsjobs/store/index.py reads them, the reaper's trim.lua
-- trims them). What Redis holds already is not kept again: PENDING and RUNNING tasks are
-- their queue stream's entries (RUNNING: those delivered), SCHEDULED ones the scheduled
-- zset's members. Kept here:
--   done:<STATE>  a stream per terminal state: an entry "<queue> <id>" (field: the queue)
--                 when a task reaches it, trimmed by time (MINID ~ now - retention: an
--                 entry is older than its task's hash only by the approximation)
--   paused        zset "<queue>:<id>" by the time it was paused
--   tags          for a task with an owner or labels only: one member per owner and label,
--                 "<tag>|<created ms, 13 digits>|<id>", score 0, read in text order (tag:
--                 "o<n>:<owner>" or "l<n>:<key>=<value>", n the byte length after the
--                 ':', so that no tag is the prefix of another); written at ENQUEUE
--   tags:trim     an entry per call that finished tasks with tags, with for each such
--                 task in turn: id, c (created), o (owner), l (labels) (o and l when it
--                 has them; an entry of an older release holds one task); the reaper
--                 removes their tags members once the entry is past retention
-- Readers check each entry against the task's hash: one whose task has left that state
-- or expired is skipped. Lists thus cost bytes only for finished, paused and tagged tasks.

-- The tags of a task with owner `owner` and decoded labels `labels` (may be nil).
local function tags_of(owner, labels)
  local out = {}
  if owner ~= nil and owner ~= '' then out[1] = 'o' .. #owner .. ':' .. owner end
  for k, v in pairs(labels or {}) do
    local kv = k .. '=' .. v
    out[#out + 1] = 'l' .. #kv .. ':' .. kv
  end
  return out
end

-- The tags members of task `id` created at `created` (ms) with the tags `tags`.
local function tag_members(tags, created, id)
  local at = string.format('%013d', created)
  local out = {}
  for j = 1, #tags do out[j] = tags[j] .. '|' .. at .. '|' .. id end
  return out
end

-- Keep the list indexes of `t` as it moves from state `from` to `to` (from ~= to).
local function index_move(t, from, to)
  local owner, labels = t.owner or '', t.labels or ''
  if from == '' and (owner ~= '' or labels ~= '') then
    local z = {}
    for _, m in ipairs(tag_members(tags_of(owner, t.label_table), t.created, t.id)) do
      z[#z + 1] = 0; z[#z + 1] = m
    end
    redis.call('ZADD', TAGS_KEY, unpack(z))
  end
  if from == 'PAUSED' then redis.call('ZREM', PAUSED_TASKS_KEY, member(t)) end
  if to == 'PAUSED' then redis.call('ZADD', PAUSED_TASKS_KEY, NOW, member(t)) end
  local done = DONE_KEYS[to]
  if done == nil then return end
  if RETENTION_MS > 0 then
    redis.call('XADD', done, 'MINID', '~', math.max(0, NOW - RETENTION_MS), '*', t.queue, t.id)
  else
    redis.call('XADD', done, '*', t.queue, t.id)
  end
  if owner ~= '' or labels ~= '' then
    local f = TRIMS[#TRIMS]
    if f == nil or #f >= TRIM_FIELDS_MAX then
      f = {}
      TRIMS[#TRIMS + 1] = f
    end
    f[#f + 1] = 'id'; f[#f + 1] = t.id; f[#f + 1] = 'c'; f[#f + 1] = t.created or 0
    if owner ~= '' then f[#f + 1] = 'o'; f[#f + 1] = owner end
    if labels ~= '' then f[#f + 1] = 'l'; f[#f + 1] = labels end
  end
end

-- The states some hook or webhook listens for (HOOKS_ON_KEY's values, comma-separated
-- lists or "*"), read once per call at its first change of state; false = none, so that
-- a namespace without hooks pays one HVALS of an empty hash per call and writes nothing.
local HOOK_STATES = nil
local function hook_states()
  if HOOK_STATES == nil then
    HOOK_STATES = false
    for _, v in ipairs(redis.call('HVALS', HOOKS_ON_KEY)) do
      for s in string.gmatch(v, '[^,]+') do
        if HOOK_STATES == false then HOOK_STATES = {} end
        HOOK_STATES[s] = true
      end
    end
  end
  return HOOK_STATES
end

-- Tell the hook stream that `t` reached `to` by `event` (history entry `hid`), when some
-- listener wants that state. The stream is not trimmed: `rsjobs hooks` deletes an entry
-- once every listener has run on it or holds a retry of it (rsjobs/hooks), so that no
-- delivery is lost to trimming; hooks run there, outside this transition.
local function note_hook(t, event, to, hid)
  local on = hook_states()
  if on == false or not (on[to] or on['*']) then return end
  redis.call('XADD', HOOKS_KEY, '*', 'id', t.id, 'q', t.queue, 's', to, 'e', event, 'hid', hid)
end

-- The longest prefix of `s` of at most `n` bytes that ends on a character boundary
-- (UTF-8: a cut never splits a character, which readers could not decode).
local function utf8_prefix(s, n)
  if #s <= n then return s end
  local j = n + 1
  -- back off over continuation bytes (10xxxxxx): the byte at j starts a character
  while j > 1 and string.byte(s, j) >= 128 and string.byte(s, j) < 192 do j = j - 1 end
  return string.sub(s, 1, j - 1)
end

-- Successors (after.lua, successors.lua; docs/successors.md). A predecessor's hash holds
-- sc (successors): the ids of the tasks waiting on it, "<id>,<id>..." (only a task that
-- has successors: others store nothing). Its first terminal transition appends an entry
-- to the release stream (KEYS[14]) in the same call: everything its successors need,
-- should its hash expire before they are released (retention). RELEASES counts the
-- entries this call wrote (scripts answer it, so that their caller runs the release step).
local RELEASES = 0
-- the longest error text a release entry carries (its successors' cancel reason)
local RELEASE_ERR_MAX = 200

-- A script's reply `reply` with a 1 appended when this call wrote a release entry (a
-- caller that reads it runs the release step; replies without one stay as they were).
local function with_released(reply)
  if RELEASES > 0 then reply[#reply + 1] = 1 end
  return reply
end

local function note_release(t, to)
  local v = redis.call('HMGET', t.key, fld('result'), 'error')
  local f = {'id', t.id, 'q', t.queue, 's', to, 'sc', t.succ}
  if to == 'SUCCEEDED' then
    if v[1] then f[#f + 1] = 'r'; f[#f + 1] = v[1] end
  elseif v[2] then
    f[#f + 1] = 'err'; f[#f + 1] = utf8_prefix(v[2], RELEASE_ERR_MAX)
  end
  redis.call('XADD', RELEASE_KEY, '*', unpack(f))
  RELEASES = RELEASES + 1
end

-- The per-owner RUNNING counts (KEYS[16], field "<queue>|<owner>"): a task with an owner
-- counts one from its entry into RUNNING (START) to its exit from it (COMPLETE, FAIL,
-- TIMEOUT, RECLAIM, REQUEUE, PAUSE, CANCEL, DEADLETTER, DEFER), kept here for every
-- transition, so that start.lua can hold an owner to its limit. Written by finish_call().
local function running_field(t)
  local f = t.rf
  if f == nil then
    f = t.queue .. '|' .. t.owner
    t.rf = f
  end
  return f
end

local function count_running(t, n)
  local f = running_field(t)
  RUNS[f] = (RUNS[f] or 0) + n
end

-- The owner's RUNNING tasks in the task's queue now (this call's changes included).
local RUN_BASE = {}  -- field -> its count as the call found it (written at its end only)
local function running_now(t)
  local f = running_field(t)
  local n = RUN_BASE[f]
  if n == nil then
    n = tonumber(redis.call('HGET', RUNNING_KEY, f)) or 0
    RUN_BASE[f] = n
  end
  return n + (RUNS[f] or 0)
end

local function transition(t, event, to, msg, fields, extra)
  if not allowed(t.state, event, to) then
    error('rsjobs: illegal transition ' .. t.state .. ' -' .. event .. '-> ' .. to)
  end
  local from = t.state
  -- (a terminal task's time of finishing is its last update, u)
  local f = {'s', to}
  if not TERMINAL[to] then f[3] = 'u'; f[4] = NOW end
  if fields ~= nil then
    for j = 1, #fields, 2 do
      f[#f + 1] = fld(fields[j]); f[#f + 1] = fields[j + 1]
    end
  end
  -- the end of an attempt, or of its worker's part (DEFER): its costs
  if from ~= to and (from == 'RUNNING' or from == 'DEFERRED') then
    extra = account_attempt(t, event, from, to, extra)
  end
  local hid = append_entry(f, t, to, event, msg, false, extra)
  if event == 'DEFER' then f[#f + 1] = 'xh'; f[#f + 1] = hid end
  if TERMINAL[to] then
    redis.call('HDEL', t.key, unpack(TERMINAL_DROP))
  end
  redis.call('HSET', t.key, unpack(f))
  if t.refusals then
    -- a new state: refusals in it are new history entries (the counts of the old stay)
    redis.call('HDEL', t.key, 'refusals')
    t.refusals = false
  end
  if from ~= to then
    if (t.owner or '') ~= '' then
      if to == 'RUNNING' then count_running(t, 1) elseif from == 'RUNNING' then count_running(t, -1) end
    end
    if from ~= '' then count(t.queue .. ':' .. from, -1) end
    count(t.queue .. ':' .. to, 1)
    index_move(t, from, to)
    note_hook(t, event, to, hid)
    -- (a terminal state is never left: this is the task's first and only end)
    if TERMINAL[to] and (t.succ or '') ~= '' then note_release(t, to) end
  end
  count('ev:' .. event, 1)
  -- per queue, for its per-minute series (scripts/series.lua): the other series counters
  -- are its state counts
  if event == 'START' then count('started:' .. t.queue, 1) end
  t.state = to
  if TERMINAL[to] then
    -- (t.started: the START time of its last attempt, when it had one)
    if t.started then observe_duration(t, to) end
    retain(t)
  end
  return hid
end

-- Tasks check_levels loaded for the loop that follows it: call index -> {names, task}.
local LOADED = {}

-- Read the i-th task of this call: keys plus the named hash fields (t.f[name]).
-- Returns nil when the task hash does not exist; nil and an error text when its queue key
-- is not the stream of its level. A hash without its id or queue (written by something
-- else than these scripts), or of layout 1, raises here, before anything is written for
-- the task: every helper below needs both, and would fail half-way through its writes.
-- (Only a new task's table is built by hand; it has no `refusals` yet.)
local function read_task(i, names)
  local key, qkey, dkey = task_keys(i)
  -- (wf, the workflow of a workflow's task, is read here for append_entry's events entry:
  -- one HMGET per task and call, not a read per entry; owner and labels for index_move)
  -- (sc: a predecessor's successors, for note_release: empty for every other task;
  -- t and wf_stage_name: the task's type and stage, for account_attempt; pr: its level)
  local q = {'s', 'id', 'q', 'a', 'dedup', 'refusals', 'c', 'hn', 'b', 'wf', 'owner', 'labels',
    'sc', 't', 'wf_stage_name', 'pr'}
  local base = #q
  for j = 1, #names do q[#q + 1] = fld(names[j]) end
  local v = redis.call('HMGET', key, unpack(q))
  if not v[1] then
    -- a hash an earlier rsjobs wrote (layout 1: `state`, not `s`) is no missing task:
    -- refused, so that no script drops its work entry as a gone task's; `rsjobs migrate`
    -- converts it (one more command, for a missing task only)
    if redis.call('HEXISTS', key, 'state') == 1 then
      error('rsjobs: task hash ' .. key .. ' is of layout 1 (an earlier rsjobs): run rsjobs '
        .. 'migrate', 0)
    end
    return nil
  end
  if not v[2] or not v[3] then
    error('rsjobs: corrupt task hash ' .. key .. ': no id or queue field', 0)
  end
  local priority = priority_of(v[16])
  if priority == nil then
    error('rsjobs: corrupt task hash ' .. key .. ': priority ' .. tostring(v[16]), 0)
  end
  -- (a task read only, keys {key, '', ''}: a predecessor after.lua reads, no queue key)
  local read_only = type(i) == 'table' and qkey == ''
  if not read_only and not is_level_key(qkey, v[3], priority) then
    return nil, 'rsjobs: queue key ' .. tostring(qkey) .. ' is not the stream of task ' .. key
      .. ' (queue ' .. v[3] .. ', priority ' .. priority .. ')'
  end
  local t = {key = key, qkey = qkey, dkey = dkey, state = v[1], id = v[2],
    queue = v[3], attempt = tonumber(v[4]) or 0, dedup = v[5], refusals = v[6],
    created = tonumber(v[7]), hn = tonumber(v[8]) or 0, started = tonumber(v[9]),
    wf = v[10] or '', owner = v[11] or '', labels = v[12] or '', succ = v[13] or '',
    type = v[14] or '', sname = v[15] or '', priority = priority, f = {}}
  for j = 1, #names do t.f[names[j]] = v[base + j] end
  return t
end

-- Load the i-th task of this call (see read_task): a table, or nil when it is missing.
-- Raises also when its queue key is not the stream of its level. A task check_levels read
-- with the same `names` table is not read again.
local function load(i, names)
  local c = LOADED[i]
  if c ~= nil then
    LOADED[i] = nil
    if c[1] == names then return c[2] or nil end
  end
  local t, err = read_task(i, names)
  if err then error(err, 0) end
  return t
end

-- Check the queue key of each of the first `n` tasks of this call against its hash (its
-- queue and priority: see level_of), before the first write of a batch: load() raises
-- on a wrong one, which half way through a batch would come after writes. Returns nil,
-- or the error reply (nothing written). `queue` (may be nil): the queue every task must
-- be of. With `names` (the fields the loop after it loads, the same table), it loads the
-- tasks (a corrupt hash raises here) and load() hands them out; without, a missing task,
-- or a hash load() refuses for another reason, is left to load().
local function check_levels(n, queue, names)
  if names ~= nil then
    -- (the loop after it loads each task anyway: load them here, once; a task named
    -- twice in the call is read again when its turn comes, after what came before it)
    local seen = {}
    for i = 1, n do
      local t, err = read_task(i, names)
      if err then return redis.error_reply(err) end
      if t and queue ~= nil and t.queue ~= queue then
        return redis.error_reply('rsjobs: task ' .. t.key .. ' is of queue ' .. t.queue
          .. ', not ' .. queue)
      end
      local key = task_keys(i)
      if not seen[key] then
        seen[key] = true
        LOADED[i] = {names, t or false}
      end
    end
    return nil
  end
  for i = 1, n do
    local b = NCOMMON + (i - 1) * 3
    local key, qkey = KEYS[b + 1], KEYS[b + 2]
    local v = redis.call('HMGET', key, 'q', 'pr')
    if v[1] and queue ~= nil and v[1] ~= queue then
      return redis.error_reply('rsjobs: task ' .. key .. ' is of queue ' .. v[1] .. ', not ' .. queue)
    end
    if v[1] then
      local p = priority_of(v[2])
      if p == nil or not is_level_key(qkey, v[1], p) then
        return redis.error_reply('rsjobs: queue key ' .. tostring(qkey) .. ' is not the stream of '
          .. 'task ' .. key .. ' (queue ' .. v[1] .. ', priority ' .. tostring(v[2] or 0) .. ')')
      end
    end
  end
  return nil
end

-- Remove a delivered or undelivered work entry from the queue stream and its PEL, when
-- the call ends (batched per stream by finish_call). No script reads an entry's PEL or
-- stream record after dropping it in the same call.
local function drop_entry(qkey, entry)
  if entry ~= nil and entry ~= false and entry ~= '' then
    local entries = DROPS[qkey]
    if entries == nil then
      entries = {}
      DROPS[qkey] = entries
    end
    entries[#entries + 1] = entry
  end
end

-- Put the task on its queue stream (its level's) as a new entry; returns the entry id.
-- A task with an owner has it on its entry too (o), so that scripts/take.lua can hold an
-- owner to its limit before it delivers the entry.
local function push_entry(t)
  if (t.owner or '') ~= '' then
    return redis.call('XADD', t.qkey, '*', 'id', t.id, 'o', t.owner)
  end
  return redis.call('XADD', t.qkey, '*', 'id', t.id)
end

-- The backoff of a task whose hash has no backoff fields (what a client submits by default).
local BACKOFF_BASE_MS, BACKOFF_MAX_MS = 1000, 300000
-- The attempts of a task whose hash has no max_attempts field (the client's default).
local MAX_ATTEMPTS = 3

-- The options of a new task: one JSON object per task, packed by the store
-- (rsjobs/store/layout.py, task_options). A name left out is 0 (counts) or '' (texts).
local TASK_OPTIONS = {max_attempts = 'count', timeout_ms = 'count', delay_ms = 'count',
  wait_timeout_ms = 'count', backoff_base_ms = 'count', backoff_max_ms = 'count',
  dedup = 'text', owner = 'text', labels = 'labels', traceparent = 'trace',
  tracestate = 'trace', after_policy = 'policy', priority = 'priority'}
-- What a successor waits for (after_policy; after.lua): 'succeeded' (the default) releases
-- it once every predecessor SUCCEEDED and cancels it when one does not; 'always' releases
-- it once every predecessor is finished, however it ended.
local AFTER_POLICIES = {succeeded = true, always = true}
-- The longest trace context text a task keeps (rsjobs/tracing.py stores at most 512).
local TRACE_MAX = 600

-- A task's labels, as its hash field `labels` holds them (the JSON text rsjobs/labels.py
-- writes, keys sorted): the table, or nil when the text is not what rsjobs writes. The
-- rules are rsjobs/labels.py's, checked again here before the first write: at most
-- LABELS_MAX "key": "value" texts, a key of 1-32 letters, digits, '_', '.', '/', '-', a
-- value of 1-256 bytes (64 characters) without control characters.
local LABELS_MAX = 8
local function decode_labels(raw)
  local ok, l = pcall(cjson.decode, raw)
  if not ok or type(l) ~= 'table' then return nil end
  local n = 0
  for k, v in pairs(l) do
    n = n + 1
    if type(k) ~= 'string' or #k > 32 or not string.match(k, '^[%w_%./%-]+$')
        or type(v) ~= 'string' or #v < 1 or #v > 256 or string.find(v, '%c') then
      return nil
    end
  end
  if n == 0 or n > LABELS_MAX then return nil end
  return l
end

-- Decode and check the options of a new task: the table, or nil and what is wrong.
-- Counts are integers >= 0 below 10^15 (exact in Lua, and stored as readers parse them);
-- max_attempts is at least 1; labels are a JSON text decode_labels accepts (o.labels
-- keeps the text, o.label_table the decoded table).
local function task_options(raw)
  local ok, o = pcall(cjson.decode, raw or '')
  if not ok or type(o) ~= 'table' then return nil, 'options (not a JSON object)' end
  local labels = nil
  for name, v in pairs(o) do
    local kind = TASK_OPTIONS[name]
    if kind == 'count' then
      if type(v) ~= 'number' or v < 0 or v >= 1e15 or v ~= math.floor(v) then
        return nil, 'option ' .. name .. ' (an integer >= 0)'
      end
    elseif kind == 'labels' then
      labels = type(v) == 'string' and decode_labels(v)
      if not labels then return nil, 'option labels (see rsjobs/labels.py)' end
    elseif kind == 'priority' then
      if type(v) ~= 'number' or v < 0 or v > MAX_PRIORITY or v ~= math.floor(v) then
        return nil, 'option priority (an integer from 0 to ' .. MAX_PRIORITY .. ')'
      end
    elseif kind == 'trace' then
      if type(v) ~= 'string' or #v > TRACE_MAX or string.find(v, '%c') then
        return nil, 'option ' .. name .. ' (a W3C trace context text, see rsjobs/tracing.py)'
      end
    elseif kind == 'policy' then
      if not AFTER_POLICIES[v] then return nil, 'option after_policy (succeeded or always)' end
    elseif kind ~= 'text' or type(v) ~= 'string' then
      return nil, 'option ' .. tostring(name)
    end
  end
  if (o.max_attempts or 0) < 1 then return nil, 'option max_attempts (at least 1)' end
  o.label_table = labels
  return o, nil
end

-- ENQUEUE a new task, PENDING or SCHEDULED (delay_ms), or WAITING when `o.after` lists
-- its predecessors (after.lua: a successor's delay and queue-wait deadline start at its
-- release, so they are kept as release_delay_ms / release_wait_ms): the fields of a task
-- hash are created here and nowhere else (enqueue.lua, and wf.lua's create_task). `i` is
-- the task's index in KEYS (or its keys, see task_keys); `o` its options (task_options);
-- `msg` the history message;
-- `more` extra hash fields and `extra` extra history fields (flat arrays, may be nil).
-- Fields equal to their defaults are left out (failures 0, progress 0, no timeout, the
-- backoff's defaults, which end_attempt applies when they are missing). Returns the task.
-- Whether the i-th task keys of this call suit a new task of `queue` with options `o`:
-- its queue key is the stream of its priority's level (a caller checks a whole batch
-- with it before its first write; new_task raises on a wrong one).
local function new_task_keys_ok(i, queue, o)
  local _, qkey = task_keys(i)
  return is_level_key(qkey, queue, o.priority or 0)
end

local function new_task(i, id, typ, queue, payload, o, msg, more, extra)
  local key, qkey, dkey = task_keys(i)
  local dedup, owner = o.dedup or '', o.owner or ''
  local priority = o.priority or 0
  if not new_task_keys_ok(i, queue, o) then
    error('rsjobs: queue key ' .. tostring(qkey) .. ' is not the stream of a task of queue '
      .. queue .. ' and priority ' .. priority, 0)
  end
  local t = {key = key, qkey = qkey, dkey = dkey, id = id, queue = queue,
    state = '', attempt = 0, dedup = dedup, created = NOW, hn = 0, wf = '', owner = owner,
    labels = o.labels or '', label_table = o.label_table, type = typ, sname = '',
    priority = priority}
  for j = 1, #(more or {}), 2 do
    if more[j] == 'wf' then t.wf = more[j + 1] end
    if more[j] == 'wf_stage_name' then t.sname = more[j + 1] end
  end
  local fields = {'id', id, 't', typ, 'q', queue, 'p', payload, 'c', NOW}
  if priority > 0 then
    -- (a priority-0 task stores nothing: no field, no history token)
    fields[#fields + 1] = 'pr'; fields[#fields + 1] = priority
    local e = {'pr', priority}
    for j = 1, #(extra or {}) do e[#e + 1] = extra[j] end
    extra = e
  end
  if o.max_attempts ~= MAX_ATTEMPTS then
    fields[#fields + 1] = 'ma'; fields[#fields + 1] = o.max_attempts
  end
  if (o.timeout_ms or 0) > 0 then
    fields[#fields + 1] = 'timeout_ms'; fields[#fields + 1] = o.timeout_ms
  end
  -- (an option left out is 0, as task_options reads it: a backoff of 0 is stored, since
  -- a missing field means the default)
  if (o.backoff_base_ms or 0) ~= BACKOFF_BASE_MS then
    fields[#fields + 1] = 'backoff_base_ms'; fields[#fields + 1] = o.backoff_base_ms or 0
  end
  if (o.backoff_max_ms or 0) ~= BACKOFF_MAX_MS then
    fields[#fields + 1] = 'backoff_max_ms'; fields[#fields + 1] = o.backoff_max_ms or 0
  end
  if owner ~= '' then fields[#fields + 1] = 'owner'; fields[#fields + 1] = owner end
  if t.labels ~= '' then fields[#fields + 1] = 'labels'; fields[#fields + 1] = t.labels end
  -- the submitter's trace context (rsjobs/tracing.py): only when it had one
  if (o.traceparent or '') ~= '' then
    fields[#fields + 1] = 'tp'; fields[#fields + 1] = o.traceparent
    if (o.tracestate or '') ~= '' then
      fields[#fields + 1] = 'ts'; fields[#fields + 1] = o.tracestate
    end
  end
  if dedup ~= '' then
    fields[#fields + 1] = 'dedup'; fields[#fields + 1] = dedup
    redis.call('SET', dkey, id)
  end
  local wait_ms = o.wait_timeout_ms or 0
  local delay_ms = o.delay_ms or 0
  if o.after ~= nil then
    -- a successor: nothing indexes it for a worker or the reaper until its release
    fields[#fields + 1] = 'after'; fields[#fields + 1] = table.concat(o.after, ',')
    if o.after_policy == 'always' then
      fields[#fields + 1] = 'after_policy'; fields[#fields + 1] = 'always'
    end
    if delay_ms > 0 then
      fields[#fields + 1] = 'release_delay_ms'; fields[#fields + 1] = delay_ms
    end
    if wait_ms > 0 then
      fields[#fields + 1] = 'release_wait_ms'; fields[#fields + 1] = wait_ms
    end
    wait_ms, delay_ms = 0, 0
  end
  if wait_ms > 0 then
    fields[#fields + 1] = 'expires_at'; fields[#fields + 1] = NOW + wait_ms
    -- indexed for the reaper, which expires the task if no worker started it in time
    redis.call('ZADD', DEADLINES_KEY, NOW + wait_ms, member(t))
  end
  if more ~= nil then
    for j = 1, #more do fields[#fields + 1] = more[j] end
  end
  local to = 'PENDING'
  if o.after ~= nil then
    to = 'WAITING'
  elseif delay_ms > 0 then
    to = 'SCHEDULED'
    fields[#fields + 1] = 'due_at'; fields[#fields + 1] = NOW + delay_ms
    redis.call('ZADD', SCHED_KEY, NOW + delay_ms, member(t))
  else
    fields[#fields + 1] = 'entry'; fields[#fields + 1] = push_entry(t)
  end
  transition(t, 'ENQUEUE', to, msg, fields, extra)
  return t
end

-- Successors and their predecessors (after.lua, successors.lua; docs/successors.md). A
-- successor's hash holds after (af): its predecessors in the order given, each "<id>" while
-- awaited and "<id>:<STATE>" once its end is counted ("<id>,<id>:SUCCEEDED..."); after_policy
-- (ap) "always" (left out: succeeded); predecessors (pr), a JSON object of the results of
-- the predecessors that SUCCEEDED, {"<id>": <result>, ...} (the result as stored, null for
-- none: the handler's ctx.predecessors); release_delay_ms (rd) and release_wait_ms (rw),
-- its delay and queue-wait deadline, which start when it is released. A WAITING task is in
-- the waiting zset (each script that moves one in or out of WAITING gets it as a key).

-- The most predecessors a task may wait for, and the most successors a task may have.
local AFTER_MAX, SUCCESSORS_MAX = 32, 1000
-- The hash fields of a successor that count_predecessor reads (load it with these).
local SUCCESSOR_FIELDS = {'after', 'after_policy', 'predecessors', 'release_delay_ms',
  'release_wait_ms'}
-- The error type of a successor cancelled by its predecessor's end.
local PREDECESSOR_ENDED = {FAILED = 'PredecessorFailed', CANCELLED = 'PredecessorCancelled',
  TIMED_OUT = 'PredecessorTimedOut'}

-- A task id as the lists of successors and predecessors hold them: 1 to 64 letters, digits
-- or '_.-' (no ',' or ':', their separators).
local function is_task_id(v)
  return type(v) == 'string' and #v >= 1 and #v <= 64 and string.match(v, '^[%w_%.%-]+$') ~= nil
end

-- How many ids a comma-separated list holds.
local function list_len(v)
  if v == nil or v == '' then return 0 end
  local _, commas = string.gsub(v, ',', '')
  return commas + 1
end

-- A successor's after field as a list of {id, state} (state '' while awaited), and back.
local function parse_after(af)
  local out = {}
  for item in string.gmatch(af or '', '[^,]+') do
    local id, st = string.match(item, '^([^:]*):?(.*)$')
    out[#out + 1] = {id = id, state = st}
  end
  return out
end
local function format_after(list)
  local parts = {}
  for j, e in ipairs(list) do
    parts[j] = e.id
    if e.state ~= '' then parts[j] = e.id .. ':' .. e.state end
  end
  return table.concat(parts, ',')
end

-- The predecessors field `pr` with the result `raw` (JSON text as stored; nil: null) of
-- predecessor `id` added: built as text, so that a result is passed on as it was stored.
local function add_result(pr, id, raw)
  local item = cjson.encode(id) .. ':' .. (raw or 'null')
  if pr == nil or pr == false or pr == '' then return '{' .. item .. '}' end
  return string.sub(pr, 1, -2) .. ',' .. item .. '}'
end

-- RELEASE the WAITING successor `t` onto its queue (`fields`: hash fields to set with it):
-- PENDING, or SCHEDULED when it has a delay; its queue-wait deadline starts now.
local function release_successor(t, waiting_key, fields, msg, extra)
  redis.call('ZREM', waiting_key, member(t))
  local delay = tonumber(t.f.release_delay_ms) or 0
  local wait = tonumber(t.f.release_wait_ms) or 0
  if wait > 0 then
    fields[#fields + 1] = 'expires_at'; fields[#fields + 1] = NOW + wait
    redis.call('ZADD', DEADLINES_KEY, NOW + wait, member(t))
  end
  local to = 'PENDING'
  if delay > 0 then
    to = 'SCHEDULED'
    fields[#fields + 1] = 'due_at'; fields[#fields + 1] = NOW + delay
    redis.call('ZADD', SCHED_KEY, NOW + delay, member(t))
  else
    fields[#fields + 1] = 'entry'; fields[#fields + 1] = push_entry(t)
  end
  transition(t, 'RELEASE', to, msg, fields, extra)
end

-- Count the end of predecessor `pid` (its state `pstate`, its result `result` or error
-- text `err`, either may be nil) for the successor `t` (loaded with SUCCESSOR_FIELDS):
-- CANCELLED when it did not succeed and the policy is "succeeded" (the reason names it),
-- RELEASED when it was the last one awaited, else COUNTED (its state and result are kept);
-- STALE, writing nothing, when `t` is not WAITING or its end was counted already (a
-- repeat). Every other change of a successor goes through the table (transition).
local function count_predecessor(t, waiting_key, pid, pstate, result, err)
  if t.state ~= 'WAITING' then return 'STALE' end
  local list = parse_after(t.f.after)
  local at = nil
  for _, e in ipairs(list) do
    if e.id == pid then at = e end
  end
  if at == nil or at.state ~= '' then return 'STALE' end
  at.state = pstate
  local awaiting, ended = 0, 0
  for _, e in ipairs(list) do
    if e.state == '' then
      awaiting = awaiting + 1
    elseif e.state ~= 'SUCCEEDED' then
      ended = ended + 1
    end
  end
  t.f.after = format_after(list)
  local fields = {'after', t.f.after}
  if pstate == 'SUCCEEDED' then
    t.f.predecessors = add_result(t.f.predecessors, pid, result)
    fields[3] = 'predecessors'; fields[4] = t.f.predecessors
  end
  if pstate ~= 'SUCCEEDED' and t.f.after_policy ~= 'always' then
    redis.call('ZREM', waiting_key, member(t))
    local why = 'predecessor ' .. pid .. ' ' .. pstate
    if err ~= nil and err ~= false and err ~= '' then why = why .. ': ' .. err end
    fields[#fields + 1] = 'error'; fields[#fields + 1] = why
    fields[#fields + 1] = 'error_type'; fields[#fields + 1] = PREDECESSOR_ENDED[pstate] or 'Predecessor'
    transition(t, 'CANCEL', 'CANCELLED', why, fields, {'pred', pid, 'pred_state', pstate})
    return 'CANCELLED'
  end
  if awaiting > 0 then
    redis.call('HSET', t.key, unpack(fields_of(fields)))
    return 'COUNTED'
  end
  local msg = 'predecessors succeeded'
  if ended > 0 then msg = 'predecessors finished (' .. ended .. ' did not succeed)' end
  release_successor(t, waiting_key, fields, msg, {'pred', pid})
  return 'RELEASED'
end

-- Exponential backoff with equal jitter: half fixed, half random (jitter in [0, 1)).
local function backoff(failures, base, cap, jitter)
  local d = base * (2 ^ (failures - 1))
  if d > cap then d = cap end
  return math.floor(d / 2 + (d / 2) * jitter)
end

-- Whether the task `t` (loaded with 'expires_at') was never started and its queue-wait
-- deadline (wait_timeout_ms at ENQUEUE) has passed by Redis TIME.
local function wait_expired(t)
  local expires = tonumber(t.f.expires_at) or 0
  return t.attempt == 0 and expires > 0 and expires <= NOW
end

-- EXPIRE a PENDING or SCHEDULED task past its queue-wait deadline (see wait_expired):
-- -> TIMED_OUT. Its work entry (acked and deleted) or its schedule, and its deadlines
-- member, are removed. `how` says who found it ('' or e.g. ', at START by w1'), `extra`
-- are history fields (may be nil). Every script that could let it go further (start,
-- promote) or sweeps for it (deadline) calls this, so the deadline holds without a reaper.
local function expire(t, how, extra)
  local expires = tonumber(t.f.expires_at)
  local created = t.created or NOW
  local why = 'expired: no worker started it within its queue-wait deadline (waited '
    .. (NOW - created) .. ' ms; deadline passed ' .. (NOW - expires) .. ' ms ago' .. how .. ')'
  if t.state == 'PENDING' then
    drop_entry(t.qkey, t.f.entry)
  else
    redis.call('ZREM', SCHED_KEY, member(t))
  end
  redis.call('ZREM', DEADLINES_KEY, member(t))
  transition(t, 'EXPIRE', 'TIMED_OUT', why, {'error', why, 'error_type', 'WaitTimeout'}, extra)
end

-- Hash fields load() must fetch for check_lease() and end_attempt().
local ATTEMPT_FIELDS = {'lease', 'entry', 'failures', 'max_attempts', 'backoff_base_ms',
  'backoff_max_ms'}

-- Fencing: nil when `lease` holds the RUNNING task; otherwise the reply {code, state}
-- (2: repeated COMPLETE of the lease holder, nothing written; -3: RUNNING under another
-- lease; -2: no longer RUNNING), with the refusal recorded.
local function check_lease(t, event, lease)
  if t.state == 'RUNNING' and t.f.lease == lease then return nil end
  if event == 'COMPLETE' and t.state == 'SUCCEEDED' and t.f.lease == lease then
    return {2, t.state}
  end
  -- recorded with the attempt the lease names: a late result comes from an older attempt
  local att = lease_attempt(lease)
  if t.state == 'RUNNING' then
    reject(t, event, 'lease lost: ' .. lease .. ' no longer holds the task', att)
    return {-3, t.state}
  end
  reject(t, event, 'task is ' .. t.state .. ' (lease ' .. lease .. ')', att)
  return {-2, t.state}
end

-- The longest traceback a worker may send with a FAIL (it bounds them far shorter, see
-- rsjobs/worker/failures.py): kept, escaped, in that attempt's history entry.
local TRACEBACK_MAX = 8192

-- The history fields of a failed attempt's entry: the exception type (et) and the bounded
-- traceback (tb) of a FAIL, when the worker sent them (nil for any other end). Every
-- attempt's FAIL entry keeps its own; the task hash keeps the last error only.
local function failure_fields(event, etype, tb)
  if event ~= 'FAIL' then return nil end
  local extra = {}
  if etype ~= nil and etype ~= '' then extra[#extra + 1] = 'et'; extra[#extra + 1] = etype end
  if tb ~= nil and tb ~= '' then extra[#extra + 1] = 'tb'; extra[#extra + 1] = tb end
  if #extra == 0 then return nil end
  return extra
end

-- End the running attempt of `t` (loaded with ATTEMPT_FIELDS): COMPLETE -> SUCCEEDED,
-- REQUEUE -> PENDING, FAIL / TIMEOUT / RECLAIM -> a retry under the task's policy or the
-- terminal state. The work entry is acked and deleted, the deadline dropped.
-- RECLAIM retries at once (PENDING); FAIL and TIMEOUT after the backoff (SCHEDULED).
-- delay < 0 means "use the task's exponential backoff" (jitter in [0, 1)).
-- `extra` (history fields) and `more` (hash fields) are optional flat arrays.
local END_EVENTS = {COMPLETE = true, FAIL = true, TIMEOUT = true, REQUEUE = true, RECLAIM = true}
local function end_attempt(t, event, body, etype, retryable, delay, jitter, extra, more)
  -- before the first write: an unknown event, or a retry without its delay and jitter,
  -- would otherwise raise after the deadline was dropped
  if not END_EVENTS[event] or type(body) ~= 'string'
      or (event ~= 'COMPLETE' and event ~= 'REQUEUE'
        and (type(delay) ~= 'number' or type(jitter) ~= 'number' or type(etype) ~= 'string')) then
    error({err = 'rsjobs: invalid end of attempt: ' .. tostring(event)})
  end
  drop_entry(t.qkey, t.f.entry)
  redis.call('ZREM', DEADLINES_KEY, member(t))
  if event == 'COMPLETE' then
    -- a success after failed attempts: the task has no error now (history keeps them)
    if (tonumber(t.f.failures) or 0) > 0 then redis.call('HDEL', t.key, 'error', 'error_type') end
    -- (a SUCCEEDED task's progress is 100: the field is dropped, as readers know)
    redis.call('HDEL', t.key, 'progress')
    -- (a null result, what a handler returning None gives, is no field)
    local fields = nil
    if body ~= 'null' then fields = {'result', body} end
    transition(t, 'COMPLETE', 'SUCCEEDED', '', fields, extra)
    return
  end
  if event == 'REQUEUE' then
    transition(t, 'REQUEUE', 'PENDING', body, {'entry', push_entry(t)}, extra)
    return
  end
  local failures = (tonumber(t.f.failures) or 0) + 1
  local max_attempts = tonumber(t.f.max_attempts) or MAX_ATTEMPTS
  local fields = {'error_type', etype, 'failures', failures}
  if more ~= nil then
    for j = 1, #more do fields[#fields + 1] = more[j] end
  end
  local hist = {}
  if extra ~= nil then
    for j = 1, #extra do hist[#hist + 1] = extra[j] end
  end
  if (retryable or event ~= 'FAIL') and failures < max_attempts then
    fields[#fields + 1] = 'error'; fields[#fields + 1] = body
    if event == 'RECLAIM' then
      fields[#fields + 1] = 'entry'; fields[#fields + 1] = push_entry(t)
      transition(t, event, 'PENDING', body, fields, hist)
      return
    end
    if delay < 0 then
      -- enqueue's defaults when a field is missing or garbled: a bad backoff setting must
      -- not fail the call after its first writes
      delay = backoff(failures, tonumber(t.f.backoff_base_ms) or BACKOFF_BASE_MS,
        tonumber(t.f.backoff_max_ms) or BACKOFF_MAX_MS, jitter)
    end
    fields[#fields + 1] = 'due_at'; fields[#fields + 1] = NOW + delay
    hist[#hist + 1] = 'retry_in_ms'; hist[#hist + 1] = delay
    redis.call('ZADD', SCHED_KEY, NOW + delay, member(t))
    transition(t, event, 'SCHEDULED', body, fields, hist)
    return
  end
  local to = 'FAILED'
  if event == 'TIMEOUT' then to = 'TIMED_OUT' end
  local why = body
  if not retryable and event == 'FAIL' then
    why = 'non-retryable: ' .. body
  elseif failures >= max_attempts then
    why = 'attempts exhausted (' .. failures .. '/' .. max_attempts .. '): ' .. body
  end
  fields[#fields + 1] = 'error'; fields[#fields + 1] = why
  transition(t, event, to, why, fields, hist)
end

-- Deferred attempts (DEFERRED in the table; defer.lua, resolve.lua, poll.lua, and the
-- longest wait in deadline.lua). A DEFERRED task's hash holds external_id (x) and provider
-- (xp), the id an outside service gave its job; wait_until (xu), the end of its longest
-- wait (Redis TIME ms, its score in the deadlines zset); poll_ms (xo, 0: no polls; else
-- its member in the polls zset is scored by its next poll). resolved (xd) is
-- "<attempt><C|F>" (COMPLETE, FAIL) of the outside result that ended the wait: a repeat of that result
-- is answered from it, writing nothing. external_id, provider and resolved stay once the
-- wait is over (a later result is refused from them, and recorded).

-- The longest external id (a provider's job id; one key per deferred task carries it).
local EXTERNAL_MAX = 200

-- An external id: 1 to EXTERNAL_MAX letters, digits or '._:/-' (rsjobs/store/deferred.py
-- checks the same first).
local function is_external(v)
  return type(v) == 'string' and #v >= 1 and #v <= EXTERNAL_MAX
    and string.match(v, '^[%w%._:/%-]+$') ~= nil
end

-- A provider name: 1 to 64 letters, digits or '._-'.
local function is_provider(v)
  return type(v) == 'string' and #v >= 1 and #v <= 64 and string.match(v, '^[%w%._%-]+$') ~= nil
end

-- The wait of DEFERRED task `t` is over (it is being resolved or timed out): its longest
-- wait and its poll leave their zsets (polls_key nil: the caller has no polls key; its
-- member, if any, is dropped by the next poll claim), and the wait fields are deleted.
local function leave_deferred(t, polls_key)
  redis.call('ZREM', DEADLINES_KEY, member(t))
  if polls_key ~= nil then redis.call('ZREM', polls_key, member(t)) end
  redis.call('HDEL', t.key, 'xu', 'xo')
end

-- Limits of shared queues (scripts/start.lua decides, scripts/take.lua hands out; the
-- settings are rsjobs/limits.py's). In a table, to keep the scripts' upvalues few.
--   * per-owner concurrency: the limits hash's "c|<queue>|<owner>" (an owner's own) or
--     "c|<queue>|*" (the queue's default for every owner) bounds the owner's RUNNING tasks
--     in the queue (KEYS[16], see count_running); a task without an owner has no limit.
--     A START over it parks the task: it stays PENDING, its work entry is held by
--     WAITING_CONSUMER and it is listed in parked:<queue>, with nothing written to its
--     hash or history; take.lua hands it to a worker once its owner is under the limit.
--   * rates: token buckets, "r|<queue>" (every start in the queue), "r|<queue>|<type>"
--     (a type's starts) and "rr|<queue>|<type>" (a type's starts after its first
--     attempt), each "<per second> <burst>", kept as GCRA: the rates hash holds a
--     bucket's theoretical arrival time TAT (ms); a start at `now` conforms when
--     TAT - tolerance <= now (tolerance = (burst - 1) * interval) and moves TAT to
--     max(TAT, now) + interval. A START that does not conform reserves the earliest time
--     every bucket of the task allows (each bucket's TAT moves past it, so the tasks a
--     bucket holds back start one interval apart, in the order they came) and parks the
--     task in throttled:<queue> scored by that time, its hash field rt = that time (the
--     START at that time is let through on it: its slots are taken). No history entry,
--     no busy loop: take.lua hands it out when its time comes.
local pools = {LIMIT_MAX = 1000000, limit = {}, rate = {}, tat = {}, lists = {}}

-- (pools.limit: queue -> owner -> its limit, or false for none, read once per call)

-- The concurrency limit of the owner of `t` in its queue: a number, or nil (none).
function pools.owner_limit(limits_key, queue, owner)
  if owner == nil or owner == '' then return nil end
  local l = sub_table(pools.limit, queue)
  local v = l[owner]
  if v == nil then
    local r = redis.call('HMGET', limits_key, 'c|' .. queue .. '|' .. owner, 'c|' .. queue .. '|*')
    v = tonumber(r[1]) or tonumber(r[2]) or false
    l[owner] = v
  end
  if v == false then return nil end
  return v
end

-- Read the concurrency limits of the owners `owners` (a list) in `queue` into the cache
-- owner_limit reads, those not read yet, in one call.
function pools.prefetch_limits(limits_key, queue, owners)
  local l = sub_table(pools.limit, queue)
  local fields, fs, seen = {'c|' .. queue .. '|*'}, {}, {}
  for _, owner in ipairs(owners) do
    if owner ~= '' and l[owner] == nil and not seen[owner] then
      seen[owner] = true
      fs[#fs + 1] = owner
      fields[#fields + 1] = 'c|' .. queue .. '|' .. owner
    end
  end
  if #fs == 0 then return end
  local r = redis.call('HMGET', limits_key, unpack(fields))
  local default = tonumber(r[1])
  for j, owner in ipairs(fs) do l[owner] = tonumber(r[j + 1]) or default or false end
end

-- The concurrency limits of the owners of the tasks check_levels loaded (calls 1..n),
-- read into the cache of pools.owner_limit with one HMGET per queue; with `running`, the
-- RUNNING counts of those with a limit too (for running_now), with one HMGET.
function pools.prefetch_loaded(n, limits_key, running)
  local byq, seen = {}, {}
  for i = 1, n do
    local t = LOADED[i] and LOADED[i][2]
    local owner = t and t.owner
    if owner and owner ~= '' then
      local s = sub_table(seen, t.queue)
      if not s[owner] then
        s[owner] = true
        local l = sub_table(byq, t.queue)
        l[#l + 1] = owner
      end
    end
  end
  local fields = {}
  for queue, owners in pairs(byq) do
    pools.prefetch_limits(limits_key, queue, owners)
    if running then
      local l = pools.limit[queue]
      for _, owner in ipairs(owners) do
        local f = queue .. '|' .. owner
        if RUN_BASE[f] == nil and l[owner] then
          RUN_BASE[f] = false  -- (read below)
          fields[#fields + 1] = f
        end
      end
    end
  end
  pools.read_running(fields, RUN_BASE)
end

-- Read the RUNNING counts of `fields` ("<queue>|<owner>") into `into` (field -> count),
-- with one HMGET.
function pools.read_running(fields, into)
  if #fields == 0 then return end
  local counts = redis.call('HMGET', RUNNING_KEY, unpack(fields))
  for j, f in ipairs(fields) do into[f] = tonumber(counts[j]) or 0 end
end

-- A rate setting: {interval ms, tolerance ms}, or false for none (or a setting that
-- does not read: rsjobs/limits.py writes only good ones).
function pools.rate_setting(limits_key, field)
  local v = pools.rate[field]
  if v == nil then
    local raw = redis.call('HGET', limits_key, field)
    local per, burst = string.match(raw or '', '^(%S+) (%d+)$')
    per, burst = tonumber(per), tonumber(burst)
    if per and per > 0 and burst and burst >= 1 then
      v = {1000 / per, (burst - 1) * 1000 / per}
    else
      v = false
    end
    pools.rate[field] = v
  end
  return v
end

-- The buckets (fields) with a setting that a START of task `t` (loaded with 'type') at
-- attempt `attempt` (the one it starts) draws on.
-- (the same list for every start of a queue, type and retry or not, in a call)
function pools.buckets(limits_key, t, attempt)
  local ty = t.f.type or ''
  local byq = pools.lists[t.queue]
  if byq == nil then
    byq = {}
    pools.lists[t.queue] = byq
  end
  local ck = ty
  if attempt > 1 then ck = ty .. '|r' end
  local out = byq[ck]
  if out ~= nil then return out end
  local names = {'r|' .. t.queue}
  if t.f.type then
    names[2] = 'r|' .. t.queue .. '|' .. t.f.type
    if attempt > 1 then names[3] = 'rr|' .. t.queue .. '|' .. t.f.type end
  end
  out = {}
  for _, f in ipairs(names) do
    if pools.rate_setting(limits_key, f) then out[#out + 1] = f end
  end
  byq[ck] = out
  return out
end

-- A bucket's TAT as this call sees it (NOW when it has none).
function pools.tat_of(rates_key, field)
  local v = pools.tat[field]
  if v == nil then
    v = tonumber(redis.call('HGET', rates_key, field)) or 0
    pools.tat[field] = v
  end
  return v
end

-- The earliest time (>= NOW) a start on every bucket of `buckets` conforms.
function pools.conform_at(rates_key, limits_key, buckets)
  local at = NOW
  for _, f in ipairs(buckets) do
    local s = pools.rate_setting(limits_key, f)
    at = math.max(at, pools.tat_of(rates_key, f) - s[2])
  end
  return at
end

-- Take the slot at time `at` on every bucket of `buckets`.
function pools.reserve(rates_key, limits_key, buckets, at)
  for _, f in ipairs(buckets) do
    local s = pools.rate_setting(limits_key, f)
    local tat = math.max(pools.tat_of(rates_key, f), at) + s[1]
    pools.tat[f] = tat
    redis.call('HSET', rates_key, f, string.format('%.3f', tat))
  end
end

-- How many starts the bucket `field` lets through now, one after the other (a large
-- number when it has no setting).
function pools.admissible(rates_key, limits_key, field)
  local s = pools.rate_setting(limits_key, field)
  if not s then return 1e9 end
  local base = math.max(pools.tat_of(rates_key, field), NOW)
  if base - s[2] > NOW then return 0 end
  return math.floor((NOW + s[2] - base) / s[1] + 1e-6) + 1
end

-- A worker's claims (the claims hash of a queue: consumer -> "<expiry ms> <owner>=<n>:<owner
-- expiry ms> ..."): the tasks of owners with a limit that take.lua handed to it and
-- start.lua has not seen yet. An owner's claim expires CLAIM_MS after the call that
-- handed out its first task (take.lua never moves it on, so a claim whose task never
-- reaches start.lua, e.g. a take whose reply was lost and whose task was cancelled, ends
-- by itself); the field's expiry is its owners' latest. Returns the field's expiry, a
-- table owner -> n and a table owner -> its expiry (a claim written without one has the
-- field's).
function pools.read_claims(raw)
  local exp = tonumber(string.match(raw or '', '^(%d+)')) or 0
  local counts, exps = {}, {}
  for owner, n, e in string.gmatch(raw or '', ' ([^ =]+)=(%d+):?(%d*)') do
    counts[owner] = tonumber(n)
    exps[owner] = tonumber(e) or exp
  end
  return exp, counts, exps
end

-- Write a worker's claims back, each owner's with its expiry (none left: the field goes).
function pools.write_claims(key, consumer, counts, exps)
  local parts, exp = {''}, 0
  for owner, n in pairs(counts) do
    if n > 0 then
      local e = exps[owner] or 0
      parts[#parts + 1] = owner .. '=' .. n .. ':' .. e
      if e > exp then exp = e end
    end
  end
  if #parts > 1 then
    parts[1] = tostring(exp)
    redis.call('HSET', key, consumer, table.concat(parts, ' '))
  else
    redis.call('HDEL', key, consumer)
  end
end

-- A work entry id "<ms>-<seq>" written so that text order is time order.
function pools.sortable(entry)
  local ms, seq = string.match(entry, '^(%d+)%-(%d+)$')
  return string.format('%013d-%010d', tonumber(ms), tonumber(seq))
end

-- Its inverse.
function pools.entry_of(sortable)
  local ms, seq = string.match(sortable, '^(%d+)%-(%d+)$')
  return tonumber(ms) .. '-' .. tonumber(seq)
end

-- The member of a parked task in parked:<queue>: "<owner>|<9 - priority><entry>|<id>"
-- (text order: by owner, then highest priority, then oldest).
function pools.waiting_member(owner, priority, entry, id)
  return owner .. '|' .. (MAX_PRIORITY - priority) .. pools.sortable(entry) .. '|' .. id
end

-- The member of a parked task in throttled:<queue>: "<priority><entry>|<id>".
function pools.throttled_member(priority, entry, id)
  return priority .. pools.sortable(entry) .. '|' .. id
end

-- Park the delivered entry `entry` of task `t`: its consumer becomes WAITING_CONSUMER
-- (it stays pending, the task PENDING with that entry), and it is listed in `zkey` as
-- `m` with `score`.
function pools.park(t, entry, zkey, score, m)
  redis.call('XCLAIM', t.qkey, GROUP, WAITING_CONSUMER, 0, entry, 'JUSTID')
  redis.call('ZADD', zkey, score, m)
end

-- Begin a call with its KEYS and ARGV: the common keys and values, the time, and every
-- table this file fills during a call (the counters are emptied by finish_call too; the
-- caches are per call, so that nothing read in one call is believed in the next).
local function begin_call(keys, argv)
  KEYS, ARGV = keys, argv
  EVENTS_KEY, STATS_KEY, SCHED_KEY, DEADLINES_KEY = keys[1], keys[2], keys[3], keys[4]
  DONE_KEYS.SUCCEEDED, DONE_KEYS.FAILED = keys[5], keys[6]
  DONE_KEYS.CANCELLED, DONE_KEYS.TIMED_OUT = keys[7], keys[8]
  PAUSED_TASKS_KEY, TAGS_KEY, TAGS_TRIM_KEY = keys[9], keys[10], keys[11]
  HOOKS_KEY, HOOKS_ON_KEY = keys[12], keys[13]
  RELEASE_KEY, COSTS_KEY, RUNNING_KEY = keys[14], keys[15], keys[16]
  SOURCE, EVENTS_MAX = argv[1], tonumber(argv[2])
  RETENTION_MS, GROUP = tonumber(argv[3]), argv[4]
  NOW = now_ms()
  COUNTS, COSTS, RUNS, DROPS, TRIMS = {}, {}, {}, {}, {}
  ACCOUNT_FIELDS, OWNER_FIELDS = {}, {}
  HOOK_STATES, RELEASES = nil, 0
  RUN_BASE, LOADED = {}, {}
  pools.limit, pools.rate, pools.tat, pools.lists = {}, {}, {}, {}
end
