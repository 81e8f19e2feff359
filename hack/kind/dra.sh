# shellcheck shell=bash
# The kind workers' test DRA driver for gpu.nvidia.com (hack/kind.sh sources this; docs/gpus.md#gpus-on-the-kind-workers).
# A real kubelet refuses to start a pod whose claim names a driver no plugin on the node registered;
# the workers have no GPU, so hack/kind/dra-plugin plays the NVIDIA driver's node part for the stand-in
# GPUs of SB_KIND_GPUS, which slurmd serves from the same layout (hack/cluster/gpus.py).
#
# Objects (namespace $KIND_DRA_NS):
#   DeviceClasses            gpu.nvidia.com, mig.nvidia.com, mig-<profile>.nvidia.com (gpus.py's)
#   ConfigMap gpu-layout     layout.json: each worker's devices and their device files (hack/kind/gpu_layout.py)
#   DaemonSet gpu-dra-plugin on every worker: registers with the kubelet, publishes the worker's
#                            ResourceSlices, prepares claims through CDI
#   RBAC                     its ServiceAccount may get nodes and ResourceClaims and write ResourceSlices,
#                            and a ValidatingAdmissionPolicy holds those writes to its own node's slices
#                            of driver gpu.nvidia.com (the pod's token names its node)

KIND_DRA_NS=gpu-dra
KIND_DRA_SA=gpu-dra-plugin

kind_dra_manifests() { # image layout.json
  local sa="system:serviceaccount:$KIND_DRA_NS:$KIND_DRA_SA"
  kubectl_kind -n "$KIND_DRA_NS" create configmap gpu-layout --from-file=layout.json="$2" --dry-run=client -o yaml
  cat <<EOF
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: $KIND_DRA_SA, namespace: $KIND_DRA_NS}
---
# What kubeletplugin needs: the node (its UID owns the slices), the claims the kubelet hands over
# (read by name), and its node's ResourceSlices (listed and watched by node, written).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $KIND_DRA_SA}
rules:
- {apiGroups: [""], resources: [nodes], verbs: [get]}
- {apiGroups: [resource.k8s.io], resources: [resourceclaims], verbs: [get]}
- {apiGroups: [resource.k8s.io], resources: [resourceslices], verbs: [get, list, watch, create, update, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: $KIND_DRA_SA}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $KIND_DRA_SA}
subjects: [{kind: ServiceAccount, name: $KIND_DRA_SA, namespace: $KIND_DRA_NS}]
---
# RBAC cannot say "its own node": the API server refuses the plugin's writes to any other node's
# slices, or another driver's, from the node name its pod-bound token carries.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: $KIND_DRA_SA-own-node}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [resource.k8s.io], apiVersions: ["*"], operations: [CREATE, UPDATE, DELETE], resources: [resourceslices]}
  matchConditions:
  - {name: the-plugin, expression: 'request.userInfo.username == "$sa"'}
  variables:
  - name: userNode
    expression: >-
      has(request.userInfo.extra) && 'authentication.kubernetes.io/node-name' in request.userInfo.extra
      ? request.userInfo.extra['authentication.kubernetes.io/node-name'][0] : ''
  - {name: slice, expression: 'request.operation == "DELETE" ? oldObject : object'}
  validations:
  - expression: 'variables.userNode != ""'
    message: the plugin's token names no node
  - expression: 'variables.slice.spec.?nodeName.orValue("") == variables.userNode && variables.slice.spec.driver == "gpu.nvidia.com"'
    messageExpression: '"the plugin on node " + variables.userNode + " may write only its own node''s gpu.nvidia.com ResourceSlices"'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: $KIND_DRA_SA-own-node}
spec:
  policyName: $KIND_DRA_SA-own-node
  validationActions: [Deny]
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: $KIND_DRA_SA
  namespace: $KIND_DRA_NS
  labels: {app.kubernetes.io/name: $KIND_DRA_SA}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: $KIND_DRA_SA}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: $KIND_DRA_SA}
      annotations: {slurm-bridge.local/layout: "$(sha256sum < "$2" | cut -c1-12)"}
    spec:
      serviceAccountName: $KIND_DRA_SA
$(_worker_placement)
      containers:
      - name: plugin
        image: $1
        imagePullPolicy: Never
        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
        resources: {requests: {cpu: 5m, memory: 16Mi}}
        # root, for the kubelet's directories, and nothing more.
        securityContext: {runAsUser: 0, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        volumeMounts:
        - {name: layout, mountPath: /etc/gpu-layout, readOnly: true}
        - {name: registry, mountPath: /var/lib/kubelet/plugins_registry}
        - {name: plugin-dir, mountPath: /var/lib/kubelet/plugins/gpu.nvidia.com}
        - {name: cdi, mountPath: /var/run/cdi}
      volumes:
      - {name: layout, configMap: {name: gpu-layout}}
      - {name: registry, hostPath: {path: /var/lib/kubelet/plugins_registry, type: Directory}}
      - {name: plugin-dir, hostPath: {path: /var/lib/kubelet/plugins/gpu.nvidia.com, type: DirectoryOrCreate}}
      - {name: cdi, hostPath: {path: /var/run/cdi, type: DirectoryOrCreate}}
---
EOF
  # Last: kubectl reads a file that starts with JSON as JSON only.
  python3 -P "$HACK_DIR/kind/gpu_layout.py" device-classes || die "SB_KIND_GPUS: see above"
}

# The driver on every worker; then each worker of the layout publishes its devices.
kind_dra_up() {
  local image node want got deadline layout="$KIND_STATE/gpu-layout.json"
  [ -n "$SB_KIND_GPUS" ] || { log "SB_KIND_GPUS is empty: the workers have no GPUs and no DRA plugin"; return 0; }
  python3 -P "$HACK_DIR/kind/gpu_layout.py" plugin-layout > "$layout" || die "SB_KIND_GPUS: see above"
  # shellcheck disable=SC2046 # one word per worker
  load_image dra-plugin $(workers)
  image=$(image_ref dra-plugin)
  kubectl_kind create namespace "$KIND_DRA_NS" --dry-run=client -o yaml | kubectl_kind apply -f - >/dev/null
  kind_dra_manifests "$image" "$layout" > "$KIND_STATE/dra.yaml"
  kubectl_kind apply -f "$KIND_STATE/dra.yaml" >/dev/null || die "applying the DRA plugin's objects failed ($KIND_STATE/dra.yaml)"
  kubectl_kind -n "$KIND_DRA_NS" rollout status "ds/$KIND_DRA_SA" --timeout=120s >/dev/null \
    || { kubectl_kind -n "$KIND_DRA_NS" logs -l "app.kubernetes.io/name=$KIND_DRA_SA" --tail=20 --prefix >&2 || true
         die "the DRA plugin did not become ready on every worker within 120 s"; }
  for node in $(workers); do
    want=$(python3 -P -c 'import json,sys; print(len(json.load(sys.stdin)["nodes"].get(sys.argv[1], [])))' "$node" < "$layout")
    [ "$want" -gt 0 ] || continue
    deadline=$((SECONDS + 60))
    until got=$(kubectl_kind get resourceslices --field-selector "spec.nodeName=$node,spec.driver=gpu.nvidia.com" \
                  -o jsonpath='{range .items[*]}{range .spec.devices[*]}{.name}{"\n"}{end}{end}' 2>/dev/null | grep -c .) \
          && [ "$got" -eq "$want" ]; do
      [ $SECONDS -lt $deadline ] || { kubectl_kind -n "$KIND_DRA_NS" logs -l "app.kubernetes.io/name=$KIND_DRA_SA" --tail=20 --prefix >&2 || true
                                      die "the DRA plugin on $node publishes ${got:-0} devices after 60 s, not $want"; }
      sleep 1
    done
  done
  log "DRA plugin gpu.nvidia.com on every worker; GPUs: ${SB_KIND_GPUS:-none}"
}
