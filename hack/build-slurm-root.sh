#!/usr/bin/env bash
# Build a Debian root with Slurm >= 25.05 (external jobs) into $CACHE_DIR/slurm-root, once.
. "$(dirname "$0")/lib.sh"
require_root "building the Slurm root"
ROOT="$CACHE_DIR/slurm-root"
STAMP="$ROOT/.slurm-bridge-root-$SLURM_SUITE"
if [ -f "$STAMP" ]; then log "Slurm root ready: $ROOT ($(cat "$STAMP"))"; exit 0; fi
ensure_apt debootstrap
mirror=$(apt_mirror)
tmp="$CACHE_DIR/slurm-root.tmp"
rm -rf "$tmp"; mkdir -p "$CACHE_DIR"
log "debootstrap $SLURM_SUITE with $SLURM_PACKAGES into $ROOT (about a minute)"
debootstrap --variant=minbase --include="$SLURM_PACKAGES" "$SLURM_SUITE" "$tmp" "$mirror" > "$CACHE_DIR/debootstrap.log" 2>&1 \
  || { tail -n 20 "$CACHE_DIR/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE_DIR/debootstrap.log); check that the apt mirror serves '$SLURM_SUITE'"; }
ver=$(chroot "$tmp" dpkg-query -W -f '${Version}' slurmctld)
major=${ver%%.*}; rest=${ver#*.}; minor=${rest%%.*}
[ "$major" -gt 25 ] || { [ "$major" -eq 25 ] && [ "$minor" -ge 5 ]; } \
  || die "Slurm $ver from '$SLURM_SUITE' has no external jobs (need >= 25.05); set SLURM_SUITE in hack/versions.env"
echo "slurm $ver" > "$tmp/.slurm-bridge-root-$SLURM_SUITE"
rm -rf "$ROOT"; mv "$tmp" "$ROOT"
log "Slurm root ready: $ROOT (slurm $ver)"
