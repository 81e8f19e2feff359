# hack/cluster.sh's workload controllers: JobSet and LeaderWorkerSet run their own managers, built
# from their Go modules, with their CRDs and webhooks taken from the same module directories; the
# webhooks serve on 127.0.0.1 with a certificate of the cluster CA. Only the coscheduling PodGroup
# CRD comes from scheduler-plugins. Sourced by hack/cluster.sh (after hack/lib.sh); defines
# functions only.

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
