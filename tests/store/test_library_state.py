"""The function library keeps ``fsm.lua``'s locals across calls (it is loaded once): each
call must begin with none of what an earlier call read or summed. Checked on the session's
server with a library of the same text plus two probes: one call fills every per-call table
and value, the next finds them all as ``begin_call`` leaves them."""

from __future__ import annotations

import pytest
import redis as sync_redis

from rsjobs.store.scripts import _prelude

pytestmark = pytest.mark.integration

#: every table and value fsm.lua keeps for one call (begin_call sets each one)
_FILL = """
COUNTS.x, COSTS.x, RUNS.x, DROPS.x, TRIMS[1] = 1, 1, 1, {'e'}, {'f', 'v'}
ACCOUNT_FIELDS.x, OWNER_FIELDS.x, RUN_BASE.x, LOADED[1] = 1, 1, 1, {}
pools.limit.q, pools.rate.x, pools.tat.x, pools.lists.q = {}, 1, 1, {}
HOOK_STATES, RELEASES = {SUCCEEDED = true}, 3
"""

_CHECK = """
local left = {}
for name, t in pairs({COUNTS = COUNTS, COSTS = COSTS, RUNS = RUNS, DROPS = DROPS,
    TRIMS = TRIMS, ACCOUNT_FIELDS = ACCOUNT_FIELDS, OWNER_FIELDS = OWNER_FIELDS,
    RUN_BASE = RUN_BASE, LOADED = LOADED, limit = pools.limit, rate = pools.rate,
    tat = pools.tat, lists = pools.lists}) do
  if next(t) ~= nil then left[#left + 1] = name end
end
if HOOK_STATES ~= nil then left[#left + 1] = 'HOOK_STATES' end
if RELEASES ~= 0 then left[#left + 1] = 'RELEASES' end
if SOURCE ~= ARGV[1] or STATS_KEY ~= KEYS[2] then left[#left + 1] = 'keys/argv' end
table.sort(left)
return left
"""


def _library() -> str:
    body = "".join(
        f"redis.register_function('statecheck_{name}', function(keys, argv)\n"
        f"begin_call(keys, argv)\n{code}\nend)\n"
        for name, code in (("fill", _FILL + "return 1"), ("check", _CHECK))
    )
    return f"#!lua name=statecheck\n{_prelude('wf_')}\n{body}"


def test_a_call_begins_with_nothing_an_earlier_call_kept(redis_url: str) -> None:
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    if int(str(r.info("server")["redis_version"]).split(".")[0]) < 7:
        r.close()
        pytest.skip("a server without functions (each call is a fresh script there)")
    r.execute_command("FUNCTION", "LOAD", "REPLACE", _library())
    try:
        keys = [f"{{statecheck}}:k{i}" for i in range(16)]
        assert r.execute_command("FCALL", "statecheck_fill", 16, *keys, "a", "1", "0", "g") == 1
        left = r.execute_command("FCALL", "statecheck_check", 16, *keys, "b", "1", "0", "g")
        assert left == []
    finally:
        r.execute_command("FUNCTION", "DELETE", "statecheck")
        r.close()
