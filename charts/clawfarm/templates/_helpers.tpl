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

{{- define "clawfarm.managerImage" -}}
{{- printf "%s:%s" .Values.image.manager.repository (default .Chart.AppVersion .Values.image.manager.tag) -}}
{{- end -}}

{{- define "clawfarm.loopImage" -}}
{{- printf "%s:%s" .Values.image.loop.repository (default .Chart.AppVersion .Values.image.loop.tag) -}}
{{- end -}}

{{/* The namespaces where runs live: runs.namespaces, or the release namespace. */}}
{{- define "clawfarm.runNamespaces" -}}
{{- if .Values.runs.namespaces -}}
{{- toYaml .Values.runs.namespaces -}}
{{- else -}}
{{- toYaml (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}
