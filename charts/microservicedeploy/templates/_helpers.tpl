{{/* Object names: the release name, at most 63 characters. */}}
{{- define "microservicedeploy.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "microservicedeploy.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The micro-service name and the instance name, defaulting to the release name. */}}
{{- define "microservicedeploy.msName" -}}
{{- .Values.msName | default .Release.Name -}}
{{- end -}}

{{- define "microservicedeploy.instanceName" -}}
{{- .Values.fullName | default .Release.Name -}}
{{- end -}}

{{/* The instance's domain name: <msName>.<path>.<domain>. */}}
{{- define "microservicedeploy.domain" -}}
{{- printf "%s.%s.%s" (include "microservicedeploy.msName" .) .Values.path .Values.domain -}}
{{- end -}}

{{/* Labels used in selectors: they must never change for the life of a release. */}}
{{- define "microservicedeploy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "microservicedeploy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "microservicedeploy.labels" -}}
{{ include "microservicedeploy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
custom.ops/ms-name: {{ include "microservicedeploy.msName" . | trunc 63 | trimSuffix "-" }}
custom.ops/path: {{ .Values.path | quote }}
{{- end -}}

{{/* Free-form facts about the instance (annotations take any text). */}}
{{- define "microservicedeploy.annotations" -}}
custom.ops/full-name: {{ include "microservicedeploy.instanceName" . | quote }}
custom.ops/version: {{ .Values.version | quote }}
custom.ops/domain: {{ include "microservicedeploy.domain" . | quote }}
{{- with .Values.creationTimestamp }}
custom.ops/creation-timestamp: {{ . | quote }}
{{- end }}
{{- end -}}
