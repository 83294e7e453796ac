{{/* Names, labels and small shared snippets of the infertune chart. */}}

{{- define "infertune.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infertune.fullname" -}}
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

{{- define "infertune.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infertune.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infertune.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "infertune.labels" -}}
helm.sh/chart: {{ include "infertune.chart" . }}
{{ include "infertune.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: infertune
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "infertune.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "infertune.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "infertune.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "infertune.metricsServiceName" -}}
{{- printf "%s-metrics" (include "infertune.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Prometheus `job` label of the operator's own target: the ServiceMonitor sets it explicitly so the OperatorDown alert can name it. */}}
{{- define "infertune.metricsJob" -}}
{{- include "infertune.metricsServiceName" . -}}
{{- end -}}

{{/* Namespaces the PodMonitor looks in: its own list, else the watched namespaces, else all. */}}
{{- define "infertune.podMonitorNamespaces" -}}
{{- if .Values.podMonitor.namespaces -}}
{{- toJson .Values.podMonitor.namespaces -}}
{{- else -}}
{{- toJson .Values.operator.watchNamespaces -}}
{{- end -}}
{{- end -}}

