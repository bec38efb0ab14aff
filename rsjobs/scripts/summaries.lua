--[[ summaries.lua — read what a task list shows of each task of a page (writes nothing).

A page of a list (rsjobs/store/index.py) reads its candidates' hashes in one call: the
fields it names, and for a finished task its history as well (its start, end and worker
are read from it: the hash drops them). One call instead of two commands per task.

KEYS: common (see fsm.lua), then
  per task:
    task  hash  the task (it may not exist)
ARGV: common (see fsm.lua), then
  ARGV[5]  fields  the hash fields to read, separated by spaces; `s` (state) and `hn`
                   (history count) among them
  ARGV[6]  states  the states the list wants, separated by spaces ('' = any): the history
                   of a task in another state is not read (the list skips the task)
Returns: per task, the values of `fields` in their order (false where missing, all false
  when there is no such task), followed for a task in a terminal state the list wants by
  the values of its history fields h1 ... h<hn>.
An error (nothing read) when `fields` does not name `s` and `hn`.
Events: none.
]]
local n, bad = layout(2, 0, 1, 0)
if bad then return bad end
local wanted = nil
for state in string.gmatch(ARGV[6], '%S+') do
  wanted = wanted or {}
  wanted[state] = true
end
local names, at = {}, {}
for name in string.gmatch(ARGV[5], '%S+') do
  names[#names + 1] = name
  at[name] = #names
end
if at.s == nil or at.hn == nil then return bad_arg('fields (s and hn needed)', ARGV[5]) end
local CHUNK = 1000  -- unpack() takes a bounded number of values
local out = {}
for i = 1, n do
  local key = KEYS[NCOMMON + i]
  local v = redis.call('HMGET', key, unpack(names))
  local hn = tonumber(v[at.hn]) or 0
  local state = v[at.s]
  if state and TERMINAL[state] and (wanted == nil or wanted[state]) and hn >= 1
      and hn == math.floor(hn) then
    for from = 1, hn, CHUNK do
      local h = {}
      for j = from, math.min(hn, from + CHUNK - 1) do h[#h + 1] = 'h' .. j end
      for _, value in ipairs(redis.call('HMGET', key, unpack(h))) do v[#v + 1] = value end
    end
  end
  out[i] = v
end
return out
