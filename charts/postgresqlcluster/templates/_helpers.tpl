{{/* The StatefulSet's name: at most 52 characters, so that its ControllerRevision names (used as a
Pod label value) stay within 63. */}}
{{- define "postgresqlcluster.fullname" -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* The client Service: the name clients connect to. */}}
{{- define "postgresqlcluster.clientName" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "postgresqlcluster.headlessName" -}}
{{- printf "%s-headless" (include "postgresqlcluster.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "postgresqlcluster.configName" -}}
{{- printf "%s-config" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "postgresqlcluster.secretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" .Release.Name | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{/* Whether the instances use password authentication. */}}
{{- define "postgresqlcluster.hasPassword" -}}
{{- if or .Values.auth.existingSecret .Values.auth.password }}true{{ end -}}
{{- end -}}

{{/* DNS name of the primary: the client Service, which selects the Pod labelled primary. */}}
{{- define "postgresqlcluster.primaryHost" -}}
{{- include "postgresqlcluster.clientName" . -}}
{{- end -}}

{{- define "postgresqlcluster.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels used in selectors: they must never change for the life of a release. */}}
{{- define "postgresqlcluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "postgresqlcluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "postgresqlcluster.labels" -}}
{{ include "postgresqlcluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.version | quote }}
app.kubernetes.io/component: database
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}
