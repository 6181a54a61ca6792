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
{{- list "SEDIMENT_DATABASE_URL" "SEDIMENT_AMQP_URL" "SEDIMENT_AMQP_PREFIX" "SEDIMENT_QDRANT_URL" "SEDIMENT_QDRANT_COLLECTION" "SEDIMENT_QDRANT_API_KEY" "SEDIMENT_EMBEDDING" "SEDIMENT_EMBEDDING_URL" "SEDIMENT_EMBEDDING_MODEL" "SEDIMENT_EMBEDDING_DIMENSION" "SEDIMENT_EMBEDDING_API_KEY" "SEDIMENT_MODEL_DIR" "SEDIMENT_LLM_URL" "SEDIMENT_LLM_MODEL" "SEDIMENT_LLM_API_KEY" "SEDIMENT_LISTEN" "SEDIMENT_WORKER_HEALTH_LISTEN" "SEDIMENT_SHUTDOWN_DEADLINE_MS" "SEDIMENT_S3_BUCKET" "SEDIMENT_S3_ENDPOINT" "SEDIMENT_S3_REGION" "SEDIMENT_S3_PATH_STYLE" "SEDIMENT_S3_PREFIX" "SEDIMENT_S3_ACCESS_KEY_ID" "SEDIMENT_S3_SECRET_ACCESS_KEY" "SEDIMENT_FILES_DIR" "SEDIMENT_LAYERS" "SEDIMENT_EXTRACT" "SEDIMENT_AUTH" "SEDIMENT_ADMIN_KEY" "SEDIMENT_ADMIN_KEY_FILE" "SEDIMENT_AUTH_KEY_CACHE_MS" "SEDIMENT_AUTH_JWKS_URL" "SEDIMENT_AUTH_JWKS_FILE" "SEDIMENT_AUTH_JWKS_REFRESH_MS" "SEDIMENT_AUTH_JWT_ISSUER" "SEDIMENT_AUTH_JWT_AUDIENCE" "SEDIMENT_AUTH_JWT_DEFAULT_PERMISSION" "SEDIMENT_AUTH_JWT_TEAM_CLAIM" "SEDIMENT_AUTH_JWT_AGENT_CLAIM" "SEDIMENT_AUTH_JWT_USER_CLAIM" "SEDIMENT_AUTH_JWT_PERMISSION_CLAIM" "SEDIMENT_RATE_LIMIT_RPS" "SEDIMENT_RATE_LIMIT_BURST" "SEDIMENT_QUOTA_TURNS" "SEDIMENT_QUOTA_REFRESH_MS" | concat (keys (include "sediment.layerEnv" . | fromYaml)) | toJson }}
{{- end }}

{{/* "true" while the extract worker is deployed, else empty: L1 extraction runs at all. Every
process gets it as SEDIMENT_EXTRACT, so that without the worker the API stops routing events to
its queue, where they would pile up. */}}
{{- define "sediment.extract" -}}
{{- if dig "extract" "enabled" false .Values.workers }}true{{ end }}
{{- end }}

{{/* Worker kinds that build the memory layers: deployed only while layers.enabled, and they
need the shared file store. */}}
{{- define "sediment.layerKinds" -}}
{{- list "scene" "persona" | toJson }}
{{- end }}

{{/* The layer settings: environment variable -> (value path, value). */}}
{{- define "sediment.layerEnv" -}}
{{- $s := .Values.layers.scene }}
{{- $p := .Values.layers.persona }}
SEDIMENT_SCENE_CAP: [layers.scene.cap, {{ $s.cap | toJson }}]
SEDIMENT_SCENE_AFTER_L1_MS: [layers.scene.afterL1Ms, {{ $s.afterL1Ms | toJson }}]
SEDIMENT_SCENE_MIN_GAP_MS: [layers.scene.minGapMs, {{ $s.minGapMs | toJson }}]
SEDIMENT_SCENE_MAX_WAIT_MS: [layers.scene.maxWaitMs, {{ $s.maxWaitMs | toJson }}]
SEDIMENT_SCENE_MAX_STEPS: [layers.scene.maxSteps, {{ $s.maxSteps | toJson }}]
SEDIMENT_SCENE_MAX_MEMORIES: [layers.scene.maxMemories, {{ $s.maxMemories | toJson }}]
SEDIMENT_SCENE_LEASE_MS: [layers.scene.leaseMs, {{ $s.leaseMs | toJson }}]
SEDIMENT_SCENE_RETRY_MS: [layers.scene.retryMs, {{ $s.retryMs | toJson }}]
SEDIMENT_PERSONA_MEMORY_THRESHOLD: [layers.persona.memoryThreshold, {{ $p.memoryThreshold | toJson }}]
SEDIMENT_PERSONA_LEASE_MS: [layers.persona.leaseMs, {{ $p.leaseMs | toJson }}]
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
{{- if regexMatch "(_KEY|_KEY_ID|_TOKEN|_PASSWORD|_SECRET)$" $key }}
{{- fail (printf "config.%s looks like a secret, and config is a ConfigMap: put it in secretEnv or your existingSecret" $key) }}
{{- end }}
{{- end }}
{{- if not .Values.existingSecret }}
{{- $own := include "sediment.chartSecretData" . | fromYaml }}
{{- range $key, $_ := .Values.secretEnv }}
{{- if hasKey $own $key }}
{{- fail (printf "secretEnv.%s: the chart already sets %s from its own values (see helm/README.md); set it there, not twice" $key $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not (kindIs "bool" .Values.auth.enabled) }}
{{- fail (printf "auth.enabled must be true or false (got %s)" (toJson .Values.auth.enabled)) }}
{{- end }}
{{- if and .Values.auth.adminKey (lt (len (toString .Values.auth.adminKey)) 32) }}
{{- fail "auth.adminKey must be at least 32 characters (it can create a key for any team)" }}
{{- end }}
{{- if not (regexMatch "^[1-9][0-9]*$" (toString .Values.auth.keyCacheMs)) }}
{{- fail (printf "auth.keyCacheMs (SEDIMENT_AUTH_KEY_CACHE_MS) must be a whole number above 0 (got %s)" (toJson .Values.auth.keyCacheMs)) }}
{{- end }}
{{- with .Values.auth.jwt }}
{{- if and .jwksUrl .jwksFile }}
{{- fail "auth.jwt: set jwksUrl or jwksFile, not both" }}
{{- end }}
{{- if and .jwksUrl (not (regexMatch "^https?://" (toString .jwksUrl))) }}
{{- fail (printf "auth.jwt.jwksUrl must start with https:// or http:// (got %s)" (toJson .jwksUrl)) }}
{{- end }}
{{- if and (or .jwksUrl .jwksFile) (not $.Values.auth.enabled) }}
{{- fail "auth.jwt is set while auth.enabled is false: with auth off no token is checked" }}
{{- end }}
{{- if not (has (toString .defaultPermission) (list "read" "write" "admin")) }}
{{- fail (printf "auth.jwt.defaultPermission must be read, write or admin (got %s)" (toJson .defaultPermission)) }}
{{- end }}
{{- if not (regexMatch "^[1-9][0-9]*$" (toString .jwksRefreshMs)) }}
{{- fail (printf "auth.jwt.jwksRefreshMs (SEDIMENT_AUTH_JWKS_REFRESH_MS) must be a whole number above 0 (got %s)" (toJson .jwksRefreshMs)) }}
{{- end }}
{{- range $name := list "team" "agent" "user" "permission" }}
{{- if not (index $.Values.auth.jwt.claims $name) }}
{{- fail (printf "auth.jwt.claims.%s must name a claim" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name := list "rateLimitRps" "rateLimitBurst" "quotaTurns" }}
{{- $v := index $.Values.limits $name }}
{{- /* YAML numbers arrive as float64 (1000000 prints as 1e+06), --set ones as int64. */}}
{{- if not (or (and (kindIs "float64" $v) (eq (float64 (int64 $v)) $v) (ge (int64 $v) 0)) (and (kindIs "int64" $v) (ge $v 0)) (and (kindIs "int" $v) (ge $v 0))) }}
{{- fail (printf "limits.%s must be a whole number, 0 for off (got %s)" $name (toJson (index $.Values.limits $name))) }}
{{- end }}
{{- end }}
{{- if not (regexMatch "^[1-9][0-9]*$" (toString .Values.limits.quotaRefreshMs)) }}
{{- fail (printf "limits.quotaRefreshMs (SEDIMENT_QUOTA_REFRESH_MS) must be a whole number above 0 (got %s)" (toJson .Values.limits.quotaRefreshMs)) }}
{{- end }}
{{- if not (kindIs "bool" .Values.layers.enabled) }}
{{- fail (printf "layers.enabled must be true or false (got %s)" (toJson .Values.layers.enabled)) }}
{{- end }}
{{- if and .Values.layers.enabled (not (include "sediment.extract" .)) }}
{{- fail "layers.enabled needs L1 extraction (scenes and the persona are built from memories): with workers.extract.enabled=false, set layers.enabled=false too" }}
{{- end }}
{{- range $env, $entry := include "sediment.layerEnv" . | fromYaml }}
{{- $value := index $entry 1 }}
{{- if not (and (or (kindIs "float64" $value) (kindIs "int64" $value) (kindIs "int" $value)) (eq (float64 $value) (float64 (int64 $value))) (gt (int64 $value) 0)) }}
{{- fail (printf "%s (%s) must be a whole number above 0 (got %s)" (index $entry 0) $env (toJson $value)) }}
{{- end }}
{{- end }}
{{- $s3 := .Values.files.s3 }}
{{- if $s3.bucket }}
{{- if not (regexMatch "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$" $s3.bucket) }}
{{- fail (printf "files.s3.bucket must be an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-' (got %q)" $s3.bucket) }}
{{- end }}
{{- if and $s3.endpoint (not (regexMatch "^https?://[^/]" $s3.endpoint)) }}
{{- fail (printf "files.s3.endpoint must start with http:// or https:// (got %q)" $s3.endpoint) }}
{{- end }}
{{- if not $s3.region }}
{{- fail "files.s3.region is required with files.s3.bucket (us-east-1 suits MinIO and most S3-compatible stores)" }}
{{- end }}
{{- if not (kindIs "bool" $s3.pathStyle) }}
{{- fail (printf "files.s3.pathStyle must be true or false (got %s)" (toJson $s3.pathStyle)) }}
{{- end }}
{{- if $s3.existingSecret }}
{{- if not (and $s3.existingSecretKeys.accessKeyId $s3.existingSecretKeys.secretAccessKey) }}
{{- fail "files.s3.existingSecretKeys.accessKeyId and .secretAccessKey must name the keys of files.s3.existingSecret" }}
{{- end }}
{{- else if and (not .Values.existingSecret) (ne (not $s3.accessKeyId) (not $s3.secretAccessKey)) }}
{{- fail "files.s3.accessKeyId and files.s3.secretAccessKey go together: set both or neither" }}
{{- end }}
{{- else if or $s3.endpoint $s3.prefix }}
{{- fail "files.s3.endpoint and files.s3.prefix need files.s3.bucket (without a bucket there is no S3)" }}
{{- end }}
{{- if not (kindIs "bool" .Values.files.allowLocal) }}
{{- fail (printf "files.allowLocal must be true or false (got %s)" (toJson .Values.files.allowLocal)) }}
{{- end }}
{{- if not (or $s3.bucket (hasPrefix "/" (toString .Values.files.localDir))) }}
{{- fail (printf "files.localDir must be an absolute path (got %q)" (toString .Values.files.localDir)) }}
{{- end }}
{{- $deadline := int64 .Values.shutdownDeadlineMs }}
{{- if le $deadline 0 }}
{{- fail "shutdownDeadlineMs must be greater than zero" }}
{{- end }}
{{- if le (mul (int64 .Values.api.terminationGracePeriodSeconds) 1000) $deadline }}
{{- fail (printf "api.terminationGracePeriodSeconds (%v s) must exceed shutdownDeadlineMs (%v ms)" .Values.api.terminationGracePeriodSeconds .Values.shutdownDeadlineMs) }}
{{- end }}
{{- $fileUsers := list }}
{{- range $kind, $w := .Values.workers }}
{{- if not (regexMatch "^[a-z][a-z0-9-]*$" $kind) }}
{{- fail (printf "workers.%s: a worker kind is lowercase letters, digits and '-'" $kind) }}
{{- end }}
{{- $w := dict }}
{{- include "sediment.worker" (dict "root" $ "kind" $kind "out" $w) }}
{{- if le (mul (int64 $w.terminationGracePeriodSeconds) 1000) $deadline }}
{{- fail (printf "workers.%s.terminationGracePeriodSeconds (%v s) must exceed shutdownDeadlineMs (%v ms)" $kind $w.terminationGracePeriodSeconds $.Values.shutdownDeadlineMs) }}
{{- end }}
{{- if and $w.enabled $w.layer }}
{{- $fileUsers = append $fileUsers (printf "workers.%s" $kind) }}
{{- end }}
{{- end }}
{{- if and $fileUsers (not .Values.files.s3.bucket) (not .Values.files.allowLocal) }}
{{- fail (printf "files.s3.bucket is required while %s %s enabled: the API and every worker replica must share one file store for the scene and persona documents. Set files.s3.bucket (and files.s3.endpoint, credentials ...), or turn the layers off (layers.enabled=false) or those workers (workers.<kind>.enabled=false). files.allowLocal=true keeps a local directory per pod instead, for single-replica tests only." (join " and " $fileUsers) (ternary "are" "is" (gt (len $fileUsers) 1))) }}
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
{{- /* Scene and persona: off with the layers, and users of the file store. */}}
{{- $_ := set $w "layer" (has .kind (include "sediment.layerKinds" $root | fromJsonArray)) }}
{{- if and $w.layer (not $root.Values.layers.enabled) }}
{{- $_ := set $w "enabled" false }}
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
{{- with .Values.files.s3 }}
{{- if .bucket }}
SEDIMENT_S3_BUCKET: {{ .bucket | quote }}
{{- with .endpoint }}
SEDIMENT_S3_ENDPOINT: {{ . | quote }}
{{- end }}
SEDIMENT_S3_REGION: {{ .region | quote }}
SEDIMENT_S3_PATH_STYLE: {{ .pathStyle | toString | quote }}
{{- with .prefix }}
SEDIMENT_S3_PREFIX: {{ . | quote }}
{{- end }}
{{- else }}
SEDIMENT_FILES_DIR: {{ $.Values.files.localDir | quote }}
{{- end }}
{{- end }}
SEDIMENT_LAYERS: {{ .Values.layers.enabled | toString | quote }}
SEDIMENT_EXTRACT: {{ include "sediment.extract" . | empty | not | toString | quote }}
{{- range $env, $entry := include "sediment.layerEnv" . | fromYaml }}
{{ $env }}: {{ index $entry 1 | int64 | toString | quote }}
{{- end }}
SEDIMENT_SHUTDOWN_DEADLINE_MS: {{ .Values.shutdownDeadlineMs | int64 | toString | quote }}
{{- if not .Values.auth.enabled }}
SEDIMENT_AUTH: "off"
{{- end }}
SEDIMENT_AUTH_KEY_CACHE_MS: {{ .Values.auth.keyCacheMs | int64 | toString | quote }}
{{- with .Values.auth.jwt }}
{{- if or .jwksUrl .jwksFile }}
{{- with .jwksUrl }}
SEDIMENT_AUTH_JWKS_URL: {{ . | quote }}
{{- end }}
{{- with .jwksFile }}
SEDIMENT_AUTH_JWKS_FILE: {{ . | quote }}
{{- end }}
SEDIMENT_AUTH_JWKS_REFRESH_MS: {{ .jwksRefreshMs | int64 | toString | quote }}
{{- with .issuer }}
SEDIMENT_AUTH_JWT_ISSUER: {{ . | quote }}
{{- end }}
{{- with .audience }}
SEDIMENT_AUTH_JWT_AUDIENCE: {{ . | quote }}
{{- end }}
SEDIMENT_AUTH_JWT_DEFAULT_PERMISSION: {{ .defaultPermission | quote }}
SEDIMENT_AUTH_JWT_TEAM_CLAIM: {{ .claims.team | quote }}
SEDIMENT_AUTH_JWT_AGENT_CLAIM: {{ .claims.agent | quote }}
SEDIMENT_AUTH_JWT_USER_CLAIM: {{ .claims.user | quote }}
SEDIMENT_AUTH_JWT_PERMISSION_CLAIM: {{ .claims.permission | quote }}
{{- end }}
{{- end }}
{{- with .Values.limits }}
{{- if gt (int64 .rateLimitRps) 0 }}
SEDIMENT_RATE_LIMIT_RPS: {{ .rateLimitRps | int64 | toString | quote }}
{{- if gt (int64 .rateLimitBurst) 0 }}
SEDIMENT_RATE_LIMIT_BURST: {{ .rateLimitBurst | int64 | toString | quote }}
{{- end }}
{{- end }}
{{- if gt (int64 .quotaTurns) 0 }}
SEDIMENT_QUOTA_TURNS: {{ .quotaTurns | int64 | toString | quote }}
SEDIMENT_QUOTA_REFRESH_MS: {{ .quotaRefreshMs | int64 | toString | quote }}
{{- end }}
{{- end }}
{{- range $key, $value := .Values.config }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* Secret settings: the Secret's stringData (unless existingSecret). */}}
{{- define "sediment.secretData" -}}
{{ include "sediment.chartSecretData" . }}
{{- range $key, $value := .Values.secretEnv }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* The secret settings the chart's own values set (secretEnv aside). */}}
{{- define "sediment.chartSecretData" -}}
SEDIMENT_DATABASE_URL: {{ .Values.database.url | quote }}
{{- if .Values.auth.enabled }}
SEDIMENT_ADMIN_KEY: {{ include "sediment.adminKey" . | quote }}
{{- end }}
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
{{- with .Values.files.s3 }}
{{- if and .bucket (not .existingSecret) .accessKeyId }}
SEDIMENT_S3_ACCESS_KEY_ID: {{ .accessKeyId | quote }}
SEDIMENT_S3_SECRET_ACCESS_KEY: {{ .secretAccessKey | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The admin key: auth.adminKey, else the one the release's Secret already holds (so an
upgrade keeps it), else a new random one. */}}
{{- define "sediment.adminKey" -}}
{{- if .Values.auth.adminKey }}
{{- .Values.auth.adminKey }}
{{- else }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "sediment.fullname" .) }}
{{- $existing := dig "data" "SEDIMENT_ADMIN_KEY" "" ($secret | default dict) }}
{{- if $existing }}
{{- $existing | b64dec }}
{{- else }}
{{- randAlphaNum 48 }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod annotations that roll the pods when the settings change. */}}
{{- define "sediment.checksums" -}}
checksum/config: {{ include "sediment.configData" . | sha256sum }}
{{- if not .Values.existingSecret }}
checksum/secret: {{ include "sediment.secretData" . | sha256sum }}
{{- end }}
{{- end }}

{{/* EnvVar entries of every sediment container: the S3 keys from files.s3.existingSecret. */}}
{{- define "sediment.env" -}}
{{- with .Values.files.s3 }}
{{- if and .bucket .existingSecret }}
- name: SEDIMENT_S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .existingSecretKeys.accessKeyId }}
- name: SEDIMENT_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .existingSecretKeys.secretAccessKey }}
{{- end }}
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
