{{/* The cluster's name: the release name, at most 52 characters so that the StatefulSet's
ControllerRevision names (used as a Pod label value) stay within 63. Also the peer Service. */}}
{{- define "etcdcluster.fullname" -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "etcdcluster.clientName" -}}
{{- printf "%s-client" (include "etcdcluster.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "etcdcluster.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* TLS settings, empty when absent. */}}
{{- define "etcdcluster.peerSecret" -}}
{{- dig "static" "member" "peerSecret" "" (.Values.tls | default dict) -}}
{{- end -}}

{{- define "etcdcluster.clientSecret" -}}
{{- dig "static" "member" "clientSecret" "" (.Values.tls | default dict) -}}
{{- end -}}

{{- define "etcdcluster.peerScheme" -}}
{{- if include "etcdcluster.peerSecret" . }}https{{ else }}http{{ end -}}
{{- end -}}

{{- define "etcdcluster.clientScheme" -}}
{{- if include "etcdcluster.clientSecret" . }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* Labels used in selectors: they must never change for the life of a release. */}}
{{- define "etcdcluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "etcdcluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "etcdcluster.labels" -}}
{{ include "etcdcluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
etcd_cluster: {{ .Release.Name }}
{{- end -}}

{{/* Placement of the members: the top-level nodeSelector, tolerations and affinity over the older
pod.* ones (a key of both: the top-level one; tolerations of both apply). Each renders as YAML,
empty when unset. */}}
{{- define "etcdcluster.nodeSelector" -}}
{{- $pod := .Values.pod | default dict -}}
{{- $merged := merge (deepCopy (.Values.nodeSelector | default dict)) (deepCopy ($pod.nodeSelector | default dict)) -}}
{{- if $merged }}{{ toYaml $merged }}{{ end -}}
{{- end -}}

{{- define "etcdcluster.tolerations" -}}
{{- $pod := .Values.pod | default dict -}}
{{- $all := concat ($pod.tolerations | default list) (.Values.tolerations | default list) | uniq -}}
{{- if $all }}{{ toYaml $all }}{{ end -}}
{{- end -}}

{{- define "etcdcluster.affinity" -}}
{{- $pod := .Values.pod | default dict -}}
{{- $merged := merge (deepCopy (.Values.affinity | default dict)) (deepCopy ($pod.affinity | default dict)) -}}
{{- if $merged }}{{ toYaml $merged }}{{ end -}}
{{- end -}}
