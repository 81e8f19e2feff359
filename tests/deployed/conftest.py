"""The deployed tier's fixture: the bridge installed as users install it (hack/deploy.sh: the image
built from the Dockerfile, `helm install` of the chart, a real JWT Secret), its pods on the local
cluster's real node. The process bridge of the e2e tier is stopped first: both use the same names.

With SB_CLUSTER=kind the same tests run on the kind cluster: hack/kind.sh install|uninstall, its
values (hack/kind/values.yaml) and the slurmrestd of the cluster's own Slurm."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.harness import BRIDGE_SH, DEPLOY_SH, KIND_SH, REPO, PrerequisiteMissing, on_kind, run, wait_for


@dataclass(frozen=True)
class Deployed:
    release: str
    namespace: str
    image_tag: str
    values: str
    env: dict[str, str]  # os.environ with the cluster's KUBECONFIG, SLURM_REST_URL_FOR_PODS, ...

    def kubectl(self, *args: str, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=self.env
        )

    def helm_args(self, *extra: str) -> list[str]:
        """The install's arguments (hack/deploy.sh), for upgrades that change one thing."""
        return [
            self.release, str(REPO / "helm" / "slurm-bridge"), "--namespace", self.namespace,
            "--values", self.values, "--set", f"image.tag={self.image_tag}",
            "--set", f"config.slurmRestApi={self.env['SLURM_REST_URL_FOR_PODS']}", *extra,
        ]  # fmt: skip


def deploy(action: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    """`install` or `uninstall` of the release, by hack/deploy.sh or (kind) hack/kind.sh."""
    return run(["bash", str(KIND_SH if on_kind() else DEPLOY_SH), action], check=False, timeout=timeout)


def deploy_env() -> dict[str, str]:
    out = run(["bash", str(KIND_SH), "deploy-env"] if on_kind() else ["bash", str(DEPLOY_SH), "env"]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def none_left_to_finalize(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi) -> bool:
    """No PlaceholderJob is left in a namespace being deleted (the tests' namespaces)."""
    leaving = {n.metadata.name for n in core.list_namespace().items if n.metadata.deletion_timestamp}
    items = custom.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL)["items"]
    return not [p for p in items if p["metadata"]["namespace"] in leaving]


@pytest.fixture(scope="session")
def deployed(cluster: dict[str, str], core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi) -> Iterator[Deployed]:
    """The Helm release, installed once for the tier; uninstalled at the end."""
    if not on_kind():
        stopped = run(["bash", str(BRIDGE_SH), "down"], check=False, timeout=120)
        if stopped.returncode != 0:
            raise PrerequisiteMissing(f"`hack/bridge.sh down` failed:\n{stopped.stderr[-3000:]}")
    proc = deploy("install")
    if proc.returncode != 0:
        raise PrerequisiteMissing(
            f"`hack/{'kind' if on_kind() else 'deploy'}.sh install` failed:\n{proc.stderr[-5000:]}"
        )
    env = deploy_env()
    yield Deployed(
        release=env["RELEASE"],
        namespace=env["RELEASE_NAMESPACE"],
        image_tag=env["IMAGE_TAG"],
        values=env["VALUES"],
        env={**os.environ, **cluster},
    )
    # PlaceholderJobs of deleted test namespaces need the operator for their finalizer.
    wait_for(lambda: none_left_to_finalize(core, custom), 120, "the test namespaces' PlaceholderJobs to be finalized")
    proc = deploy("uninstall", timeout=300)
    assert proc.returncode == 0, f"the uninstall failed:\n{proc.stderr[-3000:]}"
