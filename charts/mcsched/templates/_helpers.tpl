{{/* The install namespace. */}}
{{- define "mcsched.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end }}

{{/* The labels of every object; mcsched.io/install is what `kubectl mcsched uninstall`
selects on and what the agent checks before writing the APIService. */}}
{{- define "mcsched.labels" -}}
app.kubernetes.io/managed-by: mcsched
app.kubernetes.io/name: mcsched-agent
app.kubernetes.io/part-of: mcsched
mcsched.io/install: {{ include "mcsched.namespace" . }}
{{- end }}

{{/* The labels of the agent's pods: the Deployment's, Service's and PDB's selector. */}}
{{- define "mcsched.selectorLabels" -}}
app.kubernetes.io/name: mcsched-agent
{{- end }}

{{/* The ServiceAccount every binding names. */}}
{{- define "mcsched.subjects" -}}
- kind: ServiceAccount
  name: mcsched-agent
  namespace: {{ include "mcsched.namespace" . }}
{{- end }}

{{/* The KubeSchedulerConfiguration the ConfigMap ships: .Values.config, or mcsched's
default profile as `kubectl mcsched install` writes it. */}}
{{- define "mcsched.config" -}}
{{- if .Values.config -}}
{{ .Values.config }}
{{- else -}}
{{ tpl (.Files.Get "files/config.yaml") . }}
{{- end -}}
{{- end }}

{{/* The leader Lease's name, empty without leader election (kube-scheduler's defaults:
leaderElect true, resourceName kube-scheduler). */}}
{{- define "mcsched.leaseName" -}}
{{- $cfg := include "mcsched.config" . | fromYaml -}}
{{- if dig "leaderElection" "leaderElect" true $cfg -}}
{{- dig "leaderElection" "resourceName" "kube-scheduler" $cfg -}}
{{- end -}}
{{- end }}

{{- define "mcsched.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end }}
