"""The Helm chart against the real local apiserver: a server-side dry run of its manifests, in
several variants. The chart installed and running for real is the deployed tier (tests/deployed/).

The local bridge processes own the webhook configurations named ``slurm-bridge``, so every release
here has its own full name, and its webhook configurations select only namespaces carrying a
label no namespace has."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.repo.test_chart import CHART, helm, helm_binary

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def kube_version(api_client: k8s.ApiClient) -> str:
    version: str = k8s.VersionApi(api_client).get_code().git_version
    return version


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    label: str  # the only namespace label its webhook configurations select
    env: dict[str, str]


@pytest.fixture
def release(core: k8s.CoreV1Api, cluster: dict[str, str]) -> Iterator[Release]:
    """A fresh namespace and release name; whatever the test installed is removed afterwards."""
    helm_binary()  # fail early, naming what is missing
    tag = secrets.token_hex(3)
    rel = Release(f"sbh-{tag}", f"helm-{tag}", f"helm-test.slurm-bridge.local/{tag}",
                  {**os.environ, "KUBECONFIG": cluster["KUBECONFIG"]})  # fmt: skip
    yield rel
    helm("uninstall", rel.name, "-n", rel.namespace, "--wait", "--timeout", "60s", env=rel.env)
    try:
        core.delete_namespace(rel.namespace)
    except ApiException as e:
        if e.status != 404:
            raise


def _values(rel: Release) -> Obj:
    return {
        "fullnameOverride": rel.name,
        "config": {"managedNamespaceSelector": {"matchLabels": {rel.label: "true"}}},
        "slurmJwt": {"token": "not-a-real-token"},
    }


def _helm(rel: Release, *args: str, values: Obj | None = None, tmp: Path | None = None) -> str:
    extra: list[str] = []
    if values is not None:
        assert tmp is not None
        f = tmp / f"values-{secrets.token_hex(2)}.yaml"
        f.write_text(json.dumps(values))
        extra = ["--values", str(f)]
    proc = helm(*args, *extra, env=rel.env, timeout=300)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
    return proc.stdout


def _kubectl(cluster: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", cluster["KUBECONFIG"], *args],
        input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_rendered_chart_is_accepted_by_the_apiserver(
    core: k8s.CoreV1Api, cluster: dict[str, str], release: Release, kube_version: str, tmp_path: Path
) -> None:
    ns = release.namespace
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    for variant in ({}, {"operator": {"replicas": 2}, "config": {"managedNamespaces": ["x"]}}):
        values = _values(release) | variant
        manifest = _helm(release, "template", release.name, str(CHART), "-n", ns, "--include-crds",
                         "--kube-version", kube_version, values=values, tmp=tmp_path)  # fmt: skip
        kinds = {d["kind"] for d in yaml.safe_load_all(manifest) if d}
        assert {"CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration"} <= kinds
        proc = _kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=manifest)
        assert proc.returncode == 0, f"the apiserver refused the chart's manifests:\n{proc.stderr}"
        assert "(server dry run)" in proc.stdout
