"""A Deployment, StatefulSet, ReplicaSet, DaemonSet or ReplicationController makes pods from its
template for ever: what would refuse those pods (annotation validation, reserved keys, the
TenantPolicy) refuses the object itself, at its create, so no ReplicaSet makes refused pods in a loop
(webhook/validate.py; slurm_bridge/rules/workloadkinds.py ``makes_pods``; docs/workloads.md)."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.rules import workloadkinds
from slurm_bridge.webhook.render import webhook_configurations
from slurm_bridge.webhook.validate import validate
from tests.unit.webhook.test_tenancy_webhook import FakeTenants
from tests.unit.webhook.test_webhook import CONFIG, make_request

Obj = dict[str, Any]
KINDS = {
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "DaemonSet": ("apps", "daemonsets"),
    "ReplicationController": ("", "replicationcontrollers"),
}


def controller(
    kind: str,
    annotations: Obj | None = None,
    template_annotations: Obj | None = None,
    cpu: str = "1",
    replicas: int = 2,
) -> Obj:
    group = KINDS[kind][0]
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": f"{group}/v1" if group else "v1",
        "kind": kind,
        "metadata": {"name": "d", "namespace": "slurm", "annotations": annotations or {}},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"annotations": template_annotations or {}}, "spec": {"containers": [container]}},
        },
    }


def decide(obj: Obj, tenants: FakeTenants | None = None, operation: str = "CREATE", old: Obj | None = None) -> Any:
    group = KINDS[obj["kind"]][0]
    request = make_request(obj, group=group, kind=obj["kind"], operation=operation, old=old)
    return validate(request, CONFIG, tenants or FakeTenants([]))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_invalid_annotation_in_the_pod_template_refuses_the_object(kind: str) -> None:
    d = decide(controller(kind, template_annotations={names.ANN_MIN_NODES: "many"}))
    assert not d.allowed and d.code == 422
    assert "spec.template.metadata" in d.message and names.ANN_MIN_NODES in d.message


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_invalid_annotation_on_the_object_its_pods_jobs_options_refuses_it(kind: str) -> None:
    d = decide(controller(kind, annotations={names.ANN_TIMELIMIT: "soon"}))
    assert not d.allowed and names.ANN_TIMELIMIT in d.message


def test_a_policy_violation_refuses_the_deployment_with_the_policys_message() -> None:
    d = decide(controller("Deployment", annotations={names.ANN_ACCOUNT: "team-b"}), FakeTenants())
    assert not d.allowed and d.code == 403
    assert names.ANN_ACCOUNT in d.message and "TenantPolicy team-a" in d.message


def test_each_pods_whole_job_is_judged_as_the_operator_would_before_its_submit() -> None:
    """maxCPUs 4: a template asking 6 CPUs would make every pod's PlaceholderJob fail for ever."""
    d = decide(controller("StatefulSet", cpu="6"), FakeTenants())
    assert not d.allowed and d.code == 403
    assert "spec.template.spec" in d.message and "at most 4" in d.message


def test_a_plain_deployment_passes_and_a_scale_is_not_judged_again() -> None:
    plain = controller("Deployment")
    assert decide(plain, FakeTenants()).allowed
    bigger = controller("Deployment", replicas=5)
    assert decide(bigger, FakeTenants(), operation="UPDATE", old=plain).allowed


def test_another_schedulers_pods_are_not_judged_as_slurm_jobs() -> None:
    obj = controller("Deployment", cpu="6")
    obj["spec"]["template"]["spec"]["schedulerName"] = "other-scheduler"
    assert decide(obj, FakeTenants()).allowed


def test_the_webhook_configuration_sends_those_kinds_to_validation() -> None:
    _, validating = webhook_configurations(CONFIG, bundle="eA==", url="https://127.0.0.1:9443")
    rules = {(r["apiGroups"][0], r["resources"][0]) for r in validating["webhooks"][0]["rules"]}
    assert set(KINDS.values()) <= rules
    assert ("batch", "cronjobs") not in rules, "a CronJob's Jobs are reviewed one by one"
    assert {k.kind for k in workloadkinds.KINDS if k.makes_pods} == set(KINDS)


def test_an_owned_controller_is_not_judged_as_its_pods_own_job() -> None:
    """A LeaderWorkerSet's StatefulSet: its pods are the gang's members (their job is the LWS's),
    so the whole-job checks are the owner's; its annotations are still validated."""
    obj = controller("StatefulSet", cpu="6")
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "l", "uid": "u",
         "controller": True}
    ]  # fmt: skip
    assert decide(obj, FakeTenants()).allowed
    obj["spec"]["template"]["metadata"]["annotations"] = {names.ANN_MIN_NODES: "many"}
    assert not decide(obj, FakeTenants()).allowed
