"""The Helm chart against the real local apiserver: server-side dry run of its manifests, then
install, upgrade (a config change rolls the Deployments) and uninstall.

The local bridge processes own the webhook configurations named ``slurm-bridge``, so every release
here has its own full name, and its webhook configurations select only namespaces carrying a
label no namespace has: no other test's pod ever reaches the (simulated, never answering) chart
webhook. kwok runs no containers, so the assertions are on the objects, not on the processes."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.harness import wait_for
from tests.unit.test_chart import CHART, COMPONENTS, helm, helm_binary

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


def _deployments(apps: k8s.AppsV1Api, ns: str) -> dict[str, Any]:
    return {d.metadata.name: d for d in apps.list_namespaced_deployment(ns).items}


def _checksums(apps: k8s.AppsV1Api, ns: str, name: str) -> dict[str, str]:
    return {
        c: (_deployments(apps, ns)[f"{name}-{c}"].spec.template.metadata.annotations or {})["checksum/config"]
        for c in COMPONENTS
    }


def test_install_upgrade_uninstall(
    api_client: k8s.ApiClient, core: k8s.CoreV1Api, release: Release, tmp_path: Path
) -> None:
    name, ns = release.name, release.namespace
    apps = k8s.AppsV1Api(api_client)
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    admission = k8s.AdmissionregistrationV1Api(api_client)
    values = _values(release)
    out = _helm(release, "install", name, str(CHART), "-n", ns, "--create-namespace", values=values, tmp=tmp_path)
    assert "STATUS: deployed" in out
    assert "NOTES:" in out and "placeholderjobs" in out, "NOTES.txt tells how to start"

    # Everything is there: the four Deployments with their pods requested, Services, config.
    deployments = wait_for(
        lambda: (d := _deployments(apps, ns)) and all(
            x.status.observed_generation == x.metadata.generation and (x.status.replicas or 0) >= 1
            for x in d.values()) and d,
        60, "the chart's Deployments to be reconciled",
    )  # fmt: skip
    assert sorted(deployments) == sorted(f"{name}-{c}" for c in COMPONENTS)
    assert {s.metadata.name for s in core.list_namespaced_service(ns).items} >= {f"{name}-webhook", f"{name}-extender"}
    cm = core.read_namespaced_config_map(f"{name}-config", ns)
    assert f"system:serviceaccount:{ns}:{name}-operator" in cm.data["config.yaml"]
    mutating = admission.read_mutating_webhook_configuration(name)
    assert mutating.webhooks[0].namespace_selector.match_labels == {release.label: "true"}
    assert mutating.webhooks[0].failure_policy == "Fail"
    ca_before = mutating.webhooks[0].client_config.ca_bundle
    secret = core.read_namespaced_secret(f"{name}-webhook-tls", ns)
    assert secret.data["ca.crt"] == ca_before
    assert rbac.read_cluster_role(f"{name}-operator").rules
    crd = k8s.ApiextensionsV1Api(api_client).read_custom_resource_definition("placeholderjobs.slinky.slurm.net")
    assert crd.spec.names.short_names == ["phj"]

    # A changed config value rolls the components that read it (checksum annotation).
    before = _checksums(apps, ns, name)
    values["config"]["pollPeriodSeconds"] = 0.5
    out = _helm(release, "upgrade", name, str(CHART), "-n", ns, values=values, tmp=tmp_path)
    assert "STATUS: deployed" in out
    after = _checksums(apps, ns, name)
    for c in ("operator", "webhook", "extender"):
        assert after[c] != before[c], f"{c}: the pod template's checksum/config did not change"
    assert after["scheduler"] == before["scheduler"], "the scheduler does not read config.yaml"
    wait_for(
        lambda: len(apps.list_namespaced_replica_set(
            ns, label_selector=f"app.kubernetes.io/instance={name},app.kubernetes.io/component=operator").items) == 2,
        60, "a second ReplicaSet of the operator (the rollout)",
    )  # fmt: skip
    assert "pollPeriodSeconds: 0.5" in core.read_namespaced_config_map(f"{name}-config", ns).data["config.yaml"]
    # The generated CA is kept, so the registered caBundle stays valid.
    assert admission.read_mutating_webhook_configuration(name).webhooks[0].client_config.ca_bundle == ca_before

    # An upgrade with the same values rolls nothing.
    _helm(release, "upgrade", name, str(CHART), "-n", ns, values=values, tmp=tmp_path)
    assert _checksums(apps, ns, name) == after

    _helm(release, "uninstall", name, "-n", ns, "--wait", "--timeout", "120s")
    gone: list[Callable[[], object]] = [
        lambda: admission.read_mutating_webhook_configuration(name),
        lambda: admission.read_validating_webhook_configuration(name),
        lambda: rbac.read_cluster_role(f"{name}-operator"),
        lambda: rbac.read_cluster_role_binding(f"{name}-scheduler-as-kube-scheduler"),
        lambda: rbac.read_namespaced_role_binding(f"{name}-scheduler-auth-reader", "kube-system"),
        lambda: apps.read_namespaced_deployment(f"{name}-operator", ns),
    ]
    for read in gone:
        with pytest.raises(ApiException) as err:
            read()
        assert err.value.status == 404
    # The CRD stays (Helm never deletes crds/): PlaceholderJobs outlive a reinstall.
    k8s.ApiextensionsV1Api(api_client).read_custom_resource_definition("placeholderjobs.slinky.slurm.net")
