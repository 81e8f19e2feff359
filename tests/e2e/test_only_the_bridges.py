"""Only what is the bridge's is touched (issue 36, section 6), on the local cluster:

- a pod of a namespace the bridge does not manage that names the bridge's scheduler gets no
  PlaceholderJob and no Slurm job, an Event saying why, and is never bound;
- a node whose kubelet offers less than Slurm counts (``SlurmResourcesFit=False``) is left out of
  new jobs, a pod pinned there is told why, and an allocation kube-scheduler cannot bind is
  released after ``bindTimeoutSeconds`` (hack/bridge.sh shortens it to 30 s) with the reason on
  the PlaceholderJob;
- a Deployment whose pod template breaks a rule is refused at its create, so no ReplicaSet makes
  refused pods for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.test_tenancy import tenant_spec, wait_selected
from tests.e2e.util import bridge_jobs_in, get_phj, list_phjs, make_pod, pod_events, read_pod, slurm_job
from tests.harness import TENANTS, SlurmEnv, holds_for, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
BIND_TIMEOUT = 30  # hack/bridge.sh's SB_BIND_TIMEOUT


def reasons(core: k8s.CoreV1Api, ns: str, pod: str) -> dict[str, str]:
    return {e.reason: e.message for e in pod_events(core, ns, pod)}


# ---- unmanaged namespaces ---------------------------------------------------------------------------


def test_a_pod_of_an_unmanaged_namespace_that_names_the_bridge_gets_no_slurm_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, namespace: str
) -> None:
    pod = make_pod("stray")
    pod["spec"]["schedulerName"] = "slurm-bridge"
    core.create_namespaced_pod(namespace, pod)
    told = wait_for(
        lambda: reasons(core, namespace, "stray").get(names.REASON_NAMESPACE_NOT_MANAGED),
        30,
        f"a {names.REASON_NAMESPACE_NOT_MANAGED} Event on the pod",
    )
    assert f"namespace {namespace} is not managed by slurm-bridge" in told, told
    holds_for(
        lambda: not list_phjs(custom, namespace) and not bridge_jobs_in(slurm_env, namespace, refused=True),
        10,
        "no PlaceholderJob and no Slurm job for the pod",
    )
    stray = read_pod(core, namespace, "stray")
    assert stray is not None and not stray.spec.node_name, "the extender never lets it bind"
    failed = wait_for(
        lambda: next((e.message for e in pod_events(core, namespace, "stray") if e.reason == "FailedScheduling"), None),
        30,
        "the bridge's kube-scheduler to say why it does not place the pod",
    )
    assert "not managed by slurm-bridge" in failed, failed
    assert len([e for e in pod_events(core, namespace, "stray") if e.reason == names.REASON_NAMESPACE_NOT_MANAGED]) == 1


# ---- nodes kube-scheduler cannot use -----------------------------------------------------------------


def unfit(core: k8s.CoreV1Api, node: str) -> bool:
    conditions = core.read_node(node).status.conditions or []
    return any(c.type == names.NODE_COND_SLURM_RESOURCES_FIT and c.status == "False" for c in conditions)


def pinned(name: str, node: str, partition: str) -> Obj:
    pod = make_pod(name, annotations={names.ANN_PARTITION: partition})
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def test_a_node_whose_kubelet_offers_less_than_slurm_counts_is_left_out_of_new_jobs(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, ns: str
) -> None:
    node, partition = slurm_env.missized_node, slurm_env.missized_partition
    assert node and partition, "the local cluster has no mis-sized node (hack/lib.sh SB_MISSIZED_NODE)"
    wait_for(lambda: unfit(core, node), 60, f"{node}'s {names.NODE_COND_SLURM_RESOURCES_FIT}=False")
    # Pinned there: not sent to Slurm at all, and told why.
    core.create_namespaced_pod(ns, pinned("pinned", node, partition))
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "pinned")) and (p.get("status") or {}).get("reason") and p,
        30,
        "the pinned pod's PlaceholderJob to say why it waits",
    )
    status = phj["status"]
    assert status["reason"] == names.REASON_SUBMIT_REJECTED, status
    assert names.REASON_NODES_DO_NOT_FIT in status["message"] and node in status["message"], status
    told = wait_for(lambda: reasons(core, ns, "pinned").get(names.REASON_SLURM_SUBMIT_REJECTED), 30, "the pod told")
    assert names.NODE_COND_SLURM_RESOURCES_FIT in told, told
    assert not bridge_jobs_in(slurm_env, ns, refused=True), "nothing reached Slurm"
    # In its partition without a pin: the node is excluded from the request, so Slurm never allocates it.
    core.create_namespaced_pod(ns, make_pod("free", annotations={names.ANN_PARTITION: partition}))

    def excluded_or_refused() -> str | None:
        phj = get_phj(custom, ns, "free") or {}
        status = phj.get("status") or {}
        if status.get("reason") == names.REASON_SUBMIT_REJECTED:
            return "refused"
        for job in bridge_jobs_in(slurm_env, ns):
            full = slurm_job(slurm_env, job["job_id"]) or {}
            if node in (full.get("excluded_nodes") or []):
                return "excluded"
        return None

    wait_for(excluded_or_refused, 30, f"the free pod's job to leave {node} out")
    holds_for(
        lambda: not any(node in (j.get("nodes") or "") for j in bridge_jobs_in(slurm_env, ns)),
        5,
        f"no bridge job on {node}",
    )
    free = read_pod(core, ns, "free")
    assert free is not None and not free.spec.node_name


@pytest.fixture
def untolerated(core: k8s.CoreV1Api, slurm_env: SlurmEnv) -> Iterator[str]:
    """A Slurm node of the bridge's partition whose Kubernetes node carries a taint the bridge's
    pods do not tolerate: Slurm allocates it, kube-scheduler refuses it."""
    node = slurm_env.nodes[-1]
    taint = k8s.V1Taint(key="e2e.slurm-bridge/unbindable", value="yes", effect="NoSchedule")
    before = core.read_node(node).spec.taints or []
    core.patch_node(node, {"spec": {"taints": [*[t.to_dict() for t in before], taint.to_dict()]}})
    try:
        yield node
    finally:
        now = core.read_node(node).spec.taints or []
        core.patch_node(node, {"spec": {"taints": [t.to_dict() for t in now if t.key != taint.key]}})


def test_an_allocation_kube_scheduler_cannot_bind_is_released_with_the_reason(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, ns: str, untolerated: str
) -> None:
    core.create_namespaced_pod(ns, pinned("stuck", untolerated, slurm_env.partition))
    job_id = wait_for(
        lambda: ((get_phj(custom, ns, "stuck") or {}).get("status") or {}).get("jobId"), 30, "the allocation"
    )
    wait_for(
        lambda: any(e.reason == "FailedScheduling" for e in pod_events(core, ns, "stuck")),
        30,
        "kube-scheduler refusing the allocated node",
    )
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "stuck")) and p["status"].get("phase") == names.PHASE_FAILED and p,
        BIND_TIMEOUT + 30,
        f"the PlaceholderJob released after bindTimeoutSeconds ({BIND_TIMEOUT} s)",
    )
    status = phj["status"]
    assert status["reason"] == names.REASON_ALLOCATION_NOT_BOUND, status
    ended = next(c for c in status["conditions"] if c["type"] == names.COND_ENDED)
    assert ended["reason"] == names.REASON_ALLOCATION_NOT_BOUND and f"stuck on {untolerated}" in ended["message"]

    def released() -> bool:
        job = slurm_job(slurm_env, job_id)
        return job is None or not {"RUNNING", "PENDING"} & set(job["job_state"])

    wait_for(released, 30, f"Slurm job {job_id} released")

    def ended_unbound() -> bool:
        pod = read_pod(core, ns, "stuck")
        return pod is None or (pod.status.phase == "Failed" and not pod.spec.node_name)

    wait_for(ended_unbound, 30, "the pod ended without ever being bound")


# ---- pod-making controllers ----------------------------------------------------------------------------


def deployment(template_annotations: Obj, annotations: Obj | None = None) -> k8s.V1Deployment:
    labels = {"app": "refused"}
    pod = make_pod("x", annotations=template_annotations)
    template = k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels=labels, annotations=template_annotations),
        spec=pod["spec"] | {"restartPolicy": "Always"},
    )
    spec = k8s.V1DeploymentSpec(replicas=2, selector=k8s.V1LabelSelector(match_labels=labels), template=template)
    return k8s.V1Deployment(metadata=k8s.V1ObjectMeta(name="refused", annotations=annotations or {}), spec=spec)


def test_a_deployment_whose_pods_would_be_refused_is_refused_at_its_create(
    api_client: k8s.ApiClient, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str,
    policy: Callable[[Obj], str],
) -> None:  # fmt: skip
    apps = k8s.AppsV1Api(api_client)
    with pytest.raises(ApiException) as refused:
        apps.create_namespaced_deployment(ns, deployment({names.ANN_TIMELIMIT: "soon"}))
    assert refused.value.status == 422, refused.value
    assert "spec.template.metadata" in refused.value.body and names.ANN_TIMELIMIT in refused.value.body
    name = policy(tenant_spec(TENANTS["a"], ns))
    wait_selected(custom, name, ns)
    with pytest.raises(ApiException) as forbidden:
        apps.create_namespaced_deployment(ns, deployment({}, {names.ANN_ACCOUNT: "not-the-tenants"}))
    assert forbidden.value.status == 403, forbidden.value
    assert f"TenantPolicy {name}" in forbidden.value.body and names.ANN_ACCOUNT in forbidden.value.body
    holds_for(
        lambda: not apps.list_namespaced_replica_set(ns).items and not core.list_namespaced_pod(ns).items,
        5,
        "no ReplicaSet and no pod",
    )
