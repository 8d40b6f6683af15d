{{/*
Names and addresses of the trial (trial.enabled; docs/chart.md, "A trial
without phones"), shared by trial.yaml, NOTES.txt and the admission
allow-lists.
*/}}

{{/* The prefix of the trial's objects, short enough for "-rigsim-15" to stay a DNS label. */}}
{{- define "clawfarm.trialName" -}}
{{- include "clawfarm.fullname" . | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* Where the trial lives: the first run namespace, where AgentRuns may use its rigs. */}}
{{- define "clawfarm.trialNamespace" -}}
{{- include "clawfarm.runNamespaces" . | fromYamlArray | first -}}
{{- end -}}

{{/* Rig i's name, of its rigsim Deployment, Service and DeviceRig: (dict "root" $ "i" i). */}}
{{- define "clawfarm.trialRigName" -}}
{{- printf "%s-rigsim-%d" (include "clawfarm.trialName" .root) (int .i) -}}
{{- end -}}

{{/* Rig i's host: its Service's cluster DNS name. */}}
{{- define "clawfarm.trialRigHost" -}}
{{- printf "%s.%s.svc" (include "clawfarm.trialRigName" .) (include "clawfarm.trialNamespace" .root) -}}
{{- end -}}

{{/* Every trial rig's name, in order. */}}
{{- define "clawfarm.trialRigNames" -}}
{{- $names := list -}}
{{- range $i := until (int .Values.trial.rigs) -}}
{{- $names = append $names (include "clawfarm.trialRigName" (dict "root" $ "i" $i)) -}}
{{- end -}}
{{- toYaml $names -}}
{{- end -}}

{{/* Every trial rig's host, in order. */}}
{{- define "clawfarm.trialRigHosts" -}}
{{- $hosts := list -}}
{{- range $i := until (int .Values.trial.rigs) -}}
{{- $hosts = append $hosts (include "clawfarm.trialRigHost" (dict "root" $ "i" $i)) -}}
{{- end -}}
{{- toYaml $hosts -}}
{{- end -}}

{{/* modelsim's Service, and the OpenAI-compatible base URL runs give as spec.model.baseURL. */}}
{{- define "clawfarm.trialModelsimName" -}}
{{- printf "%s-modelsim" (include "clawfarm.trialName" .) -}}
{{- end -}}

{{- define "clawfarm.trialModelURL" -}}
{{- printf "http://%s.%s.svc:8090/v1" (include "clawfarm.trialModelsimName" .) (include "clawfarm.trialNamespace" .) -}}
{{- end -}}

{{/* The model key Secret the trial's runs name (modelsim takes any key). */}}
{{- define "clawfarm.trialSecretName" -}}
{{- printf "%s-model-key" (include "clawfarm.trialName" .) -}}
{{- end -}}

{{/*
The pool the trial's rigs and runs carry when the chart runs shards: the
first shard's first pool, so a manager serves them. Empty without shards.
*/}}
{{- define "clawfarm.trialPool" -}}
{{- with .Values.shards -}}
{{- (first .).pools | first -}}
{{- end -}}
{{- end -}}

{{/*
The admission allow-lists, with the trial's own endpoints when it is on:
modelsim's URL among the model endpoints (it matters when
admission.model.inClusterServices is off), and the trial rigs' hosts among
the rig endpoints when a list restricts them (both lists empty allow any
host; adding the trial's would restrict every other rig to them).
*/}}
{{- define "clawfarm.modelBaseURLPrefixes" -}}
{{- $prefixes := .Values.admission.model.baseURLPrefixes -}}
{{- if .Values.trial.enabled -}}
{{- $prefixes = append $prefixes (include "clawfarm.trialModelURL" .) -}}
{{- end -}}
{{- toYaml $prefixes -}}
{{- end -}}

{{- define "clawfarm.rigEndpointHosts" -}}
{{- $hosts := .Values.admission.rigs.endpointHosts -}}
{{- if and .Values.trial.enabled (or .Values.admission.rigs.endpointHosts .Values.admission.rigs.endpointCIDRs) -}}
{{- $hosts = concat $hosts (include "clawfarm.trialRigHosts" . | fromYamlArray) -}}
{{- end -}}
{{- toYaml $hosts -}}
{{- end -}}

{{/*
A trial pod's selector: (dict "root" $ "component" "rigsim" "rig" name).
The rig's own label keeps each rig's Service on its one pod; the component
keeps the manager's and the trace server's selectors off these pods.
*/}}
{{- define "clawfarm.trialSelectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .rig }}
trial.clawfarm.dev/rig: {{ . }}
{{- end }}
{{- end -}}
