#!/usr/bin/env bash
# The local cluster's one real node: containerd (built from its Go module) with Debian's runc, a
# CNI bridge network (Debian's plugins), a kubelet and kube-proxy from the cluster's own
# Kubernetes build. The bridge's own pods (the Helm chart) run here; other pods only if they
# tolerate the NoSchedule taint $REAL_NODE_KEY. It is also a Slurm node with its own slurmd
# (hack/cluster/slurmd.sh, partition SB_REAL_NODE_PARTITION): one host with a real kubelet and real
# containers next to a real slurmd and real batch processes. Its Slurm size is what this kubelet
# reports (every core, MemTotal; the kubelet reserves nothing), and it carries the feature label of
# its Slurm Features= (real).
#
#   hack/node.sh net-up      the pod network's Linux bridge, with the host address pods reach
#                            (SB_HOST_IP: the API server and slurmrestd listen there too)
#   hack/node.sh up          containerd, kubelet, kube-proxy; waits until the node is Ready and
#                            Service routing works (cluster.sh up runs both)
#   hack/node.sh down        stop them, kill the node's containers, unmount, remove kube-proxy's rules
#   hack/node.sh net-down    remove the pod network (cluster.sh down, once everything is stopped)
#   hack/node.sh import FILE...   import OCI archives into the node's containerd
#   hack/node.sh ctr ARGS    the node's ctr (namespace k8s.io)
. "$(dirname "$0")/lib.sh"

NET_TABLE=slurm_bridge_local   # our own nftables table (the API server guard)
CNI_NET=slurm-bridge-pods

ctr_() { "$BIN_DIR/ctr" --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

prefix_len() { echo "${SB_POD_CIDR#*/}"; }

# ---- network ------------------------------------------------------------------------------------
net_up() {
  require_root "hack/node.sh net-up"
  command -v ip >/dev/null || ensure_apt iproute2
  command -v nft >/dev/null || ensure_apt nftables
  # A pod network the machine already routes elsewhere would cut that network off.
  local taken
  taken=$(ip -o route show to match "$SB_HOST_IP" 2>/dev/null | grep -v '^default ' | grep -v " dev $SB_POD_BRIDGE" | head -n1 || true)
  [ -z "$taken" ] || die "SB_HOST_IP=$SB_HOST_IP is in a network this machine already routes ($taken); set SB_POD_CIDR and SB_HOST_IP to a free range"
  sysctl -qw net.ipv4.ip_forward=1 || die "cannot enable IPv4 forwarding (sysctl net.ipv4.ip_forward)"
  # Pod -> Service -> pod on the same bridge needs bridged packets to pass the NAT hooks.
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null \
    || die "the kernel has no bridge netfilter (net.bridge.bridge-nf-call-iptables); load br_netfilter"
  ip link show "$SB_POD_BRIDGE" >/dev/null 2>&1 || ip link add "$SB_POD_BRIDGE" type bridge \
    || die "cannot create the Linux bridge $SB_POD_BRIDGE (ip link add ... type bridge)"
  ip addr replace "$SB_HOST_IP/$(prefix_len)" dev "$SB_POD_BRIDGE"
  ip link set "$SB_POD_BRIDGE" up
  # The host's own connections to Service IPs (the API server calling webhook Services) leave
  # through the pod bridge, with the host address pods can answer.
  ip route replace "$SERVICE_CIDR" dev "$SB_POD_BRIDGE" src "$SB_HOST_IP"
  # The API server listens on all addresses so pods can reach it at SB_HOST_IP; this guard keeps
  # it to loopback and the pod bridge.
  nft -f - <<NFT || die "installing the nftables guard of the API server port failed"
table inet $NET_TABLE
delete table inet $NET_TABLE
table inet $NET_TABLE {
  chain input {
    type filter hook input priority 0; policy accept;
    tcp dport $SB_APISERVER_PORT iifname != { "lo", "$SB_POD_BRIDGE" } drop
  }
}
NFT
}

net_down() {
  nft delete table inet "$NET_TABLE" 2>/dev/null || true
  ip route del "$SERVICE_CIDR" dev "$SB_POD_BRIDGE" 2>/dev/null || true
  ip link del "$SB_POD_BRIDGE" 2>/dev/null || true
}

# ---- configuration ------------------------------------------------------------------------------
# kube-proxy exits when its configuration file changes: rewrite a file only if its content does.
write_if_changed() { # file < content
  local tmp="$1.new"
  cat > "$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

write_configs() {
  mkdir -p "$NODE_DIR"/{containerd,cni,cni-data,kubelet,pod-logs}
  write_if_changed "$NODE_DIR/containerd.toml" <<EOF
# Written by hack/node.sh: everything under $NODE_DIR, removed by 'down'.
version = 3
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins.'io.containerd.internal.v1.opt']
  path = "$NODE_DIR/containerd/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$(pause_image)"
[plugins.'io.containerd.cri.v1.runtime']
  # This VM refuses negative oom_score_adj; the kubelet asks -998 for sandboxes and every one
  # failed with "can't get final child's PID from pipe: EOF" until containerd clamps it.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$NODE_DIR/cni"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "$(command -v runc)"
      SystemdCgroup = false
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
EOF
  write_if_changed "$NODE_DIR/cni/10-$CNI_NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {"type": "bridge", "bridge": "$SB_POD_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$NODE_DIR/cni-data",
              "ranges": [[{"subnet": "$SB_POD_CIDR", "gateway": "$SB_HOST_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
  sign_cert "kubelet-$SB_REAL_NODE" "/O=system:nodes/CN=system:node:$SB_REAL_NODE"
  sign_cert kube-proxy "/CN=system:kube-proxy"
  write_kubeconfig "$NODE_DIR/kubelet.kubeconfig" "kubelet-$SB_REAL_NODE"
  write_kubeconfig "$NODE_DIR/kube-proxy.kubeconfig" kube-proxy
  write_if_changed "$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The node's address is the host's on the pod network (a node IP cannot be loopback): the API
# server reaches the kubelet there for logs and exec.
address: $SB_HOST_IP
port: $SB_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $SB_KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# The host has cgroup v1 only; Kubernetes 1.36 refuses it unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
# No evictions and no image garbage collection: the images were imported, not pulled, and
# a full disk elsewhere on the machine must not evict the bridge.
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: "$NODE_DIR/pod-logs"
maxPods: 30
serializeImagePulls: false
registerWithTaints:
  - {key: $REAL_NODE_KEY, value: "true", effect: NoSchedule}
resolvConf: /etc/resolv.conf
EOF
  write_if_changed "$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$NODE_DIR/kube-proxy.kubeconfig"}
mode: nftables
clusterCIDR: $SB_POD_CIDR
hostnameOverride: $SB_REAL_NODE
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$SB_KUBE_PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$SB_KUBE_PROXY_METRICS_PORT
nodePortAddresses: [primary]
# Leave the machine's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

pause_image() { echo "localhost/pause:3.10"; }

# ---- start, stop --------------------------------------------------------------------------------
node_ready() {
  [ "$(kubectl_ get node "$SB_REAL_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# The host reaches the kubernetes Service through kube-proxy's rules (any HTTP status will do:
# the request is anonymous).
service_routing_works() {
  curl -sk -o /dev/null -w '%{http_code}' --max-time 2 "https://${SERVICE_CIDR%.0/*}.1:443/version" | grep -q '^[1-5]'
}

cmd_up() {
  require_root "hack/node.sh up"
  ensure_apt runc containernetworking-plugins nftables iptables buildah
  [ -x "$K8S_BIN_DIR/kubelet" ] && [ -x "$BIN_DIR/containerd" ] || die "kubelet or containerd is not built; run hack/build-binaries.sh"
  ip link show "$SB_POD_BRIDGE" >/dev/null 2>&1 || net_up
  write_configs

  start containerd env PATH="$BIN_DIR:$PATH" "$BIN_DIR/containerd" --config "$NODE_DIR/containerd.toml" --log-level warn
  wait_ready containerd "$SB_READY_TIMEOUT" ctr_ version
  # The sandbox image is made here, not pulled (hack/image.sh).
  cmd_import "$(bash "$HACK_DIR/image.sh" archive pause)"

  alive kubelet || check_port kubelet "$SB_KUBELET_PORT" SB_KUBELET_PORT
  start kubelet "$K8S_BIN_DIR/kubelet" --config "$NODE_DIR/kubelet.yaml" --kubeconfig "$NODE_DIR/kubelet.kubeconfig" \
    --hostname-override "$SB_REAL_NODE" --node-ip "$SB_HOST_IP" --root-dir "$NODE_DIR/kubelet" \
    --cert-dir "$NODE_DIR/kubelet/pki" --node-labels "$REAL_NODE_KEY=true,feature.slinky.slurm.net/real=true"
  alive kube-proxy || check_port kube-proxy "$SB_KUBE_PROXY_HEALTHZ_PORT" SB_KUBE_PROXY_HEALTHZ_PORT
  start kube-proxy "$K8S_BIN_DIR/kube-proxy" --config "$NODE_DIR/kube-proxy.yaml"
  wait_ready kubelet "$SB_READY_TIMEOUT" node_ready
  wait_ready kube-proxy "$SB_READY_TIMEOUT" service_routing_works
  log "real node $SB_REAL_NODE ready (containerd $("$BIN_DIR/containerd" --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'))"
}

# Every process in a kubelet pod cgroup (cgroup v1: /kubepods under each controller).
pod_pids() { find /sys/fs/cgroup/pids/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null || true; }

kill_containers() {
  local pids
  for _ in $(seq 50); do
    pids=$(pod_pids)
    [ -n "$pids" ] || break
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  # Shims of this containerd (their command line names its socket).
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null || true
  local d
  for d in /sys/fs/cgroup/*/kubepods; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

unmount_under() { # dir : everything mounted below it, deepest first
  local m
  findmnt -rn -o TARGET | grep -F "$1/" | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}

cmd_down() {
  stop kube-proxy
  stop kubelet
  kill_containers
  stop containerd
  kill_containers
  [ -d "$NODE_DIR" ] && unmount_under "$NODE_DIR"
  for family in ip ip6; do nft delete table "$family" kube-proxy 2>/dev/null || true; done
}

cmd_import() { # archive... : import OCI archives (hack/image.sh archive) into the node's containerd
  local f
  for f in "$@"; do
    [ -f "$f" ] || die "no image archive $f"
    ctr_ images import --no-unpack=false "$f" >/dev/null 2>"$NODE_DIR/import.err" \
      || { cat "$NODE_DIR/import.err" >&2; die "importing $f into the node's containerd failed"; }
  done
}

case "${1:-}" in
  net-up) net_up ;;
  net-down) net_down ;;
  up) cmd_up ;;
  down) cmd_down ;;
  import) shift; cmd_import "$@" ;;
  ctr) shift; ctr_ "$@" ;;
  ready) node_ready ;;
  *) die "usage: hack/node.sh net-up|net-down|up|down|import ARCHIVE...|ctr ARGS|ready" ;;
esac
