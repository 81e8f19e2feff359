#!/usr/bin/env bash
# A real Slurm too old for the bridge (24.11 from Debian trixie: no external jobs, REST API
# v0.0.40-42), so a test can show that the operator refuses it by name (docs/compatibility.md).
# Its own root, munged, slurmctld and slurmrestd on 127.0.0.1; nothing of the local cluster's.
#
#   hack/old-slurm.sh up     build the root once, start it; prints SLURM_REST_URL and SLURM_JWT_FILE
#   hack/old-slurm.sh down   stop it and remove its state
. "$(dirname "$0")/lib.sh"
# shellcheck source=cluster/slurm-conf.sh
. "$HACK_DIR/cluster/slurm-conf.sh"   # slurm_conf_common: the lines every Slurm of the project shares
require_root "hack/old-slurm.sh (Slurm runs in a chroot)"
ROOT=$OLD_SLURM_ROOT
SDIR=/var/lib/slurm-bridge-old          # inside the root
JWT="$STATE_DIR/old-slurm/jwt"
in_old() { chroot "$ROOT" "$@"; }

cmd_up() {
  bash "$HACK_DIR/build-slurm-root.sh" old
  cp /etc/hosts "$ROOT/etc/hosts"
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc" || die "cannot mount /proc in $ROOT"
  if ! alive old-slurmctld; then
    check_port old-slurmctld "$SB_OLD_SLURMCTLD_PORT" SB_OLD_SLURMCTLD_PORT
    rm -rf "${ROOT:?}$SDIR"; mkdir -p "$ROOT$SDIR/state" "$ROOT$SDIR/spool"
    head -c 32 /dev/urandom > "$ROOT$SDIR/jwt.key"
    in_old chown -R slurm:slurm "$SDIR"; chmod 600 "$ROOT$SDIR/jwt.key"
    {
      echo "# Written by hack/old-slurm.sh: just enough for slurmrestd to answer."
      slurm_conf_common slurm-bridge-old localhost "$SB_OLD_SLURMCTLD_PORT" "$SDIR"
      echo "NodeName=old1 NodeHostname=localhost CPUs=1 State=UNKNOWN"
      echo "PartitionName=old Nodes=old1 Default=YES State=UP"
    } > "$ROOT/etc/slurm/slurm.conf"
  fi
  mkdir -p "$ROOT/run/munge"; in_old chown munge:munge /run/munge /etc/munge /etc/munge/munge.key /var/lib/munge /var/log/munge
  start old-munged chroot --userspec=munge:munge "$ROOT" /usr/sbin/munged -F
  wait_ready old-munged "$SB_READY_TIMEOUT" test -S "$ROOT/run/munge/munge.socket.2"
  start old-slurmctld chroot "$ROOT" /usr/sbin/slurmctld -D -i
  wait_ready old-slurmctld "$SB_READY_TIMEOUT" in_old scontrol ping
  mkdir -p "$(dirname "$JWT")"
  in_old scontrol token username=slurm lifespan=86400 | sed -n 's/^SLURM_JWT=//p' > "$JWT.tmp" && [ -s "$JWT.tmp" ] \
    || die "scontrol token failed; see $LOGS/old-slurmctld.log"
  chmod 600 "$JWT.tmp"; mv "$JWT.tmp" "$JWT"
  alive old-slurmrestd || check_port old-slurmrestd "$SB_OLD_SLURMRESTD_PORT" SB_OLD_SLURMRESTD_PORT
  start old-slurmrestd chroot "$ROOT" env SLURM_JWT=daemon /usr/sbin/slurmrestd -a rest_auth/jwt \
    -s openapi/slurmctld -u 65534 -g 65534 "127.0.0.1:$SB_OLD_SLURMRESTD_PORT"
  wait_ready old-slurmrestd "$SB_READY_TIMEOUT" curl -sf -o /dev/null -H "X-SLURM-USER-TOKEN: $(cat "$JWT")" \
    "http://127.0.0.1:$SB_OLD_SLURMRESTD_PORT/slurm/v0.0.42/ping"
  echo "SLURM_REST_URL=http://127.0.0.1:$SB_OLD_SLURMRESTD_PORT"
  echo "SLURM_JWT_FILE=$JWT"
  echo "SLURM_RELEASE=$(cat "$ROOT/$(old_slurm_root_stamp)")"
}

cmd_down() {
  local n
  for n in old-slurmrestd old-slurmctld old-munged; do stop "$n"; done
  if mountpoint -q "$ROOT/proc" 2>/dev/null; then umount "$ROOT/proc" || umount -l "$ROOT/proc" || true; fi
  rm -rf "${ROOT:?}$SDIR" "$STATE_DIR/old-slurm"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  *) die "usage: hack/old-slurm.sh up|down" ;;
esac
