{{/* The exact permissions the operator uses; rbac.yaml places them in a ClusterRole or per-namespace Roles. */}}

{{/* Rules on namespaced resources: the watched resources and the workloads rendered for them. */}}
{{- define "infertune.rbac.namespacedRules" -}}
- apiGroups: ["infertune.io"]
  resources: ["inferencedeployments"]
  # kopf watches, and patches finalizers and its progress annotations.
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["infertune.io"]
  resources: ["inferencedeployments/status"]
  verbs: ["get", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  # Server-side apply is a PATCH; delete is for switching a layout to a LeaderWorkerSet and back.
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  # Only to read a model's Hugging Face config.json that a spec points at.
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.rbac.podsMetricsSource }}
- apiGroups: [""]
  resources: ["pods"]
  # `spec.metrics.source: Pods` finds the inference pods' addresses to scrape them directly.
  verbs: ["list", "watch"]
{{- end }}
{{- with .Values.rbac.tokenSecretNames }}
- apiGroups: [""]
  resources: ["secrets"]
  # Only the Prometheus credentials resources may reference, by name.
  resourceNames: {{ toJson . }}
  verbs: ["get"]
{{- end }}
{{- if and .Values.operator.peering.enabled .Values.operator.watchNamespaces }}
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}

{{/* Rules on cluster-scoped resources, granted in a ClusterRole whatever the watch scope. */}}
{{- define "infertune.rbac.clusterRules" -}}
- apiGroups: ["infertune.io"]
  resources: ["servingpolicies"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  # kopf rescans the served resources when CRDs come and go.
  verbs: ["list", "watch"]
{{- if .Values.operator.watchNamespaces }}
- apiGroups: [""]
  resources: ["namespaces"]
  # kopf follows the watched namespaces being created and deleted (names only, nothing inside them);
  # refused, it retries for about a minute before it starts, and never sees a namespace made later.
  verbs: ["list", "watch"]
{{- end }}
{{- if and .Values.operator.peering.enabled (not .Values.operator.watchNamespaces) }}
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}
