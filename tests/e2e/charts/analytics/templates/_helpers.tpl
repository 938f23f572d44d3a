{{- define "analytics.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "analytics.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "analytics.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "analytics.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "analytics.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "analytics.selectorLabels" -}}
app.kubernetes.io/name: {{ include "analytics.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "analytics.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "analytics.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "analytics.secretName" -}}
{{- default (include "analytics.fullname" .) .Values.database.existingSecret }}
{{- end }}

{{/* The environment the app and its migration Job share. */}}
{{- define "analytics.env" -}}
- name: BASE_URL
  value: {{ default "" .Values.config.baseUrl | quote }}
- name: LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: DISABLE_REGISTRATION
  value: {{ .Values.config.disableRegistration | quote }}
- name: DATABASE_HOST
  value: {{ default "" .Values.database.host | quote }}
- name: DATABASE_PORT
  value: {{ .Values.database.port | quote }}
- name: DATABASE_NAME
  value: {{ .Values.database.name | quote }}
- name: DATABASE_USER
  value: {{ .Values.database.user | quote }}
- name: DATABASE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "analytics.secretName" . }}
      key: password
- name: SMTP_HOST
  value: {{ default "" .Values.smtp.host | quote }}
- name: SMTP_PORT
  value: {{ default "" .Values.smtp.port | quote }}
- name: SMTP_FROM
  value: {{ default "" .Values.smtp.from | quote }}
{{- range $name, $value := .Values.config.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
