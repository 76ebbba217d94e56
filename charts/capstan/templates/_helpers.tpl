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

{{/* The controllers' own rights: a ClusterRole cluster-wide, a Role per watched namespace in a namespaced
     install (rbac.scope: namespace). Every rule is about namespaced objects, so both read the same. */}}
{{- define "capstan.operatorRules" -}}
# Applications: the controller patches their spec's operation and refresh annotation, adds and removes
# finalizers; ApplicationSets create, update and delete them.
- apiGroups: ["capstan.dev"]
  resources: ["applications"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["capstan.dev"]
  resources: ["applicationsets", "repositories", "clusters", "policysets"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["capstan.dev"]
  resources:
    - applications/status
    - applicationsets/status
    - repositories/status
    - clusters/status
    - policysets/status
  verbs: ["get", "update", "patch"]
- apiGroups: ["capstan.dev"]
  resources:
    - applications/finalizers
    - applicationsets/finalizers
    - repositories/finalizers
    - clusters/finalizers
    - policysets/finalizers
  verbs: ["update"]
# Repository credentials, Cluster credentials and webhook secrets (read only; the Repository controller
# watches Secrets' metadata for the `capstan.dev/secret-type` label), CA bundles and policy ConfigMaps.
- apiGroups: [""]
  resources: ["secrets", "configmaps"]
  verbs: ["get", "list", "watch"]
# Events about the objects it reconciles.
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Writes of tenant Applications are made as a ServiceAccount of their namespace (docs/multi-tenancy.md):
# the controller reads that ServiceAccount (it must exist before a sync or deletion starts) and impersonates
# it; impersonating users or groups is never needed.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "impersonate"]
# Rights later controller features need go here, each with its reason. Leader election's Leases are a Role
# in the release namespace, below.
{{- with .Values.rbac.extraRules }}
# rbac.extraRules: rights later features add.
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The namespaces a namespaced install (rbac.scope: namespace) watches, comma-separated: `watchNamespaces`
     and always the release namespace (its Leases, webhook Secret, shared Repositories and Clusters). */}}
{{- define "capstan.watchedNamespaces" -}}
{{- append (.Values.watchNamespaces | default list) .Release.Namespace | uniq | join "," -}}
{{- end }}
