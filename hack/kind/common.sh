# The kind cluster's settings and its container engine, for hack/kind.sh and hack/kind/*.sh.
# Source it after hack/lib.sh.

# Builds reused across clusters (the node image's Debian root, image archives, the podman
# configuration) and the one cluster's state (kubeconfig, Slurm secrets, the bridge's token), which
# `hack/kind.sh down` removes.
KIND_CACHE="$CACHE_DIR/kind"
KIND_STATE="${SB_KIND_STATE:-$CACHE_DIR/kind-cluster}"
KIND_KUBECONFIG="$KIND_STATE/kubeconfig"
KIND_JWT_FILE="$KIND_STATE/jwt"
# SB_KIND_CLUSTER names the cluster (its nodes are <name>-control-plane, <name>-worker, <name>-worker2,
# ...); SB_KIND_WORKERS workers, each a hybrid node (kubelet + slurmd). Slurm counts
# SB_KIND_NODE_CPUS CPUs and SB_KIND_NODE_MEMORY_MIB MiB on each worker: the workers share this
# machine's cores, and the deployed tier runs 60 pods at once, each a Slurm job of at least one CPU.
# slurmrestd's NodePort is published on 127.0.0.1:SB_KIND_SLURMRESTD_PORT, where tests and the
# host's tools reach it.
: "${SB_KIND_CLUSTER:=slurm-bridge}" "${SB_KIND_WORKERS:=2}"
: "${SB_KIND_NODE_CPUS:=64}" "${SB_KIND_NODE_MEMORY_MIB:=16384}"
: "${SB_KIND_SLURMRESTD_PORT:=27820}" "${SB_KIND_SLURMRESTD_NODEPORT:=30820}"
# The workers' GPUs (docs/gpus.md#gpus-on-the-kind-workers), in hack/cluster/gpus.py's format, as
# SB_HYBRID_GPUS is the local cluster's: stand-in device files in slurmd's gres.conf, and the same GPUs
# published and prepared by the test DRA plugin (hack/kind/dra-plugin) on each worker. The first worker
# has two whole GPUs, the second (when there is one) one GPU in a static MIG layout (four 1g.10gb, one
# 3g.40gb). SB_KIND_GPUS="" gives them none.
if [ -z "${SB_KIND_GPUS+set}" ]; then
  SB_KIND_GPUS="$SB_KIND_CLUSTER-worker=h100,h100"
  [ "$SB_KIND_WORKERS" -lt 2 ] || SB_KIND_GPUS+=" $SB_KIND_CLUSTER-worker2=h100:1g.10gb+1g.10gb+1g.10gb+1g.10gb+3g.40gb"
  [ "$SB_KIND_WORKERS" -ge 1 ] || SB_KIND_GPUS=""
fi
export SB_KIND_GPUS
# Pod and Service ranges of the kind cluster: not the local cluster's (10.88/16 pods on the host,
# 10.96/16 Services, 10.244/16 kwok), so both can run side by side.
: "${SB_KIND_POD_SUBNET:=10.246.0.0/16}" "${SB_KIND_SERVICE_SUBNET:=10.97.0.0/16}"
# kind's published node image, for where a registry is reachable (a public image name; the
# container engine's own configuration says where it comes from). SB_KIND_IMAGES=local|published
# chooses between building every image here and pulling (hack/kind.sh image_mode);
# SB_KIND_NODE_IMAGE=REF uses REF as the node image.
KIND_PUBLISHED_NODE_IMAGE="kindest/node:$KUBERNETES_VERSION"

# ---- the container engine ---------------------------------------------------------------------
# docker where a Docker engine answers (a docker CLI alone is not enough: this machine has one and
# no engine), else podman from apt. SB_KIND_PROVIDER=docker|podman chooses.
kind_provider_setup() {
  [ -n "${KIND_ENGINE:-}" ] && return 0
  local want=${SB_KIND_PROVIDER:-}
  case $want in
    docker | podman | "") ;;
    *) die "SB_KIND_PROVIDER=$want: expected docker or podman" ;;
  esac
  if [ -z "$want" ]; then
    if command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; then want=docker; else want=podman; fi
  fi
  if [ "$want" = docker ]; then
    timeout 20 docker info >/dev/null 2>&1 || die "SB_KIND_PROVIDER=docker, but no Docker engine answers 'docker info'"
  else
    podman_setup
  fi
  KIND_ENGINE=$want
  export KIND_EXPERIMENTAL_PROVIDER=$want
}

# podman as kind.md found it must be configured on a host like this one: runc, not crun (crun
# refuses hybrid cgroups; lib.sh oci_runtime), container ulimits within this process's hard limits
# (root may lack CAP_SYS_RESOURCE), and a /lib/modules for kind's read-only mount of it.
podman_setup() {
  require_root "kind with podman (rootful podman; kind's podman provider)"
  command -v podman >/dev/null 2>&1 || ensure_apt podman
  local rt conf="$KIND_CACHE/containers.conf" nofile nproc
  rt=$(oci_runtime)
  # nofile: this process's hard limit. nproc: at most 32768 (kind.md's value; the hard limit
  # itself was refused here, "error setting rlimit type 6").
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576
  { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
  mkdir -p "$KIND_CACHE"
  cat > "$conf.tmp" <<EOF
# Written by hack/kind/common.sh (CONTAINERS_CONF for kind's podman calls and the project's).
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "$(basename "$rt")"

[engine.runtimes]
$(basename "$rt") = ["$rt"]
EOF
  mv "$conf.tmp" "$conf"
  export CONTAINERS_CONF="$conf"
  [ -d /lib/modules ] || mkdir -p /lib/modules
  podman info >/dev/null 2>&1 || die "podman does not work here (podman info failed with CONTAINERS_CONF=$conf)"
}

kind_engine() { "$KIND_ENGINE" "$@"; }
# kind, without the two lines it prints on every call with podman.
kind_() {
  { "$BIN_DIR/kind" "$@" 2>&1 1>&3 3>&- \
      | { grep -v -e '^using podman due to KIND_EXPERIMENTAL_PROVIDER' -e '^enabling experimental podman provider' >&2 || true; }
  } 3>&1
}
