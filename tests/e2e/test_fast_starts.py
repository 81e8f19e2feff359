"""Fast starts (issue 31) on the real cluster and the real Slurm: slurmctld's hook
(slurm-hooks/slurm-bridge-notify.c, installed compiled by hack/cluster.sh and run by the handoff script, the
one PrologSlurmctld and EpilogSlurmctld, as its NOTIFY)
tells the operator of a queued job's start and of a job's end, and the operator reads that job at
once; a tenant's pod is allocated at once, as the tenant.

What is asserted is the path each took (the operator's /stats/starts and /stats), never how fast:
speed is the benchmark's (bench/pipeline_latency.py)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import get_phj, make_pod, pod_events, read_pod, slurm_job
from tests.harness import CLUSTER_SH, TENANTS, PrerequisiteMissing, SlurmEnv, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]


def operator(cluster: dict[str, str], path: str) -> Any:
    port = (Path(cluster["SB_STATE_DIR"]) / "bridge-operator.port").read_text().strip()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)


@pytest.fixture
def hooked(cluster: dict[str, str]) -> None:
    """The local cluster's slurmctld runs the bridge's hook, and the operator takes its notices."""
    etc = Path(cluster["SLURM_ROOT"]) / "etc" / "slurm"
    conf, handoff = etc / "slurm.conf", etc / "slurm-bridge-handoff.conf"
    hooked = (
        "EpilogSlurmctld=/etc/slurm/slurm-bridge-handoff.sh" in conf.read_text()
        and "PrologSlurmctld=/etc/slurm/slurm-bridge-handoff.sh" in conf.read_text()
        and handoff.exists()
        and "NOTIFY=/etc/slurm/slurm-bridge-notify\n" in handoff.read_text()
    )
    if not hooked:
        raise PrerequisiteMissing(
            f"{conf} and {handoff} run no slurm-bridge hook: restart the cluster (hack/cluster.sh down && up)"
        )
    if "slurm_hints" not in operator(cluster, "/stats"):
        raise PrerequisiteMissing("the running operator takes no Slurm hooks: hack/bridge.sh up (SB_SLURM_HOOKS=true)")


def pod_node(core: k8s.CoreV1Api, ns: str, name: str) -> str:
    pod = read_pod(core, ns, name)
    assert pod is not None and pod.spec.node_name, name
    return str(pod.spec.node_name)


def _bound_job(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, name: str) -> int:
    wait_for(lambda: (p := read_pod(core, ns, name)) is not None and p.spec.node_name, 60, f"pod {name} bound")
    phj: Obj = wait_for(
        lambda: (p := get_phj(custom, ns, name)) and (p.get("status") or {}).get("phase") == "Running" and p,
        30,
        f"PlaceholderJob {name} Running",
    )
    job_id: int = phj["status"]["jobId"]
    return job_id


@pytest.mark.usefixtures("hooked")
def test_a_queued_jobs_start_is_read_when_slurmctld_says_so(
    cluster: dict[str, str],
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    managed_namespace: str,
    slurm_env: SlurmEnv,
) -> None:
    """A job that names a group is queued (only job/submit sets a group): Slurm starts it from its
    queue, the hook tells the operator in a signed notice that says the job's nodes, and the
    operator releases the pod on it and reads the job all the same. The operator's
    state poll (each second) may see a start before the notice arrives (seen once: 7 ms before it on
    a loaded machine), and the notice then costs nothing: up to 3 pods, one of them must be read
    on the notice, and none released before its start was read."""
    gid = TENANTS["a"].gid
    seen: list[Obj] = []
    for attempt in range(3):
        before = operator(cluster, "/stats")["slurm_hints"]
        name = f"queued-{attempt}"
        core.create_namespaced_pod(managed_namespace, make_pod(name, annotations={names.ANN_GROUP_ID: str(gid)}))
        job_id = _bound_job(core, custom, managed_namespace, name)
        steps = operator(cluster, "/stats/starts")[str(job_id)]
        seen.append(steps)
        assert steps["path"] == "queue", steps
        assert steps["running_read"] <= steps["released"], f"released before its start was read: {steps}"
        job = slurm_job(slurm_env, job_id)
        assert job is not None and job["group_id"] == gid, job
        after = operator(cluster, "/stats")["slurm_hints"]
        assert after["failed"] == before["failed"], (before, after)
        hint = steps.get("hint_started")
        if hint is not None and hint <= steps["running_read"]:
            assert after["read"] > before["read"], ("the notice came first, and was read", before, after)
            # Signed (the local Slurm's host has sha256sum), it said the job's nodes: the pod was
            # released on it, before the read that still followed it answered.
            assert after["signed_starts"] > before["signed_starts"], (before, after)
            assert steps["signed_start"] <= steps["running_read"] <= steps["released"], steps
            assert pod_node(core, managed_namespace, name) in (job.get("nodes") or ""), job
            return
    raise AssertionError(f"each of 3 starts was read by a poll before slurmctld's notice came: {seen}")


@pytest.mark.usefixtures("hooked")
def test_a_job_slurm_ends_is_read_when_slurmctld_says_so(
    cluster: dict[str, str], core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("ended"))
    job_id = _bound_job(core, custom, ns, "ended")
    before = operator(cluster, "/stats")["slurm_hints"]
    run(["bash", str(CLUSTER_SH), "slurm", "scancel", str(job_id)])
    wait_for(lambda: [e for e in pod_events(core, ns, "ended") if e.reason == "SlurmJobCancelled"], 30, "pod Event")
    after = operator(cluster, "/stats")["slurm_hints"]
    assert after["received"] > before["received"] and after["read"] > before["read"], (before, after)


def test_a_tenants_pod_is_allocated_at_once_as_the_tenant(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, cluster: dict[str, str], slurm_env: SlurmEnv,
    tenant_namespace: str,
) -> None:  # fmt: skip
    """Under a TenantPolicy, the job is allocated inside the call (Slurm: SchedSubmit) and runs as
    the tenant, in the tenant's account (docs/tenancy.md#a-tenants-identity-without-the-queue)."""
    tenant, ns = TENANTS["a"], tenant_namespace
    core.create_namespaced_pod(ns, make_pod("tenant"))
    job_id = _bound_job(core, custom, ns, "tenant")
    assert operator(cluster, "/stats/starts")[str(job_id)]["path"] == "allocate"
    job = slurm_job(slurm_env, job_id)
    identity = (job or {}).get("user_name"), (job or {}).get("group_id"), (job or {}).get("account")
    assert identity == (tenant.user, tenant.gid, tenant.accounts[0]), job
    flags = slurm_env.sacct("-X", "-n", "-P", "-j", str(job_id), "--format=Flags")
    assert "SchedSubmit" in flags, f"started inside the allocation call: {flags!r}"
