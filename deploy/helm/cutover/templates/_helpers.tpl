{{/* Labels on every object's metadata (never in selectors or pod templates, which stay as deploy/base has them). */}}
{{- define "cutover.labels" -}}
app.kubernetes.io/part-of: cutover
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{/* The image of one service: `cutover.image (list $ .Values.signal.image)`. */}}
{{- define "cutover.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $g := $root.Values.image -}}
{{- $repo := $img.repository -}}
{{- if $g.registry }}{{ $repo = printf "%s/%s" $g.registry $repo }}{{ end -}}
{{- if $g.digest -}}
{{ $repo }}@{{ $g.digest }}
{{- else -}}
{{ $repo }}:{{ $g.tag | default $root.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* DNS identities in the certificates. */}}
{{- define "cutover.actuatorName" -}}actuator-svc.{{ .Release.Namespace }}.svc{{- end }}
{{- define "cutover.signalName" -}}signal-svc.{{ .Release.Namespace }}.svc{{- end }}
{{- define "cutover.toolClients" -}}
{{- if .Values.actuator.toolClients -}}
{{ join "," .Values.actuator.toolClients }}
{{- else -}}
cutoverctl.{{ .Release.Namespace }}.svc
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
