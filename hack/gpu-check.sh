#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: what Slurm's GPU autodetection sees (slurmd -G), beside what the
# driver lists and, given a cluster, what the bridge's DRA mapping gives at each Slurm index
# (docs/gpus.md). Without a GPU it says so and exits 0: the project builds and passes its tests
# without one.
#
#   hack/gpu-check.sh [--kubeconfig PATH] [--node NAME]
#
# slurmd is the host's when it has one, else the Slurm root's (hack/build-slurm-root.sh), run in a
# private mount namespace that shows it the host's /dev/nvidia* read-only (nothing stays mounted).
# Its slurm.conf and gres.conf (AutoDetect=nvml; AutoDetect=nvidia where this slurmd has no NVML)
# are written to a temporary directory. With --node (and KUBECONFIG or --kubeconfig), the node's
# gpu.nvidia.com ResourceSlices are mapped as the operator maps them
# (slurm_bridge.rules.dra.inventory.node_devices) and compared UUID by UUID; exit 1 when they disagree.
. "$(dirname "$0")/lib.sh"
# shellcheck source=cluster/slurm-conf.sh
. "$HACK_DIR/cluster/slurm-conf.sh"   # slurm_conf_common: the lines every Slurm of the project shares
ME=hack/gpu-check.sh
HELPER="$HACK_DIR/cluster/gpu_check.py"

gpu_check_usage() {
  cat <<EOF
usage: $ME [--kubeconfig PATH] [--node NAME]

Runs slurmd's GPU autodetection (slurmd -G) and prints the GRES it finds (Type, File, UniqueId
of MIG instances, Index, Links, Cores), nvidia-smi's GPUs and MIG devices, and, with --node and a
kubeconfig (KUBECONFIG or --kubeconfig), the bridge's DRA mapping of that node's gpu.nvidia.com
ResourceSlices, index by index, and whether both name the same device: "views agree" (exit 0) or
"views DISAGREE at index N: slurmd X, driver Y" (exit 1). Needs root on a GPU machine; without a
GPU it says so and exits 0.
EOF
}

kcfg=${KUBECONFIG:-} node=
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) gpu_check_usage; exit 0 ;;
    --kubeconfig) [ $# -ge 2 ] || die "--kubeconfig needs a PATH"; kcfg=$2; shift 2 ;;
    --node) [ $# -ge 2 ] || die "--node needs a NAME"; node=$2; shift 2 ;;
    *) die "unknown argument '$1'; see $ME --help" ;;
  esac
done

smi_l=
if command -v nvidia-smi >/dev/null 2>&1; then smi_l=$(nvidia-smi -L 2>/dev/null || true); fi
if [ ! -e /dev/nvidia0 ] && ! grep -q '^GPU ' <<<"$smi_l"; then
  if command -v nvidia-smi >/dev/null 2>&1; then why="nvidia-smi -L lists none"; else why="no nvidia-smi"; fi
  echo "$ME: no NVIDIA GPU on this machine (no /dev/nvidia0, $why): nothing to check; the project builds and passes its tests without one (docs/gpus.md)"
  exit 0
fi
command -v nvidia-smi >/dev/null 2>&1 || die "/dev/nvidia0 exists but nvidia-smi is not on PATH; install the NVIDIA driver's utilities"
require_root "$ME (slurmd's GPU detection, in the Slurm root's chroot where the host has no slurmd)"
[ -z "$node" ] || [ -n "$kcfg" ] || die "--node needs a kubeconfig: set KUBECONFIG or pass --kubeconfig PATH"

base=   # where slurmd's files are: "" for the host's slurmd, else the Slurm root
if ! command -v slurmd >/dev/null 2>&1; then
  chroot "$SLURM_ROOT" test -x /usr/sbin/slurmd 2>/dev/null || die "no slurmd on this machine and no Slurm root at $SLURM_ROOT; build it with 'sudo hack/build-slurm-root.sh' (or install slurmd)"
  base=$SLURM_ROOT
fi
tmp=$(mktemp -d "$base/tmp/gpu-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t=${tmp#"$base"}   # the directory as slurmd sees it
host=$(hostname -s)
count=$(python3 -P "$HELPER" count <<<"$smi_l")   # the gpu GRES: MIG instances, and GPUs without any
mkdir "$tmp/spool"
{
  echo "# Written by $ME: one node, this machine, for slurmd -G."
  slurm_conf_common gpucheck localhost 6817 "$t" "$t/spool" "$t/slurmd.pid"
  echo "GresTypes=gpu,shard"
  echo "NodeName=$host Gres=gpu:$count CPUs=1 State=UNKNOWN"
  echo "PartitionName=gpucheck Nodes=$host Default=YES State=UP"
} > "$tmp/slurm.conf"
echo "CgroupPlugin=disabled" > "$tmp/cgroup.conf"   # slurmd -G needs no cgroups (nor has the root any)

# In the root: a private mount namespace, a /dev of its own (the root's stand-in GPU files hidden)
# with the host's NVIDIA devices bound read-only, /sys for the devices' PCI details.
# shellcheck disable=SC2016 # expanded by the inner shell
in_namespace='r=$1; shift
  mountpoint -q "$r/proc" || mount -t proc proc "$r/proc"
  mount -t tmpfs -o mode=0755 gpu-check-dev "$r/dev"
  for d in /dev/null /dev/zero /dev/urandom /dev/random /dev/nvidia*; do
    [ -e "$d" ] || continue
    if [ -d "$d" ]; then mkdir "$r$d"; else : > "$r$d"; fi
    mount --bind -o ro "$d" "$r$d"
  done
  mount --bind -o ro /sys "$r/sys"
  exec chroot "$r" "$@"'
detect() { # AutoDetect value : slurmd -G's output
  echo "AutoDetect=$1" > "$tmp/gres.conf"
  if [ -z "$base" ]; then timeout 60 slurmd -G -f "$t/slurm.conf" 2>&1 || true
  else timeout 60 unshare --mount --propagation private sh -ec "$in_namespace" sh "$base" /usr/sbin/slurmd -G -f "$t/slurm.conf" 2>&1 || true
  fi
}
how=nvml
out=$(detect nvml)
if ! grep -q 'Gres Name=gpu' <<<"$out"; then
  log "slurmd found no GPU with AutoDetect=nvml (a slurmd built without NVML says so below); trying AutoDetect=nvidia, which does not see MIG instances"
  grep -i 'nvml\|error' <<<"$out" | sed 's/^/    /' >&2 || true
  how=nvidia; out=$(detect nvidia)
fi
printf '%s\n' "$out" > "$tmp/slurmd.out"

echo "== slurmd -G (AutoDetect=$how, $(if [ -z "$base" ]; then command -v slurmd; else echo "$SLURM_ROOT"; fi)): Slurm's gpu GRES, in index order"
grep 'Gres Name=' <<<"$out" || { echo "(none; slurmd said:)"; printf '%s\n' "$out"; }
echo "== nvidia-smi --query-gpu=index,uuid,name,mig.mode.current"
nvidia-smi --query-gpu=index,uuid,name,mig.mode.current --format=csv,noheader | tee "$tmp/smi.csv"
echo "== nvidia-smi -L"
printf '%s\n' "$smi_l"

if [ -z "$node" ]; then
  [ -z "$kcfg" ] || log "give --node NAME (this machine's Kubernetes node) to compare with the bridge's DRA mapping"
  exit 0
fi
[ -x "$REPO_DIR/.venv/bin/python" ] || die "no $REPO_DIR/.venv; run hack/setup-python.sh"
kubectl --kubeconfig "$kcfg" get resourceslices -o json > "$tmp/slices.json" \
  || die "kubectl get resourceslices failed (kubeconfig $kcfg); see the output above"
echo "== the bridge's DRA mapping on node $node (slurm_bridge.rules.dra.inventory.node_devices), and slurmd's device at each index"
# The venv's editable install maps slurm_bridge (PYTHONPATH=$REPO_DIR would not: the repository's
# operator/ folder would hide the standard library's operator module).
"$REPO_DIR/.venv/bin/python" -P "$HELPER" compare "$tmp/slurmd.out" "$tmp/smi.csv" "$tmp/slices.json" "$node"
