--[[ wf_gate.lua — the user's decisions at a gate: CONFIRM a stage, or PUBLISH.

  CONFIRM  WAITING_CONFIRMATION -> RUNNING at the next stage (its tasks are spawned next,
           drive = 1), or -> READY_TO_PUBLISH when the confirmed stage is the last one.
  PUBLISH  READY_TO_PUBLISH -> PUBLISHED, once every item of every stage has an asset of
           the current version; the published version is recorded.
An expected version / stage (from what the user saw) makes a stale decision harmless: it
is refused when the workflow has moved on. Refusals are recorded; a repeated PUBLISH of a
PUBLISHED workflow answers 0 (and is recorded as refused, changing nothing).

KEYS: common (see fsm.lua), then
  the workflow keys (see wf.lua)
ARGV: common (see fsm.lua), the workflow's (see wf.lua), then
  ARGV[7]   event           CONFIRM | PUBLISH
  ARGV[8]   expect_version  '' = any
  ARGV[9]   expect_stage    stage index, '' = any
  ARGV[10]  message         note from the caller ('' = none)
Returns: {code, status, drive, message}: 1 applied, 0 already done, -1 no such workflow,
  -2 refused (message says why; recorded).
Events: CONFIRM, PUBLISH; refused ones with rej=1.
]]
local _, bad = layout(6, 0, 0, WF_NKEYS)
if bad then return bad end
local event, ev, es, note = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local w = wf_load()
if w == nil then return reply(-1, nil, 'no such workflow') end
if event ~= 'CONFIRM' and event ~= 'PUBLISH' then
  return redis.error_reply('rsjobs: unknown gate event ' .. tostring(event))
end
local function refuse(why)
  wf_reject(w, event, why, nil)
  return reply(-2, w, why)
end
if event == 'PUBLISH' and w.status == 'PUBLISHED' then
  wf_reject(w, event, 'already PUBLISHED', nil)
  return reply(0, w, 'already PUBLISHED')
end
local wanted = 'WAITING_CONFIRMATION'
if event == 'PUBLISH' then wanted = 'READY_TO_PUBLISH' end
if w.status ~= wanted then
  return refuse('workflow is ' .. w.status .. ' (stage ' .. w.stage_name .. ', version '
    .. w.version .. '), not ' .. wanted)
end
if ev ~= '' and tonumber(ev) ~= w.version then
  return refuse('stale ' .. event .. ' for version ' .. ev .. ': the current version is '
    .. w.version)
end
if es ~= '' and tonumber(es) ~= w.stage then
  return refuse('stale ' .. event .. ' for stage ' .. es .. ': the current stage is '
    .. w.stage .. ' (' .. w.stage_name .. ')')
end
local msg = note
if event == 'PUBLISH' then
  local total, have = 0, 0
  for _, st in ipairs(wf_plan(w).stages) do total = total + #st.tasks end
  local prefix = w.version .. ':'
  local fields = redis.call('HKEYS', WF_ASSETS)
  for j = 1, #fields do
    if string.sub(fields[j], 1, #prefix) == prefix then have = have + 1 end
  end
  if have ~= total then
    return refuse('version ' .. w.version .. ' has ' .. have .. ' of ' .. total .. ' assets')
  end
  if msg == '' then msg = 'published version ' .. w.version end
  wf_transition(w, 'PUBLISH', 'PUBLISHED', msg, {'published_version', w.version,
    'published_at', NOW}, nil)
  return reply(1, w, '')
end
if w.stage + 1 >= w.n_stages then
  if msg == '' then msg = 'stage ' .. w.stage_name .. ' confirmed: ready to publish' end
  wf_transition(w, 'CONFIRM', 'READY_TO_PUBLISH', msg, nil, nil)
else
  local confirmed = w.stage_name
  open_stage(w, w.stage + 1)
  if msg == '' then msg = 'stage ' .. confirmed .. ' confirmed; next: ' .. w.stage_name end
  wf_transition(w, 'CONFIRM', 'RUNNING', msg, nil, nil)
end
return reply(1, w, '')
