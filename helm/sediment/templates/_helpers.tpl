{{/*
Names, labels and the pieces every pod shares.
*/}}

{{- define "sediment.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sediment.fullname" -}}
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

{{- define "sediment.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sediment.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sediment.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sediment.labels" -}}
helm.sh/chart: {{ include "sediment.chart" . }}
{{ include "sediment.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sediment
{{- end }}

{{/* Labels of one component; call with (dict "root" $ "component" "api"). */}}
{{- define "sediment.componentLabels" -}}
{{ include "sediment.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sediment.componentSelectorLabels" -}}
{{ include "sediment.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sediment.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sediment.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sediment.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret every pod reads its secret settings from. */}}
{{- define "sediment.secretName" -}}
{{- default (include "sediment.fullname" .) .Values.existingSecret }}
{{- end }}

{{/* Environment variables the chart sets itself; `config` may not set them. */}}
{{- define "sediment.managedEnv" -}}
{{- list "SEDIMENT_DATABASE_URL" "SEDIMENT_AMQP_URL" "SEDIMENT_AMQP_PREFIX" "SEDIMENT_QDRANT_URL" "SEDIMENT_QDRANT_COLLECTION" "SEDIMENT_QDRANT_API_KEY" "SEDIMENT_EMBEDDING" "SEDIMENT_EMBEDDING_URL" "SEDIMENT_EMBEDDING_MODEL" "SEDIMENT_EMBEDDING_DIMENSION" "SEDIMENT_EMBEDDING_API_KEY" "SEDIMENT_MODEL_DIR" "SEDIMENT_LLM_URL" "SEDIMENT_LLM_MODEL" "SEDIMENT_LLM_API_KEY" "SEDIMENT_LISTEN" "SEDIMENT_WORKER_HEALTH_LISTEN" "SEDIMENT_SHUTDOWN_DEADLINE_MS" | toJson }}
{{- end }}

{{/*
Checks values the Kubernetes schemas cannot: fails the render with a message naming the value.
*/}}
{{- define "sediment.validate" -}}
{{- if not .Values.qdrant.url }}
{{- fail "qdrant.url is required: the API and the workers share one Qdrant server (the in-process Qdrant Edge index is for the embedded deployment only)" }}
{{- end }}
{{- if not (regexMatch "^https?://" .Values.qdrant.url) }}
{{- fail (printf "qdrant.url must start with http:// or https:// (got %q)" .Values.qdrant.url) }}
{{- end }}
{{- if not .Values.existingSecret }}
{{- if not (regexMatch "^postgres(ql)?://" .Values.database.url) }}
{{- fail "database.url must be a postgres:// URL (or set existingSecret)" }}
{{- end }}
{{- if not (regexMatch "^amqps?://" .Values.rabbitmq.url) }}
{{- fail "rabbitmq.url must be an amqp:// URL (or set existingSecret)" }}
{{- end }}
{{- end }}
{{- if not (regexMatch "^[A-Za-z0-9._-]+$" .Values.rabbitmq.prefix) }}
{{- fail "rabbitmq.prefix may hold only ASCII letters, digits, '.', '-' and '_'" }}
{{- end }}
{{- if not (has .Values.embedding.provider (list "none" "openai" "local" "auto")) }}
{{- fail (printf "embedding.provider must be none, openai, local or auto (got %q)" .Values.embedding.provider) }}
{{- end }}
{{- if and (eq .Values.embedding.provider "openai") (not .Values.embedding.url) }}
{{- fail "embedding.url is required when embedding.provider is openai" }}
{{- end }}
{{- if and .Values.llm.url (not (regexMatch "^https?://" .Values.llm.url)) }}
{{- fail (printf "llm.url must start with http:// or https:// (got %q)" .Values.llm.url) }}
{{- end }}
{{- if and .Values.llm.url (not .Values.llm.model) }}
{{- fail "llm.model is required when llm.url is set" }}
{{- end }}
{{- if and (not .Values.llm.url) (or .Values.llm.model (and .Values.llm.apiKey (not .Values.existingSecret))) }}
{{- fail "llm.url must be set when llm.model or llm.apiKey is (without it sediment runs the rules engines)" }}
{{- end }}
{{- $managed := include "sediment.managedEnv" . | fromJsonArray }}
{{- range $key, $_ := .Values.config }}
{{- if has $key $managed }}
{{- fail (printf "config.%s: the chart sets %s itself; use the matching value instead (see helm/README.md)" $key $key) }}
{{- end }}
{{- end }}
{{- $deadline := int64 .Values.shutdownDeadlineMs }}
{{- if le $deadline 0 }}
{{- fail "shutdownDeadlineMs must be greater than zero" }}
{{- end }}
{{- if le (mul (int64 .Values.api.terminationGracePeriodSeconds) 1000) $deadline }}
{{- fail (printf "api.terminationGracePeriodSeconds (%v s) must exceed shutdownDeadlineMs (%v ms)" .Values.api.terminationGracePeriodSeconds .Values.shutdownDeadlineMs) }}
{{- end }}
{{- range $kind, $w := .Values.workers }}
{{- if not (regexMatch "^[a-z][a-z0-9-]*$" $kind) }}
{{- fail (printf "workers.%s: a worker kind is lowercase letters, digits and '-'" $kind) }}
{{- end }}
{{- $w := dict }}
{{- include "sediment.worker" (dict "root" $ "kind" $kind "out" $w) }}
{{- if le (mul (int64 $w.terminationGracePeriodSeconds) 1000) $deadline }}
{{- fail (printf "workers.%s.terminationGracePeriodSeconds (%v s) must exceed shutdownDeadlineMs (%v ms)" $kind $w.terminationGracePeriodSeconds $.Values.shutdownDeadlineMs) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
One worker's settings: workerDefaults overlaid by its entry in `workers`, plus `kind`, `queue`
and `command`. It fills the dict passed as "out" rather than returning text, so numbers keep
their type. Call with (dict "root" $ "kind" "index" "out" $w).
*/}}
{{- define "sediment.worker" -}}
{{- $root := .root }}
{{- $w := .out }}
{{- range $key, $value := deepCopy $root.Values.workerDefaults }}
{{- $_ := set $w $key $value }}
{{- end }}
{{- /* Two levels deep, by hand: sprig's merge functions never overwrite with false or 0. */}}
{{- $entry := index $root.Values.workers .kind | default (dict) }}
{{- range $key, $value := deepCopy $entry }}
{{- if and (kindIs "map" $value) (kindIs "map" (get $w $key)) }}
{{- range $k, $v := $value }}
{{- $_ := set (get $w $key) $k $v }}
{{- end }}
{{- else }}
{{- $_ := set $w $key $value }}
{{- end }}
{{- end }}
{{- $_ := set $w "kind" .kind }}
{{- $_ := set $w "queue" (printf "%s.%s" $root.Values.rabbitmq.prefix .kind) }}
{{- if not $w.command }}
{{- $_ := set $w "command" (list (printf "sediment-%s" .kind)) }}
{{- end }}
{{- if not (hasKey $w "enabled") }}
{{- $_ := set $w "enabled" true }}
{{- end }}
{{- end }}

{{/* Non-secret settings: the ConfigMap's data. */}}
{{- define "sediment.configData" -}}
SEDIMENT_AMQP_PREFIX: {{ .Values.rabbitmq.prefix | quote }}
SEDIMENT_QDRANT_URL: {{ .Values.qdrant.url | quote }}
SEDIMENT_QDRANT_COLLECTION: {{ .Values.qdrant.collection | quote }}
SEDIMENT_EMBEDDING: {{ .Values.embedding.provider | quote }}
{{- with .Values.embedding.url }}
SEDIMENT_EMBEDDING_URL: {{ . | quote }}
{{- end }}
{{- with .Values.embedding.model }}
SEDIMENT_EMBEDDING_MODEL: {{ . | quote }}
{{- end }}
{{- with .Values.embedding.dimension }}
SEDIMENT_EMBEDDING_DIMENSION: {{ . | toString | quote }}
{{- end }}
{{- with .Values.embedding.modelDir }}
SEDIMENT_MODEL_DIR: {{ . | quote }}
{{- end }}
{{- with .Values.llm.url }}
SEDIMENT_LLM_URL: {{ . | quote }}
{{- end }}
{{- with .Values.llm.model }}
SEDIMENT_LLM_MODEL: {{ . | quote }}
{{- end }}
SEDIMENT_SHUTDOWN_DEADLINE_MS: {{ .Values.shutdownDeadlineMs | int64 | toString | quote }}
{{- range $key, $value := .Values.config }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* Secret settings: the Secret's stringData (unless existingSecret). */}}
{{- define "sediment.secretData" -}}
SEDIMENT_DATABASE_URL: {{ .Values.database.url | quote }}
SEDIMENT_AMQP_URL: {{ .Values.rabbitmq.url | quote }}
{{- with .Values.qdrant.apiKey }}
SEDIMENT_QDRANT_API_KEY: {{ . | quote }}
{{- end }}
{{- with .Values.embedding.apiKey }}
SEDIMENT_EMBEDDING_API_KEY: {{ . | quote }}
{{- end }}
{{- with .Values.llm.apiKey }}
SEDIMENT_LLM_API_KEY: {{ . | quote }}
{{- end }}
{{- range $key, $value := .Values.secretEnv }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* Pod annotations that roll the pods when the settings change. */}}
{{- define "sediment.checksums" -}}
checksum/config: {{ include "sediment.configData" . | sha256sum }}
{{- if not .Values.existingSecret }}
checksum/secret: {{ include "sediment.secretData" . | sha256sum }}
{{- end }}
{{- end }}

{{/* envFrom of every sediment container. */}}
{{- define "sediment.envFrom" -}}
- configMapRef:
    name: {{ include "sediment.fullname" . }}
- secretRef:
    name: {{ include "sediment.secretName" . }}
{{- with .Values.extraEnvFrom }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes of every sediment pod: a writable /tmp under a read-only root, plus extras. */}}
{{- define "sediment.volumes" -}}
- name: tmp
  emptyDir: {}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sediment.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}
