{{/* Names ------------------------------------------------------------------------------ */}}

{{- define "slurm-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object name; cluster-scoped objects carry it too. */}}
{{- define "slurm-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The namespace of every namespaced object: namespaceOverride, else the release's (as in
     charts that are installed as dependencies of an umbrella chart into another namespace). */}}
{{- define "slurm-bridge.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slurm-bridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<fullname>-<component>"; call with (dict "root" $ "component" "operator"). */}}
{{- define "slurm-bridge.componentName" -}}
{{- printf "%s-%s" (include "slurm-bridge.fullname" .root) .component }}
{{- end }}

{{/* The ServiceAccount name of a component; call with (dict "root" $ "component" "operator"). */}}
{{- define "slurm-bridge.serviceAccountName" -}}
{{- $sa := (index .root.Values .component).serviceAccount }}
{{- default (include "slurm-bridge.componentName" .) $sa.name }}
{{- end }}

{{- define "slurm-bridge.operatorUsername" -}}
{{- printf "system:serviceaccount:%s:%s" (include "slurm-bridge.namespace" .) (include "slurm-bridge.serviceAccountName" (dict "root" . "component" "operator")) }}
{{- end }}

{{/* Users whose writes of reserved keys the webhook allows: the operator plus config.trustedUsers (JSON). */}}
{{- define "slurm-bridge.trustedUsers" -}}
{{- concat (.Values.config.trustedUsers | default list) (list (include "slurm-bridge.operatorUsername" .)) | uniq | toJson }}
{{- end }}

{{- define "slurm-bridge.configMapName" -}}
{{- printf "%s-config" (include "slurm-bridge.fullname" .) }}
{{- end }}

{{- define "slurm-bridge.jwtSecretName" -}}
{{- default (printf "%s-slurm-jwt" (include "slurm-bridge.fullname" .)) .Values.slurmJwt.secretName }}
{{- end }}

{{- define "slurm-bridge.hookSecretName" -}}
{{- default (printf "%s-slurm-hook" (include "slurm-bridge.fullname" .)) .Values.slurmHooks.secretName }}
{{- end }}

{{- define "slurm-bridge.webhookTlsSecretName" -}}
{{- printf "%s-webhook-tls" (include "slurm-bridge.fullname" .) }}
{{- end }}

{{/* The Lease names are those the components derive from the config. */}}
{{- define "slurm-bridge.operatorLeaseName" -}}
{{- printf "%s-operator" .Values.config.bridgeId }}
{{- end }}

{{- define "slurm-bridge.schedulerLeaseName" -}}
{{- printf "%s-scheduler" .Values.config.schedulerName }}
{{- end }}

{{/* Labels ----------------------------------------------------------------------------- */}}

{{- define "slurm-bridge.labels" -}}
helm.sh/chart: {{ include "slurm-bridge.chart" . }}
app.kubernetes.io/name: {{ include "slurm-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slurm-bridge
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of a component's objects; call with (dict "root" $ "component" "operator"). */}}
{{- define "slurm-bridge.componentLabels" -}}
{{ include "slurm-bridge.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "slurm-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurm-bridge.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Images ----------------------------------------------------------------------------- */}}

{{- define "slurm-bridge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* registry.k8s.io/kube-scheduler of the cluster's own version (vMAJOR.MINOR.PATCH, without
     vendor suffixes such as +k3s1 or -eks-...), unless scheduler.image.tag is set. */}}
{{- define "slurm-bridge.schedulerImage" -}}
{{- $tag := .Values.scheduler.image.tag }}
{{- if not $tag }}
{{- $tag = regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version }}
{{- if not $tag }}
{{- fail (printf "cannot derive the kube-scheduler tag from the cluster version %q; set scheduler.image.tag" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}
{{- printf "%s:%s" .Values.scheduler.image.repository $tag }}
{{- end }}

{{/* A warning (or nothing) where the cluster is newer than the newest Kubernetes minor the chart
     was tested on (Chart.yaml's slurm-bridge/newest-tested-kubernetes, "MAJOR.MINOR"). kubeVersion
     has no upper bound, as the bridge finds its API versions by discovery: warn, never refuse. */}}
{{- define "slurm-bridge.untestedKubeVersionWarning" -}}
{{- $tested := index .Chart.Annotations "slurm-bridge/newest-tested-kubernetes" }}
{{- $parts := splitList "." $tested }}
{{- if ne (len $parts) 2 }}
{{- fail (printf "Chart.yaml annotation slurm-bridge/newest-tested-kubernetes %q is not MAJOR.MINOR" $tested) }}
{{- end }}
{{- $newer := printf ">=%s.%d.0-0" (index $parts 0) (add1 (atoi (index $parts 1))) }}
{{- if semverCompare $newer .Capabilities.KubeVersion.Version }}
WARNING: Kubernetes {{ .Capabilities.KubeVersion.Version }} is newer than {{ $tested }}, the newest minor this release
was tested on. The bridge finds the API versions it uses by discovery, so it is expected to work;
see docs/compatibility.md.
{{- end }}
{{- end }}

{{/* Configuration ---------------------------------------------------------------------- */}}

{{/* The namespaceSelector of both webhook configurations, shaped as webhook/render.py shapes it:
     a non-empty managedNamespaceSelector wins; otherwise the managedNamespaces list becomes a
     kubernetes.io/metadata.name In [...] expression ("-" when empty: no namespace matches). */}}
{{- define "slurm-bridge.namespaceSelector" -}}
{{- $sel := .Values.config.managedNamespaceSelector | default dict }}
{{- if or $sel.matchLabels $sel.matchExpressions }}
{{- $out := dict }}
{{- if $sel.matchLabels }}
{{- $_ := set $out "matchLabels" $sel.matchLabels }}
{{- end }}
{{- if $sel.matchExpressions }}
{{- $exprs := list }}
{{- range $sel.matchExpressions }}
{{- $e := dict "key" .key "operator" .operator }}
{{- if .values }}
{{- $_ := set $e "values" .values }}
{{- end }}
{{- $exprs = append $exprs $e }}
{{- end }}
{{- $_ := set $out "matchExpressions" $exprs }}
{{- end }}
{{- toYaml $out }}
{{- else }}
{{- $names := .Values.config.managedNamespaces | default (list "-") }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values:
      {{- toYaml $names | nindent 6 }}
{{- end }}
{{- end }}

{{/* config.yaml: only keys slurm_bridge/core/config.py knows (an unknown key stops every component). */}}
{{- define "slurm-bridge.configYaml" -}}
{{- $c := .Values.config }}
{{- if has (include "slurm-bridge.namespace" .) ($c.managedNamespaces | default list) }}
{{- fail (printf "config.managedNamespaces must not include the release namespace %q: the bridge's own pods would need the webhook to start" (include "slurm-bridge.namespace" .)) }}
{{- end }}
{{- $poll := float64 $c.pollPeriodSeconds }}
{{- if or (le $poll 0.0) (gt $poll 2.0) }}
{{- fail (printf "config.pollPeriodSeconds must be > 0 and <= 2, got %v" $c.pollPeriodSeconds) }}
{{- end }}
{{- $timeout := float64 $c.slurmRequestTimeoutSeconds }}
{{- if le $timeout 0.0 }}
{{- fail (printf "config.slurmRequestTimeoutSeconds must be > 0, got %v" $c.slurmRequestTimeoutSeconds) }}
{{- end }}
{{- $trusted := include "slurm-bridge.trustedUsers" . | fromJsonArray }}
{{- $cfg := dict
  "schedulerName" $c.schedulerName
  "slurmRestApi" $c.slurmRestApi
  "slurmJwtFile" (printf "/var/run/secrets/slurm-bridge/%s" .Values.slurmJwt.secretKey)
  "slurmJwtSource" (printf "Secret %s/%s, key %s" (include "slurm-bridge.namespace" .) (include "slurm-bridge.jwtSecretName" .) .Values.slurmJwt.secretKey)
  "slurmUser" $c.slurmUser
  "managedNamespaces" ($c.managedNamespaces | default list)
  "nodeSharing" ($c.nodeSharing | default "timeShared")
  "mcsLabel" $c.mcsLabel
  "partition" $c.partition
  "bridgeId" $c.bridgeId
  "pollPeriodSeconds" $poll
  "immediateAllocation" $c.immediateAllocation
  "slurmRequestTimeoutSeconds" $timeout
  "trustedUsers" $trusted
  "webhookListen" (printf "0.0.0.0:%d" (int .Values.webhook.port))
  "webhookCertFile" "/etc/slurm-bridge/tls/tls.crt"
  "webhookKeyFile" "/etc/slurm-bridge/tls/tls.key"
  "extenderListen" (printf "127.0.0.1:%d" (int .Values.extender.port))
  "extenderHealthListen" (printf "0.0.0.0:%d" (int .Values.extender.healthPort))
  "operatorHealthListen" (printf "0.0.0.0:%d" (int .Values.operator.healthPort))
  "operatorWorkers" $c.operatorWorkers
  "orphanGraceSeconds" (float64 $c.orphanGraceSeconds)
  "bindTimeoutSeconds" (float64 ($c.bindTimeoutSeconds | default 300))
  "excludeUnfitNodes" (ternary true $c.excludeUnfitNodes (kindIs "invalid" $c.excludeUnfitNodes))
  "tenancy" ($c.tenancy | default "open")
  "untenantedOperatorFields" ($c.untenantedOperatorFields | default list)
  "hybridPartitions" ($c.hybridPartitions | default list)
  "devicePluginFollowsSlurm" ($c.devicePluginFollowsSlurm | default false)
  "slurmHookTokenFile" (ternary (printf "/var/run/secrets/slurm-bridge-hook/%s" .Values.slurmHooks.secretKey) nil .Values.slurmHooks.enabled)
  "slurmHookAcceptBearer" (and .Values.slurmHooks.enabled (.Values.slurmHooks.acceptBearer | default false))
}}
{{- with $c.handoff }}
{{- $_ := set $cfg "handoff" (dict "maxGracePeriodSeconds" (int .maxGracePeriodSeconds) "marginSeconds" (int .marginSeconds)) }}
{{- end }}
{{- with $c.preemption }}
{{- $_ := set $cfg "preemption" (dict "returnToPlace" (ternary true .returnToPlace (kindIs "invalid" .returnToPlace)) "maxReturns" (int (.maxReturns | default 0)) "returnWindowSeconds" (int (.returnWindowSeconds | default 600))) }}
{{- end }}
{{- $_ := set $cfg "nodeGuard" (dict "daemonNamespaces" .Values.nodeGuard.daemonNamespaces) }}
{{- $sel := $c.managedNamespaceSelector | default dict }}
{{- if or $sel.matchLabels $sel.matchExpressions }}
{{- $_ := set $cfg "managedNamespaceSelector" (include "slurm-bridge.namespaceSelector" . | fromYaml) }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* Pod parts shared by the components ------------------------------------------------- */}}

{{/* Scheduling fields of a component's pod spec; call with (dict "root" $ "component" "operator"). */}}
{{- define "slurm-bridge.podScheduling" -}}
{{- $v := index .root.Values .component }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* POD_NAME and POD_NAMESPACE (leader-election identity, event source), then extraEnv. */}}
{{- define "slurm-bridge.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: PYTHONUNBUFFERED
  value: "1"
{{- with (index .root.Values .component).extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The annotations that roll a component when its configuration changes, then podAnnotations. */}}
{{- define "slurm-bridge.configChecksum" -}}
checksum/config: {{ include "slurm-bridge.configYaml" . | sha256sum }}
{{- end }}
