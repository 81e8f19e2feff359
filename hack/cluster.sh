#!/usr/bin/env bash
# The local cluster: Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok nodes, and one real node with containerd, kubelet and kube-proxy: hack/node.sh; with the
# Workload API turned on), the JobSet and LeaderWorkerSet controllers (and the coscheduling
# PodGroup CRD), and Slurm (munged, MariaDB, slurmdbd, slurmctld, slurmrestd and the hybrid nodes'
# slurmd, in Debian roots), all on 127.0.0.1 (and the pod network's host address SB_HOST_IP).
#
#   hack/cluster.sh up        build what is missing (cached), start what is not running, wait until ready
#   hack/cluster.sh down      stop every process it started (by pid) and remove the cluster state
#   hack/cluster.sh status    what runs where: ports, pids, log files
#   hack/cluster.sh env       shell variables for kubectl/curl (eval "$(hack/cluster.sh env)")
#   hack/cluster.sh start-slurm       start what is missing of Slurm (on a running cluster)
#   hack/cluster.sh start-workloads   start only the workload controllers (on a running cluster)
#   hack/cluster.sh nodes     create (or update) the kwok nodes, and SB_EXTRA_NODES and SB_DYN_NODES
#                             ones not in slurm.conf
#   hack/cluster.sh stop COMPONENT    stop one process (a name of `status`)
#   hack/cluster.sh slurm [--as USER] COMMAND ARGS   a Slurm command in the Slurm root, as root or
#                             as USER (a tenant of hack/accounting.env: native jobs run as them)
#
# One file per service, in hack/cluster/: pki.sh, kube.sh (control plane), kwok.sh (kwok and the
# Node objects), workloads.sh (JobSet, LWS), slurm.sh (munged, slurmctld, slurmrestd),
# accounting.sh (MariaDB, slurmdbd, associations), slurmd.sh (hybrid nodes), and slurm-conf.sh,
# the one writer of the Slurm configuration files (with hack/slurm-policy.conf).
# Ports, node counts and capacities come from SB_* variables (defaults in hack/lib.sh).
. "$(dirname "$0")/lib.sh"
for part in pki kube kwok workloads slurm-conf accounting slurm slurmd; do
  # shellcheck source=/dev/null
  . "$HACK_DIR/cluster/$part.sh"
done
unset part

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
  for n in lws-controller jobset-controller kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$n"; done
  down_slurm
  for f in "$PIDS"/*.pid; do [ -f "$f" ] && stop "$(basename "$f" .pid)"; done
  bash "$HACK_DIR/node.sh" net-down
  rm -rf "$STATE_DIR" "$SLURM_ROOT$SLURM_STATE_IN_ROOT" "${MARIADB_ROOT:?}$DB_STATE_IN_ROOT"
  log "cluster down; state removed"
}

component_port() { # name : its port (- if none)
  case $1 in
    etcd) echo "$SB_ETCD_PORT" ;; kube-apiserver) echo "$SB_APISERVER_PORT" ;;
    kube-controller-manager) echo "$SB_KCM_PORT" ;; kube-scheduler) echo "$SB_SCHEDULER_PORT" ;;
    kwok) echo "$SB_KWOK_PORT" ;; jobset-controller) echo "$SB_JOBSET_WEBHOOK_PORT" ;; lws-controller) echo "$SB_LWS_WEBHOOK_PORT" ;;
    slurmctld) echo "$SB_SLURMCTLD_PORT" ;; slurmrestd) echo "$SB_SLURMRESTD_PORT" ;;
    slurmdbd) echo "$SB_SLURMDBD_PORT" ;; mariadb) echo "$SB_MARIADB_PORT" ;;
    slurmd-*) slurmd_port "${1#slurmd-}" ;;
    kubelet) echo "$SB_KUBELET_PORT" ;; kube-proxy) echo "$SB_KUBE_PROXY_HEALTHZ_PORT" ;;
    bridge-*) cat "$STATE_DIR/$1.port" 2>/dev/null || echo - ;;
    *) echo - ;;
  esac
}

cmd_status() {
  local n p state
  printf '%-26s %-8s %-8s %-7s %s\n' COMPONENT STATE PID PORT LOG
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler kwok jobset-controller lws-controller munged mariadb slurmdbd slurmctld slurmrestd \
           $(slurmd_node_names | sed 's/^/slurmd-/') containerd kubelet kube-proxy bridge-operator bridge-webhook bridge-extender bridge-scheduler; do
    p=$(pid_of "$n" || true); state=stopped
    [ -n "$p" ] && { alive "$n" && state=running || state=dead; }
    [ "$state" = stopped ] && [ "${n#bridge-}" != "$n" ] && continue
    printf '%-26s %-8s %-8s %-7s %s\n' "$n" "$state" "${p:--}" "$(component_port "$n")" "$LOGS/$n.log"
  done
  echo "kubeconfig: $KUBECONFIG_FILE   slurmrestd: http://127.0.0.1:$SB_SLURMRESTD_PORT   jwt: $JWT_FILE"
}

cmd_env() {
  # The node lists have their own names: SB_NODES and friends are counts that the scripts read,
  # so evaluating this output must not change what the next hack/cluster.sh call builds.
  cat <<EOV
export KUBECONFIG=$KUBECONFIG_FILE
export SB_KUBERNETES_VERSION=$(cat "$STATE_DIR/kubernetes-version" 2>/dev/null || echo "$KUBERNETES_VERSION")
export SLURM_REST_URL=http://127.0.0.1:$SB_SLURMRESTD_PORT
export SLURM_REST_URL_FOR_PODS=http://$SB_HOST_IP:$SB_SLURMRESTD_PORT
export SB_REAL_NODE=$SB_REAL_NODE
export SLURM_JWT_FILE=$JWT_FILE
export SLURM_HOOK_TOKEN_FILE=$HOOK_TOKEN_FILE
export SLURM_ROOT=$SLURM_ROOT
export SB_STATE_DIR=$STATE_DIR
export SB_PARTITION=$SB_PARTITION
export SB_NODE_NAMES="$(node_names | tr '\n' ' ' | sed 's/ $//')"
export SB_PLAIN_NODE_NAMES="$(extra_node_names | tr '\n' ' ' | sed 's/ $//')"
export SB_DYN_NODE_NAMES="$(dyn_node_names | tr '\n' ' ' | sed 's/ $//')"
export SB_EXTRA_PARTITION=$SB_EXTRA_PARTITION
export SB_GPU_NODE_NAMES="$(for i in $(seq 1 "$SB_NODES"); do is_gpu_node "$i" && echo "$SB_NODE_PREFIX$i"; done | tr '\n' ' ' | sed 's/ $//')"
export SB_HYBRID_NODE_NAMES="$(hybrid_node_names | tr '\n' ' ' | sed 's/ $//')"
export SB_HYBRID_PARTITION=$SB_HYBRID_PARTITION
export SB_REAL_NODE_PARTITION=$SB_REAL_NODE_PARTITION
export SB_MISSIZED_NODE=$SB_MISSIZED_NODE
export SB_MISSIZED_PARTITION=$SB_MISSIZED_PARTITION
export SB_BLOCK_PARTITION=$SB_BLOCK_PARTITION
export SB_SWITCH_PARTITION=$SB_SWITCH_PARTITION
EOV
}

SLURM_COMMANDS="sbatch salloc srun squeue scontrol sinfo scancel sacct sacctmgr sshare sprio"

# A Slurm command in the root: as root, or (--as USER) as that Unix user of the root, in /tmp, with
# a clean environment, as the user would run it on a login node. Root may also submit for a user
# (sbatch --uid=2001 --gid=2001, deprecated in 26.05); --as needs no such flag and works for salloc and srun.
cmd_slurm() {
  local as=
  if [ "${1:-}" = --as ]; then as=${2:-}; shift 2 || true; [ -n "$as" ] || die "usage: hack/cluster.sh slurm --as USER COMMAND ARGS"; fi
  [[ " $SLURM_COMMANDS " == *" ${1:-none} "* ]] || die "usage: hack/cluster.sh slurm [--as USER] ${SLURM_COMMANDS// /|} ARGS"
  [ -n "$as" ] || { in_root "$@"; return; }
  local uid gid
  uid=$(in_root id -u "$as" 2>/dev/null) && gid=$(in_root id -g "$as" 2>/dev/null) \
    || die "no user '$as' in the Slurm root (the tenants of hack/accounting.env exist once 'hack/cluster.sh up' ran)"
  chroot --userspec="$uid:$gid" --groups="$gid" "$SLURM_ROOT" \
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp USER="$as" LOGNAME="$as" LANG=C.UTF-8 \
    sh -c 'cd /tmp && exec "$@"' slurm "$@"
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
  slurm) shift; cmd_slurm "$@" ;;
  *) die "usage: hack/cluster.sh up|down|status|env|nodes|stop COMPONENT|start-slurm|start-workloads|scontrol ARGS|slurm [--as USER] COMMAND ARGS" ;;
esac
