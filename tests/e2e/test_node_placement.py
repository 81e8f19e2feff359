"""A pod's required placement reaches Slurm, and what Slurm cannot honour is refused at admission
(slurm_bridge/rules/nodeplacement.py, docs/annotations.md). The local cluster's Slurm nodes carry
Features=kwok (and gpu on the GPU nodes), and their kwok nodes the matching labels
feature.slinky.slurm.net/<feature>: "true" (hack/cluster.sh)."""

from __future__ import annotations

import json
from typing import Any

import hostlist
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.util import get_phj, make_pod, read_pod, slurm_job
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
HOST = names.LABEL_HOSTNAME


def _placed(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm: SlurmEnv, ns: str, name: str,
            spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """Create the pod with ``spec`` merged in; its node and its Slurm job once it runs."""
    body = make_pod(name, annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "600s"})
    body["spec"].update(spec)
    core.create_namespaced_pod(ns, body)
    pod = wait_for(lambda: (p := read_pod(core, ns, name)) and p.status.phase == "Running" and p, 60, f"{name} Running")
    job_id = (get_phj(custom, ns, name) or {})["status"]["jobId"]
    job = slurm_job(slurm, job_id)
    assert job is not None
    return str(pod.spec.node_name), job


def test_a_node_name_in_the_node_selector_is_the_slurm_node(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    target = slurm_env.nodes[1]
    node, job = _placed(core, custom, slurm_env, managed_namespace, "named", {"nodeSelector": {HOST: target}})
    assert node == target == job["nodes"]
    assert job["required_nodes"] == target


def test_excluded_nodes_leave_the_one_left(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    *others, last = slurm_env.nodes
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOST, "operator": "NotIn", "values": others}]}]}}}  # fmt: skip
    node, job = _placed(core, custom, slurm_env, managed_namespace, "excluded", {"affinity": affinity})
    assert node == last == job["nodes"]
    # The pod's exclusions, and besides them only nodes the bridge leaves out of every job: the
    # missized node, once the node controller has marked it SlurmResourcesFit=False.
    excluded = set(hostlist.expand_hostlist(job["excluded_nodes"]))
    unfit = {slurm_env.missized_node} - {""}
    assert set(others) <= excluded <= set(others) | unfit, (excluded, others, unfit)


def test_a_feature_label_becomes_a_slurm_constraint(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    selector = {names.LABEL_NODE_FEATURE_PREFIX + "gpu": "true", "kubernetes.io/os": "linux"}
    node, job = _placed(core, custom, slurm_env, managed_namespace, "gpu", {"nodeSelector": selector})
    assert node in slurm_env.gpu_nodes and node == job["nodes"]
    assert job["features"] == "gpu"


SPREAD = {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
          "labelSelector": {"matchLabels": {"a": "b"}}}  # fmt: skip
TERM = {"topologyKey": HOST, "labelSelector": {"matchLabels": {"a": "b"}}}
ANTI = {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"topologySpreadConstraints": [SPREAD]}, "spec.topologySpreadConstraints"),
        ({"affinity": {"podAntiAffinity": ANTI}}, "spec.affinity.podAntiAffinity"),
        ({"nodeSelector": {"disktype": "ssd"}}, 'spec.nodeSelector["disktype"]'),
    ],
)
def test_what_slurm_cannot_honour_is_refused_at_admission(
    core: k8s.CoreV1Api, managed_namespace: str, spec: dict[str, Any], field: str
) -> None:
    body = make_pod("refused")
    body["spec"].update(spec)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(managed_namespace, body)
    message = json.loads(err.value.body or "{}").get("message", "")
    assert err.value.status == 422 and field in message, err.value.body
    assert read_pod(core, managed_namespace, "refused") is None
