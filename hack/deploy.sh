#!/usr/bin/env bash
# The bridge as users install it: the image built from the Dockerfile, the Helm chart, a real
# Secret with the Slurm JWT; its pods run on the local cluster's real node.
#
#   hack/deploy.sh install     build and import the images, create the namespace and the JWT
#                              Secret, helm install (upgrade when installed); waits until every
#                              pod is Ready
#   hack/deploy.sh uninstall   helm uninstall (the CRD and any PlaceholderJobs stay: docs/quickstart.md)
#   hack/deploy.sh env         RELEASE, RELEASE_NAMESPACE, IMAGE_TAG and the values file, for tests
#
# The helm install below is the one docs/quickstart.md shows (tests/repo/test_deploy_docs.py keeps
# them the same). The process bridge (hack/bridge.sh) must be down: both use the same names.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
RELEASE=slurm-bridge
RELEASE_NAMESPACE=slurm-bridge-system
VALUES=hack/local-values.yaml
HELM=$HELM_BIN   # SB_HELM=4: Helm 4 (hack/lib.sh)

cluster_env() { eval "$(bash "$HACK_DIR/cluster.sh" env)"; }

cmd_install() {
  [ -f "$KUBECONFIG_FILE" ] && kubectl_ get --raw /readyz >/dev/null 2>&1 || die "the local cluster is not running; run hack/cluster.sh up first"
  bash "$HACK_DIR/node.sh" ready || die "the real node $SB_REAL_NODE is not Ready (hack/cluster.sh status; its kubelet log)"
  [ -x "$HELM" ] || bash "$HACK_DIR/build-binaries.sh" "$HELM_TARGET"
  if alive bridge-operator || alive bridge-webhook; then
    die "the process bridge (hack/bridge.sh) is running and uses the same names; run hack/bridge.sh down first"
  fi
  bash "$HACK_DIR/image.sh" load
  cluster_env
  export KUBECONFIG IMAGE_TAG
  local verb
  IMAGE_TAG=$(bash "$HACK_DIR/image.sh" ref bridge); IMAGE_TAG=${IMAGE_TAG##*:}
  kubectl get namespace slurm-bridge-system >/dev/null 2>&1 || kubectl create namespace slurm-bridge-system
  kubectl -n slurm-bridge-system create secret generic slurm-bridge-slurm-jwt --from-file=jwt="$SLURM_JWT_FILE" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # slurmctld's hook and the operator share this token (docs/configuration.md#slurm-hooks).
  [ ! -f "$SLURM_HOOK_TOKEN_FILE" ] || kubectl -n slurm-bridge-system create secret generic slurm-bridge-slurm-hook \
    --from-file=token="$SLURM_HOOK_TOKEN_FILE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  if "$HELM" status slurm-bridge --namespace slurm-bridge-system >/dev/null 2>&1; then
    log "release $RELEASE exists: upgrading it to $IMAGE_TAG"
    verb=upgrade
  else
    verb=install
  fi
  # --- the helm install of docs/quickstart.md ------------------------------------------------
  helm $verb slurm-bridge helm/slurm-bridge --namespace slurm-bridge-system \
    --values hack/local-values.yaml \
    --set image.tag="$IMAGE_TAG" \
    --set config.slurmRestApi="$SLURM_REST_URL_FOR_PODS" \
    --wait --timeout 5m
  # ---------------------------------------------------------------------------------------------
  webhook_reachable
  # slurmctld (on this host) tells the installed operators of job starts and ends through their Service.
  write_hook_conf "http://$(kubectl -n slurm-bridge-system get service slurm-bridge-operator-hook -o jsonpath='{.spec.clusterIP}'):8080/slurm/hook"
  log "slurm-bridge $IMAGE_TAG installed with $("$HELM" version --short) as release $RELEASE in $RELEASE_NAMESPACE; namespaces labelled slurm-bridge.local/managed=true are managed"
}

webhook_reachable() {
  # `helm --wait` returns once the pods are Ready; the API server reaches the webhook through the
  # Service's ClusterIP a moment later, when kube-proxy has its rules (Helm 4's default watcher
  # returns sooner than Helm 3 did, and a pod created at once was refused "connection refused").
  # This host routes the Service range as the API server does: wait until the webhook answers there.
  local ip deadline=$((SECONDS + 60))
  ip=$(kubectl -n slurm-bridge-system get service slurm-bridge-webhook -o jsonpath='{.spec.clusterIP}') \
    || die "the webhook Service slurm-bridge-webhook is missing after the install"
  until curl -sk -o /dev/null --max-time 2 "https://$ip:443/readyz"; do
    [ $SECONDS -lt $deadline ] || die "the webhook Service ($ip:443) does not answer 60 s after the install; see the webhook pods' logs"
    sleep 0.5
  done
}

cmd_uninstall() {
  cluster_env
  export KUBECONFIG
  helm uninstall slurm-bridge --namespace slurm-bridge-system --wait --timeout 2m --ignore-not-found
}

helm() { "$HELM" "$@"; }

case "${1:-}" in
  install) cmd_install ;;
  uninstall) cmd_uninstall ;;
  env)
    echo "RELEASE=$RELEASE"
    echo "RELEASE_NAMESPACE=$RELEASE_NAMESPACE"
    echo "VALUES=$REPO_DIR/$VALUES"
    echo "IMAGE_TAG=$(bash "$HACK_DIR/image.sh" ref bridge | cut -d: -f2)" ;;
  *) die "usage: hack/deploy.sh install|uninstall|env" ;;
esac
