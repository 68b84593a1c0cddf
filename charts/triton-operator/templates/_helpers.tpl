{{/* Object names, labels and the operator's command line. */}}

{{- define "triton-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "triton-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "triton-operator.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "triton-operator.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the operator's pod; never change them (Deployment selectors are immutable). */}}
{{- define "triton-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "triton-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "triton-operator.labels" -}}
{{ include "triton-operator.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: triton-operator
{{- end -}}

{{- define "triton-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "triton-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the operator watches when it is not cluster-wide; at least one. */}}
{{- define "triton-operator.watchNamespaces" -}}
{{- if not .Values.watchNamespaces -}}
{{- fail "watchNamespaces must list at least one namespace when rbac.clusterWide is false" -}}
{{- end -}}
{{- toJson (uniq .Values.watchNamespaces) -}}
{{- end -}}

{{/* Arguments after the image's entrypoint (`triton-operator run`): kopf's scope flags. */}}
{{- define "triton-operator.args" -}}
{{- if .Values.rbac.clusterWide }}
- --all-namespaces
{{- else }}
{{- range (include "triton-operator.watchNamespaces" . | fromJsonArray) }}
- --namespace={{ . }}
{{- end }}
{{- end }}
{{- end -}}
