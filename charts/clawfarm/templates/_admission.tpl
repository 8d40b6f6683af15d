{{/*
The fields of an object, as a CEL list of the names whose value differs
between object and oldObject: (dict "path" "status" "fields" (list …)).
A field absent on both sides is unchanged; the optional selectors keep an
absent field from being an error.
*/}}
{{- define "clawfarm.admission.changedFields" -}}
[
{{- range $i, $f := .fields }}
  {{ if $i }}, {{ end }}object.?{{ $.path }}.?{{ $f }} == oldObject.?{{ $.path }}.?{{ $f }} ? '' : '{{ $f }}'
{{- end }}
].filter(f, f != '')
{{- end -}}

{{/* The status fields a loop pod must leave alone: every one but progress. */}}
{{- define "clawfarm.admission.statusFieldsButProgress" -}}
{{- toYaml (list "observedGeneration" "phase" "rig" "attempt" "infraRetries" "nextAttemptTime" "sentinel" "recap" "exitReason" "attempts" "followUp" "jobs" "usage" "queuedAt" "startTime" "completionTime" "conditions" "joined" "collectedInto" "steeredInto") -}}
{{- end -}}

{{/* The spec fields a follow-up Job must leave alone on a run: every one but cancel. */}}
{{- define "clawfarm.admission.specFieldsButCancel" -}}
{{- toYaml (list "rigRef" "rigSelector" "trigger" "queueMode" "model" "limits" "skills" "bootstrap" "systemPromptAppend" "denyTools" "followUp" "ttlSecondsAfterFinished" "pod") -}}
{{- end -}}
