{{/* Labels every object of the release carries. */}}
{{- define "capstan.labels" -}}
app.kubernetes.io/name: capstan
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The operator pods' selector (stable across upgrades). */}}
{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: capstan
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "capstan.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

