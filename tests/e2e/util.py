"""Helpers for end-to-end tests: pods, PlaceholderJobs and the Slurm jobs behind them."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import hostlist
import httpx
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.builders import make_pod as build_pod
from tests.harness import CLUSTER_SH, SlurmEnv, Tenant, run, wait_for

API = "/slurm/v0.0.44"
# kwok completes a pod whose annotation says so after that delay (hack/kwok-stages.yaml).
KWOK_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
# With the delay: the pod ends Failed with this exit code (hack/kwok-stages.yaml, pod-fail-annotated).
KWOK_FAIL_EXIT_CODE = "pod-fail.stage.kwok.x-k8s.io/exit-code"


def workload_command(annotations: dict[str, str] | None) -> list[str]:
    """What a test pod's container runs, so that a real kubelet (the kind tier) does what kwok's
    stages do for the same pod: it completes after the delay annotation says, else it runs on (an
    hour); it ends at once on SIGTERM, as kwok's pods do when deleted."""
    delay = (annotations or {}).get(KWOK_COMPLETE_DELAY, "3600s").removesuffix("s")
    code = int((annotations or {}).get(KWOK_FAIL_EXIT_CODE, "0"))
    return ["sh", "-c", f"trap 'exit 0' TERM; sleep {delay} & wait; exit {code}"]


def make_pod(
    name: str,
    *,
    cpu: str = "100m",
    memory: str = "64Mi",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
) -> dict[str, Any]:
    """A pod manifest for the bridge: one container, never restarted. SB_WORKLOAD_IMAGE names an
    image the nodes have (the kind tier sets it); kwok runs nothing."""
    built = build_pod(name).meta(annotations=annotations or {}, labels=labels or {}).spec(restartPolicy="Never")
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
    image = os.environ.get("SB_WORKLOAD_IMAGE", "busybox")
    built.container(
        "main",
        image=image,
        command=workload_command(annotations),
        requests={"cpu": cpu, "memory": memory},
        limits=limits,
    )
    return built.manifest()


def get_phj(custom: k8s.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL, name)
        return obj
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def list_phjs(custom: k8s.CustomObjectsApi, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = custom.list_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL)[
        "items"
    ]
    return items


def read_pod(core: k8s.CoreV1Api, ns: str, name: str) -> k8s.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def slurm_jobs(slurm: SlurmEnv) -> list[dict[str, Any]]:
    r = httpx.get(f"{slurm.url}{API}/jobs", headers=slurm.headers(), timeout=20)
    r.raise_for_status()
    jobs: list[dict[str, Any]] = r.json()["jobs"]
    return jobs


def job_fields(slurm: SlurmEnv, job_id: int) -> dict[str, str]:
    """The job as ``scontrol show job -o`` prints it, KEY=VALUE (a value with spaces is cut)."""
    out = slurm.scontrol("show", "job", str(job_id), "-o")
    return dict(t.split("=", 1) for t in out.split() if "=" in t)


def slurm_job(slurm: SlurmEnv, job_id: int) -> dict[str, Any] | None:
    r = httpx.get(f"{slurm.url}{API}/job/{job_id}", headers=slurm.headers(), timeout=20)
    if r.status_code != 200 or not r.json().get("jobs"):
        return None
    job: dict[str, Any] = r.json()["jobs"][0]
    return job


def refused_allocation(job: dict[str, Any]) -> bool:
    """The record a refused immediate allocation leaves: FAILED at once, never held a node."""
    return job["job_state"] == ["FAILED"] and not job.get("nodes") and job.get("state_reason") == "BadConstraints"


def bridge_jobs_in(slurm: SlurmEnv, ns: str, *, refused: bool = False) -> list[dict[str, Any]]:
    """Slurm jobs the bridge made for PlaceholderJobs in namespace ``ns`` (from admin_comment).

    Records of refused immediate allocations (which never allocated anything, see
    bench/log) are left out unless ``refused``: they are not jobs the bridge holds.
    """
    out = []
    for job in slurm_jobs(slurm):
        if refused_allocation(job) and not refused:
            continue
        comment = job.get("admin_comment") or ""
        if comment.startswith(names.ADMIN_COMMENT_PREFIX):
            ref = json.loads(comment[len(names.ADMIN_COMMENT_PREFIX) :])
            if ref.get("ns") == ns:
                out.append(job | {"_ref": ref})
    return out


def pod_events(core: k8s.CoreV1Api, ns: str, name: str) -> list[k8s.CoreV1Event]:
    events: list[k8s.CoreV1Event] = core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name},involvedObject.kind=Pod"
    ).items
    return events


def has_gate(pod: k8s.V1Pod) -> bool:
    return any(g.name == names.SCHEDULING_GATE for g in (pod.spec.scheduling_gates or []))


def end_workloads(
    ns: str, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    workloads: tuple[tuple[str, str, str], ...],
) -> None:  # fmt: skip
    """Delete the namespace's workloads (of the given custom kinds), Jobs, pods and
    PlaceholderJobs, and wait until their Slurm jobs ended."""
    # The workloads first: while they live, their controllers recreate the pods the bridge ends.
    batch.delete_collection_namespaced_job(ns, propagation_policy="Background")
    for gvp in workloads:
        for obj in custom.list_namespaced_custom_object(gvp[0], gvp[1], ns, gvp[2])["items"]:
            with contextlib.suppress(ApiException):
                custom.delete_namespaced_custom_object(gvp[0], gvp[1], ns, gvp[2], obj["metadata"]["name"])
    core.delete_collection_namespaced_pod(ns)
    # Deleting the PlaceholderJobs runs their finalizer, which cancels the Slurm jobs.
    for phj in list_phjs(custom, ns):
        try:
            name = phj["metadata"]["name"]
            custom.delete_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise
    try:
        wait_for(lambda: not live_jobs(slurm_env, ns), 60, "the test's Slurm jobs to end")
    finally:
        for job in live_jobs(slurm_env, ns):  # never leave an allocation behind
            run(["bash", str(CLUSTER_SH), "slurm", "scancel", str(job["job_id"])], check=False)


def live_jobs(slurm_env: SlurmEnv, ns: str) -> list[dict[str, Any]]:
    done = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
    return [j for j in bridge_jobs_in(slurm_env, ns) if not set(j["job_state"]) & done]


def wait_for_idle_nodes(slurm: SlurmEnv, nodes: list[str], timeout: float = 90) -> None:
    """Wait until no live Slurm job holds any of ``nodes`` (jobs of earlier tests' namespaces end
    as those are deleted); else fail naming the jobs that hold them, so a test that needs the
    whole cluster never waits on something it cannot see."""
    wanted = set(nodes)

    def holders() -> list[str]:
        out = []
        for job in slurm_jobs(slurm):
            if set(job.get("job_state") or []) & {"RUNNING", "SUSPENDED", "COMPLETING"}:
                held = set(hostlist.expand_hostlist(job.get("nodes") or ""))
                if held & wanted:
                    who = f"{job['name']!r} (user {job.get('user_name')}, nodes {job.get('nodes')})"
                    out.append(f"job {job['job_id']} {who}")
        # The handoff's holds of an earlier test's stopping pods: a job that needs whole nodes
        # waits for them as for a job (reason ReqNodeNotAvail, not Resources).
        for line in slurm.scontrol("show", "res", "-o").splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            name, nodes = fields.get("ReservationName", ""), fields.get("Nodes", "")
            live = name.startswith("handoff-") and fields.get("State") == "ACTIVE" and nodes not in ("", "(null)")
            if live and set(hostlist.expand_hostlist(nodes)) & wanted:
                out.append(f"the handoff's hold {name} (nodes {nodes})")
        return out

    try:
        wait_for(lambda: not holders(), timeout, "no Slurm job or handoff hold on the nodes this test needs")
    except AssertionError:
        held = holders()
        raise AssertionError(f"this test needs nodes {sorted(wanted)} free, but after {timeout:.0f}s these still "
                             f"hold them: {'; '.join(held)}") from None  # fmt: skip


class Native:
    """Native batch jobs of the test, cancelled at its end."""

    def __init__(self, slurm: SlurmEnv) -> None:
        self.slurm = slurm
        self.ids: list[int] = []

    def submit(self, tenant: Tenant, *options: str, name: str = "native") -> int:
        """``sbatch --uid`` as root (deprecated in Slurm 26.05, still honoured): the job runs as the
        tenant, in the tenant's default account, sleeping until cancelled."""
        proc = self.slurm.slurm(
            "sbatch", "--parsable", f"--uid={tenant.uid}", f"--gid={tenant.gid}", "-A", tenant.accounts[0],
            "-J", name, "-o", "/dev/null", *options, "--wrap", "exec sleep 3600", check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"sbatch {' '.join(options)} was refused: {proc.stderr.strip()}"
        job_id = int(proc.stdout.strip().split(";")[0])
        self.ids.append(job_id)
        return job_id

    def cancel(self, job_id: int) -> None:
        self.slurm.slurm("scancel", str(job_id), check=False)

    def cancel_all(self) -> None:
        for job_id in self.ids:
            self.cancel(job_id)


def down_partition(slurm: SlurmEnv, prefix: str, nodes: list[str]) -> Iterator[str]:
    """A new DOWN partition over ``nodes`` (its jobs wait, reason PartitionDown), for a fixture to
    yield from; its jobs cancelled and the partition deleted afterwards."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    slurm.scontrol("create", f"PartitionName={name}", f"Nodes={','.join(nodes)}", "State=DOWN")
    yield name
    slurm.slurm("scancel", "--partition", name, check=False)

    def deleted() -> bool:
        return slurm.slurm("scontrol", "delete", f"PartitionName={name}", check=False).returncode == 0

    wait_for(deleted, 60, f"partition {name} deleted (its jobs gone)")
