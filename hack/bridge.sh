#!/usr/bin/env bash
# The bridge on the local cluster: CRDs, webhook TLS and configurations, and the four processes
# (operator, webhook, extender, the bridge's kube-scheduler), each a plain local process.
#
#   hack/bridge.sh up               install and start everything (cluster must be up); components
#                                   already running are restarted when the config it writes changed
#   hack/bridge.sh down             stop the bridge processes and remove the webhook configurations
#                                   and the node guard
#   hack/bridge.sh restart NAME     restart one of operator|webhook|extender|scheduler
#   hack/bridge.sh stop NAME        stop one component (tests use this to simulate crashes)
#   hack/bridge.sh config           print the path of the bridge config file
#
# The Helm chart's form (image, ServiceAccounts, RBAC, pods on the real node) is hack/deploy.sh.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
BRIDGE_DIR="$STATE_DIR/bridge"
CONFIG="$BRIDGE_DIR/config.yaml"
VENV_BIN="$REPO_DIR/.venv/bin"
: "${SB_MANAGED_LABEL:=slurm-bridge.local/managed}" "${SB_POLL_PERIOD:=1.0}"
# The bridge components' --log-level (DEBUG, INFO, WARNING, ERROR) and --log-format (json, text).
: "${SB_LOG_LEVEL:=INFO}" "${SB_LOG_FORMAT:=json}"
# The operator's concurrent reconciles (config operatorWorkers; benchmarks compare settings).
: "${SB_OPERATOR_WORKERS:=64}"
# immediateAllocation (false: every job through Slurm's queue: the benchmark's queued profile).
: "${SB_IMMEDIATE_ALLOCATION:=true}"
# slurmctld's hook tells this operator of job starts and ends (false: the operator learns them
# from its polls alone, as before issue 31; benchmarks compare the two).
: "${SB_SLURM_HOOKS:=true}"
# bindTimeoutSeconds, shortened (default 300) so that tests/e2e see an unbindable allocation released.
: "${SB_BIND_TIMEOUT:=30}"
# The node guard (webhook/nodeguard.py: no pod but the bridge's tolerates the managed-node taint);
# false leaves it out, for a benchmark's default-scheduler baseline on the bridge's nodes.
: "${SB_NODE_GUARD:=true}"
# The pod policy (webhook/podpolicy.py: a plain pod handed to the bridge in the API server, no
# webhook call): auto where the cluster serves MutatingAdmissionPolicy v1 (Kubernetes >= 1.36);
# false leaves it out, for a benchmark of the webhook's path.
: "${SB_POD_POLICY:=auto}"

write_config() {
  mkdir -p "$BRIDGE_DIR"
  cat > "$CONFIG" <<CFG
# Local bridge config (written by hack/bridge.sh); keys are documented in docs/configuration.md.
schedulerName: slurm-bridge
slurmRestApi: http://127.0.0.1:$SB_SLURMRESTD_PORT
slurmJwtFile: $JWT_FILE
partition: $SB_PARTITION
managedNamespaceSelector:
  matchLabels: {$SB_MANAGED_LABEL: "true"}
pollPeriodSeconds: $SB_POLL_PERIOD
trustedUsers: [slurm-bridge]
webhookListen: 127.0.0.1:$SB_WEBHOOK_PORT
webhookCertFile: $BRIDGE_DIR/tls/tls.crt
webhookKeyFile: $BRIDGE_DIR/tls/tls.key
extenderListen: 127.0.0.1:$SB_EXTENDER_PORT
extenderHealthListen: 127.0.0.1:$SB_EXTENDER_HEALTH_PORT
operatorHealthListen: 127.0.0.1:$SB_OPERATOR_PORT
operatorWorkers: $SB_OPERATOR_WORKERS
# The handoff (docs/colocation.md): the pods' QOS GraceTime in hack/accounting.env (QOS_MODES) covers these.
handoff: {maxGracePeriodSeconds: 60, marginSeconds: 10}
immediateAllocation: $SB_IMMEDIATE_ALLOCATION
# Shortened for the tests: an allocation kube-scheduler cannot bind is released after this.
bindTimeoutSeconds: $SB_BIND_TIMEOUT
# The partitions of the slurmd-served nodes (docs/gpus.md#device-plugin-gpus-on-hybrid-nodes):
# device-plugin GPUs are refused there.
hybridPartitions: [$SB_HYBRID_PARTITION, $SB_REAL_NODE_PARTITION${SB_MISSIZED_NODE:+, $SB_MISSIZED_PARTITION}]
# SB_NODE_GUARD=false also stops the operator's drains of Slurm nodes where other pods run.
nodeGuard: {drainNodes: $SB_NODE_GUARD}
# Preempted work comes back at its place (docs/colocation.md): once, so that the tests see the bound.
preemption: {returnToPlace: true, maxReturns: 1, returnWindowSeconds: 600}
CFG
  # slurmctld's hook tells this operator of job starts and ends (docs/configuration.md#slurm-hooks).
  if [ "$SB_SLURM_HOOKS" = true ] && [ -f "$HOOK_TOKEN_FILE" ]; then
    echo "slurmHookTokenFile: $HOOK_TOKEN_FILE" >> "$CONFIG"
    write_hook_conf "http://127.0.0.1:$SB_OPERATOR_PORT/slurm/hook"
  fi
}

operator_leads() {
  local holder
  holder=$(kubectl_ -n default get lease slurm-bridge-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null) || return 1
  [ "$holder" = "$(hostname)_$(pid_of bridge-operator)" ]
}

start_component() {
  local c=$1 kc="$STATE_DIR/kubeconfig-bridge"
  case $c in
    operator)
      alive bridge-operator || check_port bridge-operator "$SB_OPERATOR_PORT" SB_OPERATOR_PORT
      start bridge-operator "$VENV_BIN/slurm-bridge-operator" --config "$CONFIG" --kubeconfig "$kc" --lease-namespace default \
        --log-level "$SB_LOG_LEVEL" --log-format "$SB_LOG_FORMAT"
      echo "$SB_OPERATOR_PORT" > "$STATE_DIR/bridge-operator.port"
      wait_ready bridge-operator "$SB_READY_TIMEOUT" curl -sf "http://127.0.0.1:$SB_OPERATOR_PORT/readyz"
      # A standby is ready too; callers expect a working bridge, so wait until this one leads. An
      # operator that died without handing over (the cluster was killed) holds the Lease until it
      # expires (leaseDurationSeconds, 15 s).
      operator_leads || log "waiting for the operator to take the Lease default/slurm-bridge-operator (a killed one holds it until it expires)"
      wait_ready bridge-operator "$SB_READY_TIMEOUT" operator_leads ;;
    webhook)
      alive bridge-webhook || check_port bridge-webhook "$SB_WEBHOOK_PORT" SB_WEBHOOK_PORT
      # --kubeconfig: the webhook reads TenantPolicies and namespaces (docs/tenancy.md).
      start bridge-webhook "$VENV_BIN/slurm-bridge-webhook" --config "$CONFIG" --kubeconfig "$kc" \
        --log-level "$SB_LOG_LEVEL" --log-format "$SB_LOG_FORMAT" serve --drain-seconds 0
      echo "$SB_WEBHOOK_PORT" > "$STATE_DIR/bridge-webhook.port"
      wait_ready bridge-webhook "$SB_READY_TIMEOUT" curl -sf --cacert "$BRIDGE_DIR/tls/ca.crt" "https://127.0.0.1:$SB_WEBHOOK_PORT/readyz" ;;
    extender)
      alive bridge-extender || check_port bridge-extender "$SB_EXTENDER_PORT" SB_EXTENDER_PORT
      alive bridge-extender || check_port bridge-extender "$SB_EXTENDER_HEALTH_PORT" SB_EXTENDER_HEALTH_PORT
      start bridge-extender "$VENV_BIN/slurm-bridge-extender" --config "$CONFIG" --kubeconfig "$kc" \
        --log-level "$SB_LOG_LEVEL" --log-format "$SB_LOG_FORMAT"
      echo "$SB_EXTENDER_PORT" > "$STATE_DIR/bridge-extender.port"
      wait_ready bridge-extender "$SB_READY_TIMEOUT" curl -sf "http://127.0.0.1:$SB_EXTENDER_PORT/healthz"
      wait_ready bridge-extender "$SB_READY_TIMEOUT" curl -sf "http://127.0.0.1:$SB_EXTENDER_HEALTH_PORT/metrics" ;;
    scheduler)
      KUBECONFIG="$kc" EXTENDER_URL="http://127.0.0.1:$SB_EXTENDER_PORT" SCHEDULER_NAME=slurm-bridge \
        LEADER_ELECT=false NAMESPACE=default python3 -P -c 'import os,sys; sys.stdout.write(os.path.expandvars(sys.stdin.read()))' \
        < "$REPO_DIR/extender/kube-scheduler.yaml" > "$BRIDGE_DIR/kube-scheduler.yaml"
      alive bridge-scheduler || check_port bridge-scheduler "$SB_BRIDGE_SCHEDULER_PORT" SB_BRIDGE_SCHEDULER_PORT
      start bridge-scheduler "$K8S_BIN_DIR/kube-scheduler" --config "$BRIDGE_DIR/kube-scheduler.yaml" \
        --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
        --bind-address 127.0.0.1 --secure-port "$SB_BRIDGE_SCHEDULER_PORT"
      echo "$SB_BRIDGE_SCHEDULER_PORT" > "$STATE_DIR/bridge-scheduler.port"
      wait_ready bridge-scheduler "$SB_READY_TIMEOUT" curl -skf "https://127.0.0.1:$SB_BRIDGE_SCHEDULER_PORT/healthz" ;;
    *) die "unknown component '$c' (expected operator, webhook, extender or scheduler)" ;;
  esac
}

cmd_up() {
  [ -f "$KUBECONFIG_FILE" ] && kubectl_ get --raw /readyz >/dev/null 2>&1 || die "the local cluster is not running; run hack/cluster.sh up first"
  [ "$(kubectl_ get mutatingwebhookconfiguration slurm-bridge -o jsonpath='{.metadata.labels.app\.kubernetes\.io/managed-by}' 2>/dev/null)" != Helm ] \
    || die "the Helm release (hack/deploy.sh) is installed and uses the same names; run hack/deploy.sh uninstall first"
  [ -x "$VENV_BIN/slurm-bridge-operator" ] || bash "$HACK_DIR/setup-python.sh"
  # A component already running keeps the config it started with: where this `up` writes a
  # different one (another SB_* setting), the running components are restarted on it, so that the
  # file and the processes never disagree.
  local before="" c
  [ -f "$CONFIG" ] && before=$(sha256sum < "$CONFIG")
  write_config
  if [ -n "$before" ] && [ "$before" != "$(sha256sum < "$CONFIG")" ]; then
    for c in operator webhook scheduler extender; do
      if alive "bridge-$c"; then log "the config changed: restarting bridge-$c on it"; stop "bridge-$c"; fi
    done
  fi
  kubectl_ apply -f "$REPO_DIR/crds/" >/dev/null || die "applying the CRDs failed"
  kubectl_ wait --for condition=Established --timeout=30s -f "$REPO_DIR/crds/" >/dev/null || die "the CRDs did not become Established"
  "$VENV_BIN/slurm-bridge-webhook" gen-certs --dir "$BRIDGE_DIR/tls" --host 127.0.0.1 --host localhost >/dev/null \
    || die "generating the webhook certificates failed"
  for c in extender scheduler webhook operator; do start_component "$c"; done
  # The webhook configurations, then the node guard (the chart's templates/nodeguard.yaml renders the same).
  local guard=() policy=()
  [ "$SB_NODE_GUARD" = true ] || guard=(--without-node-guard)
  case "$SB_POD_POLICY" in
    true) policy=(--pod-policy) ;;
    auto) local served
          served=$(kubectl_ api-resources --api-group=admissionregistration.k8s.io -o name 2>/dev/null) || served=""
          case $'\n'"$served"$'\n' in *$'\n'mutatingadmissionpolicies.admissionregistration.k8s.io$'\n'*) policy=(--pod-policy) ;; esac ;;
    false) ;;
    *) die "SB_POD_POLICY=$SB_POD_POLICY: expected auto, true or false" ;;
  esac
  "$VENV_BIN/slurm-bridge-webhook" --config "$CONFIG" render-config --url "https://127.0.0.1:$SB_WEBHOOK_PORT" \
    --ca-file "$BRIDGE_DIR/tls/ca.crt" "${guard[@]}" "${policy[@]}" > "$BRIDGE_DIR/webhooks.yaml" \
    || die "rendering the webhook configurations failed"
  # A guard or pod policy left by an earlier `up` goes when this one leaves it out.
  [ "$SB_NODE_GUARD" = true ] || kubectl_ delete --ignore-not-found validatingadmissionpolicybinding,validatingadmissionpolicy \
    slurm-bridge-node-guard >/dev/null || die "removing the node guard failed"
  [ ${#policy[@]} -gt 0 ] || kubectl_ delete --ignore-not-found mutatingadmissionpolicybinding,mutatingadmissionpolicy \
    slurm-bridge-pods >/dev/null 2>&1 || true
  # Server-side: the rendered objects are the whole truth, whatever an earlier client-side apply left.
  kubectl_ apply --server-side --force-conflicts --field-manager=slurm-bridge-hack -f "$BRIDGE_DIR/webhooks.yaml" >/dev/null \
    || die "applying the webhook configurations and the node guard failed"
  log "bridge up: config $CONFIG; namespaces labelled $SB_MANAGED_LABEL=true are managed"
}

cmd_down() {
  [ -f "$BRIDGE_DIR/webhooks.yaml" ] && kubectl_ delete --ignore-not-found -f "$BRIDGE_DIR/webhooks.yaml" >/dev/null 2>&1 || true
  for c in operator webhook scheduler extender; do stop "bridge-$c"; done
  log "bridge processes stopped"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  restart)
    [ -n "${2:-}" ] || die "usage: hack/bridge.sh restart operator|webhook|extender|scheduler"
    stop "bridge-$2"; start_component "$2" ;;
  stop) [ -n "${2:-}" ] || die "usage: hack/bridge.sh stop operator|webhook|extender|scheduler"; stop "bridge-$2" ;;
  start) [ -n "${2:-}" ] || die "usage: hack/bridge.sh start operator|webhook|extender|scheduler"; start_component "$2" ;;
  config) echo "$CONFIG" ;;
  *) die "usage: hack/bridge.sh up|down|restart NAME|stop NAME|start NAME|config" ;;
esac
