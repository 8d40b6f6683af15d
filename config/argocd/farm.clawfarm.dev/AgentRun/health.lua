-- Argo CD health check for farm.clawfarm.dev/AgentRun (docs/gitops.md).
-- Install as resource.customizations.health.farm.clawfarm.dev_AgentRun in
-- argocd-cm. It uses only the Lua libraries Argo CD opens for a configured
-- check (base, table): no string library.
--
--   no status yet, Pending, Queued, Retrying, Running  -> Progressing
--   Waiting (a follow-up run is scheduled)              -> Suspended
--   Succeeded                                           -> Healthy
--   Failed                                              -> Degraded
--   Cancelled                                           -> Degraded
--   being deleted                                       -> Progressing
--   a phase this check does not know                    -> Unknown
--
-- Cancelled is Degraded: the run stopped without doing its task, as Argo
-- CD's own checks treat a cancelled Tekton run; as a sync hook it fails the
-- sync rather than pass it. The message is the Succeeded condition's reason
-- and message, which say why.
local hs = {}

local function succeeded()
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Succeeded" then
      return c
    end
  end
  return nil
end

local function say(phase)
  local c = succeeded()
  if c == nil then
    return phase
  end
  local msg = phase
  if c.reason ~= nil and c.reason ~= "" and c.reason ~= phase then
    msg = msg .. " (" .. c.reason .. ")"
  end
  if c.message ~= nil and c.message ~= "" then
    msg = msg .. ": " .. c.message
  end
  return msg
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion: the run's pods are stopped and its rig released first"
  return hs
end

local phase = nil
if obj.status ~= nil then
  phase = obj.status.phase
end
if phase == nil or phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick the run up"
  return hs
end

local health = {
  Pending = "Progressing",
  Queued = "Progressing",
  Running = "Progressing",
  Retrying = "Progressing",
  Waiting = "Suspended",
  Succeeded = "Healthy",
  Failed = "Degraded",
  Cancelled = "Degraded",
}
local status = health[phase]
if status == nil then
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
  return hs
end
hs.status = status
hs.message = say(phase)
local fu = obj.status.followUp
if phase == "Waiting" and fu ~= nil and fu.run ~= nil and fu.fireTime ~= nil then
  hs.message = hs.message .. "; follow-up run " .. fu.run .. " at " .. fu.fireTime
end
return hs
