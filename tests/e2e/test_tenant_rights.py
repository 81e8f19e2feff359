"""Tenants get their own rights in Slurm, never the bridge's (issue 36 §4), and the limits that
size a job do not move under it (§5), on the real cluster, the real slurmctld with accounting
enforced, and the real API server (docs/security.md, "Job fields").

alice (hack/accounting.env) may use QOS team-a-qos, normal, native and native-urgent; pods-urgent,
which preempts native work, is not hers. Waiting jobs wait in a DOWN partition this module makes
over the kwok nodes for itself (``scontrol create partition``, deleted afterwards).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e import util
from tests.e2e.test_tenancy import condition, wait_selected
from tests.e2e.util import bridge_jobs_in, get_phj, make_pod, slurm_job
from tests.harness import TENANTS, SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
A = TENANTS["a"]
P = names.SLURMJOB_PREFIX
NOT_ALICES_QOS = "pods-urgent"  # preempts native work (hack/accounting.env QOS_PREEMPT)


def alice(ns: str, **more: Any) -> Obj:
    """alice's policy with no QOS named: what Slurm's association allows her is what holds."""
    return {"namespaces": [ns], "user": {"name": A.user}, "group": {"id": A.gid},
            "accounts": {"default": A.accounts[0]}, **more}  # fmt: skip


@pytest.fixture
def down_partition(slurm_env: SlurmEnv) -> Iterator[str]:
    """A DOWN partition over the kwok nodes, where jobs wait (reason PartitionDown)."""
    yield from util.down_partition(slurm_env, "rights", slurm_env.nodes)


def _status(custom: k8s.CustomObjectsApi, ns: str, name: str) -> Obj:
    return (get_phj(custom, ns, name) or {}).get("status") or {}


def _submitted(custom: k8s.CustomObjectsApi, ns: str, name: str) -> bool:
    return bool(_status(custom, ns, name).get("jobId"))


def _refused(create: Callable[[], object]) -> str:
    with pytest.raises(ApiException) as refused:
        create()
    assert refused.value.status in (403, 422), refused.value
    message: str = json.loads(refused.value.body)["message"]
    return message


def test_a_tenants_changed_qos_is_refused_by_slurm_as_the_tenant(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    policy: Callable[[Obj], str], down_partition: str,
) -> None:  # fmt: skip
    """Sent with the bridge's token the update would be an operator's, and Slurm would move the
    job into a QOS alice has no access to; sent as alice, Slurm refuses it with its reason."""
    wait_selected(custom, policy(alice(ns)), ns)
    core.create_namespaced_pod(ns, make_pod("w", annotations={P + "partition": down_partition, P + "timelimit": "5"}))
    phj = wait_for(lambda: _status(custom, ns, "w").get("jobId") and _status(custom, ns, "w"), 60, "w submitted")
    job = slurm_job(slurm_env, phj["jobId"]) or {}
    assert job.get("user_name") == A.user and job["job_state"] == ["PENDING"], job
    before = job["qos"]
    core.patch_namespaced_pod("w", ns, {"metadata": {"annotations": {P + "qos": NOT_ALICES_QOS}}})

    def settled() -> Obj | None:
        phj = get_phj(custom, ns, "w") or {}
        cond = condition(phj.get("status") or {}, names.COND_SPEC_APPLIED)
        return cond if cond and phj["status"].get("observedGeneration") == phj["metadata"]["generation"] else None

    cond = wait_for(settled, 60, "SpecApplied settled for the QOS change")
    assert (cond["status"], cond["reason"]) == ("False", names.REASON_UPDATE_REJECTED), cond
    assert "qos" in cond["message"].lower() and NOT_ALICES_QOS in cond["message"], cond["message"]
    kept = slurm_job(slurm_env, phj["jobId"]) or {}
    assert kept["qos"] == before != NOT_ALICES_QOS and kept["job_state"] == ["PENDING"], kept


def test_a_tenants_priority_is_refused_at_admission_and_never_sent(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, policy: Callable[[Obj], str]
) -> None:
    name = policy(alice(ns))
    wait_selected(custom, name, ns)
    said = _refused(lambda: core.create_namespaced_pod(ns, make_pod("p", annotations={P + "priority": "100000"})))
    assert P + "priority" in said and f"TenantPolicy {name}" in said and "allowedOperatorFields" in said, said
    # Slipped in past admission (a PlaceholderJob written directly; a policy changed after admission):
    # the operator refuses it before the submit, and Slurm never sees it.
    core.create_namespaced_pod(ns, make_pod("victim"))
    wait_for(lambda: get_phj(custom, ns, "victim"), 30, "the pod's own PlaceholderJob")
    phj = {
        "apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": {"name": "slipped"},
        "spec": {"pods": ["victim"], "slurm": {"nodes": 1, "priority": 100000}},
    }  # fmt: skip
    custom.create_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL, phj)
    status = wait_for(
        lambda: (s := _status(custom, ns, "slipped")).get("phase") == names.PHASE_FAILED and s, 60, "slipped refused"
    )
    assert status["reason"] == names.REASON_TENANT_POLICY_VIOLATION and P + "priority" in status["message"], status
    uid = (get_phj(custom, ns, "slipped") or {})["metadata"]["uid"]
    assert not [j for j in bridge_jobs_in(slurm_env, ns, refused=True) if j["_ref"].get("uid") == uid]


def _co_resident_pod(name: str, partition: str) -> Obj:
    annotations = {P + "node-sharing": "coResident", P + "partition": partition}
    pod = make_pod(name, cpu="1", memory="64Mi", annotations=annotations)
    for c in pod["spec"]["containers"]:
        c["resources"]["limits"] = {"cpu": "1", "memory": "64Mi"}
    return pod


def _resize(core: k8s.CoreV1Api, ns: str, name: str, cpu: str, limits: bool) -> None:
    resources: Obj = {"requests": {"cpu": cpu}}
    if limits:
        resources["limits"] = {"cpu": cpu}
    body = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
    core.patch_namespaced_pod_resize(name, ns, body, _content_type="application/strategic-merge-patch+json")


def test_a_coresident_pods_resize_is_refused_by_the_api_server(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, down_partition: str
) -> None:
    """The pods wait in Slurm's queue, their jobs already sized (the API server itself refuses a
    resize on a kwok node, which declares no resize support: the bridge's check is what is shown
    on a pod waiting for its node, and on a real kubelet's)."""
    core.create_namespaced_pod(ns, _co_resident_pod("co", down_partition))
    core.create_namespaced_pod(ns, make_pod("shared", annotations={P + "partition": down_partition}))
    for pod in ("co", "shared"):
        wait_for(functools.partial(_submitted, custom, ns, pod), 60, f"{pod}'s job submitted")
    said = _refused(lambda: _resize(core, ns, "co", "2", limits=True))
    assert "pods/resize" in said and "not allocated yet" in said and "delete the pod" in said, said
    pod = core.read_namespaced_pod("co", ns)
    assert pod.spec.containers[0].resources.limits["cpu"] == "1"
    # Nor a waiting timeShared pod: before its release nothing only the bridge sets says its job's mode
    # (its author may edit the labels and owner references that say whose job it is).
    said = _refused(lambda: _resize(core, ns, "shared", "200m", limits=False))
    assert "not allocated yet" in said, said
    assert core.read_namespaced_pod("shared", ns).spec.containers[0].resources.requests["cpu"] != "200m"


def test_an_exclusive_job_past_max_cpus_is_refused_at_submit(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, policy: Callable[[Obj], str]
) -> None:
    """One 1-CPU pod fits maxCPUs 1 at admission; exclusive, its job holds a whole node of several
    CPUs, which the operator counts from Slurm's nodes before the submit."""
    wait_selected(custom, policy(alice(ns, limits={"maxCPUs": 1})), ns)
    core.create_namespaced_pod(ns, make_pod("x", cpu="1", annotations={P + "node-sharing": "exclusive"}))
    status = wait_for(
        lambda: (s := _status(custom, ns, "x")).get("phase") == names.PHASE_FAILED and s, 60, "x refused at submit"
    )
    assert status["reason"] == names.REASON_TENANT_POLICY_VIOLATION, status
    assert "holds whole nodes" in status["message"] and "at most 1" in status["message"], status["message"]
    assert not bridge_jobs_in(slurm_env, ns)


def test_a_sharing_mode_the_policy_does_not_allow_is_refused(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, policy: Callable[[Obj], str]
) -> None:
    name = policy(alice(ns, nodeSharing=["timeShared", "coResident"]))
    wait_selected(custom, name, ns)
    pod = functools.partial(make_pod, "e", annotations={P + "node-sharing": "exclusive"})
    said = _refused(lambda: core.create_namespaced_pod(ns, pod()))
    assert P + "node-sharing" in said and "'exclusive'" in said and f"TenantPolicy {name}" in said, said
    assert "allowed: coResident, timeShared" in said, said
