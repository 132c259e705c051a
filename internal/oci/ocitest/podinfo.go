package ocitest

import "testing"

// PodinfoFiles are the files of a podinfo-like chart: a Deployment (with an init container)
// whose image comes from values.image.repository and .tag, a Service, an HPA, a ConfigMap
// written without a namespace, a pre-install hook Job, and a test hook Pod.
var PodinfoFiles = map[string]string{
	"Chart.yaml": `apiVersion: v2
name: podinfo
version: 6.14.1
appVersion: 6.14.1
description: A podinfo-like chart for tests.
`,
	"values.yaml": `replicaCount: 2
image:
  repository: ghcr.io/stefanprodan/podinfo
  tag: 6.14.1
initImage: busybox:1.37
ui:
  message: "hello"
hpa:
  enabled: true
  maxReplicas: 4
`,
	"crds/widgets.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`,
	"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: podinfo
    app.kubernetes.io/instance: {{ .Release.Name }}
    helm.sh/chart: podinfo-{{ .Chart.Version }}
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      initContainers:
      - name: init
        image: {{ .Values.initImage }}
      containers:
      - name: podinfo
        image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
        env:
        - name: PODINFO_UI_MESSAGE
          value: {{ .Values.ui.message | quote }}
        ports:
        - {name: http, containerPort: 9898}
`,
	"templates/service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
spec:
  selector:
    app.kubernetes.io/instance: {{ .Release.Name }}
  ports:
  - {name: http, port: 9898, targetPort: http}
`,
	"templates/hpa.yaml": `{{- if .Values.hpa.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: {{ .Release.Name }}}
  minReplicas: {{ .Values.replicaCount }}
  maxReplicas: {{ .Values.hpa.maxReplicas }}
{{- end }}
`,
	"templates/configmap.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
data:
  message: {{ .Values.ui.message | quote }}
`,
	"templates/hook-job.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    "helm.sh/hook": pre-install,pre-upgrade
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
`,
	"templates/tests/test-connection.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test
  annotations:
    "helm.sh/hook": test
spec:
  restartPolicy: Never
  containers:
  - name: curl
    image: curlimages/curl:8.0.0
`,
}

// PodinfoChart packs PodinfoFiles into a chart archive.
func PodinfoChart(tb testing.TB) []byte {
	tb.Helper()
	return Chart(tb, "podinfo", PodinfoFiles)
}
