{{/* Labels on every object's metadata (never in selectors or pod templates, which stay as deploy/base has them). */}}
{{- define "cutover.labels" -}}
app.kubernetes.io/part-of: cutover
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{/* The image of one service: `cutover.image (list $ .Values.signal.image)`. There is no
default registry: a bare `cutover/signal-svc` is Docker Hub's `cutover` namespace, which nobody
here controls, and it would run with signal-svc's Node rights and the actuator's Azure identity. */}}
{{- define "cutover.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $g := $root.Values.image -}}
{{- if not $g.registry -}}
{{- fail "image.registry is required: the registry deploy/images.sh's images were pushed to, e.g. --set image.registry=myregistry.azurecr.io (without one, cutover/signal-svc would be pulled from Docker Hub's cutover namespace, which this project does not control)" -}}
{{- end -}}
{{- $repo := printf "%s/%s" (trimSuffix "/" $g.registry) $img.repository -}}
{{- if $g.digest -}}
{{ $repo }}@{{ $g.digest }}
{{- else -}}
{{ $repo }}:{{ $g.tag | default $root.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* Identities in the certificates: certificate SANs, matched exactly by the services.
The serving DNS name is the actuator Service's, in every mode; the client identities are DNS
names with existingSecrets (as deploy/base) and SPIFFE-style URIs with certManager. */}}
{{- define "cutover.actuatorName" -}}actuator-svc.{{ .Release.Namespace }}.svc{{- end }}
{{- define "cutover.spiffe" -}}
{{- $root := index . 0 -}}
spiffe://{{ $root.Values.clusterDomain }}/ns/{{ $root.Release.Namespace }}/sa/{{ index . 1 }}
{{- end }}
{{- define "cutover.certManager" -}}{{ if eq .Values.tls.source "certManager" }}true{{ end }}{{- end }}
{{- define "cutover.actuatorUri" -}}{{ include "cutover.spiffe" (list . (include "cutover.actuatorServiceAccount" .)) }}{{- end }}
{{- define "cutover.signalName" -}}
{{- if include "cutover.certManager" . -}}
{{ include "cutover.spiffe" (list . (include "cutover.signalServiceAccount" .)) }}
{{- else -}}
signal-svc.{{ .Release.Namespace }}.svc
{{- end -}}
{{- end }}
{{- define "cutover.toolName" -}}
{{- if include "cutover.certManager" . -}}
{{ include "cutover.spiffe" (list . "cutoverctl") }}
{{- else -}}
cutoverctl.{{ .Release.Namespace }}.svc
{{- end -}}
{{- end }}
{{- define "cutover.signalClients" -}}
{{- if .Values.actuator.signalClients -}}
{{ join "," .Values.actuator.signalClients }}
{{- else -}}
{{ include "cutover.signalName" . }}
{{- end -}}
{{- end }}
{{- define "cutover.toolClients" -}}
{{- if .Values.actuator.toolClients -}}
{{ join "," .Values.actuator.toolClients }}
{{- else -}}
{{ include "cutover.toolName" . }}
{{- end -}}
{{- end }}

{{/* The allocator settings (see the actuator Deployment for why). */}}
{{- define "cutover.jemalloc" -}}background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:2{{- end }}

{{- define "cutover.pdb" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $pdb := index . 2 -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ $name }}
    {{- include "cutover.labels" $root | nindent 4 }}
spec:
  {{- $min := not (kindIs "invalid" $pdb.minAvailable) }}
  {{- $max := not (kindIs "invalid" $pdb.maxUnavailable) }}
  {{- if and $min $max }}
  {{- fail (printf "%s podDisruptionBudget: set minAvailable or maxUnavailable, and the other to null" $name) }}
  {{- end }}
  {{- if $min }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ $name }}
{{- end }}

{{/* A duration (`500ms`, `3s`, `1.5m`, `1h`, as signal-svc parses them) in milliseconds. */}}
{{- define "cutover.ms" -}}
{{- $d := toString . -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $d -}}
{{- $unit := trimPrefix $n $d -}}
{{- $per := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 -}}
{{- if or (not $n) (not (hasKey $per $unit)) -}}
{{- fail (printf "%q is not a duration (500ms, 3s, 5m, 1h)" $d) -}}
{{- end -}}
{{- round (mulf (float64 $n) (index $per $unit)) 3 -}}
{{- end }}

{{/* signal-svc's timings as it checks them at start (signal-svc/src/config.rs Args::validate):
a combination it would refuse fails the render, naming the values. Empty values are the
binary's defaults. */}}
{{- define "cutover.checkTimings" -}}
{{- $s := .Values.signal -}}
{{- $le := $s.leaderElection -}}
{{- $v := dict -}}
{{- range $t := list (list "ld" "signal.leaderElection.leaseDuration" $le.leaseDuration "4s") (list "rd" "signal.leaderElection.renewDeadline" $le.renewDeadline "3s") (list "ri" "signal.leaderElection.renewInterval" $le.renewInterval "500ms") (list "ry" "signal.leaderElection.retryInterval" $le.retryInterval "250ms") (list "av" "signal.assignmentValidFor" $s.assignmentValidFor "3s") (list "ka" "signal.actuatorKeepalive" $s.actuatorKeepalive "1s") -}}
{{- $value := index $t 2 | default (index $t 3) -}}
{{- $_ := set $v (index $t 0) (float64 (include "cutover.ms" $value)) -}}
{{- $shown := ternary (printf "%s (%s)" (index $t 1) $value) (printf "%s (empty: signal-svc's %s)" (index $t 1) $value) (not (empty (index $t 2))) -}}
{{- $_ := set $v (printf "%s_name" (index $t 0)) $shown -}}
{{- end -}}
{{- $refused := "signal-svc would refuse to start" -}}
{{- if lt $v.ld 1000.0 -}}
{{- fail (printf "%s must be at least 1s (%s)" $v.ld_name $refused) -}}
{{- end -}}
{{- if or (le $v.rd 0.0) (gt (addf $v.rd 200) $v.ld) -}}
{{- fail (printf "%s must be above 0 and at least 200ms below %s (%s)" $v.rd_name $v.ld_name $refused) -}}
{{- end -}}
{{- if or (le $v.ri 0.0) (gt (mulf $v.ri 2) $v.rd) -}}
{{- fail (printf "%s must be above 0 and at most half of %s (%s)" $v.ri_name $v.rd_name $refused) -}}
{{- end -}}
{{- if or (le $v.ry 0.0) (gt $v.ry $v.ld) -}}
{{- fail (printf "%s must be above 0 and at most %s (%s)" $v.ry_name $v.ld_name $refused) -}}
{{- end -}}
{{- if or (lt $v.av 300.0) (gt $v.av 60000.0) -}}
{{- fail (printf "%s must be 300ms..60s: actuator-svc refuses a grant valid for more than 60s (%s)" $v.av_name $refused) -}}
{{- end -}}
{{- if lt $v.ka 100.0 -}}
{{- fail (printf "%s must be at least 100ms (%s)" $v.ka_name $refused) -}}
{{- end -}}
{{- if ge (mulf $v.ka 2) $v.av -}}
{{- fail (printf "twice %s must stay below %s: a hung actuator must be detected within its grant (%s)" $v.ka_name $v.av_name $refused) -}}
{{- end -}}
{{- end }}

{{/* The ServiceAccount names. */}}
{{- define "cutover.signalServiceAccount" -}}{{ .Values.signal.serviceAccount.name | default "signal-svc" }}{{- end }}
{{- define "cutover.actuatorServiceAccount" -}}{{ .Values.actuator.serviceAccount.name | default "actuator-svc" }}{{- end }}

{{/* RUST_LOG, when logLevel is set (empty: the binaries' `info`). */}}
{{- define "cutover.logLevelEnv" -}}
{{- with .Values.logLevel }}
- name: RUST_LOG
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* NetworkPolicy egress to the cluster DNS (networkPolicy.dns), for both services. */}}
{{- define "cutover.dnsEgress" -}}
{{- $dns := .Values.networkPolicy.dns -}}
- to:
    - namespaceSelector:
        {{- toYaml $dns.namespaceSelector | nindent 8 }}
      podSelector:
        {{- toYaml $dns.podSelector | nindent 8 }}
  ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- end }}
