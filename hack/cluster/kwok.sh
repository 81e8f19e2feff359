# hack/cluster.sh's simulated nodes: kwok (it plays the kubelet of every kwok node) and the Node
# objects of each kind (names in hack/lib.sh):
#   SB_NODE_PREFIX      external Slurm nodes (State=EXTERNAL, no slurmd), the bridge's partition;
#   SB_HYBRID_NODE_PREFIX  Slurm nodes served by a real slurmd each (hack/cluster/slurmd.sh);
#   SB_MISSIZED_NODE    one more such node, its kwok side half the size of its Slurm line;
#   SB_EXTRA_NODE_PREFIX   not in Slurm: default-scheduler pods run there;
#   SB_DYN_NODE_PREFIX     not in slurm.conf: the bridge registers them as dynamic Slurm nodes.
# Sourced by hack/cluster.sh (after hack/lib.sh); defines functions only.

up_kwok() {
  # Stages from kwok's own module (node ready + lease heartbeats, pods ready) plus ours (Job
  # pods complete after an optional per-pod delay; deleted pods go at once or, when they ask,
  # after their grace period).
  local kwokdir stages="$STATE_DIR/kwok-stages.yaml"
  kwokdir=$(cd "$CACHE_DIR" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" \
    | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') || die "cannot locate the kwok $KWOK_VERSION module for its stage files"
  {
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml; do
      cat "$kwokdir/kustomize/stage/$f"; echo "---"
    done
    cat "$HACK_DIR/kwok-stages.yaml"
  } > "$stages"
  alive kwok || check_port kwok "$SB_KWOK_PORT" SB_KWOK_PORT
  start kwok "$BIN_DIR/kwok" --kubeconfig "$KUBECONFIG_FILE" --config "$stages" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake --node-lease-duration-seconds 40 \
    --server-address "127.0.0.1:$SB_KWOK_PORT" --cidr 10.244.0.0/16 --node-ip 127.0.0.1
  wait_ready kwok "$SB_READY_TIMEOUT" curl -sf "http://127.0.0.1:$SB_KWOK_PORT/healthz"

  create_nodes
  wait_ready kube-apiserver "$SB_READY_TIMEOUT" nodes_ready
}

node_yaml() { # name cpus pods extra-labels extra-capacity [memory-mib] : one kwok Node manifest
  local mem=${6:-$SB_NODE_MEMORY_MIB}
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubernetes.io/hostname: $1, kubernetes.io/os: linux, kubernetes.io/arch: amd64$4}
spec: {}
status:
  capacity: {cpu: "$2", memory: "${mem}Mi", pods: "$3"$5}
  allocatable: {cpu: "$2", memory: "${mem}Mi", pods: "$3"$5}
  addresses: [{type: InternalIP, address: 127.0.0.1}]
---
EOF
}

# The Kubernetes side of the Slurm nodes' Features= (hack/cluster/slurm-conf.sh): a pod's nodeSelector
# on feature.slinky.slurm.net/<feature> becomes a Slurm constraint (docs/annotations.md).
feature_labels() { local f out=(); for f in "$@"; do out+=("feature.slinky.slurm.net/$f: \"true\""); done; (IFS=,; echo "${out[*]}" | sed 's/,/, /g'); }

set_node_resources() { # name cpus memory-mib pods : apply leaves an existing node's status alone
  local res="{\"cpu\": \"$2\", \"memory\": \"${3}Mi\", \"pods\": \"$4\"}"
  kubectl_ patch node "$1" --subresource=status --type=merge \
    -p "{\"status\": {\"capacity\": $res, \"allocatable\": $res}}" >/dev/null || die "setting $1's capacity failed"
}

nodes_yaml() { # every kwok Node manifest of the layout
  local i name
  for i in $(seq 1 "$SB_NODES"); do
    if is_gpu_node "$i"; then
      node_yaml "$SB_NODE_PREFIX$i" "$SB_NODE_CPUS" "$SB_NODE_PODS" ", nvidia.com/gpu.present: \"true\", $(feature_labels kwok gpu)" ", nvidia.com/gpu: \"$SB_NODE_GPUS\""
    else
      node_yaml "$SB_NODE_PREFIX$i" "$SB_NODE_CPUS" "$SB_NODE_PODS" ", $(feature_labels kwok)" ""
    fi
  done
  # Hybrid nodes: the labels of the other kwok Slurm nodes, and the size their slurm.conf line has.
  for name in $(hybrid_node_names); do
    node_yaml "$name" "$SB_HYBRID_NODE_CPUS" "$SB_NODE_PODS" ", $(feature_labels kwok hybrid)" "" "$SB_HYBRID_NODE_MEMORY_MIB"
  done
  for name in $(missized_node_names); do
    node_yaml "$name" $((SB_HYBRID_NODE_CPUS / 2)) "$SB_NODE_PODS" ", $(feature_labels kwok missized)" "" $((SB_HYBRID_NODE_MEMORY_MIB / 2))
  done
  for name in $(extra_node_names); do
    node_yaml "$name" "$SB_EXTRA_NODE_CPUS" "$SB_EXTRA_NODE_PODS" "" ""
  done
  for name in $(dyn_node_names); do
    node_yaml "$name" "$SB_DYN_NODE_CPUS" "$SB_NODE_PODS" ', nvidia.com/gpu.present: "true"' ", nvidia.com/gpu: \"$SB_DYN_NODE_GPUS\""
  done
}

create_nodes() {
  local name
  nodes_yaml > "$STATE_DIR/nodes.yaml"
  # Status is part of the create body for Nodes; apply also updates an existing node's capacity.
  kubectl_ apply -f "$STATE_DIR/nodes.yaml" >/dev/null || die "creating the kwok nodes failed"
  # apply leaves an existing node's status alone: set the extra and hybrid nodes' capacity explicitly.
  for name in $(extra_node_names); do
    set_node_resources "$name" "$SB_EXTRA_NODE_CPUS" "$SB_NODE_MEMORY_MIB" "$SB_EXTRA_NODE_PODS"
  done
  for name in $(hybrid_node_names); do
    set_node_resources "$name" "$SB_HYBRID_NODE_CPUS" "$SB_HYBRID_NODE_MEMORY_MIB" "$SB_NODE_PODS"
  done
  for name in $(missized_node_names); do
    set_node_resources "$name" $((SB_HYBRID_NODE_CPUS / 2)) $((SB_HYBRID_NODE_MEMORY_MIB / 2)) "$SB_NODE_PODS"
  done
  # The hybrid nodes' GPUs as the NVIDIA DRA driver publishes them, and their DeviceClasses (hack/cluster/gpus.py).
  if [ -n "$SB_HYBRID_GPUS" ]; then
    python3 -P "$HACK_DIR/cluster/gpus.py" manifests | kubectl_ apply -f - >/dev/null || die "publishing the hybrid nodes' GPUs failed"
  fi
  # The bridge registers a dynamic node only with its address (slurmctld would resolve the name at
  # each allocation); once seen without one after an API server restart, so set it on each up.
  for name in $(dyn_node_names); do
    kubectl_ patch node "$name" --subresource=status --type=merge \
      -p '{"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}' >/dev/null \
      || die "setting $name's address failed"
  done
}

nodes_ready() {
  local ready
  ready=$(kubectl_ get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)
  [ "$ready" -ge $((SB_NODES + SB_HYBRID_NODES + $(missized_node_names | wc -l) + SB_EXTRA_NODES + SB_DYN_NODES)) ]
}
