{{/* Names, labels and the pieces every pod of the chart shares. */}}

{{- define "baton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "baton.fullname" -}}
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

{{- define "baton.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "baton.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "baton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "server"). */}}
{{- define "baton.componentSelector" -}}
{{ include "baton.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "baton.componentLabels" -}}
{{ include "baton.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "baton.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "baton.runnerImage" -}}
{{- $repo := default .Values.image.repository .Values.runner.image.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.runner.image.tag }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}

{{- define "baton.secretName" -}}
{{- default (include "baton.fullname" .) .Values.existingSecret }}
{{- end }}

{{/* The ConfigMap of one component: (dict "ctx" $ "component" "server"). */}}
{{- define "baton.configName" -}}
{{- printf "%s-%s" (include "baton.fullname" .ctx) .component }}
{{- end }}

{{/* The URL runners reach the nodes at: the chart's Service. */}}
{{- define "baton.serverUrl" -}}
{{- printf "http://%s:%v" (include "baton.fullname" .) .Values.server.service.port }}
{{- end }}

{{/* The same Service by a name that resolves from any namespace: what KEDA's operator,
     in its own namespace, polls the demand at. */}}
{{- define "baton.serverClusterUrl" -}}
{{- printf "http://%s.%s.svc:%v" (include "baton.fullname" .) .Release.Namespace .Values.server.service.port }}
{{- end }}

{{/* Kubernetes counts the preStop sleep inside the grace period, so both fit, plus a margin. */}}
{{- define "baton.serverTerminationGrace" -}}
{{- add .Values.server.preStopSleepSeconds .Values.server.drainGraceSeconds 5 }}
{{- end }}

{{/* An environment variable from the Secret: (dict "ctx" $ "name" "BATON_API_TOKEN" "key" "api-token"),
     with "optional" true for a key the Secret may not have (the variable is then unset). */}}
{{- define "baton.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "baton.secretName" .ctx }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end }}

{{/* Where a CA certificate from a Secret is mounted: (dict "store" "postgres"). */}}
{{- define "baton.caDir" -}}
{{- printf "/etc/baton/%s-ca" .store }}
{{- end }}

{{/* TLS to Postgres, as libpq's variables, for every pod that connects to it. */}}
{{- define "baton.postgresTlsEnv" -}}
{{- with .Values.postgres.sslMode }}
- name: PGSSLMODE
  value: {{ . | quote }}
{{- end }}
{{- if .Values.postgres.caSecret }}
- name: PGSSLROOTCERT
  value: {{ printf "%s/ca.crt" (include "baton.caDir" (dict "store" "postgres")) | quote }}
{{- end }}
{{- end }}

{{/* The stores' CA certificates, as volumes: (dict "ctx" $ "stores" (list "postgres" "redis")). */}}
{{- define "baton.caVolumes" -}}
{{- range .stores }}
{{- $secret := ternary $.ctx.Values.postgres.caSecret $.ctx.Values.redis.tls.caSecret (eq . "postgres") }}
{{- if $secret }}
- name: {{ . }}-ca
  secret:
    secretName: {{ $secret }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}
{{- end }}

{{/* And where they are mounted, read-only. */}}
{{- define "baton.caMounts" -}}
{{- range .stores }}
{{- $secret := ternary $.ctx.Values.postgres.caSecret $.ctx.Values.redis.tls.caSecret (eq . "postgres") }}
{{- if $secret }}
- name: {{ . }}-ca
  mountPath: {{ include "baton.caDir" (dict "store" .) }}
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/* The OTLP settings of one component, as ConfigMap data: (dict "ctx" $ "service" "baton"). */}}
{{- define "baton.otlpConfig" -}}
{{- with .ctx.Values.otlp }}
{{- if .enabled }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ required "otlp.endpoint is required when otlp.enabled" .endpoint | quote }}
OTEL_EXPORTER_OTLP_PROTOCOL: {{ .protocol | quote }}
OTEL_TRACES_SAMPLER_ARG: {{ .samplerRatio | toString | quote }}
OTEL_SERVICE_NAME: {{ $.service | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where a component's pods may run: its nodeSelector, tolerations and affinity. */}}
{{- define "baton.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "baton.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
