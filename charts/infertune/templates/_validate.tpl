{{/* Contradictory values fail the render with one line naming the values to change. */}}
{{- define "infertune.validate" -}}
{{- $v := .Values -}}
{{- if and (gt (int $v.operator.replicas) 1) (not $v.operator.peering.enabled) -}}
{{- fail "operator.replicas > 1 requires operator.peering.enabled=true: without kopf peering every replica would act on the same InferenceDeployments" -}}
{{- end -}}
{{- if and $v.serviceMonitor.enabled (not $v.metrics.enabled) -}}
{{- fail "serviceMonitor.enabled=true requires metrics.enabled=true: there is no metrics endpoint to monitor" -}}
{{- end -}}
{{- if and $v.prometheusRule.enabled (not $v.metrics.enabled) -}}
{{- fail "prometheusRule.enabled=true requires metrics.enabled=true: the alerts read the operator's infertune_* metrics" -}}
{{- end -}}
{{- if and $v.tests.enabled (not $v.metrics.enabled) -}}
{{- fail "tests.enabled=true requires metrics.enabled=true: the helm test probes the metrics Service" -}}
{{- end -}}
{{- if and $v.prometheusRule.enabled (not $v.serviceMonitor.enabled) -}}
{{- fail "prometheusRule.enabled=true requires serviceMonitor.enabled=true: without the scrape, InfertuneOperatorDown fires forever" -}}
{{- end -}}
{{- if and $v.prometheus.tokenSecret.name (not $v.prometheus.url) -}}
{{- fail "prometheus.tokenSecret.name is set but prometheus.url is empty: the token would be sent nowhere" -}}
{{- end -}}
{{- if and $v.podMonitor.namespaces $v.operator.watchNamespaces -}}
{{- range $v.operator.watchNamespaces -}}
{{- if not (has . $v.podMonitor.namespaces) -}}
{{- fail (printf "podMonitor.namespaces leaves out watched namespace %q: its inference pods would never be scraped" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not $v.serviceAccount.create) (not $v.serviceAccount.name) -}}
{{- fail "serviceAccount.create=false requires serviceAccount.name: the operator must not run as the namespace's default account" -}}
{{- end -}}
{{- end -}}
