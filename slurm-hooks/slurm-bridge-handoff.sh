#!/bin/bash
# slurm-bridge's EpilogSlurmctld: the handoff (docs/colocation.md, "The handoff").
#
# Slurm frees an external job's CPUs the moment it ends the job, but the pod on them may still be
# shutting down (its grace period). When Slurm ends a bridge job on its own -- scancel by someone
# else, a node failure, a time limit or a preemption the bridge did not get ahead of -- this
# script reserves what the job held on each of its nodes, for the bridge's Slurm user only, so no
# native job starts there under the pod. The bridge deletes the reservation once the pod's
# containers have stopped, or drains the node if the pod outlives its grace period and a margin;
# the reservation's EndTime bounds the hold when the bridge is down.
#
# Install on the slurmctld host (it runs there, as SlurmUser, for every job end):
#   install -m 0755 slurm-bridge-handoff.sh /etc/slurm/slurm-bridge-handoff.sh
#   slurm.conf:  EpilogSlurmctld=/etc/slurm/slurm-bridge-handoff.sh
# SlurmUser must be allowed to create reservations (it is an operator of its own cluster).
#
# What it reads (no call to slurmctld to learn it):
#   SLURM_JOB_WORK_DIR        /slurm-bridge/handoff/<hold seconds>/<cores|node>/<bridgeId>: set by
#                             the bridge at submit; any other job is left alone
#   SLURM_JOB_NAME            ends in "#released": the bridge itself released the job after its
#                             pods stopped (it renames the job before cancelling it): nothing held
#   SLURM_JOB_NODELIST, SLURM_JOB_CPUS_PER_NODE ("2(x2),1"), SLURM_JOB_EXCLUSIVE (NO, NODE, MCS, USER)
# What it makes, one per node (a reservation's per-node CoreCnt list is refused by Slurm 26.05):
#   handoff-<job id>-<bridgeId>-<node>   StartTime=now EndTime=now+<hold>  Users=<SlurmUser>
#     cores scope: CoreCnt=<the job's CPUs on that node> (the lowest free cores: a count, not the
#                  job's own cores; no memory)
#     node scope (whole-node, time-shared or exact-core jobs): the whole node (Flags=IGNORE_JOBS:
#                  jobs running there go on; nothing new starts)
#     a count that no longer fits (another job took the cores first) falls back to the node scope
# It always exits 0 (a failing EpilogSlurmctld is logged by slurmctld but changes nothing for an
# ended job) and returns within milliseconds: slurmctld runs it beside its scheduling.
# Log: one line per action to /var/log/slurm-bridge/handoff.log when that directory is writable.
PATH=/usr/bin:/bin:/usr/sbin:/sbin:${PATH:-}

LOG_DIR=/var/log/slurm-bridge
log() { [ -w "$LOG_DIR" ] && echo "$(date +%Y-%m-%dT%H:%M:%S.%N) job=${SLURM_JOB_ID:-?} $*" >> "$LOG_DIR/handoff.log"; }

dir=${SLURM_JOB_WORK_DIR:-}
case $dir in /slurm-bridge/handoff/*/*/*) ;; *) exit 0 ;; esac
case ${SLURM_JOB_NAME:-} in *'#released') log "released by the bridge: nothing held"; exit 0 ;; esac
[ -n "${SLURM_JOB_NODELIST:-}" ] || exit 0   # never allocated: nothing to hold
IFS=/ read -r _ _ _ hold scope bridge _ <<< "$dir"
case $hold in '' | *[!0-9]* | 0) exit 0 ;; esac
case $bridge in '' | *[!a-z0-9-]*) exit 0 ;; esac
case ${SLURM_JOB_EXCLUSIVE:-NO} in NO | '') ;; *) scope=node ;; esac
[ "$scope" = node ] || scope=cores
me=$(id -un)

# SLURM_JOB_CPUS_PER_NODE in node order: "4,2(x3)" -> 4 2 2 2
cpus=()
for item in ${SLURM_JOB_CPUS_PER_NODE//,/ }; do
  n=${item%%(*} r=1
  case $item in *'(x'*) r=${item#*(x}; r=${r%)} ;; esac
  for ((i = 0; i < r; i++)); do cpus+=("$n"); done
done
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null)

reserve() { # node cpus
  local name="handoff-${SLURM_JOB_ID}_${bridge}_$1" what out out2
  if [ "$scope" = node ] || [ -z "$2" ]; then what="Flags=IGNORE_JOBS"; else what="CoreCnt=$2"; fi
  if out=$(scontrol create reservation "ReservationName=$name" "Nodes=$1" $what StartTime=now \
    "EndTime=now+${hold}seconds" "Users=$me" 2>&1); then
    log "node=$1 $what hold=${hold}s: $out"
    return
  fi
  if [ "$what" != Flags=IGNORE_JOBS ]; then
    out2=$(scontrol create reservation "ReservationName=$name" "Nodes=$1" Flags=IGNORE_JOBS StartTime=now \
      "EndTime=now+${hold}seconds" "Users=$me" 2>&1)
    log "node=$1 $what failed ($out); whole node instead: $out2"
  else
    log "node=$1 $what failed: $out"
  fi
}

for i in "${!nodes[@]}"; do
  reserve "${nodes[$i]}" "${cpus[$i]:-}" &
done
wait
exit 0
