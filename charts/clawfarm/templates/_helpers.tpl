{{/* Names and labels shared by every object of the chart. */}}
{{- define "clawfarm.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "clawfarm.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "clawfarm.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{/*
The manager Deployments: [{}] without shards (one manager, as ever), else
shards as given. A shard name or a pool given twice fails the render: a
pool served by two shards would have two managers hand out its rigs.
*/}}
{{- define "clawfarm.shards" -}}
{{- if .Values.shards -}}
{{- $names := dict -}}
{{- $pools := dict -}}
{{- range .Values.shards -}}
{{- if hasKey $names .name -}}
{{- fail (printf "shards: two shards are named %s; give each its own name" .name) -}}
{{- end -}}
{{- $_ := set $names .name true -}}
{{- $shard := .name -}}
{{- range .pools -}}
{{- if hasKey $pools . -}}
{{- fail (printf "shards: pool %s is in shards %s and %s; a pool belongs to one shard" . (get $pools .) $shard) -}}
{{- end -}}
{{- $_ := set $pools . $shard -}}
{{- end -}}
{{- end -}}
{{- toYaml .Values.shards -}}
{{- else -}}
{{- toYaml (list (dict)) -}}
{{- end -}}
{{- end -}}

{{/* Every pool a shard serves, in shard order. */}}
{{- define "clawfarm.shardPools" -}}
{{- $pools := list -}}
{{- range .Values.shards -}}
{{- $pools = concat $pools .pools -}}
{{- end -}}
{{- toYaml $pools -}}
{{- end -}}

{{/* A manager Deployment's name: (dict "root" $ "shard" $shard). */}}
{{- define "clawfarm.managerName" -}}
{{- if .shard.name -}}
{{- printf "%s-manager-%s" (include "clawfarm.fullname" .root) .shard.name -}}
{{- else -}}
{{- printf "%s-manager" (include "clawfarm.fullname" .root) -}}
{{- end -}}
{{- end -}}

{{/* A manager Deployment's pod selector: every manager's labels, and its shard's. */}}
{{- define "clawfarm.managerSelectorLabels" -}}
{{ include "clawfarm.selectorLabels" .root }}
{{- with .shard.name }}
farm.clawfarm.dev/shard: {{ . }}
{{- end }}
{{- end -}}

{{- define "clawfarm.serverSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{/*
The trace server's URL as loop pods reach it: server.url, else the chart's
Service; empty when the server is off.
*/}}
{{- define "clawfarm.traceURL" -}}
{{- if .Values.server.enabled -}}
{{- if .Values.server.url -}}
{{- .Values.server.url -}}
{{- else -}}
{{- printf "%s://%s-server.%s.svc:%v" (ternary "https" "http" (not (empty .Values.server.tls.secretName))) (include "clawfarm.fullname" .) .Release.Namespace .Values.server.port -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
An image: repository@digest when a digest is set (the tag is ignored), else
repository:tag, the tag defaulting to the chart's appVersion. Call it with
(dict "image" .Values.image.manager "chart" .Chart).
*/}}
{{- define "clawfarm.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "clawfarm.managerImage" -}}
{{- include "clawfarm.image" (dict "image" .Values.image.manager "chart" .Chart) -}}
{{- end -}}

{{- define "clawfarm.loopImage" -}}
{{- include "clawfarm.image" (dict "image" .Values.image.loop "chart" .Chart) -}}
{{- end -}}

{{/* imagePullSecrets of a pod or a ServiceAccount, unindented; empty when there are none. */}}
{{- define "clawfarm.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* The namespaces where runs live: runs.namespaces, or the release namespace. */}}
{{- define "clawfarm.runNamespaces" -}}
{{- if .Values.runs.namespaces -}}
{{- toYaml .Values.runs.namespaces -}}
{{- else -}}
{{- toYaml (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
The namespaces the manager acts in: the run namespaces and its own.
*/}}
{{- define "clawfarm.managerNamespaces" -}}
{{- toYaml (append (include "clawfarm.runNamespaces" . | fromYamlArray) .Release.Namespace | uniq) -}}
{{- end -}}

{{/*
The price list ConfigMap the manager reads (--pricing-configmap), as
namespace/name: the chart's own when pricing.prices is set, else
pricing.configMap; empty for none.
*/}}
{{- define "clawfarm.pricingConfigMap" -}}
{{- if .Values.pricing.prices -}}
{{- printf "%s/%s-pricing" .Release.Namespace (include "clawfarm.fullname" .) -}}
{{- else -}}
{{- .Values.pricing.configMap -}}
{{- end -}}
{{- end -}}

{{- /*
The kubernetes Service's variables pointing at .Values.apiServer (host:port),
for the operator's own containers: client-go's in-cluster config reads them.
Empty when apiServer is unset.
*/}}
{{- define "clawfarm.apiServerEnv" -}}
{{- with .Values.apiServer }}
{{- $host := regexReplaceAll ":[0-9]+$" . "" }}
{{- $port := regexFind "[0-9]+$" . }}
env:
- {name: KUBERNETES_SERVICE_HOST, value: {{ $host | quote }}}
- {name: KUBERNETES_SERVICE_PORT, value: {{ $port | quote }}}
- {name: KUBERNETES_SERVICE_PORT_HTTPS, value: {{ $port | quote }}}
{{- end }}
{{- end }}

{{/*
RBAC subjects from a values list of {kind: User|Group|ServiceAccount, name,
namespace}; key names the list in the error for a ServiceAccount without
its namespace.
*/}}
{{- define "clawfarm.subjects" -}}
{{- range .subjects }}
- kind: {{ .kind }}
  name: {{ .name | quote }}
  {{- if eq .kind "ServiceAccount" }}
  namespace: {{ required (printf "%s: a ServiceAccount needs its namespace" $.key) .namespace }}
  {{- else }}
  apiGroup: rbac.authorization.k8s.io
  {{- end }}
{{- end }}
{{- end }}
