{{/* Object names: the release name, at most 63 characters. */}}
{{- define "appservice.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "appservice.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels used in selectors: they must never change for the life of a release. */}}
{{- define "appservice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "appservice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "appservice.labels" -}}
{{ include "appservice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The Service port name of one `ports` entry. */}}
{{- define "appservice.portName" -}}
{{- .name | default (printf "port-%d" (int .port)) -}}
{{- end -}}
