{{/* The base name of every object: the release's name when it holds the chart's. */}}
{{- define "camproxy.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; "component" is the object's part (gateway, injector, …). */}}
{{- define "camproxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: camproxy
app.kubernetes.io/version: {{ include "camproxy.tag" .root | quote }}
{{ include "camproxy.selector" . }}
{{- end -}}

{{/* The labels a component's selectors match: its name and the release. */}}
{{- define "camproxy.selector" -}}
app.kubernetes.io/name: {{ include "camproxy.name" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A component's object name: the gateway is the fullname, the others fullname-component. */}}
{{- define "camproxy.name" -}}
{{- if eq .component "gateway" -}}
{{- include "camproxy.fullname" .root -}}
{{- else -}}
{{- printf "%s-%s" (include "camproxy.fullname" .root) .component -}}
{{- end -}}
{{- end -}}

{{- define "camproxy.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "camproxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "camproxy.tag" .) -}}
{{- end -}}

{{/* The ConfigMap of config.yaml, the same name in the release's and every agent namespace. */}}
{{- define "camproxy.configMap" -}}
{{- include "camproxy.fullname" . -}}
{{- end -}}

{{- define "camproxy.adminSecret" -}}
{{- .Values.admin.existingSecret | default (printf "%s-admin" (include "camproxy.fullname" .)) -}}
{{- end -}}

{{/* A Service's in-cluster host: sidecars run in other namespaces, so always the full name. */}}
{{- define "camproxy.host" -}}
{{- printf "%s.%s.svc.cluster.local" (include "camproxy.name" .) .root.Release.Namespace -}}
{{- end -}}

{{/* The fleet's Redis URL. */}}
{{- define "camproxy.redisURL" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://%s:6379/0" (include "camproxy.host" (dict "root" . "component" "redis")) -}}
{{- else if .Values.redis.external.url -}}
{{- .Values.redis.external.url -}}
{{- else -}}
{{- fail "redis: set redis.enabled or redis.external.url: the gateway replicas and every sidecar share episodes, arm statistics and the replay stream through one Redis" -}}
{{- end -}}
{{- end -}}

{{/* The fleet's Redis URL with one more query parameter ("root", "query"): a replay
stream, a learner's store prefix. */}}
{{- define "camproxy.redisURLWith" -}}
{{- $redis := include "camproxy.redisURL" .root -}}
{{- printf "%s%s%s" $redis (ternary "&" "?" (contains "?" $redis)) .query -}}
{{- end -}}

{{/* camproxy's own containers: non-root (the image's distroless nonroot user), read-only. */}}
{{- define "camproxy.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "camproxy.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: ["ALL"]}
{{- end -}}

{{/* Checks of values no schema can express. */}}
{{- define "camproxy.validate" -}}
{{- $experiments := list (dict "key" "config.experiment" "arms" .Values.config.experiment.arms) -}}
{{- if .Values.config.experiments -}}
{{- $experiments = list -}}
{{- range $i, $e := .Values.config.experiments -}}
{{- $experiments = append $experiments (dict "key" (printf "config.experiments[%d]" $i) "arms" $e.arms) -}}
{{- end -}}
{{- end -}}
{{- range $experiments -}}
{{- $key := .key -}}
{{- $arms := list -}}
{{- range .arms -}}
{{- $arms = append $arms .name -}}
{{- if and (eq .augmenter "cam") (not $.Values.cam.enabled) (not (hasKey $.Values.config.augmenters "cam")) -}}
{{- fail (printf "%s.arms: arm %q uses the augmenter cam, but cam.enabled is false and config.augmenters has no cam" $key .name) -}}
{{- end -}}
{{- end -}}
{{- if ne (len $arms) (len (uniq $arms)) -}}
{{- fail (printf "%s.arms: names repeat: %v" $key $arms) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.cam.enabled (hasKey .Values.config.augmenters "cam") -}}
{{- fail "config.augmenters.cam: the chart defines cam when cam.enabled; name yours otherwise or disable cam" -}}
{{- end -}}
{{- end -}}
