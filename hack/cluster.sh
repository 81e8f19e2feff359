#!/usr/bin/env bash
# The local cluster: Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok nodes, and one real node with containerd, kubelet and kube-proxy: hack/node.sh; with the
# Workload API turned on), the JobSet
# and LeaderWorkerSet controllers (and the coscheduling PodGroup CRD), and Slurm (munged, slurmctld,
# slurmrestd in a Debian root), all on 127.0.0.1 (and the pod network's host address SB_HOST_IP).
#
#   hack/cluster.sh up        build what is missing (cached), start everything, wait until ready
#   hack/cluster.sh down      stop every process it started (by pid) and remove the cluster state
#   hack/cluster.sh status    what runs where: ports, pids, log files
#   hack/cluster.sh env       shell variables for kubectl/curl (eval "$(hack/cluster.sh env)")
#   hack/cluster.sh start-workloads   start only the workload controllers (on a running cluster)
#   hack/cluster.sh nodes     create (or update) the kwok nodes, and SB_EXTRA_NODES and SB_DYN_NODES
#                             ones not in slurm.conf
#
# Ports, node count and capacities come from SB_* variables (defaults in hack/lib.sh).
. "$(dirname "$0")/lib.sh"

# ---- certificates ----------------------------------------------------------------------------
make_pki() {
  mkdir -p "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=slurm-bridge-local-ca" \
      -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null || die "making the cluster CA failed"
  fi
  # Pods reach the API server at the kubernetes Service (10.96.0.1), the real node's kube-proxy
  # and kubelet at SB_HOST_IP; host processes at 127.0.0.1.
  sign_cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,IP:$SB_HOST_IP,DNS:kubernetes.default.svc,DNS:kubernetes.default"
  sign_cert admin "/O=system:masters/CN=admin"
  # The bridge's own identity, so the webhook can tell its writes from users' (trustedUsers).
  sign_cert bridge "/O=system:masters/CN=slurm-bridge"
  # The API server's client identity towards kubelets (logs, exec).
  sign_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  if [ ! -f "$PKI/sa.key" ]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null && openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null \
      || die "making the service-account key failed"
  fi
  chmod 600 "$PKI"/*.key
}

# ---- Kubernetes ------------------------------------------------------------------------------
# The Workload API (Workload and PodGroup, and the pods' spec.schedulingGroup) is off unless its
# gate and API version are turned on: alpha scheduling.k8s.io/v1alpha2 in 1.36; beta v1beta1 in
# 1.37 (a beta gate and API that are still off by default), where the Job controller can make a
# Job's Workload and PodGroups (WorkloadWithJob) and CompositePodGroup (alpha, v1alpha3) groups
# them. DRAWorkloadResourceClaims lets a PodGroup carry shared claims, which the bridge refuses
# by name (docs/workloads.md): without the gate the API server would drop them before it could.
# 1.34 has no Workload API, and 1.35's v1alpha1 is not one the bridge reads: neither turns
# anything on, so the bridge's "not served" errors are what those versions show.
case $KUBERNETES_MINOR in
  36) FEATURE_GATES="GenericWorkload=true,DRAWorkloadResourceClaims=true"; RUNTIME_CONFIG="scheduling.k8s.io/v1alpha2=true" ;;
  37) FEATURE_GATES="GenericWorkload=true,WorkloadWithJob=true,DRAWorkloadResourceClaims=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true"
      RUNTIME_CONFIG="scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true" ;;
  *) FEATURE_GATES=""; RUNTIME_CONFIG="" ;;
esac
# Controllers the local cluster does without (no node IPAM, cloud or volume binding); 1.37 no longer
# knows the cloud ones by name and refuses to start if told to turn them off.
kcm_controllers() {
  if [ "$KUBERNETES_MINOR" -ge 37 ]; then echo '*,-nodeipam,-persistentvolume-binder'
  else echo '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle,-persistentvolume-binder'; fi
}
# Flags only for what is set: an empty --feature-gates is refused by some versions.
gate_flags() { [ -z "$FEATURE_GATES" ] || echo "--feature-gates=$FEATURE_GATES"; }

up_kubernetes() {
  make_pki
  write_kubeconfig "$KUBECONFIG_FILE" admin
  write_kubeconfig "$STATE_DIR/kubeconfig-bridge" bridge
  mkdir -p "$STATE_DIR/etcd"

  alive etcd || check_port etcd "$SB_ETCD_PORT" SB_ETCD_PORT
  alive etcd || check_port etcd-peer "$SB_ETCD_PEER_PORT" SB_ETCD_PEER_PORT
  start etcd "$BIN_DIR/etcd" --name local --data-dir "$STATE_DIR/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$SB_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$SB_ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$SB_ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$SB_ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$SB_ETCD_PEER_PORT" --listen-metrics-urls "" --log-level warn
  wait_ready etcd "$SB_READY_TIMEOUT" curl -sf "http://127.0.0.1:$SB_ETCD_PORT/health"

  alive kube-apiserver || check_port kube-apiserver "$SB_APISERVER_PORT" SB_APISERVER_PORT
  start kube-apiserver "$K8S_BIN_DIR/kube-apiserver" --etcd-servers "http://127.0.0.1:$SB_ETCD_PORT" \
    --bind-address 0.0.0.0 --advertise-address "$SB_HOST_IP" --secure-port "$SB_APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" --service-cluster-ip-range "$SERVICE_CIDR" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --allow-privileged --enable-priority-and-fairness=false --max-requests-inflight 2000 \
    --max-mutating-requests-inflight 1000 --profiling=${SB_APISERVER_PROFILING:-false} \
    $(gate_flags) ${RUNTIME_CONFIG:+--runtime-config=$RUNTIME_CONFIG}
  wait_ready kube-apiserver "$SB_READY_TIMEOUT" kubectl_ get --raw /readyz

  alive kube-controller-manager || check_port kube-controller-manager "$SB_KCM_PORT" SB_KCM_PORT
  start kube-controller-manager "$K8S_BIN_DIR/kube-controller-manager" --kubeconfig "$KUBECONFIG_FILE" \
    --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE" \
    --bind-address 127.0.0.1 --secure-port "$SB_KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --controllers "$(kcm_controllers)" \
    --kube-api-qps 200 --kube-api-burst 400 --concurrent-job-syncs 20 $(gate_flags)
  wait_ready kube-controller-manager "$SB_READY_TIMEOUT" curl -skf "https://127.0.0.1:$SB_KCM_PORT/healthz"

  alive kube-scheduler || check_port kube-scheduler "$SB_SCHEDULER_PORT" SB_SCHEDULER_PORT
  start kube-scheduler "$K8S_BIN_DIR/kube-scheduler" --kubeconfig "$KUBECONFIG_FILE" \
    --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE" \
    --bind-address 127.0.0.1 --secure-port "$SB_SCHEDULER_PORT" --leader-elect=false $(gate_flags)
  wait_ready kube-scheduler "$SB_READY_TIMEOUT" curl -skf "https://127.0.0.1:$SB_SCHEDULER_PORT/healthz"

  # kwok: stages from its own module (node ready + lease heartbeats, pods ready) plus ours (Job
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

node_names() { for i in $(seq 1 "$SB_NODES"); do echo "$SB_NODE_PREFIX$i"; done; }
extra_node_names() { for i in $(seq 1 "$SB_EXTRA_NODES"); do echo "$SB_EXTRA_NODE_PREFIX$i"; done; }
dyn_node_names() { for i in $(seq 1 "$SB_DYN_NODES"); do echo "$SB_DYN_NODE_PREFIX$i"; done; }
is_gpu_node() { [ "$1" -gt $((SB_NODES - SB_GPU_NODES)) ]; }

node_yaml() { # name cpus pods extra-labels extra-capacity : one kwok Node manifest
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubernetes.io/hostname: $1, kubernetes.io/os: linux, kubernetes.io/arch: amd64$4}
spec: {}
status:
  capacity: {cpu: "$2", memory: "${SB_NODE_MEMORY_MIB}Mi", pods: "$3"$5}
  allocatable: {cpu: "$2", memory: "${SB_NODE_MEMORY_MIB}Mi", pods: "$3"$5}
  addresses: [{type: InternalIP, address: 127.0.0.1}]
---
EOF
}

# The Kubernetes side of the Slurm nodes' Features= (slurm.conf below): a pod's nodeSelector on
# feature.slinky.slurm.net/<feature> becomes a Slurm constraint (docs/annotations.md).
feature_labels() { local f out=(); for f in "$@"; do out+=("feature.slinky.slurm.net/$f: \"true\""); done; (IFS=,; echo "${out[*]}" | sed 's/,/, /g'); }

create_nodes() {
  local i name
  for i in $(seq 1 "$SB_NODES"); do
    if is_gpu_node "$i"; then
      node_yaml "$SB_NODE_PREFIX$i" "$SB_NODE_CPUS" "$SB_NODE_PODS" ", nvidia.com/gpu.present: \"true\", $(feature_labels kwok gpu)" ", nvidia.com/gpu: \"$SB_NODE_GPUS\""
    else
      node_yaml "$SB_NODE_PREFIX$i" "$SB_NODE_CPUS" "$SB_NODE_PODS" ", $(feature_labels kwok)" ""
    fi
  done > "$STATE_DIR/nodes.yaml"
  for name in $(extra_node_names); do
    node_yaml "$name" "$SB_EXTRA_NODE_CPUS" "$SB_EXTRA_NODE_PODS" "" ""
  done >> "$STATE_DIR/nodes.yaml"
  for name in $(dyn_node_names); do
    node_yaml "$name" "$SB_DYN_NODE_CPUS" "$SB_NODE_PODS" ', nvidia.com/gpu.present: "true"' ", nvidia.com/gpu: \"$SB_DYN_NODE_GPUS\""
  done >> "$STATE_DIR/nodes.yaml"
  # Status is part of the create body for Nodes; apply also updates an existing node's capacity.
  kubectl_ apply -f "$STATE_DIR/nodes.yaml" >/dev/null || die "creating the kwok nodes failed"
  # apply leaves an existing node's status alone: set the extra nodes' capacity explicitly.
  local res="{\"cpu\": \"$SB_EXTRA_NODE_CPUS\", \"memory\": \"${SB_NODE_MEMORY_MIB}Mi\", \"pods\": \"$SB_EXTRA_NODE_PODS\"}"
  for name in $(extra_node_names); do
    kubectl_ patch node "$name" --subresource=status --type=merge \
      -p "{\"status\": {\"capacity\": $res, \"allocatable\": $res}}" >/dev/null || die "setting $name's capacity failed"
  done
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
  [ "$ready" -ge $((SB_NODES + SB_EXTRA_NODES + SB_DYN_NODES)) ]
}

# ---- workload controllers ----------------------------------------------------------------------
# JobSet and LeaderWorkerSet run their own managers, built from their Go modules, with their CRDs
# and webhooks taken from the same module directories; the webhooks serve on 127.0.0.1 with a
# certificate of the cluster CA. Only the coscheduling PodGroup CRD comes from scheduler-plugins.

module_dir() { # module version : the module's directory in the Go module cache (downloaded if missing)
  (cd "$CACHE_DIR" && GOFLAGS=-mod=mod go mod download -json "$1@$2" \
    | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') || die "cannot locate the Go module $1@$2 (is GOPROXY reachable?)"
}

workload_certs() {
  local d="$STATE_DIR/workload-webhooks"
  [ -f "$d/tls.crt" ] && return 0
  mkdir -p "$d"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=workload-webhooks" -keyout "$d/tls.key" -out "$d/tls.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$d/tls.ext"
  openssl x509 -req -in "$d/tls.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
    -extfile "$d/tls.ext" -out "$d/tls.crt" 2>/dev/null || die "signing the workload webhooks' certificate failed"
  chmod 600 "$d/tls.key"
}

write_workload_config() { # name config-group webhook-port health-port
  cat > "$STATE_DIR/$1.yaml" <<EOF
apiVersion: config.$2/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
health: {healthProbeBindAddress: "127.0.0.1:$4"}
metrics: {bindAddress: "0"}
webhook: {port: $3, host: 127.0.0.1, certDir: "$STATE_DIR/workload-webhooks"}
EOF
}

register_webhooks() { # prefix port kustomize-dir : the module's webhook configurations, served on 127.0.0.1:port
  kubectl kustomize "$3" | kubectl_ create --dry-run=client -o json -f - \
    | PREFIX=$1 URL="https://127.0.0.1:$2" CA=$(base64 -w0 < "$PKI/ca.crt") python3 -P -c '
import json, os, sys
text, at, docs = sys.stdin.read(), 0, []
while text[at:].strip():  # kubectl prints one JSON document per object
    doc, end = json.JSONDecoder().raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
    docs, at = docs + doc.get("items", [doc]), end
out = []
for o in docs:
    if not o["kind"].endswith("WebhookConfiguration"):
        continue
    o["metadata"] = {"name": os.environ["PREFIX"] + "-" + o["metadata"]["name"]}
    for w in o["webhooks"]:
        w["clientConfig"] = {"url": os.environ["URL"] + w["clientConfig"]["service"]["path"], "caBundle": os.environ["CA"]}
    out.append(o)
json.dump({"apiVersion": "v1", "kind": "List", "items": out}, sys.stdout)' \
    | kubectl_ apply -f - >/dev/null || die "registering the $1 webhooks failed"
}

workload_crds_established() {
  local crd
  for crd in jobsets.jobset.x-k8s.io leaderworkersets.leaderworkerset.x-k8s.io podgroups.scheduling.x-k8s.io; do
    [ "$(kubectl_ get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ] || return 1
  done
}

up_workloads() {
  local jobset lws plugins
  jobset=$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")
  lws=$(module_dir sigs.k8s.io/lws "$LWS_VERSION")
  plugins=$(module_dir sigs.k8s.io/scheduler-plugins "$SCHEDULER_PLUGINS_VERSION")
  # Server-side: the JobSet CRD is too large for kubectl's last-applied annotation.
  kubectl_ apply --server-side --force-conflicts -f "$jobset/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" \
    -f "$lws/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" \
    -f "$plugins/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" >/dev/null || die "applying the workload CRDs failed"
  wait_ready kube-apiserver "$SB_READY_TIMEOUT" workload_crds_established
  workload_certs
  write_workload_config jobset-controller jobset.x-k8s.io "$SB_JOBSET_WEBHOOK_PORT" "$SB_JOBSET_HEALTH_PORT"
  write_workload_config lws-controller lws.x-k8s.io "$SB_LWS_WEBHOOK_PORT" "$SB_LWS_HEALTH_PORT"
  alive jobset-controller || check_port jobset-controller "$SB_JOBSET_WEBHOOK_PORT" SB_JOBSET_WEBHOOK_PORT
  start jobset-controller env KUBECONFIG="$KUBECONFIG_FILE" "$BIN_DIR/jobset-controller" \
    --config "$STATE_DIR/jobset-controller.yaml" --zap-log-level=info
  alive lws-controller || check_port lws-controller "$SB_LWS_WEBHOOK_PORT" SB_LWS_WEBHOOK_PORT
  start lws-controller env KUBECONFIG="$KUBECONFIG_FILE" "$BIN_DIR/lws-controller" \
    --config "$STATE_DIR/lws-controller.yaml" --leader-elect=false --zap-log-level=info
  # Ready once the webhook server answers TLS (any HTTP status).
  wait_ready jobset-controller "$SB_READY_TIMEOUT" curl -sk -o /dev/null "https://127.0.0.1:$SB_JOBSET_WEBHOOK_PORT/"
  wait_ready lws-controller "$SB_READY_TIMEOUT" curl -sk -o /dev/null "https://127.0.0.1:$SB_LWS_WEBHOOK_PORT/"
  register_webhooks jobset "$SB_JOBSET_WEBHOOK_PORT" "$jobset/config/components/webhook"
  register_webhooks lws "$SB_LWS_WEBHOOK_PORT" "$lws/config/webhook"
}

# ---- Slurm -------------------------------------------------------------------------------------
in_root() { chroot "$SLURM_ROOT" "$@"; }

write_slurm_conf() {
  local conf="$SLURM_ROOT/etc/slurm/slurm.conf" cpu_nodes gpu_nodes
  local n_cpu=$((SB_NODES - SB_GPU_NODES))
  {
    cat <<EOF
# Written by hack/cluster.sh: external nodes (no slurmd) mirroring the kwok nodes.
ClusterName=slurm-bridge-local
SlurmctldHost=localhost
SlurmctldPort=$SB_SLURMCTLD_PORT
SlurmdPort=$((SB_SLURMCTLD_PORT + 1))
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$SLURM_STATE_IN_ROOT/jwt.key
CredType=cred/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$SB_SLURMDBD_PORT
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
StateSaveLocation=$SLURM_STATE_IN_ROOT/state
SlurmdSpoolDir=$SLURM_STATE_IN_ROOT/spool
SlurmctldPidFile=$SLURM_STATE_IN_ROOT/slurmctld.pid
SchedulerType=sched/backfill
# A heterogeneous job (a CompositePodGroup, docs/workloads.md) starts only in a backfill pass: every
# 2 s here instead of the default 30 s, so tests and users see it start in seconds.
SchedulerParameters=bf_interval=2
ReturnToService=2
MaxJobCount=$SB_MAX_JOB_COUNT
MinJobAge=$SB_MIN_JOB_AGE
DefMemPerCPU=256
GresTypes=gpu
# Dynamic nodes: the bridge registers labelled Kubernetes nodes (docs/nodes.md); a NodeSet per
# partition selects them by the feature that names it.
MaxNodeCount=$((SB_NODES + SB_DYN_NODE_MAX))
NodeSet=dyn-$SB_PARTITION Feature=$SB_PARTITION
NodeSet=dyn-$SB_EXTRA_PARTITION Feature=$SB_EXTRA_PARTITION
EOF
    [ "$n_cpu" -gt 0 ] && echo "NodeName=${SB_NODE_PREFIX}[1-$n_cpu] NodeHostname=localhost CPUs=$SB_NODE_CPUS RealMemory=$SB_NODE_MEMORY_MIB Features=kwok State=EXTERNAL"
    [ "$SB_GPU_NODES" -gt 0 ] && echo "NodeName=${SB_NODE_PREFIX}[$((n_cpu + 1))-$SB_NODES] NodeHostname=localhost CPUs=$SB_NODE_CPUS RealMemory=$SB_NODE_MEMORY_MIB Gres=gpu:$SB_NODE_GPUS Features=kwok,gpu State=EXTERNAL"
    echo "PartitionName=$SB_PARTITION Nodes=${SB_NODE_PREFIX}[1-$SB_NODES],dyn-$SB_PARTITION Default=YES MaxTime=INFINITE State=UP"
    echo "PartitionName=$SB_EXTRA_PARTITION Nodes=dyn-$SB_EXTRA_PARTITION MaxTime=INFINITE State=UP"
    [ -z "$SB_PENDING_PARTITION" ] || echo "PartitionName=$SB_PENDING_PARTITION Nodes=${SB_NODE_PREFIX}[1-$SB_NODES] MaxTime=INFINITE State=DOWN"
  } > "$conf"
  : > "$SLURM_ROOT/etc/slurm/gres.conf"
  if [ "$SB_GPU_NODES" -gt 0 ]; then
    echo "NodeName=${SB_NODE_PREFIX}[$((n_cpu + 1))-$SB_NODES] Name=gpu Count=$SB_NODE_GPUS" > "$SLURM_ROOT/etc/slurm/gres.conf"
  fi
  # slurmctld refuses a dynamic node's GPUs unless gres.conf gives them device files; with them it
  # also keeps which GPU indices each job holds (IDX in the job's GRES detail), which exact DRA
  # devices need (slurm_bridge/dra.py). A slurm.conf node without slurmd gets no indices from
  # File= lines (checked: Slurm 26.05 reports "gpu(CNT:2)"), so the static GPU nodes count only.
  [ "$SB_DYN_NODE_GPUS" -gt 0 ] && echo "NodeName=${SB_DYN_NODE_PREFIX}[1-$SB_DYN_NODE_MAX] Name=gpu File=/dev/nvidia[0-$((SB_DYN_NODE_GPUS - 1))]" \
    >> "$SLURM_ROOT/etc/slurm/gres.conf"
  return 0
}

# ---- Slurm accounting: MariaDB (its own root) -> slurmdbd -> associations (hack/accounting.env) --
in_db_root() { chroot "$MARIADB_ROOT" "$@"; }
DB_STATE_IN_ROOT=/var/lib/slurm-bridge-db   # inside the MariaDB root; removed by `down`
DB_PASSWORD_FILE="$STATE_DIR/slurm/db-password"

up_mariadb() {
  alive mariadb && return 0
  check_port mariadb "$SB_MARIADB_PORT" SB_MARIADB_PORT
  cp /etc/hosts "$MARIADB_ROOT/etc/hosts"
  rm -rf "${MARIADB_ROOT:?}$DB_STATE_IN_ROOT"; mkdir -p "$MARIADB_ROOT/run/mysqld" "$LOGS"
  in_db_root chown mysql:mysql /run/mysqld
  in_db_root mariadb-install-db --user=mysql --datadir="$DB_STATE_IN_ROOT" --skip-test-db \
    --auth-root-authentication-method=socket > "$LOGS/mariadb-install.log" 2>&1 \
    || { tail -n 20 "$LOGS/mariadb-install.log" >&2; die "mariadb-install-db failed (log: $LOGS/mariadb-install.log)"; }
  start mariadb chroot "$MARIADB_ROOT" /usr/sbin/mariadbd --user=mysql --datadir="$DB_STATE_IN_ROOT" \
    --socket=/run/mysqld/mysqld.sock --port="$SB_MARIADB_PORT" --bind-address=127.0.0.1 --skip-name-resolve
  wait_ready mariadb "$SB_READY_TIMEOUT" in_db_root mariadb -S /run/mysqld/mysqld.sock -e 'select 1'
  mkdir -p "$(dirname "$DB_PASSWORD_FILE")"
  head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$DB_PASSWORD_FILE"; chmod 600 "$DB_PASSWORD_FILE"
  in_db_root mariadb -S /run/mysqld/mysqld.sock -e "
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$DB_PASSWORD_FILE")';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "creating slurmdbd's database user failed"
}

write_slurmdbd_conf() {
  local conf="$SLURM_ROOT/etc/slurm/slurmdbd.conf"
  cat > "$conf" <<EOF
# Written by hack/cluster.sh: slurmdbd on loopback, its database in the MariaDB root.
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$SLURM_STATE_IN_ROOT/jwt.key
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$SB_SLURMDBD_PORT
SlurmUser=slurm
PidFile=$SLURM_STATE_IN_ROOT/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$SB_MARIADB_PORT
StorageUser=slurm
StoragePass=$(cat "$DB_PASSWORD_FILE")
StorageLoc=slurm_acct_db
EOF
  in_root chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 600 "$conf"
}

ensure_unix_user() { # name uid group gid : the user exists in the Slurm root (slurmctld resolves job owners)
  in_root getent group "$3" >/dev/null || in_root groupadd -g "$4" "$3"
  in_root getent passwd "$1" >/dev/null || in_root useradd -u "$2" -g "$4" -M -d /nonexistent -s /usr/sbin/nologin "$1"
}

sacctmgr_() { in_root sacctmgr -i "$@" >/dev/null || die "sacctmgr $* failed; see $LOGS/slurmdbd.log"; }

create_associations() {
  # shellcheck source=accounting.env
  . "$HACK_DIR/accounting.env"
  local t user uid group gid accounts qos
  sacctmgr_ add cluster slurm-bridge-local
  sacctmgr_ add qos high
  sacctmgr_ add account "$BRIDGE_ACCOUNTS" Description=slurm-bridge Organization=slurm-bridge
  sacctmgr_ add user "$SB_BRIDGE_SLURM_USER" Account="$BRIDGE_ACCOUNTS" DefaultAccount="${BRIDGE_ACCOUNTS%%,*}" \
    QOS="$BRIDGE_QOS" DefaultQOS="${BRIDGE_QOS%%,*}"
  for t in $TENANTS; do
    IFS=: read -r user uid group gid accounts qos <<< "$t"
    ensure_unix_user "$user" "$uid" "$group" "$gid"
    sacctmgr_ add qos "${qos%%,*}" "$TENANT_QOS_LIMIT"
    sacctmgr_ add account "$accounts" Description="$group" Organization="$group"
    sacctmgr_ add user "$user" Account="$accounts" DefaultAccount="${accounts%%,*}" QOS="$qos" DefaultQOS="${qos%%,*}"
  done
}

up_accounting() {
  if alive slurmdbd; then return 0; fi
  up_mariadb
  write_slurmdbd_conf
  check_port slurmdbd "$SB_SLURMDBD_PORT" SB_SLURMDBD_PORT
  start slurmdbd chroot "$SLURM_ROOT" /usr/sbin/slurmdbd -D
  # Its first connection to MariaDB fails on TLS and is retried after 5 s (docs/development.md).
  wait_ready slurmdbd "$SB_READY_TIMEOUT" in_root sacctmgr -n list cluster
  create_associations
}

up_slurm() {
  [ -f "$SLURM_ROOT/$(slurm_root_stamp)" ] && [ -f "$MARIADB_ROOT/$(mariadb_root_stamp)" ] \
    || die "the Slurm or MariaDB root is missing or out of date; run hack/build-slurm-root.sh"
  require_root "starting Slurm (chroot)"
  cp /etc/hosts "$SLURM_ROOT/etc/hosts"
  mountpoint -q "$SLURM_ROOT/proc" || mount -t proc proc "$SLURM_ROOT/proc" || die "cannot mount /proc in $SLURM_ROOT"
  local sdir="$SLURM_ROOT$SLURM_STATE_IN_ROOT"
  if alive slurmctld && ! alive slurmdbd; then
    die "slurmctld runs without slurmdbd (a cluster started before Slurm accounting, or slurmdbd stopped); run 'hack/cluster.sh down' and 'hack/cluster.sh up'"
  fi
  if ! alive slurmctld; then
    rm -rf "$sdir"; mkdir -p "$sdir/state" "$sdir/spool"
    head -c 32 /dev/urandom > "$sdir/jwt.key"
    in_root chown -R slurm:slurm "$SLURM_STATE_IN_ROOT"
    chmod 600 "$sdir/jwt.key"
    write_slurm_conf
  fi
  mkdir -p "$SLURM_ROOT/run/munge"; in_root chown munge:munge /run/munge /etc/munge /etc/munge/munge.key /var/lib/munge /var/log/munge

  start munged chroot --userspec=munge:munge "$SLURM_ROOT" /usr/sbin/munged -F
  wait_ready munged "$SB_READY_TIMEOUT" test -S "$SLURM_ROOT/run/munge/munge.socket.2"

  up_accounting

  alive slurmctld || check_port slurmctld "$SB_SLURMCTLD_PORT" SB_SLURMCTLD_PORT
  start slurmctld chroot "$SLURM_ROOT" /usr/sbin/slurmctld -D -i
  wait_ready slurmctld "$SB_READY_TIMEOUT" in_root scontrol ping

  mkdir -p "$(dirname "$JWT_FILE")"
  # Long-lived admin token for the bridge; the file is what the bridge and tests read.
  in_root scontrol token username="$SB_BRIDGE_SLURM_USER" lifespan=2592000 | sed -n 's/^SLURM_JWT=//p' > "$JWT_FILE.tmp" \
    && [ -s "$JWT_FILE.tmp" ] || die "scontrol token failed; see $LOGS/slurmctld.log"
  chmod 600 "$JWT_FILE.tmp"; mv "$JWT_FILE.tmp" "$JWT_FILE"

  alive slurmrestd || check_port slurmrestd "$SB_SLURMRESTD_PORT" SB_SLURMRESTD_PORT
  # On loopback for host processes, and on the pod network's host address for the bridge's pods.
  start slurmrestd chroot "$SLURM_ROOT" env SLURM_JWT=daemon /usr/sbin/slurmrestd -a rest_auth/jwt \
    -s openapi/slurmctld,openapi/slurmdbd -u 65534 -g 65534 "127.0.0.1:$SB_SLURMRESTD_PORT" "$SB_HOST_IP:$SB_SLURMRESTD_PORT"
  wait_ready slurmrestd "$SB_READY_TIMEOUT" curl -sf -H "X-SLURM-USER-TOKEN: $(cat "$JWT_FILE")" \
    "http://127.0.0.1:$SB_SLURMRESTD_PORT/slurm/v0.0.44/ping"
}

# ---- commands ----------------------------------------------------------------------------------
cmd_up() {
  require_root "hack/cluster.sh up"
  local running
  running=$(cat "$STATE_DIR/kubernetes-version" 2>/dev/null || true)
  if [ -n "$running" ] && [ "$running" != "$KUBERNETES_VERSION" ] && alive kube-apiserver; then
    die "the cluster runs Kubernetes $running, not $KUBERNETES_VERSION; run 'hack/cluster.sh down' first (binaries are cached per version)"
  fi
  command -v kubectl >/dev/null || die "kubectl is not on PATH; install kubectl and re-run"
  command -v openssl >/dev/null || ensure_apt openssl
  command -v curl >/dev/null || ensure_apt curl
  mkdir -p "$STATE_DIR"
  local t0=$SECONDS
  bash "$HACK_DIR/build-binaries.sh"
  bash "$HACK_DIR/build-slurm-root.sh"
  echo "$KUBERNETES_VERSION" > "$STATE_DIR/kubernetes-version"
  local t1=$SECONDS
  bash "$HACK_DIR/node.sh" net-up   # the host address pods reach: slurmrestd and the API server listen there
  up_slurm
  up_kubernetes
  up_workloads
  bash "$HACK_DIR/node.sh" up
  log "cluster up in $((SECONDS - t1))s (builds $((t1 - t0))s); kubeconfig: $KUBECONFIG_FILE"
  cmd_status
}

cmd_down() {
  local n
  bash "$HACK_DIR/old-slurm.sh" down
  bash "$HACK_DIR/node.sh" down
  for n in lws-controller jobset-controller kwok kube-scheduler kube-controller-manager kube-apiserver etcd slurmrestd slurmctld slurmdbd mariadb munged; do stop "$n"; done
  for f in "$PIDS"/*.pid; do [ -f "$f" ] && stop "$(basename "$f" .pid)"; done
  bash "$HACK_DIR/node.sh" net-down
  if mountpoint -q "$SLURM_ROOT/proc" 2>/dev/null; then umount "$SLURM_ROOT/proc" || umount -l "$SLURM_ROOT/proc" || true; fi
  rm -rf "$STATE_DIR" "$SLURM_ROOT$SLURM_STATE_IN_ROOT" "${MARIADB_ROOT:?}$DB_STATE_IN_ROOT"
  log "cluster down; state removed"
}

cmd_status() {
  local n p state port
  printf '%-26s %-8s %-8s %-7s %s\n' COMPONENT STATE PID PORT LOG
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler kwok jobset-controller lws-controller munged mariadb slurmdbd slurmctld slurmrestd \
           containerd kubelet kube-proxy bridge-operator bridge-webhook bridge-extender bridge-scheduler; do
    p=$(pid_of "$n" || true); state=stopped
    [ -n "$p" ] && { alive "$n" && state=running || state=dead; }
    case $n in
      etcd) port=$SB_ETCD_PORT ;; kube-apiserver) port=$SB_APISERVER_PORT ;;
      kube-controller-manager) port=$SB_KCM_PORT ;; kube-scheduler) port=$SB_SCHEDULER_PORT ;;
      kwok) port=$SB_KWOK_PORT ;; jobset-controller) port=$SB_JOBSET_WEBHOOK_PORT ;; lws-controller) port=$SB_LWS_WEBHOOK_PORT ;;
      slurmctld) port=$SB_SLURMCTLD_PORT ;; slurmrestd) port=$SB_SLURMRESTD_PORT ;;
      slurmdbd) port=$SB_SLURMDBD_PORT ;; mariadb) port=$SB_MARIADB_PORT ;;
      kubelet) port=$SB_KUBELET_PORT ;; kube-proxy) port=$SB_KUBE_PROXY_HEALTHZ_PORT ;;
      bridge-*) port=$(cat "$STATE_DIR/$n.port" 2>/dev/null || echo -) ;;
      *) port=- ;;
    esac
    [ "$state" = stopped ] && [ "${n#bridge-}" != "$n" ] && continue
    printf '%-26s %-8s %-8s %-7s %s\n' "$n" "$state" "${p:--}" "$port" "$LOGS/$n.log"
  done
  echo "kubeconfig: $KUBECONFIG_FILE   slurmrestd: http://127.0.0.1:$SB_SLURMRESTD_PORT   jwt: $JWT_FILE"
}

cmd_env() {
  # The node lists have their own names: SB_NODES and friends are counts that the scripts read,
  # so evaluating this output must not change what the next hack/cluster.sh call builds.
  cat <<EOF
export KUBECONFIG=$KUBECONFIG_FILE
export SB_KUBERNETES_VERSION=$(cat "$STATE_DIR/kubernetes-version" 2>/dev/null || echo "$KUBERNETES_VERSION")
export SLURM_REST_URL=http://127.0.0.1:$SB_SLURMRESTD_PORT
export SLURM_REST_URL_FOR_PODS=http://$SB_HOST_IP:$SB_SLURMRESTD_PORT
export SB_REAL_NODE=$SB_REAL_NODE
export SLURM_JWT_FILE=$JWT_FILE
export SLURM_ROOT=$SLURM_ROOT
export SB_STATE_DIR=$STATE_DIR
export SB_PARTITION=$SB_PARTITION
export SB_NODE_NAMES="$(node_names | tr '\n' ' ' | sed 's/ $//')"
export SB_PLAIN_NODE_NAMES="$(extra_node_names | tr '\n' ' ' | sed 's/ $//')"
export SB_DYN_NODE_NAMES="$(dyn_node_names | tr '\n' ' ' | sed 's/ $//')"
export SB_EXTRA_PARTITION=$SB_EXTRA_PARTITION
export SB_GPU_NODE_NAMES="$(for i in $(seq 1 "$SB_NODES"); do is_gpu_node "$i" && echo "$SB_NODE_PREFIX$i"; done | tr '\n' ' ' | sed 's/ $//')"
EOF
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  scontrol) shift; in_root scontrol "$@" ;;
  stop) [ -n "${2:-}" ] || die "usage: hack/cluster.sh stop COMPONENT"; stop "$2" ;;
  start-slurm) up_slurm ;;
  start-workloads) up_workloads ;;
  nodes) create_nodes; wait_ready kube-apiserver "$SB_READY_TIMEOUT" nodes_ready ;;
  slurm) shift; case "${1:-}" in scontrol|scancel|squeue|sinfo|sbatch|sacct|sacctmgr) in_root "$@" ;; *) die "usage: hack/cluster.sh slurm scontrol|scancel|squeue|sinfo|sbatch|sacct|sacctmgr ARGS" ;; esac ;;
  *) die "usage: hack/cluster.sh up|down|status|env|nodes|stop COMPONENT|start-slurm|start-workloads|scontrol ARGS|slurm COMMAND ARGS" ;;
esac
