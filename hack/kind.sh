#!/usr/bin/env bash
# A kind cluster whose workers are hybrid nodes (kubelet + slurmd), with Slurm running inside it,
# and the bridge installed there with its Helm chart. docs/quickstart.md ("Try it on kind") walks
# through the same steps.
#
#   hack/kind.sh up          create the cluster (Kubernetes $KUBERNETES_VERSION: one control plane,
#                            SB_KIND_WORKERS workers), start Slurm in it (the workers' stand-in GPUs
#                            of SB_KIND_GPUS in slurmd's gres.conf) and the test DRA plugin that
#                            publishes and prepares the same GPUs, load the images (the tests'
#                            lingering workload into the workers too); reuses a running cluster
#   hack/kind.sh install     install (or upgrade) the bridge with helm, as docs/quickstart.md shows
#   hack/kind.sh uninstall   helm uninstall the bridge
#   hack/kind.sh down        delete the cluster; nothing of it keeps running, its state is removed
#   hack/kind.sh status      nodes, Slurm's pods and nodes, the bridge's pods
#   hack/kind.sh env         shell variables for kubectl, curl and the tests (eval "$(hack/kind.sh env)")
#   hack/kind.sh slurm CMD   a Slurm command (sinfo, squeue, sacct, sbatch, scontrol, scancel,
#                            sacctmgr) in the slurmctld pod
#   hack/kind.sh deploy-env  RELEASE, RELEASE_NAMESPACE, IMAGE_TAG and the values file, for tests
#
# Container engine: docker where a Docker engine answers, else podman (from apt). Images: where a
# registry is reachable, kind's published node image and public base images; else (this machine,
# CI) everything is built here from the project's Kubernetes build, Debian packages and Go modules
# (hack/kind/node-image.sh, hack/image.sh), cached in ~/.cache/slurm-bridge. SB_KIND_* variables
# (hack/kind/common.sh) size and place it.
. "$(dirname "$0")/lib.sh"
. "$HACK_DIR/kind/common.sh"
. "$HACK_DIR/cluster/slurm-conf.sh"
. "$HACK_DIR/kind/slurm.sh"
. "$HACK_DIR/kind/dra.sh"
cd "$REPO_DIR"

RELEASE=slurm-bridge
RELEASE_NAMESPACE=slurm-bridge-system
VALUES=hack/kind/values.yaml
HELM=$HELM_BIN   # SB_HELM=4: Helm 4 (hack/lib.sh)
MANAGED_LABEL=slurm-bridge.local/managed

kubectl_kind() { kubectl --kubeconfig "$KIND_KUBECONFIG" "$@"; }
helm() { KUBECONFIG=$KIND_KUBECONFIG "$HELM" "$@"; }

cluster_exists() { kind_ get clusters 2>/dev/null | grep -qx "$SB_KIND_CLUSTER"; }

# ---- images -------------------------------------------------------------------------------------
# "local": every image is built here (kind's node image included; nothing is pulled); "published":
# kind's published node image, and the project's Dockerfiles built by the engine on their public
# bases. Published needs docker and a registry that answers: podman resolves no short image names
# with Debian's registries configuration, so with podman the images are built here. Decided once per
# cluster (kept in $KIND_STATE/images); SB_KIND_IMAGES=local|published decides instead.
image_mode() {
  if [ -s "$KIND_STATE/images" ]; then cat "$KIND_STATE/images"; return 0; fi
  local mode
  case ${SB_KIND_IMAGES:-} in
    local | published) mode=$SB_KIND_IMAGES ;;
    "")
      if [ "$KIND_ENGINE" != docker ]; then
        log "$KIND_ENGINE: every image is built here and cached (SB_KIND_IMAGES=published pulls instead)"
        mode=local
      elif kind_engine image inspect "$KIND_PUBLISHED_NODE_IMAGE" >/dev/null 2>&1 \
        || timeout 300 docker pull "$KIND_PUBLISHED_NODE_IMAGE" >"$KIND_CACHE/pull.log" 2>&1; then
        mode=published
      else
        log "kind's published node image cannot be pulled here ($(tail -n 1 "$KIND_CACHE/pull.log" 2>/dev/null)): every image is built here and cached"
        mode=local
      fi ;;
    *) die "SB_KIND_IMAGES=$SB_KIND_IMAGES: expected local or published" ;;
  esac
  mkdir -p "$KIND_STATE"; echo "$mode" > "$KIND_STATE/images"; echo "$mode"
}

# SB_KIND_NODE_IMAGE=REF: that node image, whatever builds the others.
node_image() {
  if [ -n "${SB_KIND_NODE_IMAGE:-}" ]; then echo "$SB_KIND_NODE_IMAGE"
  elif [ "$(image_mode)" = local ]; then bash "$HACK_DIR/kind/node-image.sh" build
  else echo "$KIND_PUBLISHED_NODE_IMAGE"; fi
}

# An image built from one of the project's Dockerfiles, as an archive `kind load image-archive`
# reads: with buildah on local bases (hack/image.sh), or with the container engine on public bases.
# The tests' lingering workload (hack/workload) and the test DRA plugin (hack/kind/dra-plugin) are
# static binaries on empty images: always built here (hack/image.sh), whatever the mode; nothing of
# them is pulled.
image_archive() { # bridge|slurm|mariadb|workload|dra-plugin
  if [ "$(image_mode)" = local ] || [ "$1" = workload ] || [ "$1" = dra-plugin ]; then bash "$HACK_DIR/image.sh" archive "$1"; return; fi
  local ref out
  ref=$(image_ref "$1"); out="$KIND_CACHE/images/$(echo "${ref#localhost/}" | tr ':/' '--').tar"
  if [ ! -f "$out" ]; then
    mkdir -p "$(dirname "$out")"
    case $1 in
      bridge) kind_engine build -t "$ref" . >&2 ;;
      *) kind_engine build --target "$1" -t "$ref" hack/kind/slurm-image >&2 ;;
    esac || die "building $ref with $KIND_ENGINE failed"
    kind_engine save -o "$out.tmp" "$ref" && mv "$out.tmp" "$out" || die "saving $ref failed"
  fi
  echo "$out"
}

image_ref() { # bridge|slurm|mariadb|workload|dra-plugin
  if [ "$(image_mode)" = local ] || [ "$1" = workload ] || [ "$1" = dra-plugin ]; then bash "$HACK_DIR/image.sh" ref "$1"; return; fi
  local sum
  case $1 in
    bridge) sum=$( { ls Dockerfile .dockerignore constraints.txt pyproject.toml README.md
                     find slurm_bridge operator webhook extender -type f ! -name '*.pyc' ! -path '*/__pycache__/*'; } \
                   | sort | xargs sha256sum | sha256sum | cut -c1-12)
            echo "localhost/slurm-bridge:$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)-$sum" ;;
    slurm | mariadb) sum=$(find hack/kind/slurm-image -type f | sort | xargs sha256sum | sha256sum | cut -c1-12)
            echo "localhost/slurm-bridge-$1:$sum" ;;
  esac
}

load_image() { # name node... : load the image into those nodes unless they have it
  local name=$1 ref archive n missing=()
  ref=$(image_ref "$name"); shift
  for n in "$@"; do
    kind_engine exec "$n" ctr --namespace=k8s.io images ls -q 2>/dev/null | grep -qxF "$ref" || missing+=("$n")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  archive=$(image_archive "$name")
  log "loading $ref into ${missing[*]}"
  kind_ load image-archive "$archive" --name "$SB_KIND_CLUSTER" --nodes "$(IFS=,; echo "${missing[*]}")" >&2 \
    || die "kind load image-archive $archive failed"
}

# ---- the cluster ------------------------------------------------------------------------------
cgroup_v1() { [ ! -f /sys/fs/cgroup/cgroup.controllers ]; }
# Some hosts (this VM) refuse a negative oom_score_adj, which the kubelet gives pod sandboxes
# (test-environment.md); containerd must then leave it alone.
negative_oom_refused() { ! (echo -998 > /proc/self/oom_score_adj) 2>/dev/null; }

kind_config() {
  local i
  cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $SB_KIND_CLUSTER
networking:
  apiServerAddress: 127.0.0.1
  # The pod network is set up by hack/kind.sh (routes between the nodes), the same with any node image.
  disableDefaultCNI: true
  kubeProxyMode: nftables
  podSubnet: $SB_KIND_POD_SUBNET
  serviceSubnet: $SB_KIND_SERVICE_SUBNET
EOF
  if negative_oom_refused; then
    cat <<'EOF'
containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
EOF
  fi
  if cgroup_v1; then
    # kubelet 1.37 refuses cgroup v1 unless told otherwise.
    cat <<'EOF'
kubeadmConfigPatches:
- |
  apiVersion: kubelet.config.k8s.io/v1beta1
  kind: KubeletConfiguration
  failCgroupV1: false
EOF
  fi
  cat <<EOF
nodes:
- role: control-plane
  extraPortMappings:
  - {containerPort: $SB_KIND_SLURMRESTD_NODEPORT, hostPort: $SB_KIND_SLURMRESTD_PORT, listenAddress: 127.0.0.1}
EOF
  for i in $(seq 1 "$SB_KIND_WORKERS"); do echo "- role: worker"; done
}

nodes() { kind_ get nodes --name "$SB_KIND_CLUSTER" | sort; }
workers() { nodes | grep -v -- '-control-plane$'; }
control_plane() { nodes | grep -- '-control-plane$'; }

# "name podCIDR address" of every node, once the controller manager has given each its range.
node_table() {
  kubectl_kind get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}'
}

# The pod network: each node's pods on a ptp link with addresses from its podCIDR (Debian's CNI
# plugins), a route to every other node's podCIDR through that node, and masquerading of what pods
# send outside the pod network. That is what kindnetd does for kind; kindnetd is not in the kind
# Go module any more (docs/development.md), and static routes serve a cluster of fixed nodes.
setup_network() {
  local table n cidr addr m mcidr maddr deadline=$((SECONDS + 120))
  until table=$(node_table) && [ "$(echo "$table" | awk 'NF == 3' | wc -l)" -eq $((SB_KIND_WORKERS + 1)) ]; do
    [ $SECONDS -lt $deadline ] || die "the nodes have no podCIDR or address after 120 s: $table"
    sleep 1
  done
  while read -r n cidr addr; do
    {
      cat <<EOF
set -e
mkdir -p /etc/cni/net.d
cat > /etc/cni/net.d/10-slurm-bridge-kind.conflist.tmp <<'CNI'
{"cniVersion": "0.4.0", "name": "slurm-bridge-kind", "plugins": [
  {"type": "ptp", "ipMasq": false, "mtu": 1500,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
CNI
mv /etc/cni/net.d/10-slurm-bridge-kind.conflist.tmp /etc/cni/net.d/10-slurm-bridge-kind.conflist
nft -f - <<'NFT'
table ip slurm-bridge-kind
delete table ip slurm-bridge-kind
table ip slurm-bridge-kind {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr $SB_KIND_POD_SUBNET ip daddr != $SB_KIND_POD_SUBNET masquerade
  }
}
NFT
EOF
      while read -r m mcidr maddr; do
        [ "$m" = "$n" ] || echo "ip route replace $mcidr via $maddr"
      done <<< "$table"
    } | kind_engine exec -i "$n" bash || die "setting up the pod network on $n failed"
  done <<< "$table"
}

wait_nodes_ready() {
  kubectl_kind wait --for=condition=Ready node --all --timeout=180s >/dev/null \
    || { kubectl_kind get nodes -o wide >&2; die "the kind nodes did not become Ready within 180 s"; }
}

create_cluster() {
  local image=$1
  mkdir -p "$KIND_STATE"
  kind_config > "$KIND_STATE/kind-config.yaml"
  log "creating kind cluster $SB_KIND_CLUSTER (1 control plane, $SB_KIND_WORKERS workers, $KIND_ENGINE, image $image)"
  kind_ create cluster --name "$SB_KIND_CLUSTER" --image "$image" --config "$KIND_STATE/kind-config.yaml" \
    --kubeconfig "$KIND_KUBECONFIG" --retain >&2 \
    || { kind_ export logs "$KIND_STATE/create-logs" --name "$SB_KIND_CLUSTER" >/dev/null 2>&1 || true
         kind_ delete cluster --name "$SB_KIND_CLUSTER" >/dev/null 2>&1 || true
         die "kind create cluster failed (node logs: $KIND_STATE/create-logs)"; }
}

# ---- Slurm ------------------------------------------------------------------------------------
slurm_up() {
  local cp w workers="" n addr
  cp=$(control_plane)
  for w in $(workers); do
    addr=$(kubectl_kind get node "$w" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
    workers+="$w=$addr "
  done
  load_image slurm $(nodes)
  load_image mariadb "$cp"
  KIND_SLURM_IMAGE=$(image_ref slurm); KIND_MARIADB_IMAGE=$(image_ref mariadb)
  KIND_SLURM_USERS=$(kind_slurm_users)
  kubectl_kind apply -f - >/dev/null <<EOF || die "creating the $KIND_SLURM_NS namespace failed"
apiVersion: v1
kind: Namespace
metadata: {name: $KIND_SLURM_NS, labels: {app.kubernetes.io/part-of: slurm}}
EOF
  { kind_slurm_secrets; echo "---"; kind_slurm_config_map "$workers"; } > "$KIND_STATE/slurm-base.yaml"
  KIND_SLURM_CONFIG_HASH=$(sha256sum < "$KIND_STATE/slurm-base.yaml" | cut -c1-12)
  kind_slurm_manifests > "$KIND_STATE/slurm.yaml"
  kubectl_kind apply -f "$KIND_STATE/slurm-base.yaml" -f "$KIND_STATE/slurm.yaml" >/dev/null \
    || die "applying Slurm's objects failed ($KIND_STATE/slurm.yaml)"
  log "waiting for Slurm: mariadb, slurmdbd, slurmctld (with the accounting of hack/accounting.env), slurmrestd, slurmd on ${workers% }"
  for n in mariadb slurmdbd slurmctld slurmrestd; do
    kubectl_kind -n "$KIND_SLURM_NS" rollout status "deploy/$n" --timeout=300s >/dev/null \
      || { slurm_debug "$n"; die "Slurm's $n did not become ready within 300 s"; }
  done
  kubectl_kind -n "$KIND_SLURM_NS" rollout status ds/slurmd --timeout=180s >/dev/null \
    || { slurm_debug slurmd; die "slurmd did not become ready on every worker within 180 s"; }
  wait_slurm_nodes
  bridge_token
}

slurm_debug() { # component : its pods and their logs, for an error
  kubectl_kind -n "$KIND_SLURM_NS" get pods -o wide >&2 || true
  kubectl_kind -n "$KIND_SLURM_NS" logs -l "app.kubernetes.io/name=$1" --all-containers --tail=30 --prefix >&2 || true
}

slurm_cmd() { kubectl_kind -n "$KIND_SLURM_NS" exec -i deploy/slurmctld -c slurmctld -- "$@"; }

# Every worker is an idle Slurm node served by its slurmd (not DOWN, not EXTERNAL).
wait_slurm_nodes() {
  local deadline=$((SECONDS + 120)) states
  until states=$(slurm_cmd sinfo -h -N -o '%N %t' 2>/dev/null) && [ -n "$states" ] \
    && ! echo "$states" | grep -qvE ' (idle|mix|alloc)$'; do
    [ $SECONDS -lt $deadline ] || { slurm_debug slurmd; die "the workers are not all up in Slurm after 120 s: $states"; }
    sleep 1
  done
}

# The bridge's token: SlurmUser's (only it and root may submit for another user, docs/tenancy.md),
# kept on the host for the tests and put into the bridge's Secret by `install`.
bridge_token() {
  local tok
  tok=$(slurm_cmd scontrol token username="$SB_BRIDGE_SLURM_USER" lifespan=2592000 | sed -n 's/^SLURM_JWT=//p')
  [ -n "$tok" ] || die "scontrol token failed in the slurmctld pod"
  (umask 077; echo "$tok" > "$KIND_JWT_FILE.tmp"); mv "$KIND_JWT_FILE.tmp" "$KIND_JWT_FILE"
  local deadline=$((SECONDS + 60))
  until curl -sf -o /dev/null -H "X-SLURM-USER-TOKEN: $tok" "http://127.0.0.1:$SB_KIND_SLURMRESTD_PORT/slurm/v0.0.44/ping"; do
    [ $SECONDS -lt $deadline ] || { slurm_debug slurmrestd; die "slurmrestd does not answer on 127.0.0.1:$SB_KIND_SLURMRESTD_PORT (NodePort $SB_KIND_SLURMRESTD_NODEPORT) after 60 s"; }
    sleep 1
  done
}

# ---- commands -------------------------------------------------------------------------------------
cmd_up() {
  local t0=$SECONDS image
  command -v kubectl >/dev/null || die "kubectl is not on PATH; install kubectl and re-run"
  command -v curl >/dev/null || ensure_apt curl
  require_go
  kind_provider_setup
  bash "$HACK_DIR/build-binaries.sh" kind >&2
  mkdir -p "$KIND_STATE" "$KIND_CACHE"
  if ! cluster_exists; then
    rm -rf "$KIND_STATE"; mkdir -p "$KIND_STATE"
    image=$(node_image)
    create_cluster "$image"
  else
    kind_ get kubeconfig --name "$SB_KIND_CLUSTER" > "$KIND_KUBECONFIG"
    log "kind cluster $SB_KIND_CLUSTER exists: reusing it"
  fi
  echo "$KIND_ENGINE" > "$KIND_STATE/engine"
  local t1=$SECONDS
  setup_network
  wait_nodes_ready
  slurm_up
  kind_dra_up
  load_image bridge "$(control_plane)"
  # The handoff's tests (tests/kind/test_colocation.py): a container that lingers after SIGTERM.
  load_image workload $(workers)
  log "kind cluster $SB_KIND_CLUSTER up in $((SECONDS - t0))s (cluster $((t1 - t0))s, Slurm and images $((SECONDS - t1))s)"
  cmd_status
}

cmd_install() {
  kind_provider_setup
  cluster_exists && [ -s "$KIND_JWT_FILE" ] || die "the kind cluster is not up; run hack/kind.sh up first"
  [ -x "$HELM" ] || bash "$HACK_DIR/build-binaries.sh" "$HELM_TARGET" >&2
  load_image bridge "$(control_plane)"
  local IMAGE_TAG verb
  IMAGE_TAG=$(image_ref bridge); IMAGE_TAG=${IMAGE_TAG##*:}
  kubectl_kind get namespace "$RELEASE_NAMESPACE" >/dev/null 2>&1 || kubectl_kind create namespace "$RELEASE_NAMESPACE" >/dev/null
  # The token Secret, made as a user makes it (docs/quickstart.md).
  kubectl_kind -n "$RELEASE_NAMESPACE" create secret generic slurm-bridge-slurm-jwt --from-file=jwt="$KIND_JWT_FILE" \
    --dry-run=client -o yaml | kubectl_kind apply -f - >/dev/null
  if helm status "$RELEASE" --namespace "$RELEASE_NAMESPACE" >/dev/null 2>&1; then verb=upgrade; else verb=install; fi
  # --- the helm install of docs/quickstart.md ("Try it on kind") ------------------------------------
  helm $verb slurm-bridge helm/slurm-bridge --namespace slurm-bridge-system \
    --values hack/kind/values.yaml \
    --set image.tag="$IMAGE_TAG" \
    --wait --timeout 5m
  # -------------------------------------------------------------------------------------------------
  webhook_answers
  log "slurm-bridge $IMAGE_TAG installed with $("$HELM" version --short) as release $RELEASE in $RELEASE_NAMESPACE on kind; namespaces labelled $MANAGED_LABEL=true are managed"
}

# helm --wait returns once the pods are Ready; the API server reaches the webhook a moment later,
# when kube-proxy has the Service's rules. A server-side dry run of a managed pod goes through it.
webhook_answers() {
  local ns=slurm-bridge-webhook-check deadline=$((SECONDS + 90))
  kubectl_kind create namespace "$ns" --dry-run=client -o yaml | kubectl_kind label --local -f - "$MANAGED_LABEL=true" -o yaml \
    | kubectl_kind apply -f - >/dev/null
  until [ "$(kubectl_kind -n "$ns" run probe --image=x --restart=Never --dry-run=server -o jsonpath='{.spec.schedulerName}' 2>/dev/null)" = slurm-bridge ]; do
    [ $SECONDS -lt $deadline ] || die "the bridge's webhook does not answer the API server 90 s after the install; see the webhook pods' logs"
    sleep 1
  done
  kubectl_kind delete namespace "$ns" --wait=false >/dev/null
}

cmd_uninstall() {
  kind_provider_setup
  cluster_exists || return 0
  helm uninstall "$RELEASE" --namespace "$RELEASE_NAMESPACE" --wait --timeout 2m --ignore-not-found
}

cmd_down() {
  kind_provider_setup
  if cluster_exists; then
    kind_ delete cluster --name "$SB_KIND_CLUSTER" >&2 || die "kind delete cluster failed"
  fi
  rm -rf "$KIND_STATE"
  log "kind cluster $SB_KIND_CLUSTER deleted; state removed"
}

cmd_status() {
  kind_provider_setup
  cluster_exists || { echo "kind cluster $SB_KIND_CLUSTER: not running"; return 0; }
  echo "# kind cluster $SB_KIND_CLUSTER ($KIND_ENGINE; images: $(cat "$KIND_STATE/images" 2>/dev/null || echo ?)); kubeconfig $KIND_KUBECONFIG"
  kubectl_kind get nodes -o wide
  echo; echo "# Slurm (namespace $KIND_SLURM_NS); slurmrestd on http://127.0.0.1:$SB_KIND_SLURMRESTD_PORT"
  kubectl_kind -n "$KIND_SLURM_NS" get pods,services -o wide
  echo; slurm_cmd sinfo -N -o '%N %P %t %c %m %G' 2>/dev/null || echo "(slurmctld does not answer)"
  if kubectl_kind get namespace "$KIND_DRA_NS" >/dev/null 2>&1; then
    echo; echo "# the test DRA plugin gpu.nvidia.com (namespace $KIND_DRA_NS) and the workers' ResourceSlices"
    kubectl_kind -n "$KIND_DRA_NS" get pods -o wide
    kubectl_kind get resourceslices
  fi
  if kubectl_kind get namespace "$RELEASE_NAMESPACE" >/dev/null 2>&1; then
    echo; echo "# the bridge (namespace $RELEASE_NAMESPACE)"
    kubectl_kind -n "$RELEASE_NAMESPACE" get pods -o wide
  fi
}

cmd_env() {
  local workers="" cp="" image="" linger=""
  if [ -s "$KIND_KUBECONFIG" ]; then
    workers=$(kubectl_kind get nodes -l '!node-role.kubernetes.io/control-plane' -o name 2>/dev/null | sed 's|^node/||' | sort | tr '\n' ' ' | sed 's/ $//')
    cp=$(kubectl_kind get nodes -l node-role.kubernetes.io/control-plane -o name 2>/dev/null | sed 's|^node/||')
  fi
  [ -s "$KIND_STATE/images" ] && image=$(image_ref slurm) && linger=$(image_ref workload)
  cat <<EOF
export KUBECONFIG=$KIND_KUBECONFIG
export SB_CLUSTER=kind
export SB_KUBERNETES_VERSION=$KUBERNETES_VERSION
export SLURM_REST_URL=http://127.0.0.1:$SB_KIND_SLURMRESTD_PORT
export SLURM_REST_URL_FOR_PODS=$KIND_SLURMRESTD_URL_FOR_PODS
export SLURM_JWT_FILE=$KIND_JWT_FILE
export SB_STATE_DIR=$KIND_STATE
export SB_PARTITION=$SB_PARTITION
export SB_NODE_NAMES="$workers"
export SB_GPU_NODE_NAMES=""
export SB_BRIDGE_NODE=$cp
export SB_WORKLOAD_IMAGE=$image
export SB_LINGER_IMAGE=$linger
export KIND_EXPERIMENTAL_PROVIDER=$(cat "$KIND_STATE/engine" 2>/dev/null)
EOF
  [ "$(cat "$KIND_STATE/engine" 2>/dev/null)" != podman ] || echo "export CONTAINERS_CONF=$KIND_CACHE/containers.conf"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  install) cmd_install ;;
  uninstall) cmd_uninstall ;;
  status) cmd_status ;;
  env) cmd_env ;;
  slurm)
    shift
    case "${1:-}" in
      sinfo|squeue|sacct|sbatch|scontrol|scancel|sacctmgr|sshare|srun|salloc) kind_provider_setup; slurm_cmd "$@" ;;
      *) die "usage: hack/kind.sh slurm sinfo|squeue|sacct|sbatch|scontrol|scancel|sacctmgr|sshare|srun|salloc ARGS" ;;
    esac ;;
  deploy-env)
    echo "RELEASE=$RELEASE"
    echo "RELEASE_NAMESPACE=$RELEASE_NAMESPACE"
    echo "VALUES=$REPO_DIR/$VALUES"
    kind_provider_setup
    t=$(image_ref bridge); echo "IMAGE_TAG=${t##*:}" ;;
  *) die "usage: hack/kind.sh up|down|status|env|install|uninstall|slurm CMD ARGS|deploy-env" ;;
esac
