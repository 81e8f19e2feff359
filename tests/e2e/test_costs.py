"""What a pod costs, counted (not timed) on the real cluster and the real Slurm (issue 39): the
operator's API writes by verb and resource, its Slurm calls by kind and the watch events it
handles, over each pod's whole life (created, running, deleted, its PlaceholderJob gone), for a
plain pod, a tenant's pod, a gang's pods, a coResident pod on a hybrid node and a pod whose job
Slurm queues.

Counts come from the operator's /stats (``kube_writes_by_kind``, ``slurm_requests_by_kind``,
``watch_events``), before and after, once they stopped moving; and the programs slurmctld's hooks
start for the pods' jobs, from strace attached to slurmctld's script daemon. A feature that adds a
call or a write per pod fails here and must change the number below on purpose, in the same
commit, with why.
The polls (job states, nodes, reservations, Slurm's settings, the preemption checks' reads of
running jobs, the reads of pending jobs for their reason) cost per second, not per pod, and the
node controller's and the leader lease's writes are not a pod's: they are left out. Where Slurm's
timing decides (the reads of a queued job), the count is a ceiling and a floor."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import get_phj, make_pod, read_pod
from tests.harness import TENANTS, PrerequisiteMissing, SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
N = 4
PODGROUP = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
# Per second (or per start-up), not per pod: the polls of job states, jobs, nodes and the handoff's
# reservations, Slurm's settings (conf, partitions, QOS, accounts, associations), the health ping.
# And the handoff loop's deletes of holds: a pod the bridge ends itself leaves none (its job is
# marked released), so a delete in the window is an earlier test's stopping pod's.
POLLS = ("GET /ping", "GET /conf", "GET /nodes", "GET /jobs", "GET /reservations", "GET /slurmdb/", "GET /partition",
         "DELETE /reservation")  # fmt: skip
POD_RESOURCES = {"pods", "pods/status", "placeholderjobs", "placeholderjobs/status", "events"}


def stats(cluster: dict[str, str], path: str = "/stats") -> Obj:
    port = (Path(cluster["SB_STATE_DIR"]) / "bridge-operator.port").read_text().strip()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        result: Obj = json.load(r)
    return result


def notices(cluster: dict[str, str], job_ids: list[int]) -> Counter[str]:
    """slurmctld's notices of these jobs that reached the operator, by event (its /stats/starts:
    the first of each kind a job). The hook sends one only where the job's comment asks for it
    (slurm-bridge-notify.sh): an allocated job's start and the end of a job the bridge ended
    itself are not told of."""
    steps = stats(cluster, "/stats/starts")
    c: Counter[str] = Counter()
    for job_id in job_ids:
        for step in ("hint_started", "hint_ended"):
            if step in steps.get(str(job_id), {}):
                c[f"slurm notice {step.removeprefix('hint_')}"] += 1
    return c


HOOK_PROGRAMS = "slurmctld hook programs"


def script_daemon(cluster: dict[str, str]) -> int:
    """The local slurmctld's script daemon (slurmscriptd, a child of slurmctld), which starts every
    PrologSlurmctld and EpilogSlurmctld: not another cluster's (a kind node's slurmctld is in /proc
    too)."""
    ctld = int((Path(cluster["SB_STATE_DIR"]) / "pids" / "slurmctld.pid").read_text().strip())
    for task in Path(f"/proc/{ctld}/task").iterdir():
        for child in (task / "children").read_text().split():
            if Path(f"/proc/{child}/comm").read_text().strip() == "slurmscriptd":
                return int(child)
    raise AssertionError(f"slurmctld ({ctld}) has no slurmscriptd child")


@contextlib.contextmanager
def hook_programs(cluster: dict[str, str]) -> Iterator[Counter[str]]:
    """Counts the programs slurmctld's hooks start (every successful execve under slurmscriptd,
    traced by strace; the hook itself is one): each program start costs slurmctld's host about a
    millisecond of CPU (docs/performance.md#slurmctlds-hooks)."""
    strace = shutil.which("strace")
    if strace is None:
        raise PrerequisiteMissing("strace is not installed (hack/test.sh installs it): apt-get install strace")
    pid = script_daemon(cluster)
    out = Path(cluster["SB_STATE_DIR"]) / f"hook-programs-{pid}.trace"
    tracer = subprocess.Popen(
        [strace, "-f", "-qq", "-e", "trace=execve", "-e", "signal=none", "-o", str(out), "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def traced() -> bool:  # every thread: slurmscriptd may fork a hook from any of them
        for task in Path(f"/proc/{pid}/task").iterdir():
            status = (task / "status").read_text().splitlines()
            if not any(line.split()[1:] == [str(tracer.pid)] for line in status if line.startswith("TracerPid:")):
                return False
        return True

    counted: Counter[str] = Counter()
    try:
        wait_for(traced, 10, f"strace attached to slurmscriptd ({pid})")
        yield counted
    finally:
        tracer.send_signal(signal.SIGINT)
        _, err = tracer.communicate(timeout=30)
    lines = out.read_text().splitlines() if out.exists() else []
    out.unlink(missing_ok=True)
    assert tracer.returncode == 0 or lines, f"strace failed: {err.decode()[-500:]}"
    # an execve that others interrupted is two lines: "execve(... <unfinished ...>", "<... execve resumed>) = 0"
    done = [ln for ln in lines if (" execve(" in ln or "<... execve resumed>" in ln) and ln.rstrip().endswith("= 0")]
    counted[HOOK_PROGRAMS] = len(done)


def pod_counts(s: Obj) -> Counter[str]:
    """The counters that belong to pods: Slurm calls (polls out), the operator's writes to pods,
    PlaceholderJobs and Events, the watch events of pods and PlaceholderJobs."""
    c: Counter[str] = Counter()
    for kind, n in (s.get("slurm_requests_by_kind") or {}).items():
        if not kind.startswith(POLLS):
            c[f"slurm {kind}"] = n
    # Reads that cost per second, not per pod: the handoff loop reads each running job every few
    # seconds for Slurm's preempt_time, the poller reads a pending job again for its reason (a
    # gang's job waited long enough on a loaded CI machine for 5 reads more); and reads whose time
    # Slurm decides: an ended job read once more when MinJobAge drops it from Slurm's list (seen in
    # CI: an earlier test's seven hetjob components, read inside a gang's count); and running jobs
    # read again because another job started or ended on their node (what a job holds can change
    # without its state: docs/security.md, "A job's owner in Slurm").
    reads = ("slurm_preemption_reads", "slurm_reason_reads", "slurm_purge_reads", "slurm_moved_reads")
    c["slurm GET /job/{id}"] -= sum(int(s.get(k, 0)) for k in reads)
    # The cancels: each job cancelled once (the operator's count), in as many calls as ended apart:
    # those that end together go in one (DELETE /jobs/, operator/placeholderjobs/slurmjobs/cancels.py).
    c["slurm cancel calls"] = c.pop("slurm DELETE /job/{id}", 0) + c.pop("slurm DELETE /jobs/", 0)
    c["slurm jobs cancelled"] = int((s.get("slurm_cancels") or {}).get("jobs", 0))
    for kind, n in (s.get("kube_writes_by_kind") or {}).items():
        if kind.split(" ", 1)[1] in POD_RESOURCES:
            c[f"kube {kind}"] = n
    for resource, n in (s.get("watch_events") or {}).items():
        c[f"watch {resource}"] = n
    return c


def settled(cluster: dict[str, str], quiet: float = 3.0, limit: float = 60.0) -> Counter[str]:
    """The pod counters once they have not moved for ``quiet`` seconds (Events are posted in the
    background, a cancel after the pod's end)."""
    deadline = time.monotonic() + limit
    last, since = pod_counts(stats(cluster)), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = pod_counts(stats(cluster))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    raise AssertionError(f"the operator's counters still moved after {limit:.0f}s: {dict(last)}")


def alone(custom: k8s.CustomObjectsApi) -> None:
    """No PlaceholderJob of an earlier test is left (their namespaces' deletions end their jobs in
    the background, which would count here: seen, 5 cancels of an earlier test's pending jobs)."""

    def none() -> bool:
        items = custom.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL)["items"]
        return not items

    wait_for(none, 180, "the PlaceholderJobs of earlier tests to be gone")


def measure(
    cluster: dict[str, str], custom: k8s.CustomObjectsApi, life: Callable[[], list[int]], *, trace_hooks: bool = True
) -> dict[str, float]:
    """Counters per pod over ``life`` (the pods' create to their PlaceholderJobs' end; it returns
    their Slurm jobs), with slurmctld's notices of those jobs, once the PlaceholderJobs of earlier
    tests are gone."""
    alone(custom)
    before = settled(cluster)
    tracing = hook_programs(cluster) if trace_hooks else contextlib.nullcontext(Counter[str]())
    with tracing as programs:
        job_ids = life()
        after = settled(cluster)
    delta = after - before + notices(cluster, job_ids) + programs
    return {k: round(n / N, 2) for k, n in sorted(delta.items()) if n}


def running(custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, ns: str, pods: list[str], phjs: list[str]) -> list[int]:
    """Once the pods are bound and their PlaceholderJobs Running: their Slurm jobs."""

    def up() -> bool:
        bound = all((p := read_pod(core, ns, name)) is not None and p.spec.node_name for name in pods)
        return bound and all(((get_phj(custom, ns, n) or {}).get("status") or {}).get("phase") == "Running"
                             for n in phjs)  # fmt: skip

    wait_for(up, 120, f"pods {pods} bound and PlaceholderJobs {phjs} Running")
    return [int(((get_phj(custom, ns, n) or {}).get("status") or {})["jobId"]) for n in phjs]


def ended(
    custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, ns: str, pods: list[str], phjs: list[str],
    then: Callable[[], object] = lambda: None,
) -> None:  # fmt: skip
    """The pods deleted (then ``then``: their group's own object), until they and the
    PlaceholderJobs are gone."""
    for name in pods:
        core.delete_namespaced_pod(name, ns)
    then()

    def gone() -> bool:
        return all(read_pod(core, ns, p) is None for p in pods) and all(get_phj(custom, ns, n) is None for n in phjs)

    wait_for(gone, 120, f"pods {pods} and PlaceholderJobs {phjs} gone")


def singles(custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, ns: str, manifest: Callable[[str], Obj]) -> list[int]:
    """N pods of one pod each: created, running, deleted, their PlaceholderJobs gone."""
    pods = [f"cost-{i}" for i in range(N)]
    for name in pods:
        core.create_namespaced_pod(ns, manifest(name))
    job_ids = running(custom, core, ns, pods, pods)
    ended(custom, core, ns, pods, pods)
    return job_ids


def events_in(core: k8s.CoreV1Api, ns: str) -> str:
    """The namespace's Events by object kind and reason: what a changed count of Events was."""
    seen = Counter(f"{e.involved_object.kind} {e.reason}" for e in core.list_namespaced_event(ns).items)
    return ", ".join(f"{k} x{n}" for k, n in sorted(seen.items()))


def check(
    got: Mapping[str, float], exact: Mapping[str, float], within: Mapping[str, tuple[float, float]],
    core: k8s.CoreV1Api, ns: str,
) -> None:  # fmt: skip
    """Every counter that moved is named: exactly, or within (floor, ceiling)."""
    problems = [f"{k}: {got.get(k, 0)} per pod, expected {v}" for k, v in exact.items() if got.get(k, 0) != v]
    problems += [f"{k}: {got.get(k, 0)} per pod, expected {lo} to {hi}" for k, (lo, hi) in within.items()
                 if not lo <= got.get(k, 0) <= hi]  # fmt: skip
    problems += [f"{k}: {v} per pod, not expected at all" for k, v in got.items() if k not in exact and k not in within]
    assert not problems, (
        "per-pod costs changed:\n  " + "\n  ".join(problems) + f"\nall: {got}\nEvents in {ns}: {events_in(core, ns)}"
    )


# ---- what each kind of pod costs ------------------------------------------------------------------
# A pod allocated at once. Slurm: its allocation, one read, the released mark (the handoff's
# EpilogSlurmctld is configured) and the cancel; slurmctld's hook tells the operator nothing (the
# allocation's answer said it started, and the bridge ended it itself: the job's comment says so).
# The operator's writes: three to place it (the PlaceholderJob, the pod's release, the status with
# the allocation), three to end it (the status with the pods' end, the `PodsDeleted` Event, the
# finalizer's removal). Watch events (other writers' too, so a floor and a ceiling; 8 and 5
# measured): the pod's create, release, bind, kubelet status, deletion, terminal phase and delete;
# the PlaceholderJob's create, its two status writes, the finalizer's removal and delete.
PLACED: dict[str, float] = {
    "slurm POST /job/allocate": 1, "slurm POST /job/{id}": 1, "slurm jobs cancelled": 1,
    "kube POST placeholderjobs": 1, "kube PATCH pods": 1, "kube POST events": 1, "kube PATCH placeholderjobs": 1,
    # slurmctld's hooks: the handoff script at the job's start and at its end, each leaving in its
    # small shell (no guarded node, no notice due), no other program
    HOOK_PROGRAMS: 2,
}  # fmt: skip
# The read after the allocation, and at most one more: a job read while its PrologSlurmctld still
# runs (CONFIGURING: the handoff's prolog on a node it guards reads the node) is read again once it
# runs (measured: 1 on an idle machine, 1.5 for coResident pods on a fresh clone's first run). No
# notice of slurmctld's hook adds one any more: the hook tells of neither the start nor the end.
# The status with the pods' end is not written when garbage collection deleted the PlaceholderJob
# (its owner, the pod, is gone) before the operator came to it: it is then only finalized
# (measured: 1.75 - 2).
WATCH: dict[str, tuple[float, float]] = {
    "watch pods": (7, 9), "watch placeholderjobs": (4, 6), "slurm GET /job/{id}": (1, 2),
    "kube PATCH placeholderjobs/status": (1, 2),
    # the N pods of a test end together: their cancels go in one call, or one each (N = 4)
    "slurm cancel calls": (0.25, 1),
}  # fmt: skip


def test_a_plain_pod(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, cluster: dict[str, str]) -> None:
    got = measure(cluster, custom, lambda: singles(custom, core, ns, make_pod))
    check(got, PLACED, WATCH, core, ns)


def test_a_coresident_pod_on_a_hybrid_node(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, cluster: dict[str, str], slurm_env: SlurmEnv
) -> None:
    """The same as a plain pod: the handoff adds nothing to a pod's life when the bridge ends it."""

    def manifest(name: str) -> Obj:
        pod = make_pod(name, cpu="1", memory="64Mi",
                       annotations={names.ANN_NODE_SHARING: names.NODE_SHARING_CO_RESIDENT,
                                    names.ANN_PARTITION: slurm_env.hybrid_partition})  # fmt: skip
        pod["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "64Mi"}
        return pod

    # Not traced: strace stops bash's every system call on a guarded node, which slows the
    # handoff's prolog and with it the reads this test counts; what the handoff's programs cost
    # there is bench/hook_cost.py's.
    got = measure(cluster, custom, lambda: singles(custom, core, ns, manifest), trace_hooks=False)
    check(got, {k: v for k, v in PLACED.items() if k != HOOK_PROGRAMS}, WATCH, core, ns)


def test_a_queued_pod(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, cluster: dict[str, str]) -> None:
    """A job that names a group is queued (job/submit): its start is read once slurmctld's hook
    says so, or at a poll; a pending job's reason may be read again before it starts. A start the
    poll's job list (a cost per second) showed first costs no read: the floor is none. The hook
    tells of its start (a notice may be lost: it is a hint), not of the end the bridge made."""
    gid = str(TENANTS["a"].gid)
    got = measure(
        cluster, custom, lambda: singles(custom, core, ns, lambda n: make_pod(n, annotations={names.ANN_GROUP_ID: gid}))
    )
    exact = {k: v for k, v in PLACED.items() if k != "slurm POST /job/allocate"}
    exact["slurm POST /job/submit"] = 1
    # its start's notice: the handoff's small shell checks the hook and its file (stat) and runs it
    exact[HOOK_PROGRAMS] = 4
    check(got, exact, WATCH | {"slurm GET /job/{id}": (0, 3), "slurm notice started": (0, 1)}, core, ns)


def test_a_tenants_pod(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, tenant_namespace: str, cluster: dict[str, str]
) -> None:
    """Allocated as the tenant: a tenant may not set the job's admin comment, so the bridge's
    marker is set right after, with its own token (one POST more)."""
    got = measure(cluster, custom, lambda: singles(custom, core, tenant_namespace, make_pod))
    check(got, PLACED | {"slurm POST /job/{id}": 2}, WATCH, core, tenant_namespace)


def test_a_gangs_pods(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, cluster: dict[str, str]) -> None:
    """A PodGroup of N: one Slurm job and one PlaceholderJob for all N pods, so per pod a quarter
    of a job's calls, one release patch each."""

    def life() -> list[int]:
        group, pods = "cost-gang", [f"gang-{i}" for i in range(N)]
        body = {"apiVersion": "/".join(PODGROUP[:2]), "kind": "PodGroup", "metadata": {"name": group},
                "spec": {"minMember": N}}  # fmt: skip
        custom.create_namespaced_custom_object(PODGROUP[0], PODGROUP[1], ns, PODGROUP[2], body)
        for name in pods:
            core.create_namespaced_pod(ns, make_pod(name, labels={names.LABEL_POD_GROUP: group}))
        phj = f"podgroup-{group}"
        job_ids = running(custom, core, ns, pods, [phj])

        # the PodGroup's PlaceholderJob goes with the PodGroup (its owner)
        def drop_group() -> None:
            custom.delete_namespaced_custom_object(PODGROUP[0], PODGROUP[1], ns, PODGROUP[2], group)

        ended(custom, core, ns, pods, [phj], drop_group)
        return job_ids

    got = measure(cluster, custom, life)
    per_job = 1 / N
    # One Slurm job, one PlaceholderJob and its Events (below) for the N pods; each pod's own
    # release. The gang's PlaceholderJob is written as its members come and go, so those writes
    # grow with N (measured for 4 pods, 3 runs: 9 - 10 spec patches, each member joining and leaving,
    # the finalizer and a retry on a conflict, and 7 status writes, "1 of 4" ... Running ... the
    # end): a floor and a ceiling of 3 patches and 2 status writes a member.
    exact = {
        "slurm POST /job/allocate": per_job, "slurm POST /job/{id}": per_job, "slurm jobs cancelled": per_job,
        "slurm cancel calls": per_job,
        "kube POST placeholderjobs": per_job, "kube PATCH pods": 1, HOOK_PROGRAMS: 2 * per_job,
    }  # fmt: skip
    within = {
        "watch pods": (7, 9), "watch placeholderjobs": (1, 4), "slurm GET /job/{id}": (per_job, 2 * per_job),
        "kube PATCH placeholderjobs": (1, 3), "kube PATCH placeholderjobs/status": (2 * per_job, 2),
        # `PodsDeleted`; or, when the PodGroup's deletion (its PlaceholderJob's, by garbage
        # collection) comes before the pods' end is seen, `WaitingForPods` and then `Cancelled`
        # (seen on a fresh clone's run, 2026-11-30)
        "kube POST events": (per_job, 2 * per_job),
    }  # fmt: skip
    check(got, exact, within, core, ns)
