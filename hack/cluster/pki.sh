# hack/cluster.sh's certificates: the cluster CA and the certificates it signs. Sourced by
# hack/cluster.sh (after hack/lib.sh); defines functions only.

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
