"""A change of slurmjob annotations at admission (webhook/changes.py): refused when it cannot reach
a pod's Slurm job (allocated; a key fixed at submit; a value Slurm cannot go back to; a pod its
workload configures), let through with a warning on a workload, whose jobs only the operator sees."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.rules import tenancy
from slurm_bridge.webhook.validate import validate
from tests.unit.webhook.test_webhook import CONFIG, _job_with, make_request, managed_pod

pytestmark = pytest.mark.unit
JSON = dict[str, Any]
P = names.SLURMJOB_PREFIX


def released(annotations: JSON) -> JSON:
    """A pod whose job Slurm allocated: the bridge named its node and job, and lifted the gate."""
    pod = managed_pod(annotations={**annotations, names.ANN_SLURM_NODE: "n1"}, labels={names.LABEL_SLURM_JOB_ID: "12"},
                      gated=False)  # fmt: skip
    return pod


def update(old: JSON, new: JSON, tenants: Any = None) -> Any:
    return validate(make_request(new, operation="UPDATE", old=old), CONFIG, tenants)


@pytest.mark.parametrize(
    "key",
    [P + k for k in ("timelimit", "partition", "qos", "account", "priority", "constraints", "min-nodes", "max-nodes",
                     "job-name")],
)  # fmt: skip
def test_each_changeable_key_of_a_waiting_pod_goes_through(key: str) -> None:
    values = {P + "min-nodes": ("1", "2"), P + "max-nodes": ("1", "2"), P + "timelimit": ("5", "7")}
    old, new = values.get(key, ("a", "b")) if key not in (P + "priority",) else ("5", "9")
    decision = update(managed_pod(annotations={key: old}), managed_pod(annotations={key: new}))
    assert decision.allowed, decision.message


@pytest.mark.parametrize(
    ("key", "old", "new"),
    [(P + "cpu-per-task", "1", "2"), (P + "mem-per-node", "1Gi", "2Gi"), (P + "gres", "gpu:1", "gpu:2"),
     (P + "exclusive", "true", "false"), (P + "licenses", "a:1", "a:2"), (P + "reservation", "r1", "r2"),
     (P + "wckey", "a", "b"), (P + "user-id", "1", "2"), (P + "group-id", "1", "2")],
)  # fmt: skip
def test_a_key_fixed_at_submit_is_refused_on_a_waiting_pod(key: str, old: str, new: str) -> None:
    decision = update(managed_pod(annotations={key: old}), managed_pod(annotations={key: new}))
    assert not decision.allowed and decision.code == 422
    assert key in decision.message and "cannot change once the Slurm job is submitted" in decision.message


def test_the_issues_case_a_waiting_pods_time_limit_goes_through_and_an_allocated_ones_is_refused() -> None:
    assert update(
        managed_pod(annotations={P + "timelimit": "5"}), managed_pod(annotations={P + "timelimit": "7"})
    ).allowed
    decision = update(released({P + "timelimit": "5"}), released({P + "timelimit": "7"}))
    assert not decision.allowed and decision.code == 422
    for words in (P + 'timelimit changed from "5" to "7"', "Slurm job 12 was already allocated", "delete the pod"):
        assert words in decision.message


@pytest.mark.parametrize("key", [P + "partition", P + "qos", P + "min-nodes", P + "job-name"])
def test_no_key_changes_once_the_pod_is_allocated(key: str) -> None:
    decision = update(released({}), released({key: "2"}))
    assert not decision.allowed and f'{key} added ("2")' in decision.message


def test_removing_the_priority_of_a_waiting_pod_is_refused() -> None:
    decision = update(managed_pod(annotations={P + "priority": "5"}), managed_pod(annotations={}))
    assert not decision.allowed and "set the priority you want instead" in decision.message


def test_removing_the_account_is_refused_unless_the_namespaces_policy_gives_a_default() -> None:
    old, new = managed_pod(annotations={P + "account": "a"}), managed_pod(annotations={})
    assert "set the account you want instead" in update(old, new).message

    class Tenants:
        synced, problem = True, ""

        def index(self) -> tenancy.TenantIndex:
            spec = {"namespaces": ["slurm"], "accounts": {"default": "a", "allowed": ["a"]}}
            return tenancy.TenantIndex.build([{"metadata": {"name": "t"}, "spec": spec}], [])

    assert update(old, new, Tenants()).allowed


def test_a_pods_own_annotations_do_not_configure_a_job_its_workload_configures() -> None:
    decision = update(managed_pod(owner=True), managed_pod(annotations={P + "timelimit": "7"}, owner=True))
    assert not decision.allowed
    assert "its Job j (or the workload above it) does: change them there" in decision.message


def test_other_pods_and_other_changes_are_left_alone() -> None:
    other = {"metadata": {"name": "p", "annotations": {P + "gres": "gpu:1"}}, "spec": {"schedulerName": "default"}}
    changed = {"metadata": {"name": "p", "annotations": {P + "gres": "gpu:2"}}, "spec": {"schedulerName": "default"}}
    assert update(other, changed).allowed
    assert update(released({P + "gres": "gpu:1"}), released({P + "gres": "gpu:1", "other": "x"})).allowed


def test_a_workloads_change_goes_through_and_says_what_it_reaches() -> None:
    spec = {"schedulerName": CONFIG.schedulerName}
    old, new = _job_with(spec, {P + "timelimit": "5"}), _job_with(spec, {P + "timelimit": "7", P + "gres": "gpu:1"})
    decision = validate(make_request(new, operation="UPDATE", old=old, group="batch", kind="Job"), CONFIG)
    assert decision.allowed
    (gres, time) = decision.warnings
    assert "reaches only Slurm jobs not submitted yet" in gres and names.REASON_UPDATE_NOT_APPLIED in gres
    assert "wait in Slurm's queue" in time and names.REASON_UPDATE_TOO_LATE in time
