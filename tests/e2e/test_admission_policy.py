"""A plain pod handed to the bridge inside the API server (webhook/podpolicy.py), on the local
cluster: hack/bridge.sh applies the MutatingAdmissionPolicy where Kubernetes serves it (>= 1.36).

Each pod of the table is created (server-side dry run) in a namespace the bridge does not manage
(kube-system, as the DaemonSet controller, which the node guard lets tolerate the managed-node
taint), which gives the pod as the API server defaults it and nothing else, and in a managed one. The
managed one must be exactly what webhook/mutate.py's ``mutate_pod`` makes of the defaulted pod,
whichever of the policy and the webhook made it; the webhook's own counter says which did: no
review for a plain pod, one for every other.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from slurm_bridge import names
from slurm_bridge.webhook import podpolicy
from slurm_bridge.webhook.mutate import mutate_pod
from slurm_bridge.webhook.nodeguard import DAEMON_SET_CONTROLLER
from tests.e2e.util import make_pod
from tests.harness import PrerequisiteMissing, wait_for

pytestmark = [pytest.mark.usefixtures("bridge"), pytest.mark.kubernetes(podpolicy.FIRST_MINOR)]
Obj = dict[str, Any]
SCHEDULER = "slurm-bridge"
KEY = names.TAINT_MANAGED_NODE
MUTATE = 'slurm_bridge_webhook_admissions_total{endpoint="mutate",operation="CREATE",result="allowed"}'


def reviews(cluster: dict[str, str]) -> float:
    """The webhook's mutating reviews so far (its /metrics; hack/bridge.sh's port and CA)."""
    port_file = Path(cluster["SB_STATE_DIR"]) / "bridge-webhook.port"
    if not port_file.is_file():
        raise PrerequisiteMissing(f"{port_file} is missing: the webhook is not running (hack/bridge.sh up)")
    port = port_file.read_text().strip()
    text = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=False, timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(MUTATE))


def _spec(**changes: Any) -> Callable[[Obj], None]:
    def change(pod: Obj) -> None:
        pod["spec"].update(copy.deepcopy(changes))

    return change


def _container(**changes: Any) -> Callable[[Obj], None]:
    def change(pod: Obj) -> None:
        pod["spec"]["containers"][0].update(copy.deepcopy(changes))

    return change


TOLERATION = {"key": KEY, "operator": "Equal", "value": SCHEDULER, "effect": names.TAINT_MANAGED_NODE_EFFECT}
# name -> (what changes the table's pod, whether the policy hands it over without a review)
CASES: dict[str, tuple[Callable[[Obj], None], bool]] = {
    "plain": (lambda pod: None, True),
    "no resources at all": (_container(resources={}), True),
    "hugepages and ephemeral storage": (
        _container(resources={"limits": {"cpu": "1", "memory": "64Mi", "hugepages-2Mi": "4Mi",
                                         "ephemeral-storage": "1Gi"}}),
        True,
    ),
    "an init container": (
        _spec(initContainers=[{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]), True
    ),
    "its own unrelated toleration": (_spec(tolerations=[{"key": "x", "operator": "Exists"}]), True),
    "tolerates every taint already": (_spec(tolerations=[{"operator": "Exists"}]), True),
    "tolerates the taint already": (_spec(tolerations=[dict(TOLERATION)]), True),
    "tolerates it for a while only": (_spec(tolerations=[{**TOLERATION, "tolerationSeconds": 30}]), True),
    "another scheduling gate": (_spec(schedulingGates=[{"name": "example.com/wait"}]), True),
    "the bridge's gate already": (_spec(schedulingGates=[{"name": names.SCHEDULING_GATE}]), True),
    "the bridge's schedulerName": (_spec(schedulerName=SCHEDULER), True),
    "placement fields": (_spec(nodeSelector={"kubernetes.io/os": "linux"}), True),
    "a nodeName": (_spec(nodeName="node-that-is-not-there"), False),
    "a GPU of the device plugin": (_container(resources={"limits": {"nvidia.com/gpu": "1"}}), False),
    "every change made already": (
        _spec(schedulerName=SCHEDULER, schedulingGates=[{"name": names.SCHEDULING_GATE}],
              tolerations=[dict(TOLERATION)]),
        True,
    ),
}  # fmt: skip


def _dry_run(core: k8s.CoreV1Api, ns: str, pod: Obj) -> Obj:
    created = core.api_client.sanitize_for_serialization(core.create_namespaced_pod(ns, pod, dry_run="All"))
    assert isinstance(created, dict)
    return created


def _comparable(value: Any) -> Any:
    """Containers without their volume mounts: the service account's token volume has a new random
    name in every create."""
    if isinstance(value, list):
        return [{k: v for k, v in c.items() if k != "volumeMounts"} if isinstance(c, dict) else c for c in value]
    return value


@pytest.fixture(scope="module")
def as_daemon_sets(cluster: dict[str, str]) -> Iterator[k8s.CoreV1Api]:
    """The API as the DaemonSet controller (impersonated), whose pods in kube-system the node guard
    admits whatever they tolerate."""
    client = k8s_config.new_client_from_config(config_file=cluster["KUBECONFIG"])
    client.set_default_header("Impersonate-User", DAEMON_SET_CONTROLLER)
    yield k8s.CoreV1Api(client)
    client.close()


@pytest.fixture(scope="module")
def policy_in_force(core: k8s.CoreV1Api, cluster: dict[str, str]) -> None:
    """The API server compiles a new policy within a second or two: wait until a plain pod is
    handed over by it (a namespace of its own, made and deleted here)."""
    name = "sb-policy-probe"
    core.create_namespace({"metadata": {"name": name, "labels": {"slurm-bridge.local/managed": "true"}}})
    try:

        def handed_over() -> bool:
            before = reviews(cluster)
            gates = _dry_run(core, name, make_pod("probe"))["spec"].get("schedulingGates") or []
            return any(g["name"] == names.SCHEDULING_GATE for g in gates) and reviews(cluster) == before

        wait_for(handed_over, 30, "the pod policy to hand a plain pod to the bridge without a webhook review")
    finally:
        core.delete_namespace(name)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_policy_makes_what_the_webhook_makes(
    core: k8s.CoreV1Api,
    as_daemon_sets: k8s.CoreV1Api,
    cluster: dict[str, str],
    managed_namespace: str,
    policy_in_force: None,
    case: str,
) -> None:
    change, handed_over = CASES[case]
    pod = make_pod("p")
    change(pod)
    defaulted = _dry_run(as_daemon_sets, "kube-system", pod)
    # Untouched outside the managed namespaces.
    assert defaulted["spec"]["schedulerName"] == pod["spec"].get("schedulerName", "default-scheduler")
    before = reviews(cluster)
    got = _dry_run(core, managed_namespace, pod)
    mutation = mutate_pod(defaulted, SCHEDULER)
    assert not mutation.problems and not mutation.skipped, mutation
    expected = jsonpatch.apply_patch(defaulted, mutation.patch)
    for field in ("schedulerName", "schedulingGates", "tolerations", "nodeName", "containers", "initContainers"):
        assert _comparable(got["spec"].get(field)) == _comparable(expected["spec"].get(field)), field
    assert got["spec"]["schedulerName"] == SCHEDULER
    assert any(g["name"] == names.SCHEDULING_GATE for g in got["spec"]["schedulingGates"])
    reviewed = reviews(cluster) - before
    assert reviewed == (0 if handed_over else 1), f"{reviewed} webhook reviews"
