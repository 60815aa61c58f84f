{{/*
camproxy's config.yaml for the gateway and every injected sidecar. The injector
sets the CAMPROXY_* variables on a sidecar; the gateway runs on the defaults after ":-".
*/}}
{{- define "camproxy.config" -}}
{{- $c := .Values.config -}}
# Written by the camproxy Helm chart; set it through the chart's values (config.*).
#   CAMPROXY_LISTEN         127.0.0.1:PORT on a sidecar: only its own pod reaches it
#   CAMPROXY_ADMIN_LISTEN   :PORT on a sidecar (probes, metrics)
#   CAMPROXY_ADMIN_LOOPBACK_ONLY  "true" on a sidecar: its admin API answers the pod's
#                           own containers while the kubelet and Prometheus reach
#                           /healthz, /readyz, /metrics
#   CAMPROXY_ADMIN_TOKEN    the gateway's, from its Secret: without it camproxy does
#                           not bind its admin API beyond loopback
#   CAMPROXY_EXPERIMENT     camproxy.io/experiment
#   CAMPROXY_WEIGHT_<ARM>   camproxy.io/arm: 1 for the pinned arm, 0 for the others
#   CAMPROXY_ADAPTIVE       "false" on a pinned pod
server:
  listen: "${CAMPROXY_LISTEN:-0.0.0.0:{{ .Values.gateway.port }}}"
  admin_listen: "${CAMPROXY_ADMIN_LISTEN:-0.0.0.0:{{ .Values.gateway.adminPort }}}"
admin:
  token: "${CAMPROXY_ADMIN_TOKEN:-}"
  loopback_only: ${CAMPROXY_ADMIN_LOOPBACK_ONLY:-false}
{{- with $c.upstreams }}
upstreams:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.task }}
task:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.placement }}
placement:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if or .Values.cam.enabled $c.augmenters }}
augmenters:
{{- if .Values.cam.enabled }}
  cam:
    type: cam
    base_url: "http://{{ include "camproxy.host" (dict "root" . "component" "cam") }}:{{ .Values.cam.port }}/v1"
    model: {{ .Values.cam.servedModelName | quote }}
    timeout: {{ .Values.cam.timeout }}
    {{- with .Values.cam.extraBody }}
    extra_body:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}
{{- with $c.augmenters }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- if $c.experiments }}
# config.experiments: a call goes to the first experiment whose match it meets, else
# to the one named default, else upstream untouched. A sidecar reads this list too:
# camproxy.io/experiment and camproxy.io/arm do not apply to it.
experiments:
{{- range $c.experiments }}
  {{- $e := deepCopy . }}
  {{- if and (dig "learn" "enabled" false $e) (not (dig "learn" "store" "" $e)) }}
  {{- /* A learner of its own per experiment, in the fleet's Redis (with its lease). */}}
  {{- $_ := set $e.learn "store" (include "camproxy.redisURLWith" (dict "root" $ "query" (printf "prefix=camproxy:playbook:%s" $e.name))) }}
  {{- end }}
  - name: {{ $e.name | quote }}
    {{- with omit $e "name" }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
{{- else }}
experiment:
  name: "${CAMPROXY_EXPERIMENT:-{{ $c.experiment.name }}}"
  {{- with $c.experiment.sticky }}
  sticky: {{ . }}
  {{- end }}
  adaptive:
    enabled: ${CAMPROXY_ADAPTIVE:-{{ $c.experiment.adaptive.enabled | default false }}}
    {{- with omit $c.experiment.adaptive "enabled" }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  arms:
  {{- range $c.experiment.arms }}
    - name: {{ .name | quote }}
      weight: ${CAMPROXY_WEIGHT_{{ regexReplaceAll "[^A-Z0-9]" (upper .name) "_" }}:-{{ .weight }}}
      {{- with omit . "name" "weight" }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  {{- end }}
  {{- with omit $c.experiment "name" "sticky" "adaptive" "arms" }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
# One Redis for every gateway replica and sidecar: contexts, episodes, arm statistics.
cache: {redis_url: {{ include "camproxy.redisURL" . | quote }}}
episodes: {store: redis}
# One replay sink for the fleet; the spool is on the pod's emptyDir (working dir).
replay:
  sinks: [{{ include "camproxy.redisURLWith" (dict "root" . "query" (printf "stream=%s" .Values.redis.stream)) | quote }}]
  spool_dir: "./camproxy-data/spool"
{{- with $c.extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}
