"""The local Kubernetes control plane is real: nodes, scheduler, Job controller, garbage collector."""

from __future__ import annotations

import secrets

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.harness import wait_for


def _pod(name: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c", image="busybox")]),
    )


def _ready(node: k8s.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def test_node_created_by_harness_turns_ready(core: k8s.CoreV1Api) -> None:
    name = f"smoke-node-{secrets.token_hex(3)}"
    node = k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake"}),
        # Tainted so no other test's pod lands on it while it exists.
        spec=k8s.V1NodeSpec(taints=[k8s.V1Taint(key="smoke", value="only", effect="NoSchedule")]),
    )
    core.create_node(node)
    try:
        wait_for(lambda: _ready(core.read_node(name)), 30, f"node {name} Ready")
    finally:
        core.delete_node(name)


def test_pod_bound_by_default_scheduler_becomes_running(core: k8s.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, _pod("p"))
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod("p", namespace)).status.phase == "Running" and p,
        30,
        "pod Running",
    )
    assert pod.spec.scheduler_name == "default-scheduler"
    assert pod.spec.node_name, "the default scheduler bound the pod to a node"


def test_job_pods_created_and_garbage_collected(core: k8s.CoreV1Api, batch: k8s.BatchV1Api, namespace: str) -> None:
    job = k8s.V1Job(
        metadata=k8s.V1ObjectMeta(name="j"),
        spec=k8s.V1JobSpec(
            parallelism=2,
            completions=2,
            template=k8s.V1PodTemplateSpec(
                # The local kwok stage keeps Job pods running for this long.
                metadata=k8s.V1ObjectMeta(annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "60s"}),
                spec=k8s.V1PodSpec(restart_policy="Never", containers=[k8s.V1Container(name="c", image="busybox")]),
            ),
        ),
    )
    batch.create_namespaced_job(namespace, job)
    pods = wait_for(
        lambda: len(items := core.list_namespaced_pod(namespace, label_selector="job-name=j").items) == 2 and items,
        30,
        "2 pods created by the Job controller",
    )
    assert all(p.metadata.owner_references[0].kind == "Job" for p in pods)
    batch.delete_namespaced_job("j", namespace, propagation_policy="Background")
    wait_for(
        lambda: not core.list_namespaced_pod(namespace, label_selector="job-name=j").items,
        60,
        "the garbage collector to delete the Job's pods",
    )
    try:
        batch.read_namespaced_job("j", namespace)
        raise AssertionError("job still exists")
    except ApiException as e:
        assert e.status == 404
