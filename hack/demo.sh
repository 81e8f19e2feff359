#!/usr/bin/env bash
# README command (1): the demo, on a fresh machine.
#
# By default on kind (hack/kind.sh): a cluster whose workers are hybrid nodes (kubelet + slurmd),
# Slurm inside it, the bridge installed with its Helm chart. It runs the example workload
# (examples/kind-demo.yaml) and a native `sbatch` job on the same worker, and prints what
# Kubernetes and Slurm each see. The cluster stays up to explore; `hack/kind.sh down` removes it.
#
# SB_DEMO=local runs it on the local cluster instead (hack/cluster.sh: Kubernetes built from source
# with kwok nodes and one real node, Slurm in a chroot), for machines where neither docker nor
# podman can run containers.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
t0=$SECONDS
NS=slurm-bridge-demo

demo_local() {
  require_root "hack/demo.sh (the local Slurm runs in a chroot)"
  bash hack/setup-python.sh
  bash hack/cluster.sh up
  bash hack/bridge.sh down >/dev/null   # the development form, if it runs, uses the same names
  bash hack/deploy.sh install
  echo; echo "# The bridge, installed with helm: its pods run on the real node $SB_REAL_NODE"
  kubectl_ -n slurm-bridge-system get pods -o wide
  log "setup done in $((SECONDS - t0))s; applying examples/demo.yaml"
  kubectl_ delete namespace $NS --ignore-not-found --wait=true >/dev/null
  kubectl_ apply -f examples/demo.yaml
  local deadline=$((SECONDS + 120))
  until [ "$(kubectl_ -n $NS get pods --no-headers 2>/dev/null | grep -c Running)" -ge 4 ]; do
    [ $SECONDS -lt $deadline ] || { kubectl_ -n $NS get placeholderjobs,pods -o wide; die "demo pods did not all run within 120s; see hack/cluster.sh status for logs"; }
    sleep 0.5
  done
  echo; echo "# Kubernetes: every pod has a PlaceholderJob; Slurm chose the node"
  kubectl_ -n $NS get placeholderjobs,pods -o wide
  echo; echo "# Slurm: the matching external jobs"
  bash hack/cluster.sh slurm squeue -o '%.6i %.30j %.9T %.10M %.8l %R'
  echo; echo "# When the Job's pods complete, their Slurm jobs end with them (waiting up to 60s)"
  deadline=$((SECONDS + 60))
  until [ "$(kubectl_ -n $NS get placeholderjobs --no-headers 2>/dev/null | grep -c Completed)" -ge 3 ]; do
    [ $SECONDS -lt $deadline ] || break
    sleep 1
  done
  kubectl_ -n $NS get placeholderjobs,pods -o wide
  echo; echo "# Slurm: native work as a tenant (alice), a real batch process on a hybrid node's slurmd"
  bash hack/cluster.sh slurm sinfo -p "$SB_HYBRID_PARTITION,$SB_REAL_NODE_PARTITION" -N -o '%.14N %.10P %.6t %.4c %.8m'
  local out=/tmp/demo-native-$$.out job
  job=$(bash hack/cluster.sh slurm --as alice sbatch --parsable --wait -p "$SB_HYBRID_PARTITION" -A team-a -J demo-native \
    -o "$out" --wrap 'echo "$(id -un) (uid $(id -u)) ran job $SLURM_JOB_ID on $SLURMD_NODENAME"') \
    || die "the native demo job failed; see hack/cluster.sh status for the slurmd logs"
  cat "$SLURM_ROOT$out"; rm -f "$SLURM_ROOT$out"
  deadline=$((SECONDS + 30))
  until bash hack/cluster.sh slurm sacct -X -n -j "$job" -o State | grep -q COMPLETED; do
    [ $SECONDS -lt $deadline ] || break
    sleep 0.5
  done
  bash hack/cluster.sh slurm sacct -X -j "$job" -o JobID,JobName%12,User,Account,Partition,NodeList,State
  log "demo done in $((SECONDS - t0))s. Explore: eval \"\$(hack/cluster.sh env)\"; kubectl -n $NS describe placeholderjob hello-slurm"
}

# ---- kind ------------------------------------------------------------------------------------------
k() { kubectl --kubeconfig "$KUBECONFIG" "$@"; }
slurm() { bash hack/kind.sh slurm "$@"; }

wait_until() { # seconds what command... : poll, else print the demo's state and fail
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { k -n $NS get placeholderjobs,pods -o wide >&2; slurm squeue >&2 || true
                                     die "$what did not happen within the time allowed; hack/kind.sh status shows the cluster"; }
    sleep 1
  done
}

pod_running_on_a_node() { [ "$(k -n $NS get pod hello-slurm -o jsonpath='{.status.phase}')" = Running ]; }
job_running() { slurm squeue -h -j "$1" -o %T | grep -qx RUNNING; }
jobs_completed() { [ "$(k -n $NS get placeholderjobs --no-headers 2>/dev/null | grep -c Completed)" -ge 3 ]; }

demo_kind() {
  local node native image
  bash hack/kind.sh up
  bash hack/kind.sh install
  eval "$(bash hack/kind.sh env)"
  log "setup done in $((SECONDS - t0))s"
  echo; echo "# Kubernetes: the kind nodes. The workers are hybrid nodes (kubelet + slurmd); the bridge and Slurm's controller run on the control plane"
  k get nodes -o wide
  echo; echo "# Slurm: the same workers, as Slurm nodes of the same names served by their slurmd"
  slurm sinfo -N -o '%22N %14P %8t %5c %8m %v'
  image=$SB_WORKLOAD_IMAGE
  k delete namespace $NS --ignore-not-found --wait=true >/dev/null
  log "applying examples/kind-demo.yaml (a pod and a Job of 3 pods, image $image)"
  sed "s|WORKLOAD_IMAGE|$image|" examples/kind-demo.yaml | k apply -f -
  wait_until 120 "the pod hello-slurm running on the worker Slurm chose" pod_running_on_a_node
  node=$(k -n $NS get pod hello-slurm -o jsonpath='{.spec.nodeName}')
  # shellcheck source=accounting.env
  . hack/accounting.env
  local user=${TENANTS%% *}; IFS=: read -r user uid _ gid accounts _ <<< "$user"
  log "submitting a native batch job as $user (account ${accounts%%,*}) to $node, where hello-slurm runs"
  native=$(slurm sbatch --parsable --uid="$uid" --gid="$gid" -A "${accounts%%,*}" -w "$node" -c 1 --mem=64M \
    -J native-render --chdir=/tmp -o /dev/null --wrap 'echo native work on $(hostname); sleep 120')
  native=${native%%;*}
  wait_until 60 "native job $native running" job_running "$native"
  echo; echo "# Kubernetes: every pod has a PlaceholderJob; Slurm chose the node"
  k -n $NS get placeholderjobs,pods -o wide
  echo; echo "# Slurm: the bridge's external jobs and $user's native job $native, together on $node"
  slurm squeue -o '%.6i %.32j %.8u %.12a %.9T %.8M %R'
  slurm sinfo -N -o '%22N %8t %14C' -n "$node"
  wait_until 90 "the Job's 3 pods completing" jobs_completed
  echo; echo "# When the Job's pods complete, their Slurm jobs end with them"
  k -n $NS get placeholderjobs -o wide
  echo; echo "# Slurm accounting: pods' jobs and native jobs side by side"
  slurm sacct -X -j "$(k -n $NS get placeholderjobs -o jsonpath='{range .items[*]}{.status.jobId},{end}')$native" \
    -o 'JobID,JobName%32,User,Account%14,State%10,NodeList%22,AllocCPUS'
  log "demo done in $((SECONDS - t0))s. Explore: eval \"\$(hack/kind.sh env)\"; kubectl -n $NS describe placeholderjob hello-slurm; hack/kind.sh slurm squeue. Remove it: hack/kind.sh down"
}

case "${SB_DEMO:-kind}" in
  kind) demo_kind ;;
  local) demo_local ;;
  *) die "SB_DEMO=$SB_DEMO: expected kind (the default) or local" ;;
esac
