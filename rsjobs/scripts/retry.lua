--[[ retry.lua — RETRY or REPLAY: start a finished task over, as a new task.

RETRY starts a FAILED, TIMED_OUT or CANCELLED task over, REPLAY a SUCCEEDED one: a new task
with the old one's type, queue, payload, max_attempts, timeout, backoff, queue-wait
deadline, owner and labels (not its delay: the new task is PENDING at once), created by
ENQUEUE with the operator as its source. The two are linked both ways: the new task's
`retry_of` names the old one, the old one's `retried_as` the new one, and the old task's
history gets the RETRY / REPLAY entry (`as` = the new task's id). The old task stays in its
state (a terminal state is never left). The old task's dedup key, when it names the old
task, names the new one from now on: a submit with it answers the new task.
Starting the same task over again answers the task its `retried_as` names while that one
exists (nothing written); the caller that found it gone names it in `replaces`, and then a
new task is made. A workflow's task is refused: its workflow retries it (wf_retry.lua).
Successors (after.lua): the new task of a predecessor has no successors (the old one's were
released or cancelled by its end, once); a successor that was released (every predecessor
counted, and succeeded unless its policy is "always") starts over at once with the same
predecessors and their results, and one cancelled while it waited is refused (its
predecessors did not all succeed: submit it again after them).

KEYS: common (see fsm.lua), then
  per task (two, the old then the new): the task keys (see fsm.lua)
ARGV: common (see fsm.lua), then
  ARGV[5]  event     RETRY | REPLAY
  ARGV[6]  new_id    the new task's id (not in use)
  ARGV[7]  message   the operator's reason ('' = none)
  ARGV[8]  replaces  the task the old one's retried_as named when the caller read it and
                     found it gone ('' = none)
Returns: {code, id, state, message}
   1  started over: id and state (PENDING) of the new task
   0  already started over: id of the task its retried_as names (state ''); nothing written
  -1  no such task
  -2  refused, recorded in the old task's history (coalesced, see reject in fsm.lua): the
      task is not finished, the event is not its own (RETRY of a SUCCEEDED task, REPLAY of
      another), it is a workflow's task or a successor that was never released, its type
      or payload is missing, or its labels are not what rsjobs writes; state is its
      state, message says why
An error (nothing written) for an unknown event, an empty or used new id, a message over
4096 bytes, or a new task's queue or dedup key that is not the old one's.
Events: RETRY (FAILED | TIMED_OUT | CANCELLED -> itself) or REPLAY (SUCCEEDED -> itself) on
  the old task; ENQUEUE ('' -> PENDING) of the new one.
]]
local _, bad = layout(4, 0, 3, 0, 2)
if bad then return bad end
local event, new_id, msg, replaces = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local MSG_MAX = 4096
-- what each event starts over, for the reason of a refusal
local STARTS = {RETRY = 'a FAILED, TIMED_OUT or CANCELLED task', REPLAY = 'a SUCCEEDED task'}
if STARTS[event] == nil then
  return redis.error_reply('rsjobs: unknown restart event ' .. tostring(event))
end
if type(new_id) ~= 'string' or new_id == '' or #new_id > 64 then return bad_arg('new id', new_id) end
if type(msg) ~= 'string' or #msg > MSG_MAX then
  return bad_arg('message (at most ' .. MSG_MAX .. ' bytes)', type(msg) == 'string' and #msg)
end
local _, old_qkey, old_dkey = task_keys(1)
local new_key, new_qkey, new_dkey = task_keys(2)
if new_qkey ~= old_qkey or new_dkey ~= old_dkey then
  return bad_arg('keys of the new task (not the old task\'s queue and dedup key)', new_key)
end
if redis.call('EXISTS', new_key) == 1 then return bad_arg('new id (in use)', new_id) end
local t = load(1, {'type', 'payload', 'max_attempts', 'timeout_ms', 'backoff_base_ms',
  'backoff_max_ms', 'expires_at', 'owner', 'wf', 'retried_as', 'labels', 'after',
  'after_policy', 'predecessors', 'release_wait_ms'})
if t == nil then return {-1, '', '', 'no such task'} end
t.wf = t.f.wf or ''
local dedup = t.dedup or ''
if dedup ~= '' and string.sub(old_dkey, -(#dedup + 1)) ~= ':' .. dedup then
  return bad_arg('dedup key (not the task\'s)', old_dkey)
end

-- checks first: a refusal is recorded, and nothing else is written
local why = nil
if not TERMINAL[t.state] then
  why = 'task is ' .. t.state .. ': only a finished task can be started over'
elseif not allowed(t.state, event, t.state) then
  -- a terminal state takes the other one (the table)
  local other = 'RETRY'
  if event == 'RETRY' then other = 'REPLAY' end
  why = 'task is ' .. t.state .. ': ' .. other .. ' starts it over (' .. event .. ' starts '
    .. STARTS[event] .. ' over)'
elseif t.wf ~= '' then
  why = 'task of workflow ' .. t.wf .. ': retry it through its workflow'
elseif t.f.after then
  -- a successor: started over only once it was released (what it ran with is kept)
  for _, e in ipairs(parse_after(t.f.after)) do
    if e.state == '' or (e.state ~= 'SUCCEEDED' and t.f.after_policy ~= 'always') then
      why = 'successor never released (predecessor ' .. e.id .. ' '
        .. (e.state ~= '' and e.state or 'not finished') .. '): submit it again after its '
        .. 'predecessors'
      break
    end
  end
elseif not t.f.type or not t.f.payload then
  why = 'task has no type or payload to start over with'
elseif t.f.labels and not decode_labels(t.f.labels) then
  -- the new task gets its labels as a submit gives them (new_task indexes them)
  why = 'task has labels that are not what rsjobs writes (see rsjobs/labels.py)'
end
if why ~= nil then
  reject(t, event, why)
  return {-2, t.state, why}
end
local linked = t.f.retried_as or ''
if linked ~= '' and linked ~= replaces then
  return {0, linked, '', 'already started over as ' .. linked}
end

-- the new task: the old one's options (missing fields are enqueue's defaults)
local o = {max_attempts = tonumber(t.f.max_attempts) or MAX_ATTEMPTS,
  timeout_ms = tonumber(t.f.timeout_ms) or 0,
  backoff_base_ms = tonumber(t.f.backoff_base_ms) or BACKOFF_BASE_MS,
  backoff_max_ms = tonumber(t.f.backoff_max_ms) or BACKOFF_MAX_MS,
  owner = t.f.owner or '', priority = t.priority}
if t.f.labels then
  -- the path a submit's labels take (task_options): new_task writes and indexes them
  o.labels = t.f.labels
  o.label_table = decode_labels(t.f.labels)
end
local expires = tonumber(t.f.expires_at) or 0
if t.f.release_wait_ms then
  o.wait_timeout_ms = tonumber(t.f.release_wait_ms)  -- a successor's, from its release
elseif expires > 0 and t.created and expires > t.created then
  o.wait_timeout_ms = expires - t.created  -- the same queue-wait deadline, from now
end
if dedup ~= '' then
  -- the key moves on only from the old task (it names it as long as both exist)
  local named = redis.call('GET', old_dkey)
  if named == false or named == t.id then o.dedup = dedup end
end
local more = {'retry_of', t.id}
if t.f.after then
  -- a released successor runs again with what it ran with (PENDING at once)
  more[3] = 'after'; more[4] = t.f.after
  if t.f.after_policy then more[#more + 1] = 'after_policy'; more[#more + 1] = t.f.after_policy end
  if t.f.predecessors then more[#more + 1] = 'predecessors'; more[#more + 1] = t.f.predecessors end
end
local note = string.lower(event) .. ' of ' .. t.id .. ' (' .. t.state .. ')'
if msg ~= '' then note = note .. ': ' .. msg end
local new = new_task(2, new_id, t.f.type, t.queue, t.f.payload, o, note, more, nil)

-- the old task: a RETRY / REPLAY entry that leaves its state as it is, and the link
local f = {}
append_entry(f, t, t.state, event, msg, false, {'as', new_id})
f[#f + 1] = 'retried_as'; f[#f + 1] = new_id
redis.call('HSET', t.key, unpack(f))
count('ev:' .. event, 1)
return {1, new_id, new.state, ''}
