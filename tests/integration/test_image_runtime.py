"""Image builds name their OCI runtime, so installing podman (which brings crun) cannot break them.

On a host with hybrid cgroups crun refuses every container ("cgroups in hybrid mode not
supported"), and buildah prefers crun once it is installed. hack/test.sh installs podman for the
kind tier, so crun is present here; this test runs a real RUN step through the same buildah
wrapper as the bridge image's build.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.harness import REPO

IMAGE_SH = REPO / "hack" / "image.sh"


def test_the_build_runtime_is_runc_unless_overridden() -> None:
    out = subprocess.run(["bash", str(IMAGE_SH), "runtime"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == shutil.which("runc")
    env = {**os.environ, "SB_OCI_RUNTIME": "no-such-runtime"}
    bad = subprocess.run(["bash", str(IMAGE_SH), "runtime"], capture_output=True, text=True, env=env)
    assert bad.returncode == 1
    assert "SB_OCI_RUNTIME=no-such-runtime is not an executable" in bad.stderr


def test_a_run_step_builds_with_crun_installed() -> None:
    assert shutil.which("crun"), (
        "crun is missing: this test checks that image builds still work once podman (which brings crun) "
        "is installed; hack/test.sh installs podman for the kind tier (apt-get install podman)"
    )
    proc = subprocess.run(["bash", str(IMAGE_SH), "selftest"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "a RUN step works with" in proc.stdout
