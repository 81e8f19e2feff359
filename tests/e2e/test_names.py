"""Names at Kubernetes' limits (issue 22): a pod named with 253 characters, and a gang whose
PodGroup is named with 253, run like any other; their pods' label holds a bounded form of the
PlaceholderJob's name and an annotation the full one; their Slurm jobs end with them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from slurm_bridge.core.kubeformats import label_value
from slurm_bridge.operator.placeholderjobs.grouping.groups import phj_name
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import default_job_name
from tests.e2e.test_pipeline import _running_phj
from tests.e2e.test_workload_api import WorkloadAPI, _job, _no_workload_api, wapi, workload_kinds
from tests.e2e.test_workloads import _bound_to_assignments, _one_gang_job, _phase
from tests.e2e.util import get_phj, make_pod, pod_events, read_pod, slurm_job
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")

# A DNS subdomain of 253 characters: four labels of at most 63.
LONGEST = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
assert len(LONGEST) == 253
# The served Workload API version's fixtures (found once by discovery), used here as fixtures.
__all__ = ["wapi", "workload_kinds"]


def _released_with_bounded_label(pod: Any, phj: str) -> None:
    labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
    assert labels[names.LABEL_PLACEHOLDER_JOB] == label_value(phj) and len(label_value(phj)) <= 63
    assert annotations[names.ANN_PLACEHOLDER_JOB] == phj, "the full name"


def test_a_pod_named_with_253_characters_runs_and_its_job_ends_with_it(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    core.create_namespaced_pod(ns, make_pod(LONGEST))
    phj = _running_phj(custom, ns, LONGEST)
    job_id = phj["status"]["jobId"]
    pod = wait_for(lambda: (p := read_pod(core, ns, LONGEST)) and p.spec.node_name and p, 30, "pod bound")
    assert phj["status"]["assignments"] == [{"pod": LONGEST, "node": pod.spec.node_name}]
    _released_with_bounded_label(pod, LONGEST)
    job = slurm_job(slurm_env, job_id)
    assert job is not None and job["name"] == default_job_name(ns, LONGEST) and job["job_state"] == ["RUNNING"]
    # Events on it get names of their own (the scheduler's Scheduled, at least).
    wait_for(lambda: any(e.reason == "Scheduled" for e in pod_events(core, ns, LONGEST)), 30, "Scheduled Event")

    core.delete_namespaced_pod(LONGEST, ns)
    wait_for(lambda: get_phj(custom, ns, LONGEST) is None, 30, "PlaceholderJob garbage-collected")
    ended = wait_for(lambda: (j := slurm_job(slurm_env, job_id)) and j["job_state"] != ["RUNNING"] and j, 30, "end")
    assert ended["job_state"] == ["CANCELLED"], "the allocation is released, not held"


def test_a_gang_whose_podgroup_is_named_with_253_characters_starts_together(
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
    slurm_env: SlurmEnv,
) -> None:
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    wapi.create(custom, ns, wapi.workload("long", 2))
    wapi.create(custom, ns, wapi.podgroup(LONGEST, "long", 2))
    batch.create_namespaced_job(ns, _job("long", LONGEST, 2))
    name = phj_name("pg", LONGEST)
    assert len(name) == 253 and name != LONGEST, "the PlaceholderJob's own name is bounded too"
    phj = _phase(custom, ns, name, "Running")
    _one_gang_job(slurm_env, ns, phj, 2)
    for pod_name in _bound_to_assignments(core, ns, phj):
        pod = read_pod(core, ns, pod_name)
        assert pod is not None
        _released_with_bounded_label(pod, name)
