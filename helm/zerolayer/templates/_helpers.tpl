{{/* Names and labels shared by every template. */}}

{{- define "zerolayer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name: the RayService, and the prefix of every other object. Short
enough for the names KubeRay derives from it (clusters, services, pods). */}}
{{- define "zerolayer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "zerolayer.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "zerolayer.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "zerolayer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "zerolayer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "zerolayer.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "zerolayer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: zerolayer
{{- end -}}

{{/* Pods that may reach the platform's Redis (the NetworkPolicy admits these alone). */}}
{{- define "zerolayer.redisClientLabel" -}}
zerolayer.io/redis-client: "true"
{{- end -}}

{{- define "zerolayer.image" -}}
{{- $tag := .Values.image.tag | default (printf "%s-%s" .Chart.AppVersion .Values.accelerator) -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "zerolayer.adminSecret" -}}
{{- .Values.adminKey.existingSecret | default (printf "%s-admin" (include "zerolayer.fullname" .)) -}}
{{- end -}}

{{- define "zerolayer.redisSecret" -}}
{{- printf "%s-redis" (include "zerolayer.fullname" .) -}}
{{- end -}}

{{- define "zerolayer.redisHost" -}}
{{- printf "%s-redis" (include "zerolayer.fullname" .) -}}
{{- end -}}

{{- define "zerolayer.cacheClaim" -}}
{{- .Values.cache.existingClaim | default (printf "%s-cache" (include "zerolayer.fullname" .)) -}}
{{- end -}}

{{/* The serveConfigV2 text: the operator's own (serveConfig) or the chart's generated copy. */}}
{{- define "zerolayer.serveConfig" -}}
{{- if .Values.serveConfig -}}
{{- .Values.serveConfig -}}
{{- else -}}
{{- .Files.Get (printf "files/serve-config.%s.yaml" .Values.accelerator) -}}
{{- end -}}
{{- end -}}

{{/* A secret value kept across upgrades: the live Secret's, else a new random one. */}}
{{- define "zerolayer.keptSecret" -}}
{{- $found := lookup "v1" "Secret" .namespace .name -}}
{{- if and $found (hasKey $found.data .key) -}}
{{- index $found.data .key -}}
{{- else -}}
{{- printf "%s%s" .prefix (randAlphaNum 40) | b64enc -}}
{{- end -}}
{{- end -}}

{{/* Environment of every container that runs zerolayer code (Ray pods, the prepare Job). */}}
{{- define "zerolayer.env" -}}
{{- if .Values.redis.enabled }}
- name: REDIS_URL
  value: {{ printf "redis://%s:6379/0" (include "zerolayer.redisHost" .) | quote }}
- name: REDIS_PASSWORD_FILE
  value: /etc/zerolayer/redis/password
{{- else }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "redis.external.existingSecret is required when redis.enabled is false" .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.urlKey }}
{{- end }}
- name: ZEROLAYER_ADMIN_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "zerolayer.adminSecret" . }}
      key: {{ .Values.adminKey.secretKey }}
{{- with .Values.files }}
{{- if .url }}
- name: ZEROLAYER_FILES_URL
  value: {{ .url | quote }}
{{- end }}
{{- if .existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .secretAccessKeyKey }}
- name: AWS_ENDPOINT_URL
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .endpointUrlKey }}
      optional: true
{{- end }}
{{- end }}
- name: RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH
  value: zerolayer.gateway.edge:middlewares
- name: HOME
  value: /tmp/home
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "zerolayer.volumeMounts" -}}
- name: cache
  mountPath: /var/cache/zerolayer
- name: serve-config
  mountPath: /etc/zerolayer/serve
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.redis.enabled }}
- name: redis-password
  mountPath: /etc/zerolayer/redis
  readOnly: true
{{- end }}
{{- end -}}

{{- define "zerolayer.volumes" -}}
- name: cache
  persistentVolumeClaim:
    claimName: {{ include "zerolayer.cacheClaim" . }}
- name: serve-config
  configMap:
    name: {{ include "zerolayer.fullname" . }}-serve-config
- name: tmp
  emptyDir: {}
{{- if .Values.redis.enabled }}
- name: redis-password
  secret:
    secretName: {{ include "zerolayer.redisSecret" . }}
    items:
      - key: password
        path: password
{{- end }}
{{- end -}}
