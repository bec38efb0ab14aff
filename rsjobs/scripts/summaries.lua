--[[ summaries.lua — read what a task list shows of the candidates of a page (writes nothing).

A page of a list (rsjobs/store/index.py) reads its candidates in one call: each task is
checked here against what its index said of it and against the list's filters, and only
the tasks that pass are answered, with the fields the list shows, and for a finished task
its history (its start, end and worker are read from it: the hash drops them). One call
instead of commands per task, and nothing sent back for a task the list skips.

KEYS: common (see fsm.lua), then
  per task:
    task  hash  the task (it may not exist)
ARGV: common (see fsm.lua), then
  ARGV[5]  fields  the hash fields to read, separated by spaces; s, q, t, owner, labels,
                   e and hn among them
  ARGV[6]  filter  the list's filters, a JSON object: states, queues (arrays: any of
                   them), type, owner (texts), labels (an object: all of them); a name left
                   out filters nothing
  per task:
    expect  what its index says of it, "<states>|<entry>": the states it may be in
            (separated by spaces, none: any) and the work entry it must have ('': any)
Returns: per task, false when it does not exist, is not what its index says any more, or
  does not pass the filters; else the values of `fields` in their order (false where
  missing), followed for a task in a terminal state by its history fields h1 ... h<hn>.
An error (nothing read) when `fields` lacks one of the fields named above, or `filter`
is not a JSON object.
Events: none.
]]
local n, bad = layout(2, 1, 1, 0)
if bad then return bad end
local names, at = {}, {}
for name in string.gmatch(ARGV[5], '%S+') do
  names[#names + 1] = name
  at[name] = #names
end
for _, need in ipairs({'s', 'q', 't', 'owner', 'labels', 'e', 'hn'}) do
  if at[need] == nil then return bad_arg('fields (' .. need .. ' needed)', ARGV[5]) end
end
local ok, filter = pcall(cjson.decode, ARGV[6])
if not ok or type(filter) ~= 'table' then return bad_arg('filter', ARGV[6]) end

-- a set of the texts of array `a` (nil: no filter)
local function set_of(a)
  if type(a) ~= 'table' or #a == 0 then return nil end
  local s = {}
  for _, v in ipairs(a) do s[v] = true end
  return s
end
local STATES, QUEUES = set_of(filter.states), set_of(filter.queues)
local TYPE, OWNER = filter.type, filter.owner
local LABELS = type(filter.labels) == 'table' and filter.labels or nil

local function passes(v)
  if (STATES and not STATES[v[at.s]]) or (QUEUES and not QUEUES[v[at.q]])
      or (TYPE and v[at.t] ~= TYPE) or (OWNER and v[at.owner] ~= OWNER) then
    return false
  end
  if LABELS then
    local have = v[at.labels] and decode_labels(v[at.labels]) or {}
    for k, want in pairs(LABELS) do
      if have[k] ~= want then return false end
    end
  end
  return true
end

-- what the index said of the i-th task: its states (nil: any) and its entry ('' = any)
local function expected(i)
  local raw = ARGV[NARGV + 2 + i]
  local states, entry = string.match(raw, '^([^|]*)|(.*)$')
  local set = nil
  for state in string.gmatch(states or '', '%S+') do
    set = set or {}
    set[state] = true
  end
  return set, entry or ''
end

local CHUNK = 1000  -- unpack() takes a bounded number of values
local out = {}
for i = 1, n do
  local key = KEYS[NCOMMON + i]
  local v = redis.call('HMGET', key, unpack(names))
  local state = v[at.s]
  local states, entry = expected(i)
  if not state or (states and not states[state]) or (entry ~= '' and v[at.e] ~= entry)
      or not passes(v) then
    out[i] = false
  else
    local hn = tonumber(v[at.hn]) or 0
    if TERMINAL[state] and hn >= 1 and hn == math.floor(hn) then
      for from = 1, hn, CHUNK do
        local h = {}
        for j = from, math.min(hn, from + CHUNK - 1) do h[#h + 1] = 'h' .. j end
        for _, value in ipairs(redis.call('HMGET', key, unpack(h))) do v[#v + 1] = value end
      end
    end
    out[i] = v
  end
end
return out
