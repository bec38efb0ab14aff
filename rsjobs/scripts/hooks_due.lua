--[[ hooks_due.lua — `rsjobs hooks` claims the hook retries that are due: each is given a
claim (its score moved to now + claim_ms), so that no other hook runner takes it while this
one runs it, and one whose runner died comes due again when the claim ends. No task is
touched: this script writes only its own zset.

KEYS: common (see fsm.lua), then
  hooks_retry  zset  hook retries (JSON) by due time (ms)
ARGV: common (see fsm.lua), then
  ARGV[5]  most      the most retries to claim (1..1000)
  ARGV[6]  claim_ms  how long a claim holds (ms, >= 1)
Returns: the claimed members (JSON texts), the earliest due first.
An error (nothing written) when most or claim_ms is not such a number.
Events: none.
]]
local _, bad = layout(2, 0, 0, 1)
if bad then return bad end
local RETRY_KEY = KEYS[NCOMMON + 1]
local limit, claim = ARGV[NARGV + 1], ARGV[NARGV + 2]
if not is_count(limit) or tonumber(limit) < 1 or tonumber(limit) > 1000 then
  return bad_arg('most', limit)
end
if not is_count(claim) or tonumber(claim) < 1 then return bad_arg('claim_ms', claim) end
local due = redis.call('ZRANGEBYSCORE', RETRY_KEY, '-inf', NOW, 'LIMIT', 0, tonumber(limit))
for _, m in ipairs(due) do
  redis.call('ZADD', RETRY_KEY, 'XX', NOW + tonumber(claim), m)
end
return due
