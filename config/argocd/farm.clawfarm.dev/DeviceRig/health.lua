-- Argo CD health check for farm.clawfarm.dev/DeviceRig (docs/gitops.md).
-- Install as resource.customizations.health.farm.clawfarm.dev_DeviceRig in
-- argocd-cm. It uses only the Lua libraries Argo CD opens for a configured
-- check (base, table): no string library.
--
--   Ready, InUse                                   -> Healthy
--   NotReady, Offline                              -> Degraded
--   Maintenance (spec.unschedulable)               -> Suspended
--   no status yet, a spec change not yet observed,
--   being deleted                                  -> Progressing
--   a phase this check does not know               -> Unknown
--
-- Maintenance is Suspended, not Progressing: someone set
-- spec.unschedulable on purpose, and the rig will not move on by itself
-- until it is unset (as a suspended CronJob). The message is the Ready
-- condition's reason and message, which say what is wrong.
local hs = {}

local function ready()
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" then
      return c
    end
  end
  return nil
end

local function say(phase)
  local c = ready()
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
  hs.message = "Pending deletion"
  return hs
end

local phase = nil
if obj.status ~= nil then
  phase = obj.status.phase
end
if phase == nil or phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator's first probe of the rig"
  return hs
end

local gen = obj.metadata.generation
local seen = obj.status.observedGeneration
if gen ~= nil and (seen == nil or seen < gen) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(gen)
  return hs
end

local health = {
  Ready = "Healthy",
  InUse = "Healthy",
  NotReady = "Degraded",
  Offline = "Degraded",
  Maintenance = "Suspended",
}
local status = health[phase]
if status == nil then
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
  return hs
end
hs.status = status
hs.message = say(phase)
return hs
