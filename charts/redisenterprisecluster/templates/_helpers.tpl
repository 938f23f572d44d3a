{{/* The cluster's name: the release name, at most 52 characters so that the StatefulSet's
ControllerRevision names (used as a Pod label value) stay within 63. Also the Secret and the
client Service. */}}
{{- define "redisenterprisecluster.fullname" -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "redisenterprisecluster.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "true" when each node gets a PersistentVolumeClaim: enabled may be a boolean or a string. */}}
{{- define "redisenterprisecluster.persistent" -}}
{{- if eq (toString (dig "enabled" true (.Values.persistentSpec | default dict))) "true" }}true{{ end -}}
{{- end -}}

{{/* Labels used in selectors: they must never change for the life of a release. */}}
{{- define "redisenterprisecluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "redisenterprisecluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "redisenterprisecluster.labels" -}}
{{ include "redisenterprisecluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.redisEnterpriseImageSpec.versionTag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}
