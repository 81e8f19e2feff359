#!/usr/bin/env bash
# README command (2): the whole test suite on a fresh machine — installs what it needs, builds (or
# reuses) the cached binaries, Slurm roots and images, then runs two tiers:
#
#   local  lint; the local cluster (hack/cluster.sh up); unit, integration, e2e and deployed tests
#   kind   the kind cluster (hack/kind.sh up: hybrid workers, Slurm inside); the deployed tests under
#          Helm 3 and Helm 4 and the hybrid-node tests (tests/kind) with SB_CLUSTER=kind; then
#          hack/kind.sh down, so nothing of it keeps running
#
# SB_TEST_TIERS="local kind" (the default) chooses tiers. Extra arguments replace each tier's
# test paths (pytest arguments). The exit status is the first failing tier's.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
require_root "hack/test.sh (the local Slurm runs in a chroot; kind runs on rootful podman)"
t0=$SECONDS
tiers=${SB_TEST_TIERS:-local kind}
for tier in $tiers; do
  case $tier in local | kind) ;; *) die "SB_TEST_TIERS=$tiers: unknown tier '$tier' (expected local, kind)" ;; esac
done
bash hack/setup-python.sh
# crun comes with podman unless runc was installed first; installed here either way, so that
# tests/integration/test_image_runtime.py always meets it (buildah prefers crun, which fails on
# hybrid cgroups: the project names its runtime, hack/lib.sh oci_runtime).
ensure_apt crun
# strace: tests/e2e/test_costs.py counts the programs slurmctld's hooks start per job.
ensure_apt strace
rc=0

tier_local() {
  local paths=("$@"); [ ${#paths[@]} -gt 0 ] || paths=(tests)
  bash hack/lint.sh
  bash hack/cluster.sh up
  log "local tier: setup done in $((SECONDS - t0))s; running pytest"
  .venv/bin/pytest "${paths[@]}"
}

tier_kind() {
  local t=$SECONDS r=0 paths=("$@") paths4=("$@")
  [ ${#paths[@]} -gt 0 ] || { paths=(tests/kind tests/deployed); paths4=(tests/deployed); }
  # Whatever happens, the kind cluster goes: it holds a few GB of memory and three containers.
  trap 'bash hack/kind.sh down >/dev/null 2>&1 || true' EXIT
  bash hack/kind.sh up || return 1
  log "kind tier: cluster up in $((SECONDS - t))s; running pytest (Helm 3: tests/kind and tests/deployed)"
  SB_CLUSTER=kind SB_HELM=3 .venv/bin/pytest "${paths[@]}" || r=$?
  log "kind tier: the deployed tests again under Helm 4"
  SB_CLUSTER=kind SB_HELM=4 .venv/bin/pytest "${paths4[@]}" || { [ $r -ne 0 ] || r=$?; }
  bash hack/kind.sh down
  trap - EXIT
  log "kind tier finished in $((SECONDS - t))s"
  return $r
}

for tier in $tiers; do
  set +e
  ( set -e; "tier_$tier" "$@" )
  r=$?
  set -e
  log "$tier tier: exit $r"
  [ $rc -ne 0 ] || rc=$r
done
log "tests finished in $((SECONDS - t0))s (exit $rc)"
exit $rc
