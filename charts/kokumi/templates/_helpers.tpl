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

{{/* kokumi.controllerMemory is the controller's resources and GOMEMLIMIT for
.Values.controller.fleetSize, as YAML: up to 1,000 Clusters those of the values; above, a memory
limit of 1024Mi and 128Mi more per 1,000 Clusters beyond 1,000 (unless the values' limit, in Mi
or Gi, is larger) and a GOMEMLIMIT of 90% of the limit. */}}
{{- define "kokumi.controllerMemory" -}}
{{- $c := .Values.controller -}}
{{- $resources := deepCopy (default dict $c.resources) -}}
{{- $goMemLimit := $c.goMemLimit -}}
{{- $fleet := int (default 0 $c.fleetSize) -}}
{{- if gt $fleet 1000 -}}
{{- $mi := add 1024 (div (mul (sub $fleet 1000) 128) 1000) -}}
{{- $limits := default dict $resources.limits -}}
{{- $given := toString (default "" $limits.memory) -}}
{{- $givenMi := 0 -}}
{{- if hasSuffix "Gi" $given -}}{{- $givenMi = mul (int (trimSuffix "Gi" $given)) 1024 -}}
{{- else if hasSuffix "Mi" $given -}}{{- $givenMi = int (trimSuffix "Mi" $given) -}}
{{- end -}}
{{- if gt $givenMi $mi -}}{{- $mi = $givenMi -}}{{- end -}}
{{- $_ := set $limits "memory" (printf "%dMi" $mi) -}}
{{- $_ := set $resources "limits" $limits -}}
{{- $goMemLimit = printf "%dMiB" (div (mul $mi 9) 10) -}}
{{- end -}}
resources:
  {{- toYaml $resources | nindent 2 }}
goMemLimit: {{ $goMemLimit | quote }}
{{- end -}}
