# hack/cluster.sh's Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler on 127.0.0.1 (the API server also on SB_HOST_IP, for pods). Sourced by
# hack/cluster.sh (after hack/lib.sh); defines functions only.

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


# The control plane; then kwok and its nodes (hack/cluster/kwok.sh).
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
  up_kwok
}
