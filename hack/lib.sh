# Shared helpers for hack/*.sh. Source it; it defines paths, ports and error handling.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=versions.env
. "$HACK_DIR/versions.env"
# Heavy, reusable artefacts (binaries, Slurm root, Go caches) live outside the repository.
CACHE_DIR="${SLURM_BRIDGE_CACHE:-$HOME/.cache/slurm-bridge}"
BIN_DIR="$CACHE_DIR/bin"
# Per-cluster state (data dirs, logs, pids, kubeconfig) is thrown away by `down`.
STATE_DIR="${SLURM_BRIDGE_STATE:-$CACHE_DIR/cluster}"
# The cluster's Kubernetes: SB_KUBERNETES (a minor such as 1.36, or an exact version) picks one of
# KUBERNETES_VERSIONS; without it, the version of the cluster that runs (its state records it),
# else the default. So hack/bridge.sh and hack/image.sh follow the cluster hack/cluster.sh made.
if [ -n "${SB_KUBERNETES:-}" ]; then
  _want=v${SB_KUBERNETES#v}; _found=
  for _v in $KUBERNETES_VERSIONS; do
    case $_v in "$_want" | "$_want".*) _found=$_v ;; esac
  done
  [ -n "$_found" ] || { echo "error: SB_KUBERNETES=$SB_KUBERNETES is not a supported version (one of: $KUBERNETES_VERSIONS)" >&2; exit 1; }
  KUBERNETES_VERSION=$_found
  unset _want _found _v
elif [ -s "$STATE_DIR/kubernetes-version" ]; then
  KUBERNETES_VERSION=$(cat "$STATE_DIR/kubernetes-version")
fi
KUBERNETES_MINOR=${KUBERNETES_VERSION#v1.}; KUBERNETES_MINOR=${KUBERNETES_MINOR%%.*}
# The Kubernetes binaries (control plane, kubelet, kube-proxy) of the chosen version: one
# directory per version, so each version of the matrix is built once.
K8S_BIN_DIR="$BIN_DIR/kubernetes-$KUBERNETES_VERSION"
# SB_HELM=3 (default) or 4: the Helm major that hack/deploy.sh and the chart tests use, and its
# build target (hack/build-binaries.sh).
case "${SB_HELM:-3}" in
  3) HELM_TARGET=helm ;;
  4) HELM_TARGET=helm4 ;;
  *) echo "error: SB_HELM=$SB_HELM: expected 3 or 4 (the Helm major to use)" >&2; exit 1 ;;
esac
HELM_BIN="$BIN_DIR/$HELM_TARGET"

die() { echo "error: $*" >&2; exit 1; }
log() { echo "==> $*" >&2; }

require_root() { [ "$(id -u)" = 0 ] || die "$1 must run as root (it builds/chroots into the Slurm root); re-run with sudo"; }
require_go() { command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH; install Go >= 1.24 and re-run"; }

# The Debian mirror this machine's apt already uses (never hard-coded in the repository).
apt_mirror() {
  # The Debian archive is the source that serves this system's own codename (not -security).
  local m
  m=$(python3 -P - <<'PY'
import glob, re
codename = dict(l.strip().split("=", 1) for l in open("/etc/os-release") if "=" in l).get("VERSION_CODENAME", "").strip('"')
for f in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(f).read().split("\n\n"):
        kv = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
        if codename in kv.get("Suites", "").split():
            print(kv["URIs"].split()[0]); raise SystemExit
for f in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try: lines = open(f).read().splitlines()
    except OSError: continue
    for line in lines:
        parts = re.sub(r"\[[^]]*\]", "", line).split()
        if len(parts) >= 3 and parts[0] == "deb" and parts[2] == codename:
            print(parts[1]); raise SystemExit
PY
)
  [ -n "$m" ] || die "cannot find the Debian archive in /etc/apt/sources.list*; configure apt first"
  echo "$m"
}

# The OCI runtime every container build or run of the project uses (buildah, and podman for kind).
# runc works on cgroup v1, v2 and this machine's hybrid layout; crun, which podman brings and
# buildah then prefers, refuses hybrid cgroups ("cgroups in hybrid mode not supported"). So the
# runtime is named rather than left to whichever is installed. SB_OCI_RUNTIME overrides it.
oci_runtime() {
  local rt=${SB_OCI_RUNTIME:-}
  if [ -n "$rt" ]; then
    rt=$(command -v "$rt" 2>/dev/null) || die "SB_OCI_RUNTIME=$SB_OCI_RUNTIME is not an executable on PATH; install it or unset SB_OCI_RUNTIME (default: runc)"
  else
    command -v runc >/dev/null 2>&1 || ensure_apt runc
    rt=$(command -v runc) || die "runc is not on PATH after installing it"
  fi
  echo "$rt"
}

ensure_apt() { # ensure_apt pkg... : install missing Debian packages
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  if [ ! -f "$CACHE_DIR/.apt-updated" ] || [ -n "$(find "$CACHE_DIR/.apt-updated" -mmin +720)" ]; then
    apt-get update -qq >&2 || die "apt-get update failed; check the machine's apt sources"
    mkdir -p "$CACHE_DIR"; touch "$CACHE_DIR/.apt-updated"
  fi
  # shellcheck disable=SC2086 # SB_APT_INSTALL_FLAGS: extra apt-get flags, word-split on purpose
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${SB_APT_INSTALL_FLAGS:-} "${missing[@]}" >&2 \
    || die "apt-get install ${missing[*]} failed; see the output above"
}

# ---- local cluster layout: ports (override with SB_* variables), state paths -----------------
: "${SB_ETCD_PORT:=23790}" "${SB_ETCD_PEER_PORT:=23800}" "${SB_APISERVER_PORT:=26443}"
: "${SB_KCM_PORT:=20257}" "${SB_SCHEDULER_PORT:=20259}" "${SB_KWOK_PORT:=20247}"
: "${SB_SLURMCTLD_PORT:=26817}" "${SB_SLURMRESTD_PORT:=26820}"
# Slurm accounting: slurmdbd and its MariaDB (docs/tenancy.md); the bridge's own Slurm user.
: "${SB_SLURMDBD_PORT:=26819}" "${SB_MARIADB_PORT:=26306}" "${SB_BRIDGE_SLURM_USER:=slurm}"
# A Slurm too old for the bridge (hack/old-slurm.sh): its slurmctld and slurmrestd.
: "${SB_OLD_SLURMCTLD_PORT:=26917}" "${SB_OLD_SLURMRESTD_PORT:=26920}"
: "${SB_NODES:=4}" "${SB_GPU_NODES:=2}" "${SB_NODE_CPUS:=64}" "${SB_NODE_MEMORY_MIB:=262144}"
: "${SB_NODE_PODS:=110}" "${SB_NODE_GPUS:=4}" "${SB_NODE_PREFIX:=kwok-node-}"
# Extra kwok nodes that are not in Slurm (no managed-node taint): default-scheduler pods run there,
# all of them (the bench makes 200 at once), hence the larger capacity.
: "${SB_EXTRA_NODES:=1}" "${SB_EXTRA_NODE_PREFIX:=kwok-plain-}" "${SB_EXTRA_NODE_CPUS:=1000}" "${SB_EXTRA_NODE_PODS:=1000}"
# kwok nodes that are not in slurm.conf either, with GPUs: the bridge registers them as Slurm
# dynamic nodes when they carry the external-node label (docs/nodes.md). slurm.conf allows
# SB_DYN_NODE_MAX dynamic nodes; SB_EXTRA_PARTITION is a second partition that selects them by feature.
: "${SB_DYN_NODES:=1}" "${SB_DYN_NODE_PREFIX:=kwok-dyn-}" "${SB_DYN_NODE_CPUS:=16}" "${SB_DYN_NODE_GPUS:=2}"
: "${SB_DYN_NODE_MAX:=32}" "${SB_EXTRA_PARTITION:=bridge-extra}"
: "${SB_PARTITION:=slurm-bridge}" "${SB_READY_TIMEOUT:=60}"
# slurm.conf's ClusterName, and the cluster of every association (hack/cluster/accounting.sh).
: "${SB_SLURM_CLUSTER:=slurm-bridge-local}"
# Hybrid nodes (docs/development.md#hybrid-nodes): Slurm nodes served by real slurmd processes on
# loopback (NodeHostname=localhost, a port each), so Slurm runs real batch processes for them.
# SB_HYBRID_NODES kwok nodes (kwok plays their kubelet), sized alike on both sides, in their own
# partition; slurmd ports SB_HYBRID_SLURMD_PORT, +1, ... one per node.
: "${SB_HYBRID_NODES:=2}" "${SB_HYBRID_NODE_PREFIX:=kwok-hybrid-}" "${SB_HYBRID_NODE_CPUS:=4}" "${SB_HYBRID_NODE_MEMORY_MIB:=8192}"
: "${SB_HYBRID_PARTITION:=hybrid}" "${SB_HYBRID_SLURMD_PORT:=26831}"
# The hybrid nodes' GPUs (docs/gpus.md; hack/cluster/gpus.py reads the format): stand-in device
# files for slurmd's gres.conf, and the same GPUs as the NVIDIA DRA driver's ResourceSlices. The first
# hybrid node has two whole GPUs, each also 8 Slurm shards where Kubernetes has DRA consumable capacity
# on by default (1.36, beta), the second one GPU in a static MIG layout (four 1g.10gb, one 3g.40gb).
if [ -z "${SB_HYBRID_GPUS+set}" ]; then
  if [ "$KUBERNETES_MINOR" -ge 36 ]; then SB_HYBRID_GPUS="${SB_HYBRID_NODE_PREFIX}1=h100/8,h100/8"
  else SB_HYBRID_GPUS="${SB_HYBRID_NODE_PREFIX}1=h100,h100"; fi
  [ "$SB_HYBRID_NODES" -lt 2 ] || SB_HYBRID_GPUS+=" ${SB_HYBRID_NODE_PREFIX}2=h100:1g.10gb+1g.10gb+1g.10gb+1g.10gb+3g.40gb"
  [ "$SB_HYBRID_NODES" -ge 1 ] || SB_HYBRID_GPUS=""
fi
export SB_HYBRID_GPUS
# The real node (SB_REAL_NODE, hack/node.sh) is a Slurm node too: its own slurmd and partition. Its
# Slurm CPUs and memory are what the machine gives its kubelet (every core, all of MemTotal: the
# kubelet reserves nothing) unless these are set.
: "${SB_REAL_NODE_PARTITION:=real-node}" "${SB_REAL_NODE_SLURMD_PORT:=26830}"
: "${SB_REAL_NODE_SLURM_CPUS:=}" "${SB_REAL_NODE_SLURM_MEMORY_MIB:=}"
# A hybrid node sized wrong on purpose (docs/colocation.md, the SlurmResourcesFit node condition):
# its slurm.conf line and slurmd say SB_HYBRID_NODE_CPUS and _MEMORY_MIB, its kwok node offers
# half of each, so the bridge's condition is False there. In a partition of its own, so that no
# other test's job lands on it. Empty SB_MISSIZED_NODE: none.
: "${SB_MISSIZED_NODE=kwok-missized-1}" "${SB_MISSIZED_PARTITION:=missized}" "${SB_MISSIZED_SLURMD_PORT:=26839}"
# Two partitions over the kwok nodes that place their jobs by the local Slurm's block and tree
# topologies (hack/cluster/slurm-conf.sh topology_yaml; docs/workloads.md#topology): gangs with a
# topology constraint go there; the main partition places by the flat default.
: "${SB_BLOCK_PARTITION:=topo-block}" "${SB_SWITCH_PARTITION:=topo-switch}"
# Slurm's job record limits (slurm.conf MinJobAge, MaxJobCount). Benchmarks that keep thousands
# of finished jobs visible (bench/scale.py) raise MinJobAge: a finished job's record goes after it.
# SB_PENDING_PARTITION (empty: none) adds a DOWN partition over the kwok nodes, where jobs stay
# PENDING (reason PartitionDown) without holding up the main partition's allocations.
: "${SB_MIN_JOB_AGE:=60}" "${SB_MAX_JOB_COUNT:=100000}" "${SB_PENDING_PARTITION:=}"
: "${SB_WEBHOOK_PORT:=29443}" "${SB_EXTENDER_PORT:=28090}" "${SB_OPERATOR_PORT:=28080}" "${SB_BRIDGE_SCHEDULER_PORT:=20261}"
# The extender's health and metrics listener (its /filter and /bind port stays SB_EXTENDER_PORT), and
# the local Prometheus server of hack/prometheus.sh.
: "${SB_EXTENDER_HEALTH_PORT:=28091}" "${SB_PROMETHEUS_PORT:=29090}"
# The JobSet and LeaderWorkerSet controllers of the local cluster: webhook and health ports.
: "${SB_JOBSET_WEBHOOK_PORT:=29444}" "${SB_JOBSET_HEALTH_PORT:=20283}" "${SB_LWS_WEBHOOK_PORT:=29445}" "${SB_LWS_HEALTH_PORT:=20284}"
# The one real node (hack/node.sh): containerd and a kubelet run the bridge's own pods (the Helm
# chart). Its pods sit on the Linux bridge SB_POD_BRIDGE; SB_HOST_IP is the host's address there,
# where pods reach the API server and slurmrestd. Nothing on it is reachable from off the machine
# except what already listens on all addresses. Not podman's default network (10.88.0.0/16, its
# podman0 bridge exists while a podman container runs, as for kind): the two would collide.
: "${SB_REAL_NODE:=real-node-1}" "${SB_POD_BRIDGE:=sb-br0}" "${SB_POD_CIDR:=10.201.0.0/16}" "${SB_HOST_IP:=10.201.0.1}"
: "${SB_KUBELET_PORT:=20250}" "${SB_KUBELET_HEALTHZ_PORT:=20248}" "${SB_KUBE_PROXY_HEALTHZ_PORT:=20256}" "${SB_KUBE_PROXY_METRICS_PORT:=20249}"
SERVICE_CIDR=10.96.0.0/16
# The taint and label of the real node: only pods that tolerate it (the bridge's) run there.
REAL_NODE_KEY=slurm-bridge.local/real-node

SLURM_ROOT="$CACHE_DIR/slurm-root"
MARIADB_ROOT="$CACHE_DIR/mariadb-root"
OLD_SLURM_ROOT="$CACHE_DIR/slurm-root-$OLD_SLURM_SUITE"
# A root's stamp file names its suite and packages, so a change to either rebuilds it.
slurm_root_stamp() { echo ".slurm-bridge-root-$SLURM_SUITE-$(echo "$SLURM_PACKAGES" | sha1sum | cut -c1-8)"; }
old_slurm_root_stamp() { echo ".slurm-bridge-root-$OLD_SLURM_SUITE-$(echo "$OLD_SLURM_PACKAGES" | sha1sum | cut -c1-8)"; }
mariadb_root_stamp() { echo ".slurm-bridge-root-$MARIADB_SUITE-$(echo "$MARIADB_PACKAGES" | sha1sum | cut -c1-8)"; }
IMAGES_DIR="$CACHE_DIR/images"
NODE_DIR="$STATE_DIR/node"
CONTAINERD_SOCK="$NODE_DIR/containerd/containerd.sock"
PKI="$STATE_DIR/pki"
LOGS="$STATE_DIR/logs"
PIDS="$STATE_DIR/pids"
KUBECONFIG_FILE="$STATE_DIR/kubeconfig"
SLURM_STATE_IN_ROOT="/var/lib/slurm-bridge"   # inside the Slurm root
JWT_FILE="$STATE_DIR/slurm/jwt"
# slurmctld's hook to the bridge (slurm-hooks/slurm-bridge-notify.sh): the shared secret (made
# with slurmctld's state, hack/cluster/slurm.sh) and the hook's settings (the bridge's URL: written
# by whichever form of the bridge runs, hack/bridge.sh or hack/deploy.sh).
HOOK_TOKEN_FILE="$SLURM_ROOT$SLURM_STATE_IN_ROOT/bridge-hook.token"
HOOK_CONF="$SLURM_ROOT/etc/slurm/slurm-bridge-notify.conf"

write_hook_conf() { # URL : where slurmctld's hook sends its notices (the bridge that runs now)
  [ -d "$(dirname "$HOOK_CONF")" ] || return 0
  printf 'URL=%s\nTOKEN_FILE=%s\n' "$1" "$SLURM_STATE_IN_ROOT/bridge-hook.token" > "$HOOK_CONF.tmp" && mv "$HOOK_CONF.tmp" "$HOOK_CONF"
}

# ---- the local cluster's nodes, by kind (names from the SB_* counts and prefixes above) ----------
node_names() { for i in $(seq 1 "$SB_NODES"); do echo "$SB_NODE_PREFIX$i"; done; }           # external Slurm nodes
extra_node_names() { for i in $(seq 1 "$SB_EXTRA_NODES"); do echo "$SB_EXTRA_NODE_PREFIX$i"; done; }  # not in Slurm
dyn_node_names() { for i in $(seq 1 "$SB_DYN_NODES"); do echo "$SB_DYN_NODE_PREFIX$i"; done; }  # registered by the bridge
hybrid_node_names() { for i in $(seq 1 "$SB_HYBRID_NODES"); do echo "$SB_HYBRID_NODE_PREFIX$i"; done; }  # kwok + slurmd
is_gpu_node() { [ "$1" -gt $((SB_NODES - SB_GPU_NODES)) ]; }
# Every Slurm node a slurmd serves, and its port.
slurmd_node_names() { hybrid_node_names; echo "$SB_REAL_NODE"; missized_node_names; }
missized_node_names() { [ -z "$SB_MISSIZED_NODE" ] || echo "$SB_MISSIZED_NODE"; }  # kwok + slurmd, sized wrong
slurmd_port() { # node
  if [ "$1" = "$SB_REAL_NODE" ]; then echo "$SB_REAL_NODE_SLURMD_PORT"; return; fi
  if [ -n "$SB_MISSIZED_NODE" ] && [ "$1" = "$SB_MISSIZED_NODE" ]; then echo "$SB_MISSIZED_SLURMD_PORT"; return; fi
  local i=${1#"$SB_HYBRID_NODE_PREFIX"}
  [ "$i" != "$1" ] && [ "$i" -ge 1 ] 2>/dev/null && [ "$i" -le "$SB_HYBRID_NODES" ] || die "$1 is not a hybrid node (${SB_HYBRID_NODE_PREFIX}1..$SB_HYBRID_NODES, $SB_REAL_NODE, ${SB_MISSIZED_NODE:-no mis-sized node})"
  echo $((SB_HYBRID_SLURMD_PORT + i - 1))
}
# The real node's Slurm size: what its kubelet reports (hack/node.sh reserves nothing), unless set.
real_node_slurm_cpus() { echo "${SB_REAL_NODE_SLURM_CPUS:-$(getconf _NPROCESSORS_ONLN)}"; }
real_node_slurm_memory_mib() { echo "${SB_REAL_NODE_SLURM_MEMORY_MIB:-$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)}"; }

# ---- process management --------------------------------------------------------------------
pid_of() { local f="$PIDS/$1.pid"; [ -f "$f" ] && cat "$f"; }
alive() { local p; p=$(pid_of "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
check_port() { # name port variable
  if port_in_use "$2"; then
    die "port $2 for $1 is in use on 127.0.0.1; stop what uses it (ss -ltnp 'sport = :$2'), run 'hack/cluster.sh down', or set $3 to a free port"
  fi
}

start() { # name command... : run detached, record pid, log to $LOGS/name.log
  local name=$1; shift
  if alive "$name"; then log "$name already running (pid $(pid_of "$name"))"; return 0; fi
  mkdir -p "$LOGS" "$PIDS"
  # Descriptors 3-9 are closed: a daemon must not keep its caller's files open (a lock taken
  # with flock around `hack/bridge.sh up` would otherwise be held as long as the daemon lives).
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
  echo $! > "$PIDS/$name.pid"
}

wait_ready() { # name timeout command... : poll until command succeeds, else print the log tail
  local name=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      tail -n 25 "$LOGS/$name.log" >&2 2>/dev/null || true
      die "$name exited during start-up (log above: $LOGS/$name.log)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 25 "$LOGS/$name.log" >&2 2>/dev/null || true
      die "$name did not become ready within ${timeout}s (log above: $LOGS/$name.log)"
    fi
    sleep 0.2
  done
}

stop() { # name : TERM, wait, KILL; only the recorded pid and its process group
  local name=$1 p
  p=$(pid_of "$name") || return 0
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
    kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
  fi
  rm -f "$PIDS/$name.pid"
}

kubectl_() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

sign_cert() { # name subject [san] : $PKI/name.{key,crt}, signed by the cluster CA, unless present
  [ -f "$PKI/$1.crt" ] && return 0
  (
    cd "$PKI"
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3" > "$1.ext"; else : > "$1.ext"; fi
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile "$1.ext" -out "$1.crt" 2>/dev/null && chmod 600 "$1.key"
  ) || die "signing the $1 certificate failed"
}

write_kubeconfig() { # file user [extra user fields, e.g. ', as: "x"'] : client-cert kubeconfig
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$SB_APISERVER_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"${3:-}}
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
EOF
}

