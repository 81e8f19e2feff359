"""The workload-kind table (slurm_bridge/rules/workloadkinds.py) and the rules derived from it: the
webhook's rules and template checks and the operator's owner walk all read the same rows."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.operator.placeholderjobs.grouping import groups
from slurm_bridge.rules import workloadkinds
from slurm_bridge.webhook.render import webhook_configurations
from slurm_bridge.webhook.review import AdmissionRequest
from slurm_bridge.webhook.validate import validate

pytestmark = pytest.mark.unit

P = names.SLURMJOB_PREFIX


def test_the_table_holds_each_kind_once() -> None:
    keys = [k.group_kind for k in workloadkinds.KINDS]
    assert len(keys) == len(set(keys))
    assert all(k.plural == k.plural.lower() and k.plural.endswith("s") for k in workloadkinds.KINDS)


def test_configuring_kinds_and_their_pod_templates() -> None:
    assert workloadkinds.POD_TEMPLATES == {
        ("batch", "Job"): (("spec", "template"),),
        ("jobset.x-k8s.io", "JobSet"): (("spec", "replicatedJobs", "*", "template", "spec", "template"),),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
            ("spec", "leaderWorkerTemplate", "leaderTemplate"),
            ("spec", "leaderWorkerTemplate", "workerTemplate"),
        ),
        ("scheduling.x-k8s.io", "PodGroup"): (),
        ("scheduling.k8s.io", "Workload"): (),
        ("scheduling.k8s.io", "PodGroup"): (),
        ("scheduling.k8s.io", "CompositePodGroup"): (),
    }


def test_grouping_views() -> None:
    deciding = {("batch", "Job"), ("jobset.x-k8s.io", "JobSet"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")}
    assert deciding == workloadkinds.DECIDES_GROUP
    assert {"JobSet", "LeaderWorkerSet", "PodGroup", "CompositePodGroup"} == workloadkinds.GANG_KINDS
    assert workloadkinds.PLURALS[("apps", "ReplicaSet")] == "replicasets"
    assert workloadkinds.PLURALS[("", "Pod")] == "pods"
    assert workloadkinds.PODGROUP.api_version == "scheduling.x-k8s.io/v1alpha1"
    assert workloadkinds.SCHED_PODGROUP.api_version == "scheduling.k8s.io/v1beta1"  # preferred; v1alpha2 read too
    assert workloadkinds.WorkloadKind("", "Pod", "pods", versions=("v1",)).api_version == "v1"


def test_the_operator_reads_the_same_table() -> None:
    assert groups.RECOGNIZED == workloadkinds.DECIDES_GROUP
    assert groups.GANG_KINDS == workloadkinds.GANG_KINDS
    assert workloadkinds.PODGROUP.api_version == groups.PODGROUP_API_VERSION
    assert set(groups.WORKLOAD_API_VERSIONS) == set(workloadkinds.SCHED_PODGROUP.versions)
    assert workloadkinds.SCHED_PODGROUP.group_kind == (groups.WORKLOAD_API_GROUP, "PodGroup")


def test_the_webhook_registers_exactly_the_configuring_and_pod_making_kinds_in_table_order() -> None:
    _, validating = webhook_configurations(Config(), bundle="Y2E=", url="https://127.0.0.1:9443")
    rules = validating["webhooks"][0]["rules"]
    assert [(r["apiGroups"][0], r["resources"][0]) for r in rules[1:-1]] == [
        (k.group, k.plural) for k in workloadkinds.VALIDATED
    ]
    assert (*workloadkinds.CONFIGURING, *(k for k in workloadkinds.KINDS if k.makes_pods)) == workloadkinds.VALIDATED
    # in-place resize (webhook/resize.py) and kubectl debug (webhook/devicedoors.py)
    assert rules[0]["resources"] == ["pods", "pods/resize", "pods/ephemeralcontainers"]
    assert rules[-1]["resources"] == ["resourceclaims", "resourceclaimtemplates"]  # claims made by hand


def _request(group: str, kind: str, obj: dict[str, Any]) -> AdmissionRequest:
    return AdmissionRequest(uid="u", operation="CREATE", group=group, version="v1", kind=kind, sub_resource="",
                            namespace="ns", name="w", username="alice", object=obj, old_object=None)  # fmt: skip


@pytest.mark.parametrize("kind", workloadkinds.CONFIGURING, ids=lambda k: f"{k.group}/{k.kind}")
def test_every_configuring_kind_has_its_annotations_validated(kind: workloadkinds.WorkloadKind) -> None:
    bad = {"metadata": {"name": "w", "annotations": {P + "partiton": "a"}}}
    decision = validate(_request(kind.group, kind.kind, bad), Config())
    assert not decision.allowed and "partiton" in decision.message


def test_a_kind_outside_the_table_is_not_checked() -> None:
    bad = {"metadata": {"name": "w", "annotations": {P + "partiton": "a"}}}
    assert validate(_request("batch", "CronJob", bad), Config()).allowed


def test_slurmjob_annotations_keeps_only_the_prefix_and_strings_values() -> None:
    assert workloadkinds.slurmjob_annotations(None) == {}
    got = workloadkinds.slurmjob_annotations(
        {P + "partition": "a", P + "priority": 5, "other/x": "y", "slurmjob.x": "z"}
    )
    assert got == {P + "partition": "a", P + "priority": "5"}
    pod = {"metadata": {"annotations": {P + "qos": "high", "a": "b"}}}
    assert groups.slurmjob_annotations(pod) == {P + "qos": "high"}
    assert groups.slurmjob_annotations({"metadata": {}}) == {}


def test_controller_of_picks_the_controller_reference() -> None:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": True}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "2"}
    assert workloadkinds.controller_of({"metadata": {"ownerReferences": [other, owner]}}) == owner
    assert workloadkinds.controller_of({"metadata": {"ownerReferences": [other]}}) is None
    assert workloadkinds.controller_of({"metadata": {}}) is None
    assert workloadkinds.controller_of({}) is None
    assert (
        workloadkinds.controller_of({"metadata": {"ownerReferences": ["junk", {**owner, "controller": False}]}}) is None
    )


def test_scheduling_group_name() -> None:
    assert workloadkinds.scheduling_group_name({"schedulingGroup": {"podGroupName": "pg"}}) == "pg"
    assert workloadkinds.scheduling_group_name({"schedulingGroup": {"podGroupName": ""}}) is None
    assert workloadkinds.scheduling_group_name({"schedulingGroup": "pg"}) is None
    assert workloadkinds.scheduling_group_name({}) is None


def test_group_kind_of_objects_and_references() -> None:
    assert workloadkinds.group_kind({"apiVersion": "v1", "kind": "Pod"}) == ("", "Pod")
    assert (
        workloadkinds.group_kind({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"})
        == workloadkinds.JOBSET.group_kind
    )
    assert workloadkinds.group_kind({}) == ("", "")
    assert workloadkinds.api_group("apps/v1") == "apps"
