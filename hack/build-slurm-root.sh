#!/usr/bin/env bash
# Build the Debian roots the local Slurm runs in, once each: Slurm >= 25.05 (external jobs) with
# slurmdbd and slurmd into $SLURM_ROOT, and slurmdbd's MariaDB into $MARIADB_ROOT (`cluster`, the default);
# or (`old`) a Slurm too old for the bridge, for hack/old-slurm.sh. A root is rebuilt when its
# suite or package list in hack/versions.env changes (the stamp names both).
. "$(dirname "$0")/lib.sh"
require_root "building the Slurm roots"

bootstrap() { # root stamp suite packages : debootstrap into root unless its stamp is there
  local root=$1 stamp=$2 suite=$3 packages=$4 tmp="$1.tmp"
  if [ -f "$root/$stamp" ]; then log "root ready: $root ($(cat "$root/$stamp"))"; return 0; fi
  ensure_apt debootstrap
  # Never copy or delete a root whose /proc is mounted (a running cluster's): the copy follows it.
  ! mountpoint -q "$root/proc" 2>/dev/null || die "$root is in use (its /proc is mounted); run 'hack/cluster.sh down' first"
  rm -rf "$tmp"; mkdir -p "$CACHE_DIR"
  log "debootstrap $suite with $packages into $root (about a minute)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$tmp" "$(apt_mirror)" > "$CACHE_DIR/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE_DIR/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE_DIR/debootstrap.log); check that the apt mirror serves '$suite'"; }
  "${@:5}" "$tmp"
  rm -rf "$root"; mv "$tmp" "$root"
}

check_slurm() { # tmp-root : external jobs need Slurm >= 25.05
  local ver major rest minor
  ver=$(chroot "$1" dpkg-query -W -f '${Version}' slurmctld)
  major=${ver%%.*}; rest=${ver#*.}; minor=${rest%%.*}
  [ "$major" -gt 25 ] || { [ "$major" -eq 25 ] && [ "$minor" -ge 5 ]; } \
    || die "Slurm $ver from '$SLURM_SUITE' has no external jobs (need >= 25.05); set SLURM_SUITE in hack/versions.env"
  echo "slurm $ver" > "$1/$(slurm_root_stamp)"
}

check_mariadb() { # tmp-root
  echo "mariadb $(chroot "$1" dpkg-query -W -f '${Version}' mariadb-server)" > "$1/$(mariadb_root_stamp)"
}

check_old_slurm() { # tmp-root
  echo "slurm $(chroot "$1" dpkg-query -W -f '${Version}' slurmctld)" > "$1/$(old_slurm_root_stamp)"
}

case "${1:-cluster}" in
  cluster)
    bootstrap "$SLURM_ROOT" "$(slurm_root_stamp)" "$SLURM_SUITE" "$SLURM_PACKAGES" check_slurm
    bootstrap "$MARIADB_ROOT" "$(mariadb_root_stamp)" "$MARIADB_SUITE" "$MARIADB_PACKAGES" check_mariadb ;;
  old) bootstrap "$OLD_SLURM_ROOT" "$(old_slurm_root_stamp)" "$OLD_SLURM_SUITE" "$OLD_SLURM_PACKAGES" check_old_slurm ;;
  *) die "usage: hack/build-slurm-root.sh [cluster|old]" ;;
esac
