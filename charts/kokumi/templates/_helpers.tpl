{{/* Labels of every object of the chart; component is added per workload. */}}
{{- define "kokumi.labels" -}}
app.kubernetes.io/name: kokumi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The image of every container: the digest wins over the tag, which defaults to appVersion. */}}
{{- define "kokumi.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The namespace a generated manifest names, in this release: kokumi-system is the release's
namespace and argocd is .Values.argocd.namespace. */}}
{{- define "kokumi.namespace" -}}
{{- $root := index . 0 -}}
{{- $ns := index . 1 -}}
{{- if eq $ns "kokumi-system" -}}{{ $root.Release.Namespace }}
{{- else if eq $ns "argocd" -}}{{ $root.Values.argocd.namespace }}
{{- else -}}{{ $ns }}
{{- end -}}
{{- end -}}

{{/* kokumi.generated renders a file of files/ (copied from config/ by `make manifests`, so the
chart's RBAC and CRDs are the ones the code's markers generate) with the release's namespaces
and the chart's labels. Arguments: (list $ file). */}}
{{- define "kokumi.generated" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" ($root.Files.Get $file) -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj.kind }}
{{- $meta := $obj.metadata }}
{{- if $meta.namespace }}
{{- $_ := set $meta "namespace" (include "kokumi.namespace" (list $root $meta.namespace)) }}
{{- end }}
{{- $_ := set $meta "labels" (merge (dict) (fromYaml (include "kokumi.labels" $root)) ($meta.labels | default dict)) }}
{{- range $s := $obj.subjects | default list }}
{{- if $s.namespace }}
{{- $_ := set $s "namespace" (include "kokumi.namespace" (list $root $s.namespace)) }}
{{- end }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod scheduling values: (dict "v" .Values.controller). */}}
{{- define "kokumi.scheduling" -}}
{{- with .v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
