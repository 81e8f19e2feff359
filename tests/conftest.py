"""Shared fixtures: the real local cluster (started once per session, or reused) and per-test
namespaces. Unit tests use none of them and need no servers."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.harness import (
    BRIDGE_SH,
    DEPLOY_SH,
    MANAGED_LABEL,
    PrerequisiteMissing,
    SlurmEnv,
    clean_slate,
    cluster_minor,
    ensure_cluster,
    ensure_kind_cluster,
    log_tails,
    on_kind,
    run,
    slurm_env_from,
    wait_for,
)

LAYERS = ("unit", "integration", "e2e", "deployed", "kind")
# Folders of a layer named otherwise: tests/repo (the repository's own checks: chart, image, docs,
# scripts, benches, code shape) needs no servers, as the unit tests of the code in tests/unit.
FOLDER_LAYERS = {"repo": "unit"}
# The layers a session on each cluster runs (SB_CLUSTER, tests.harness.on_kind): the local cluster
# runs all but the kind layer; the kind tier runs the chart's tests (deployed) and the hybrid-node
# tests (tests/kind) on the kind cluster, where no local processes exist for integration and e2e.
LOCAL_ONLY = ("integration", "e2e")
KIND_ONLY = ("kind",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by directory, so `-m unit|integration|e2e|deployed|kind` selects a layer, and run
    the deployed tier last: it replaces the bridge processes the e2e tests use with the Helm release.

    Layers of the other cluster are deselected, and the summary says how many: `pytest tests` is
    the local cluster's run, `SB_CLUSTER=kind pytest tests/deployed tests/kind` the kind tier
    (hack/test.sh runs both).

    Tests of a feature newer than the local cluster's Kubernetes (``@pytest.mark.kubernetes(37)``)
    are deselected, and the summary says how many: on an older version of the matrix there is
    nothing of it to test. The default version (CI's) has every feature, so nothing is left out there."""
    for item in items:
        layer = _layer(item)
        if layer:
            item.add_marker(getattr(pytest.mark, layer))
    items.sort(key=lambda item: _layer(item) == "deployed")
    other = LOCAL_ONLY if on_kind() else KIND_ONLY
    elsewhere = [i for i in items if any(i.get_closest_marker(layer) for layer in other)]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [i for i in items if i not in elsewhere]
    needs = {id(i): m.args[0] for i in items if (m := i.get_closest_marker("kubernetes")) is not None}
    if needs:
        minor = cluster_minor()
        newer = [i for i in items if needs.get(id(i), 0) > minor]
        if newer:
            config.hook.pytest_deselected(items=newer)
            items[:] = [i for i in items if needs.get(id(i), 0) <= minor]


def _layer(item: pytest.Item) -> str | None:
    """The layer of a test: its directory under tests/ (tests/repo's is unit; not any directory of
    that name above the repository, which a clone into .../kind/... would have)."""
    path = Path(str(item.fspath))
    try:
        first = path.relative_to(Path(__file__).resolve().parent).parts[0]
    except ValueError:
        return None
    first = FOLDER_LAYERS.get(first, first)
    return first if first in LAYERS else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed and call.when in ("call", "setup") and _CLUSTER.get("state_dir"):
        for name, tail in log_tails(Path(_CLUSTER["state_dir"])).items():
            report.sections.append((f"log tail: {name}", tail))
    return report


_CLUSTER: dict[str, str] = {}


@pytest.fixture(scope="session")
def cluster() -> dict[str, str]:
    """The cluster the session runs against: the local one, or kind's (SB_CLUSTER=kind)."""
    env = ensure_kind_cluster() if on_kind() else ensure_cluster()
    if on_kind():
        # Pods of tests/e2e/util.make_pod run this image there: every kind node has it, nothing is pulled.
        os.environ["SB_WORKLOAD_IMAGE"] = env["SB_WORKLOAD_IMAGE"]
    clean_slate(env)
    _CLUSTER["state_dir"] = env["SB_STATE_DIR"]
    return env


@pytest.fixture(scope="session")
def bridge(cluster: dict[str, str]) -> dict[str, str]:
    """The bridge's four processes running against the local cluster (started once, reused).

    A Helm release of the bridge (the demo's, or a deployed-tier run that stopped early) uses the
    same names, so it is uninstalled first."""
    if on_kind():
        raise PrerequisiteMissing("the process bridge (hack/bridge.sh) runs against the local cluster, not kind")
    proc = run(["bash", str(DEPLOY_SH), "uninstall"], check=False, timeout=300)
    if proc.returncode != 0:
        raise PrerequisiteMissing(f"`hack/deploy.sh uninstall` failed:\n{proc.stderr[-3000:]}")
    proc = run(["bash", str(BRIDGE_SH), "up"], check=False, timeout=300)
    if proc.returncode != 0:
        raise PrerequisiteMissing(f"`hack/bridge.sh up` failed:\n{proc.stderr[-3000:]}")
    return cluster


@pytest.fixture(scope="session")
def slurm_env(cluster: dict[str, str]) -> SlurmEnv:
    return slurm_env_from(cluster)


@pytest.fixture(scope="session")
def api_client(cluster: dict[str, str]) -> Iterator[k8s.ApiClient]:
    c = k8s_config.new_client_from_config(config_file=cluster["KUBECONFIG"])
    yield c
    c.close()


@pytest.fixture(scope="session")
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch(api_client: k8s.ApiClient) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(api_client)


@pytest.fixture(scope="session")
def custom(api_client: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api_client)


def _make_namespace(core: k8s.CoreV1Api, request: pytest.FixtureRequest, labels: dict[str, str]) -> str:
    base = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")
    name = f"{base[:40].strip('-')}-{secrets.token_hex(3)}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels=labels)))
    # Pods are refused until the ServiceAccount controller has made the default account.
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30, f"default SA in {name}")
    return name


@pytest.fixture
def namespace(core: k8s.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace the bridge does not manage."""
    name = _make_namespace(core, request, {})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def managed_namespace(core: k8s.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace the bridge manages (selected by label)."""
    name = _make_namespace(core, request, {MANAGED_LABEL: "true"})
    yield name
    core.delete_namespace(name)
