# hack/cluster.sh's Slurm, in its Debian root (hack/build-slurm-root.sh): munged, accounting
# (hack/cluster/accounting.sh), slurmctld, slurmrestd, and the hybrid nodes' slurmd
# (hack/cluster/slurmd.sh). The configuration files come from hack/cluster/slurm-conf.sh. Sourced
# by hack/cluster.sh; defines functions only.

in_root() { chroot "$SLURM_ROOT" "$@"; }

# Every Slurm configuration file of the root, from hack/cluster/slurm-conf.sh (slurmdbd.conf is
# written with the database password, by write_slurmdbd_conf).
write_slurm_files() {
  local etc="$SLURM_ROOT/etc/slurm"
  install_notify_script
  slurm_conf > "$etc/slurm.conf"
  gres_conf > "$etc/gres.conf"
  topology_yaml > "$etc/topology.yaml"
  python3 -P "$HACK_DIR/cluster/gpus.py" device-files "$SLURM_ROOT" || die "creating the hybrid nodes' stand-in GPU device files failed"
  cgroup_conf > "$etc/cgroup.conf"
  install_handoff_script
}

# The handoff script (slurm-hooks/, docs/colocation.md), slurmctld's EpilogSlurmctld and
# PrologSlurmctld at the path slurm.conf names (hack/slurm-policy.conf), its configuration file next
# to it (root's, mode 0644: the script does nothing otherwise) naming the local bridge (hack/bridge.sh:
# bridgeId slurm-bridge, the default) and the nodes where pods and native jobs share (the slurmd
# nodes: hack/cluster/slurm-conf.sh's handoff_conf) and the notify hook it runs at every job's start
# and end (slurm.conf's one PrologSlurmctld and EpilogSlurmctld), and its log and state directories,
# SlurmUser's, who runs it.
install_handoff_script() {
  local etc="$SLURM_ROOT/etc/slurm" shared
  shared=$( { hybrid_node_names; missized_node_names; echo "$SB_REAL_NODE"; } | paste -sd, -)
  install -o root -g root -m 0755 "$REPO_DIR/slurm-hooks/slurm-bridge-handoff.sh" "$etc/slurm-bridge-handoff.sh"
  handoff_conf nodes="$shared" notify=/etc/slurm/slurm-bridge-notify > "$etc/slurm-bridge-handoff.conf.new"
  chown root:root "$etc/slurm-bridge-handoff.conf.new"; chmod 0644 "$etc/slurm-bridge-handoff.conf.new"
  mv -f "$etc/slurm-bridge-handoff.conf.new" "$etc/slurm-bridge-handoff.conf"
  mkdir -p "$SLURM_ROOT/var/log/slurm-bridge" "$SLURM_ROOT/var/spool/slurm-bridge"
  chmod 0755 "$SLURM_ROOT/var/spool/slurm-bridge"
  in_root chown slurm:slurm /var/log/slurm-bridge /var/spool/slurm-bridge
}

# slurmctld's hook that tells the bridge of job starts and ends (slurm-hooks/, docs/configuration.md#slurm-hooks):
# its compiled form (slurm-bridge-notify.c) at the path the handoff's configuration names (its
# NOTIFY: the handoff script runs it), built static on this machine (the Slurm root has its own
# libc and no compiler; the local bridge's URL is an address, so no name lookup) into the cache,
# once per version of the source; the script beside it, as a site without a compiler would run
# it. Its URL is the bridge's to write (hack/bridge.sh, hack/deploy.sh): without it, it does nothing.
install_notify_script() {
  local src="$REPO_DIR/slurm-hooks/slurm-bridge-notify.c" out
  out="$CACHE_DIR/notify-hook/slurm-bridge-notify-$(sha1sum < "$src" | cut -c1-12)"
  ensure_apt gcc libc6-dev   # libc6-dev: the static libc; the unit tests build the hook too
  if [ ! -x "$out" ]; then
    mkdir -p "${out%/*}"
    # (glibc's linker note on getaddrinfo in a static program is expected: the URL is an address)
    gcc -O2 -static -o "$out.tmp" "$src" 2> "$out.log" || { cat "$out.log" >&2; die "compiling $src failed (gcc -O2 -static)"; }
    mv -f "$out.tmp" "$out"
  fi
  install -o root -g root -m 0755 "$out" "$SLURM_ROOT/etc/slurm/slurm-bridge-notify"
  install -m 0755 "$REPO_DIR/slurm-hooks/slurm-bridge-notify.sh" "$SLURM_ROOT/etc/slurm/slurm-bridge-notify.sh"
}

# A fresh slurmctld state: its state directory, the slurmd spools, the JWT key, the config files.
reset_slurm_state() {
  local sdir="$SLURM_ROOT$SLURM_STATE_IN_ROOT"
  rm -rf "$sdir"; mkdir -p "$sdir/state" "$sdir/spool"
  # Job ids start again at 1: the handoff script's log and its per-job markers (STATE_DIR/<id>.done)
  # name the last state's jobs, and a marker would be taken for a new job of the same id.
  rm -rf "$SLURM_ROOT/var/log/slurm-bridge" "$SLURM_ROOT/var/spool/slurm-bridge"
  head -c 32 /dev/urandom > "$sdir/jwt.key"
  # The shared secret of slurmctld's hook and the bridge (SlurmUser reads it; slurmHookTokenFile).
  head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$sdir/bridge-hook.token"
  in_root chown -R slurm:slurm "$SLURM_STATE_IN_ROOT"
  chmod 600 "$sdir/jwt.key" "$sdir/bridge-hook.token"
  write_slurm_files
}

up_munged() {
  mkdir -p "$SLURM_ROOT/run/munge"; in_root chown munge:munge /run/munge /etc/munge /etc/munge/munge.key /var/lib/munge /var/log/munge
  start munged chroot --userspec=munge:munge "$SLURM_ROOT" /usr/sbin/munged -F
  wait_ready munged "$SB_READY_TIMEOUT" test -S "$SLURM_ROOT/run/munge/munge.socket.2"
}

up_slurmctld() {
  alive slurmctld || check_port slurmctld "$SB_SLURMCTLD_PORT" SB_SLURMCTLD_PORT
  start slurmctld chroot "$SLURM_ROOT" /usr/sbin/slurmctld -D -i
  wait_ready slurmctld "$SB_READY_TIMEOUT" in_root scontrol ping
  mkdir -p "$(dirname "$JWT_FILE")"
  # Long-lived admin token for the bridge; the file is what the bridge and tests read.
  in_root scontrol token username="$SB_BRIDGE_SLURM_USER" lifespan=2592000 | sed -n 's/^SLURM_JWT=//p' > "$JWT_FILE.tmp" \
    && [ -s "$JWT_FILE.tmp" ] || die "scontrol token failed; see $LOGS/slurmctld.log"
  chmod 600 "$JWT_FILE.tmp"; mv "$JWT_FILE.tmp" "$JWT_FILE"
}

up_slurmrestd() {
  alive slurmrestd || check_port slurmrestd "$SB_SLURMRESTD_PORT" SB_SLURMRESTD_PORT
  # On loopback for host processes, and on the pod network's host address for the bridge's pods.
  start slurmrestd chroot "$SLURM_ROOT" env SLURM_JWT=daemon /usr/sbin/slurmrestd -a rest_auth/jwt \
    -s openapi/slurmctld,openapi/slurmdbd -u 65534 -g 65534 "127.0.0.1:$SB_SLURMRESTD_PORT" "$SB_HOST_IP:$SB_SLURMRESTD_PORT"
  wait_ready slurmrestd "$SB_READY_TIMEOUT" curl -sf -H "X-SLURM-USER-TOKEN: $(cat "$JWT_FILE")" \
    "http://127.0.0.1:$SB_SLURMRESTD_PORT/slurm/v0.0.44/ping"
}

# Start what is not running, in dependency order; a running slurmctld keeps its state and config.
up_slurm() {
  [ -f "$SLURM_ROOT/$(slurm_root_stamp)" ] && [ -f "$MARIADB_ROOT/$(mariadb_root_stamp)" ] \
    || die "the Slurm or MariaDB root is missing or out of date; run hack/build-slurm-root.sh"
  require_root "starting Slurm (chroot)"
  cp /etc/hosts "$SLURM_ROOT/etc/hosts"
  mountpoint -q "$SLURM_ROOT/proc" || mount -t proc proc "$SLURM_ROOT/proc" || die "cannot mount /proc in $SLURM_ROOT"
  alive slurmctld || reset_slurm_state
  install_handoff_script   # the script of this worktree (a running slurmctld reads it at each job end)
  install_notify_script   # the hook of this worktree (a running slurmctld runs it at each job start and end)
  up_munged
  up_accounting
  up_slurmctld
  up_slurmrestd
  up_slurmds
}

# Every Slurm process of the cluster, stopped; then what they left in the root (batch jobs' steps).
down_slurm() {
  local n
  for n in $(slurmd_node_names); do stop "slurmd-$n"; done
  for n in slurmrestd slurmctld slurmdbd mariadb munged; do stop "$n"; done
  kill_root_processes "$SLURM_ROOT"
  if mountpoint -q "$SLURM_ROOT/proc" 2>/dev/null; then umount "$SLURM_ROOT/proc" || umount -l "$SLURM_ROOT/proc" || true; fi
}
