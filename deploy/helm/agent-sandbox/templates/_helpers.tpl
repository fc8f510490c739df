{{/*
Object names are fixed, as in deploy/ (kustomize) and upstream's chart: the ClusterRoles are
cluster-wide and the leader-election Lease name is the controller's, so one release per cluster.
*/}}
{{- define "asc.name" -}}agent-sandbox-controller{{- end }}

{{/* The app.kubernetes.io/name label: the chart's name, as upstream's chart has it. */}}
{{- define "asc.appName" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The namespace of every namespaced object: namespace.name, else the release's. */}}
{{- define "asc.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name }}
{{- end }}

{{- define "asc.serviceName" -}}
{{- default "agent-sandbox-controller" .Values.service.name }}
{{- end }}

{{- define "asc.labels" -}}
app: agent-sandbox-controller
app.kubernetes.io/name: {{ include "asc.appName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* What the Service, the PodDisruptionBudget and the NetworkPolicy select the pod by. */}}
{{- define "asc.selectorLabels" -}}
app: agent-sandbox-controller
{{- end }}

{{/*
The Deployment's selector, which is immutable: the one of the Deployment already there (made by
upstream's chart, by kustomize or by an earlier release of this chart), so that an upgrade or a
--take-ownership install changes it in place; else upstream's chart's (name and instance). The
pod carries both label sets, so either selects it.
*/}}
{{- define "asc.deploymentSelector" -}}
{{- $live := lookup "apps/v1" "Deployment" (include "asc.namespace" .) (include "asc.name" .) }}
{{- if and $live $live.spec $live.spec.selector $live.spec.selector.matchLabels }}
{{- toYaml $live.spec.selector.matchLabels }}
{{- else }}
app.kubernetes.io/name: {{ include "asc.appName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end }}

{{- define "asc.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{- define "asc.leaderElectionNamespace" -}}
{{ .Values.controller.leaderElectionNamespace | default (include "asc.namespace" .) }}
{{- end }}

{{/* The pod's securityContext: the restricted one unless set (null or {} included). */}}
{{- define "asc.podSecurityContext" -}}
{{- with .Values.podSecurityContext }}
{{- toYaml . }}
{{- else }}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- end }}

{{- define "asc.containerSecurityContext" -}}
{{- with .Values.containerSecurityContext }}
{{- toYaml . }}
{{- else }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- end }}

{{/* One flag value as the Go flag parser reads it: whole numbers without an exponent. */}}
{{- define "asc.flagValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{ int64 . }}
{{- else -}}
{{ . }}
{{- end -}}
{{- end }}

{{/* controller.* keys with a rendering of their own below, not a plain --<kebab>=<value>. */}}
{{- define "asc.dedicatedKeys" -}}
leaderElect leaderElectionNamespace extensions enableTracing extraArgs
{{- end }}

{{/* The container's args, in the order deploy/controller.yaml has them, then the other flags. */}}
{{- define "asc.args" -}}
{{- $c := .Values.controller }}
{{- if not (kindIs "invalid" $c.leaderElect) }}
- --leader-elect={{ $c.leaderElect }}
{{- end }}
{{- if $c.extensions }}
- --extensions
{{- end }}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
- --health-probe-bind-address=:{{ .Values.health.port }}
{{- with $c.leaderElectionNamespace }}
- --leader-election-namespace={{ . }}
{{- end }}
{{- if $c.enableTracing }}
- --enable-tracing
{{- end }}
{{- $dedicated := splitList " " (include "asc.dedicatedKeys" .) }}
{{- range $name, $value := $c }}
{{- if and (not (has $name $dedicated)) (not (kindIs "invalid" $value)) }}
- {{ printf "--%s=%s" (kebabcase $name) (include "asc.flagValue" $value) | quote }}
{{- end }}
{{- end }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
