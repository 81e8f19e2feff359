"""Tenancy against the real slurmdbd (docs/tenancy.md): each namespace submits only as its own
Slurm identity, and what Slurm's accounting says reaches Kubernetes.

The local cluster's accounting is hack/accounting.env's (tests/harness.py TENANTS reads it):
alice (uid 2001, group team-a) in accounts team-a (default) and team-a-dev with QOS team-a-qos
(GrpTRES=cpu=8) and normal; bob (uid 2002) in team-b with team-b-qos; the bridge's Slurm user is
SlurmUser; AccountingStorageEnforce=associations,limits,qos.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.util import bridge_jobs_in, get_phj, make_pod, read_pod
from tests.harness import QOS_CPU_LIMIT, TENANTS, SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
A, B = TENANTS["a"], TENANTS["b"]
# Slurm's reasons for a job held at a QOS or association CPU limit.
LIMIT_REASONS = {"QOSGrpCpuLimit", "AssocGrpCpuLimit", "QOSMaxCpuPerUserLimit", "AssocMaxCpuPerUserLimit"}


def tenant_spec(tenant: Any, namespace: str) -> Obj:
    return {
        "namespaces": [namespace],
        "user": {"name": tenant.user},
        "group": {"id": tenant.gid},
        "accounts": {"default": tenant.accounts[0], "allowed": list(tenant.accounts)},
        "qos": {"default": tenant.qos, "allowed": [tenant.qos, "normal"] if tenant is A else [tenant.qos]},
    }


def policy_status(custom: k8s.CustomObjectsApi, name: str) -> Obj:
    obj: Obj = custom.get_cluster_custom_object(names.GROUP, names.VERSION, names.TP_PLURAL, name)
    status: Obj = obj.get("status") or {}
    return status


def condition(status: Obj, ctype: str) -> Obj:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), {})


def wait_selected(custom: k8s.CustomObjectsApi, name: str, ns: str) -> None:
    """The operator reports the policy Ready for the namespace: webhook and operator have read it too
    (both caches follow the same watch; the webhook's is checked by the first admission)."""
    wait_for(
        lambda: (
            ns in policy_status(custom, name).get("namespaces", [])
            and condition(policy_status(custom, name), names.TP_COND_READY).get("status") == "True"
        ),
        30,
        f"TenantPolicy {name} to select {ns}",
    )


def sacct_job(slurm_env: SlurmEnv, job_id: int) -> dict[str, str]:
    out = slurm_env.sacct("-X", "-n", "-P", "-j", str(job_id), "--format=JobID,User,Account,QOS,JobName")
    line = next((ln for ln in out.splitlines() if ln.split("|")[0] == str(job_id)), "")
    fields = line.split("|")
    return dict(zip(["job_id", "user", "account", "qos", "name"], fields, strict=False))


def test_tenant_a_cannot_use_tenant_bs_account_or_uid(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, policy: Callable[[Obj], str]
) -> None:
    name = policy(tenant_spec(A, ns))
    wait_selected(custom, name, ns)
    for key, value in ((names.ANN_ACCOUNT, B.accounts[0]), (names.ANN_USER_ID, str(B.uid)), (names.ANN_USER_ID, "0")):
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(ns, make_pod(f"p-{secrets.token_hex(3)}", annotations={key: value}))
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        assert key in message and repr(value) in message and f"TenantPolicy {name}" in message, message
    # The tenant's own second account is allowed.
    core.create_namespaced_pod(ns, make_pod("own-account", annotations={names.ANN_ACCOUNT: A.accounts[1]}))


def test_a_pod_without_annotations_runs_under_its_tenants_defaults_and_sacct_shows_it(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, policy: Callable[[Obj], str]
) -> None:
    name = policy(tenant_spec(A, ns))
    wait_selected(custom, name, ns)
    core.create_namespaced_pod(ns, make_pod("plain"))

    def running() -> Obj | None:
        phj = get_phj(custom, ns, "plain")
        status = (phj or {}).get("status") or {}
        return status if status.get("phase") == names.PHASE_RUNNING and status.get("account") else None

    status = wait_for(running, 60, "the plain pod's PlaceholderJob to run")
    assert (status["slurmUser"], status["account"]) == (A.user, A.accounts[0])
    job = wait_for(lambda: (j := sacct_job(slurm_env, status["jobId"])).get("user") and j, 60, "sacct to list the job")
    assert (job["user"], job["account"], job["qos"]) == (A.user, A.accounts[0], A.qos)
    assert job["name"] == f"{ns}/plain"
    listed = slurm_env.sacct("-X", "-n", "-P", "-A", A.accounts[0], "--format=JobID,JobName", "-S", "now-1hour")
    assert f"{status['jobId']}|{ns}/plain" in listed


def test_the_pod_over_a_qos_limit_waits_with_slurms_reason_and_binds_when_one_ends(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, policy: Callable[[Obj], str]
) -> None:
    name = policy(tenant_spec(A, ns))
    wait_selected(custom, name, ns)
    cpus = 2
    fit = QOS_CPU_LIMIT // cpus
    for i in range(fit + 1):
        core.create_namespaced_pod(ns, make_pod(f"w{i}", cpu=str(cpus)))

    def phase(pod: str) -> str:
        return str(((get_phj(custom, ns, pod) or {}).get("status") or {}).get("phase") or "")

    def held() -> list[str]:
        running = [f"w{i}" for i in range(fit + 1) if phase(f"w{i}") == names.PHASE_RUNNING]
        return running if len(running) == fit else []

    running = wait_for(held, 120, f"{fit} pods to run under {QOS_CPU_LIMIT} CPUs of {A.qos}")
    (waiting,) = [f"w{i}" for i in range(fit + 1) if f"w{i}" not in running]

    def limited() -> Obj | None:
        status = (get_phj(custom, ns, waiting) or {}).get("status") or {}
        return status if status.get("reason") in LIMIT_REASONS else None

    status = wait_for(limited, 60, f"{waiting} to wait at the QOS limit with Slurm's reason")
    assert status["phase"] == names.PHASE_PENDING and status["slurmState"] == "PENDING"
    pod = read_pod(core, ns, waiting)
    assert pod is not None and not pod.spec.node_name
    core.delete_namespaced_pod(running[0], ns, grace_period_seconds=0)
    wait_for(lambda: phase(waiting) == names.PHASE_RUNNING, 120, f"{waiting} to bind once a job ended")


def test_a_placeholderjob_a_trusted_user_writes_outside_the_policy_is_refused_by_the_operator(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, policy: Callable[[Obj], str]
) -> None:
    """No webhook looks at a PlaceholderJob: the operator checks the policy before it submits."""
    name = policy(tenant_spec(A, ns))
    wait_selected(custom, name, ns)
    # The pod first: a PlaceholderJob whose every member is missing has ended (PodsDeleted), so one
    # written before its pod exists may be ended before the operator ever looks at its policy.
    core.create_namespaced_pod(ns, make_pod("victim"))
    wait_for(lambda: get_phj(custom, ns, "victim"), 30, "the pod's own PlaceholderJob")
    phj = {
        "apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": {"name": "trusted"},
        "spec": {"pods": ["victim"], "slurm": {"nodes": 1, "userId": 0, "account": B.accounts[0]}},
    }  # fmt: skip
    custom.create_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL, phj)

    def refused() -> Obj | None:
        status = (get_phj(custom, ns, "trusted") or {}).get("status") or {}
        return status if status.get("phase") == names.PHASE_FAILED else None

    status = wait_for(refused, 60, "the operator to refuse the PlaceholderJob")
    assert status["reason"] == names.REASON_TENANT_POLICY_VIOLATION
    assert names.ANN_USER_ID in status["message"] and names.ANN_ACCOUNT in status["message"]
    submitted = condition(status, names.COND_SUBMITTED)
    assert submitted.get("status") == "False" and submitted.get("reason") == names.REASON_TENANT_POLICY_VIOLATION
    uid = get_phj(custom, ns, "trusted")["metadata"]["uid"]  # type: ignore[index]
    assert not [j for j in bridge_jobs_in(slurm_env, ns, refused=True) if j["_ref"].get("uid") == uid]
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=trusted").items
    assert any(e.reason == names.REASON_TENANT_POLICY_VIOLATION and e.type == "Warning" for e in events)


def test_an_unknown_account_in_a_policy_is_reported_on_the_policy(
    ns: str, custom: k8s.CustomObjectsApi, policy: Callable[[Obj], str]
) -> None:
    spec = {
        "namespaces": [ns],
        "user": {"name": A.user},
        "group": {"id": A.gid},
        "accounts": {"default": "no-such-account"},
    }
    name = policy(spec)

    def reported() -> Obj | None:
        cond = condition(policy_status(custom, name), names.TP_COND_ACCOUNTS_VALID)
        return cond if cond.get("status") == "False" else None

    cond = wait_for(reported, 60, "AccountsValid=False on the policy")
    assert cond["reason"] == names.TP_REASON_UNKNOWN_ACCOUNT
    assert "no-such-account does not exist in Slurm" in cond["message"]
