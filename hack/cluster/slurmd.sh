# hack/cluster.sh's slurmd: one per hybrid node (hack/lib.sh slurmd_node_names: the kwok hybrid nodes,
# the real node and the mis-sized node), all in the Slurm root on loopback. slurm.conf gives each node
# NodeHostname=localhost and a port of its own (slurmd_port); `slurmd -N NODE` tells each daemon
# which node it serves. Logs: $LOGS/slurmd-NODE.log; pids: $PIDS/slurmd-NODE.pid. Sourced by
# hack/cluster.sh; defines functions only.

slurmd_ready() { # node : slurmd registered and the node is in service (idle, mixed, allocated, ...)
  local state
  state=$(in_root sinfo -h -N -n "$1" -o %T 2>/dev/null | head -n1)
  case $state in
    *'*'* | '' | down* | drain* | fail* | unknown* | not_responding* | future* | inval* ) return 1 ;;
    *) return 0 ;;
  esac
}

up_slurmds() {
  local n conf="$SLURM_ROOT/etc/slurm/slurm.conf" started=()
  in_root test -x /usr/sbin/slurmd || die "the Slurm root has no slurmd; run hack/build-slurm-root.sh (SLURM_PACKAGES in hack/versions.env lists slurmd)"
  for n in $(slurmd_node_names); do
    alive "slurmd-$n" && continue
    # A slurmctld started by an older hack/cluster.sh runs a slurm.conf without this node. The
    # mis-sized node is only the node condition's test case: without it the cluster still serves.
    if ! grep -q "^NodeName=$n " "$conf"; then
      if [ "$n" = "$SB_MISSIZED_NODE" ]; then
        log "the running slurmctld's slurm.conf has no node $n (started by a hack/cluster.sh without it): its slurmd is not started; 'hack/cluster.sh down' and 'up' add it"
        continue
      fi
      die "the running slurmctld's slurm.conf has no node $n (a cluster started by an older hack/cluster.sh); run 'hack/cluster.sh down' and 'hack/cluster.sh up'"
    fi
    if [ "$n" = "$SB_REAL_NODE" ]; then
      check_port "slurmd-$n" "$(slurmd_port "$n")" SB_REAL_NODE_SLURMD_PORT
    elif [ "$n" = "$SB_MISSIZED_NODE" ]; then
      check_port "slurmd-$n" "$(slurmd_port "$n")" SB_MISSIZED_SLURMD_PORT
    else
      check_port "slurmd-$n" "$(slurmd_port "$n")" SB_HYBRID_SLURMD_PORT
    fi
    mkdir -p "$SLURM_ROOT$SLURM_STATE_IN_ROOT/spool/$n"
    start "slurmd-$n" chroot "$SLURM_ROOT" /usr/sbin/slurmd -D -N "$n"
    started+=("$n")
  done
  for n in "${started[@]}"; do wait_ready "slurmd-$n" "$SB_READY_TIMEOUT" slurmd_ready "$n"; done
}

# Every process whose root directory is ROOT: what the stopped daemons left there (a batch job's
# slurmstepd and its tasks run in their own process groups, so stopping slurmd does not end them).
kill_root_processes() { # root
  local root p pids=()
  root=$(readlink -f "$1")
  for _ in $(seq 50); do
    pids=()
    for p in /proc/[0-9]*; do
      if [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ]; then pids+=("${p#/proc/}"); fi
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.1
  done
  log "warning: processes still running in $root after SIGKILL: ${pids[*]}"
}
