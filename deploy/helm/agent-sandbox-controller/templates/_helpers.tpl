{{/*
Object names are fixed, as in deploy/ (kustomize): the ClusterRoles are cluster-wide and the
leader-election Lease name is the controller's, so one release per cluster.
*/}}
{{- define "asc.name" -}}agent-sandbox-controller{{- end }}

{{- define "asc.labels" -}}
app: agent-sandbox-controller
app.kubernetes.io/name: agent-sandbox-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "asc.selectorLabels" -}}
app: agent-sandbox-controller
{{- end }}

{{- define "asc.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{- define "asc.leaderElectionNamespace" -}}
{{ .Values.leaderElection.namespace | default .Release.Namespace }}
{{- end }}

{{/* One flag value as the Go flag parser reads it: whole numbers without an exponent. */}}
{{- define "asc.flagValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{ int64 . }}
{{- else -}}
{{ . }}
{{- end -}}
{{- end }}

{{/* The container's args, in the order deploy/controller.yaml has them, then the other flags. */}}
{{- define "asc.args" -}}
- --leader-elect={{ .Values.leaderElection.enabled }}
{{- if .Values.extensions }}
- --extensions
{{- end }}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
- --health-probe-bind-address=:{{ .Values.health.port }}
{{- with .Values.leaderElection.namespace }}
- --leader-election-namespace={{ . }}
{{- end }}
{{- if .Values.tracing.enabled }}
- --enable-tracing
{{- end }}
{{- range $name, $value := .Values.flags }}
{{- if not (kindIs "invalid" $value) }}
- {{ printf "--%s=%s" (kebabcase $name) (include "asc.flagValue" $value) | quote }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
