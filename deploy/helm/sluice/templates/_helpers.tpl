{{/* The chart's name, and a release's full name (at most 63 characters). */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/component: {{ .Values.mode }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The mode, checked. */}}
{{- define "sluice.mode" -}}
{{- if not (has .Values.mode (list "gateway" "rls" "sidecar")) -}}
{{- fail (printf "mode: %q is not one of gateway, rls, sidecar" .Values.mode) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{/*
The config file: .Values.config with the listeners written from .Values.ports,
the descriptors' directory, the sidecar's upstream and the chart's Redis.
*/}}
{{- define "sluice.config" -}}
{{- $mode := include "sluice.mode" . -}}
{{- $c := deepCopy (default (dict) .Values.config) -}}
{{- $server := default (dict) (index $c "server") -}}
{{- if eq $mode "rls" -}}
{{- $_ := unset $server "listen" -}}
{{- $svc := default (dict) (index $c "service") -}}
{{- $_ := set $svc "grpc" (printf ":%v" .Values.ports.grpc) -}}
{{- $_ := set $svc "http" (printf ":%v" .Values.ports.http) -}}
{{- if .Values.descriptors -}}
{{- $_ := set $svc "descriptors" "ratelimit" -}}
{{- end -}}
{{- if not (index $svc "descriptors") -}}
{{- fail "descriptors: the rate-limit service needs its descriptor files (or config.service.descriptors)" -}}
{{- end -}}
{{- $_ := set $c "service" $svc -}}
{{- else -}}
{{- $_ := set $server "listen" (printf ":%v" .Values.ports.http) -}}
{{- end -}}
{{- $_ := set $server "admin" (printf ":%v" .Values.ports.admin) -}}
{{- $_ := set $c "server" $server -}}
{{- if and (eq $mode "sidecar") (not (hasKey $c "upstream")) -}}
{{- $_ := set $c "upstream" (printf "http://127.0.0.1:%v" .Values.sidecar.appPort) -}}
{{- end -}}
{{- if and (eq $mode "gateway") (not (index $c "upstream")) -}}
{{- fail "config.upstream: the gateway needs the URL of the API it passes requests to" -}}
{{- end -}}
{{- if and (ne $mode "rls") (not (index $c "rules")) -}}
{{- fail (printf "config.rules: mode %s needs at least one rule" $mode) -}}
{{- end -}}
{{- if .Values.redis.enabled -}}
{{- $store := default (dict) (index $c "store") -}}
{{- $_ := set $store "backend" "redis" -}}
{{- $r := default (dict) (index $store "redis") -}}
{{- if not (or (index $r "url") (index $r "addrs")) -}}
{{- $_ := set $r "url" (printf "redis://%s-redis:6379/0" (include "sluice.fullname" .)) -}}
{{- end -}}
{{- $_ := set $store "redis" $r -}}
{{- $_ := set $c "store" $store -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* The store backend the config file names. */}}
{{- define "sluice.backend" -}}
{{- $c := include "sluice.config" . | fromYaml -}}
{{- $store := default (dict) (index $c "store") -}}
{{- default "memory" (index $store "backend") -}}
{{- end -}}
