"""The SlurmResourcesFit node condition (operator/nodes/resourcesfit.py): Slurm's CPUs and memory
for the node against the kubelet's allocatable minus the requests of pods the bridge does not
place; both sides' numbers in the message; one pod list per node per period; a write only when the
condition changes; Events on the way to False and back."""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any, cast

import pytest

from slurm_bridge import names
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.nodes import resourcesfit
from slurm_bridge.operator.nodes.resourcesfit import ResourcesFit, current, decide
from slurm_bridge.operator.runtime.store import project_node
from slurm_bridge.rules.podresources import pod_requests
from slurm_bridge.slurm.models import NodeInfo
from tests.builders import make_pod
from tests.unit.kubefakes import FakeKube

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
MIB = 2**20
ALLOC = {"cpu": "4", "memory": "8192Mi", "pods": "110"}


def slurm(cpus: int = 4, mem: int = 8192, effective: int | None = None, spec_mem: int = 0) -> NodeInfo:
    return NodeInfo(name="hyb-1", cpus=cpus, real_memory_mib=mem, effective_cpus=effective,
                    specialized_memory_mib=spec_mem)  # fmt: skip


def other(cpu: str, memory: str, name: str = "ds") -> Obj:
    pod = make_pod(name, "kube-system").node("hyb-1")
    return pod.container("c", image="x", requests={"cpu": cpu, "memory": memory}).obj()


def test_a_node_sized_alike_on_both_sides_fits() -> None:
    fit = decide(slurm(), ALLOC, [])
    assert fit is not None and (fit.status, fit.reason) == ("True", names.REASON_SLURM_SIZE_FITS)
    assert "Slurm may allocate 4 CPUs and 8192 MiB on node hyb-1" in fit.message
    assert "allocatable is 4 CPUs and 8192 MiB" in fit.message and "leaving 4 CPUs and 8192 MiB" in fit.message


def test_pods_the_bridge_does_not_place_take_their_share_and_both_numbers_are_told() -> None:
    fit = decide(slurm(), ALLOC, [other("500m", "1Gi"), other("250m", "100Mi", "cni")])
    assert fit is not None and (fit.status, fit.reason) == ("False", names.REASON_SLURM_SIZE_EXCEEDS)
    assert "2 pod(s) the bridge does not place request 0.75 CPUs and 1124 MiB" in fit.message
    assert "leaving 3.25 CPUs and 7068 MiB" in fit.message
    assert "Slurm's size is 0.75 CPUs and 1124 MiB too large" in fit.message


@pytest.mark.parametrize(
    ("info", "alloc", "status"),
    [
        (slurm(cpus=4, effective=3), {"cpu": "3", "memory": "8192Mi"}, "True"),  # CpuSpecList takes a core
        (slurm(cpus=4), {"cpu": "3", "memory": "8192Mi"}, "False"),
        (slurm(mem=8192, spec_mem=1024), {"cpu": "4", "memory": "7Gi"}, "True"),  # MemSpecLimit
        (slurm(mem=8192), {"cpu": "4", "memory": "7Gi"}, "False"),
        (slurm(cpus=2, mem=24105), {"cpu": "2", "memory": "24684092Ki"}, "True"),  # real-node-1's numbers
        (slurm(cpus=2, mem=24106), {"cpu": "2", "memory": "24684092Ki"}, "False"),
        (slurm(cpus=4), {"cpu": "3900m", "memory": "8Gi"}, "False"),  # kube-reserved 100m
    ],
)
def test_specialized_cores_and_memory_and_reservations_are_counted(info: NodeInfo, alloc: Obj, status: str) -> None:
    fit = decide(info, alloc, [])
    assert fit is not None and fit.status == status, fit


def test_no_allocatable_no_condition() -> None:
    assert decide(slurm(), {}, []) is None
    assert decide(slurm(), {"cpu": "4"}, []) is None


def test_requests_count_as_kube_scheduler_counts_them() -> None:
    p = (
        make_pod("p")
        .container("a", image="x", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "4", "memory": "2Gi"})
        .container("b", image="x", requests={"cpu": "500m"})
        .obj()
    )
    p["spec"]["initContainers"] = [{"name": "i", "image": "x", "resources": {"requests": {"cpu": "3"}}}]
    p["spec"]["overhead"] = {"cpu": "100m", "memory": "10Mi"}
    assert pod_requests(p) == (Fraction(31, 10), Fraction(1034 * MIB))  # max(1.5, 3) + 0.1; limits not counted


def test_the_node_projection_keeps_only_the_bridges_condition() -> None:
    node: Obj = {
        "metadata": {"name": "n", "resourceVersion": "1"},
        "kind": "Node",
        "status": {
            "allocatable": ALLOC,
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"},
                {"type": names.NODE_COND_SLURM_RESOURCES_FIT, "status": "False"},
            ],
        },
    }
    projected = project_node(node)
    assert [c["type"] for c in projected["status"]["conditions"]] == [names.NODE_COND_SLURM_RESOURCES_FIT]
    node["status"]["conditions"][0]["lastHeartbeatTime"] = "t2"
    assert project_node(node) == projected, "a kubelet heartbeat is no change"


PODS = "/api/v1/pods"
NODE_STATUS = "/api/v1/nodes/hyb-1/status"


def fit_kube(pods: list[Obj]) -> FakeKube:
    """The API server with node hyb-1 and ``pods`` on it."""
    node: Obj = {"metadata": {"name": "hyb-1", "resourceVersion": "1"}, "status": {"allocatable": ALLOC}}
    return FakeKube({"/api/v1/nodes/hyb-1": node}, collections={PODS: pods})


def selectors(kube: FakeKube) -> list[str]:
    """The field selector of each pod list; every read is a list of pods from the cache."""
    assert set(kube.reads) <= {PODS} and all(p["resourceVersion"] == "0" for p in kube.lists)
    return [p["fieldSelector"] for p in kube.lists]


def conditions(kube: FakeKube) -> list[Obj]:
    """The one condition each write sets, by a strategic patch of the node's status."""
    assert set(zip(kube.patches, kube.patch_types, strict=True)) <= {(NODE_STATUS, "strategic")}
    out = []
    for body in kube.bodies:
        (cond,) = body["status"]["conditions"]
        out.append(cond)
    return out


async def test_one_list_per_period_and_a_write_only_on_change(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = fit_kube([])
    fit = ResourcesFit(cast(KubeClient, kube), "slurm-bridge")
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    written = await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm())
    assert written is not None and current(written) is not None
    assert selectors(kube) == ["spec.nodeName=hyb-1,spec.schedulerName!=slurm-bridge,status.phase!=Succeeded,"
                          "status.phase!=Failed"]  # fmt: skip
    assert kube.told("name", "reason", "warning") == [], "a first True is routine"
    assert await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm()) is None and len(selectors(kube)) == 1, (
        "within the period"
    )
    clock[0] += resourcesfit.FIT_SECONDS
    assert await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm()) is None and len(selectors(kube)) == 2, (
        "same condition"
    )
    assert len(conditions(kube)) == 1
    # a DaemonSet pod arrives: only the period (or a size change) looks again
    kube.collections[PODS] = [other("1", "1Gi")]
    assert await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm()) is None and len(selectors(kube)) == 2
    written = await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm(mem=8000))  # a size change: at once
    assert written is not None and conditions(kube)[-1]["status"] == "False"
    assert kube.told("name", "reason", "warning") == [("hyb-1", names.REASON_SLURM_SIZE_EXCEEDS, True)]
    first_false = conditions(kube)[-1]["lastTransitionTime"]
    kube.collections[PODS] = []
    written = await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm(mem=8191))
    assert written is not None and conditions(kube)[-1]["status"] == "True"
    assert kube.told("name", "reason", "warning")[-1] == ("hyb-1", names.REASON_SLURM_SIZE_FITS, False)
    assert conditions(kube)[-1]["lastTransitionTime"] >= first_false


async def test_a_node_that_does_not_fit_is_looked_at_again_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """While False, every new job leaves the node out: when the pods that made it so leave (a
    Job's pods that tolerate its taint: seen, a benchmark's default-scheduler pods kept four nodes
    out of every job for five minutes), the node comes back within FALSE_SECONDS, and its
    reconcile asks to come back then (nothing else may move meanwhile). A node that fits is
    listed again only every FIT_SECONDS, and asks for nothing."""
    kube = fit_kube([other("1", "1Gi")])
    fit = ResourcesFit(cast(KubeClient, kube), "slurm-bridge")
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm())
    assert conditions(kube)[-1]["status"] == "False"
    assert fit.recheck_in("hyb-1") == resourcesfit.FALSE_SECONDS < resourcesfit.FIT_SECONDS
    kube.collections[PODS] = []  # the other pod left
    clock[0] += resourcesfit.FALSE_SECONDS - 1
    assert await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm()) is None and len(selectors(kube)) == 1
    assert fit.recheck_in("hyb-1") == 1
    clock[0] += 1
    written = await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm())
    assert written is not None and conditions(kube)[-1]["status"] == "True" and len(selectors(kube)) == 2
    assert fit.recheck_in("hyb-1") is None
    clock[0] += resourcesfit.FALSE_SECONDS
    assert await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm()) is None and len(selectors(kube)) == 2


async def test_a_changed_message_keeps_the_transition_time() -> None:
    kube = fit_kube([other("1", "1Gi")])
    fit = ResourcesFit(cast(KubeClient, kube), "slurm-bridge")
    await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm())
    kube.nodes["hyb-1"]["status"]["conditions"][0]["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    kube.collections[PODS].append(other("1", "1Gi", "another"))
    fit.forget("hyb-1")
    await fit.reconcile("hyb-1", kube.nodes["hyb-1"], slurm())
    assert (
        conditions(kube)[-1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
        and "2 pod(s)" in conditions(kube)[-1]["message"]
    )
    assert len(kube.told("name", "reason", "warning")) == 1, "no second Event while it stays False"
