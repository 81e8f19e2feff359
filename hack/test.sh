#!/usr/bin/env bash
# README command (2): the whole test suite on a fresh machine — installs what it needs, builds
# (or reuses) the cached cluster binaries and Slurm root, starts the local cluster, then runs
# lint, unit, integration and e2e tests. Extra arguments go to pytest.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
require_root "hack/test.sh (the local Slurm runs in a chroot)"
t0=$SECONDS
bash hack/setup-python.sh
# crun comes with podman unless runc was installed first; installed here either way, so that
# tests/integration/test_image_runtime.py always meets it (buildah prefers crun, which fails on
# hybrid cgroups: the project names its runtime, hack/lib.sh oci_runtime).
ensure_apt crun
bash hack/lint.sh
bash hack/cluster.sh up
log "setup done in $((SECONDS - t0))s; running pytest"
set +e
.venv/bin/pytest "${@:-tests}"
rc=$?
set -e
log "tests finished in $((SECONDS - t0))s (pytest exit $rc)"
exit $rc
