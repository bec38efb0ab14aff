--[[ hooks_forget.lua — remove hook runners' consumers that hold nothing from the hook
stream's group, so that the group does not grow with every runner that ever ran (each
runner reads as a consumer of its own name; a restarted one under a new name leaves its
old one behind). The check and the removal are one step: XGROUP DELCONSUMER drops what a
consumer holds, so a consumer is removed only while its pending list is empty (a runner
still alive that holds nothing loses nothing: its next read makes it again). The caller
names the consumers it found idle long enough (XINFO CONSUMERS). No task is touched.

KEYS: common (see fsm.lua), then
  per consumer:
  hooks  stream  the hook stream (its group: ARGV[5])
ARGV: common (see fsm.lua), then
  ARGV[5]  group  the hook runners' consumer group
  per consumer:
    name  a consumer of that group
Returns: per consumer 1 when it is not in the group any more (removed, or not there),
  0 when it holds entries (left as it is).
An error (nothing written) when the group or a name is empty, or the stream has no such
group.
Events: none.
]]
local n, bad = layout(1, 1, 0, 1)
if bad then return bad end
local HOOKS_STREAM, HOOK_GROUP = KEYS[#KEYS], ARGV[NARGV + 1]
if type(HOOK_GROUP) ~= 'string' or HOOK_GROUP == '' then return bad_arg('group', HOOK_GROUP) end
for i = 1, n do
  local name = ARGV[NARGV + 1 + i]
  if name == '' or #name > TEXT_MAX then return bad_arg('consumer name', name) end
end
-- (a missing stream or group fails here, before anything is written)
local ok = pcall(redis.call, 'XPENDING', HOOKS_STREAM, HOOK_GROUP)
if not ok then return bad_arg('group (no such group on the hook stream)', HOOK_GROUP) end
local out = {}
for i = 1, n do
  local name = ARGV[NARGV + 1 + i]
  local held = redis.call('XPENDING', HOOKS_STREAM, HOOK_GROUP, '-', '+', 1, name)
  out[i] = 0
  if #held == 0 then
    redis.call('XGROUP', 'DELCONSUMER', HOOKS_STREAM, HOOK_GROUP, name)
    out[i] = 1
  end
end
return out
