#!/usr/bin/env bash
# README command (1): on a fresh machine, build/start the local cluster (Kubernetes with kwok nodes
# and one real node, and a real Slurm), install the bridge as users do (the image built from the
# Dockerfile, `helm install`; hack/deploy.sh), and run the example workload through Slurm.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
require_root "hack/demo.sh (the local Slurm runs in a chroot)"
t0=$SECONDS
bash hack/setup-python.sh
bash hack/cluster.sh up
bash hack/bridge.sh down >/dev/null   # the development form, if it runs, uses the same names
bash hack/deploy.sh install
echo; echo "# The bridge, installed with helm: its pods run on the real node $SB_REAL_NODE"
kubectl_ -n slurm-bridge-system get pods -o wide
log "setup done in $((SECONDS - t0))s; applying examples/demo.yaml"
kubectl_ delete namespace slurm-bridge-demo --ignore-not-found --wait=true >/dev/null
kubectl_ apply -f examples/demo.yaml
ns=slurm-bridge-demo
deadline=$((SECONDS + 120))
until [ "$(kubectl_ -n $ns get pods --no-headers 2>/dev/null | grep -c Running)" -ge 4 ]; do
  [ $SECONDS -lt $deadline ] || { kubectl_ -n $ns get placeholderjobs,pods -o wide; die "demo pods did not all run within 120s; see hack/cluster.sh status for logs"; }
  sleep 0.5
done
echo; echo "# Kubernetes: every pod has a PlaceholderJob; Slurm chose the node"
kubectl_ -n $ns get placeholderjobs,pods -o wide
echo; echo "# Slurm: the matching external jobs"
bash hack/cluster.sh slurm squeue -o '%.6i %.30j %.9T %.10M %.8l %R'
echo; echo "# When the Job's pods complete, their Slurm jobs end with them (waiting up to 60s)"
deadline=$((SECONDS + 60))
until [ "$(kubectl_ -n $ns get placeholderjobs --no-headers 2>/dev/null | grep -c Completed)" -ge 3 ]; do
  [ $SECONDS -lt $deadline ] || break
  sleep 1
done
kubectl_ -n $ns get placeholderjobs,pods -o wide
echo; echo "# Slurm: native work as a tenant (alice), a real batch process on a hybrid node's slurmd"
bash hack/cluster.sh slurm sinfo -p "$SB_HYBRID_PARTITION,$SB_REAL_NODE_PARTITION" -N -o '%.14N %.10P %.6t %.4c %.8m'
out=/tmp/demo-native-$$.out
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
log "demo done in $((SECONDS - t0))s. Explore: eval \"\$(hack/cluster.sh env)\"; kubectl -n $ns describe placeholderjob hello-slurm"
