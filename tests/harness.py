"""Test harness: the local cluster of hack/cluster.sh, seen from Python.

Fixtures in conftest.py use these helpers; nothing here fakes a server.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "hack" / "cluster.sh"
BRIDGE_SH = REPO / "hack" / "bridge.sh"
DEPLOY_SH = REPO / "hack" / "deploy.sh"
KIND_SH = REPO / "hack" / "kind.sh"


def on_kind() -> bool:
    """SB_CLUSTER=kind: the session runs against the kind cluster of hack/kind.sh (the kind tier:
    tests/deployed and tests/kind), not the local cluster of hack/cluster.sh."""
    return os.environ.get("SB_CLUSTER", "local") == "kind"


class PrerequisiteMissing(RuntimeError):
    """A test needs something the machine does not have; the message says what to run."""


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy, or fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # the condition may raise while the system converges
            last_error = e
        if time.monotonic() >= deadline:
            suffix = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{suffix}")
        time.sleep(interval)


async def wait_for_async(check: Callable[[], Any], seconds: float, what: str, interval: float = 0.01) -> Any:
    """wait_for inside an event loop (the code under test runs in its tasks meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not (value := check()):
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {seconds:.0f}s waiting for {what}")
        await asyncio.sleep(interval)
    return value


def holds_for(check: Callable[[], Any], seconds: float, what: str, interval: float = 0.2) -> None:
    """Assert that ``check`` stays truthy for ``seconds`` (polled), naming ``what`` if it does not:
    the counterpart of wait_for for things that must *not* happen for a while."""
    deadline = time.monotonic() + seconds
    while True:
        assert check(), f"{what} stopped holding after {seconds - (deadline - time.monotonic()):.1f}s"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def run(cmd: list[str], check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, text=True, capture_output=True, timeout=timeout)


def cluster_env(script: Path = CLUSTER_SH) -> dict[str, str]:
    """The variables `hack/cluster.sh env` (or `hack/kind.sh env`) prints: kubeconfig, slurmrestd URL,
    token file, nodes."""
    out = run(["bash", str(script), "env"]).stdout
    env: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


# The processes of `hack/cluster.sh status` that a running cluster has (and slurmd_processes).
KUBERNETES_PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SLURM_PROCESSES = ("munged", "mariadb", "slurmdbd", "slurmctld", "slurmrestd")
NODE_PROCESSES = ("containerd", "kubelet", "kube-proxy")


def slurmd_processes(env: dict[str, str]) -> list[str]:
    """The names (in `hack/cluster.sh status`) of the hybrid nodes' slurmd, one per node."""
    missized = [env["SB_MISSIZED_NODE"]] if env.get("SB_MISSIZED_NODE") else []
    return [f"slurmd-{n}" for n in [*env["SB_HYBRID_NODE_NAMES"].split(), env["SB_REAL_NODE"], *missized]]


def process_states() -> dict[str, str]:
    """Each process of `hack/cluster.sh status` and its state (running, dead, stopped)."""
    out = run(["bash", str(CLUSTER_SH), "status"], check=False).stdout
    return {ln.split()[0]: ln.split()[1] for ln in out.splitlines()[1:] if len(ln.split()) > 2}


def cluster_running() -> bool:
    states = process_states()
    needed = [*KUBERNETES_PROCESSES, *SLURM_PROCESSES, *slurmd_processes(cluster_env()), *NODE_PROCESSES]
    return all(states.get(n) == "running" for n in needed)


def ensure_cluster() -> dict[str, str]:
    """Reuse a running cluster or start one (cached builds make that take well under a minute)."""
    if not cluster_running():
        if os.geteuid() != 0:
            raise PrerequisiteMissing("the local cluster is not running and starting it needs root: run "
                                      "`sudo hack/cluster.sh up` first")  # fmt: skip
        proc = run(["bash", str(CLUSTER_SH), "up"], check=False, timeout=3600)
        if proc.returncode != 0:
            raise PrerequisiteMissing(f"`hack/cluster.sh up` failed:\n{proc.stderr[-3000:]}")
    else:
        # A cluster started by an older hack/cluster.sh lacks the nodes that are not in Slurm.
        proc = run(["bash", str(CLUSTER_SH), "nodes"], check=False, timeout=120)
        if proc.returncode != 0:
            raise PrerequisiteMissing(f"`hack/cluster.sh nodes` failed:\n{proc.stderr[-3000:]}")
    return cluster_env()


def ensure_kind_cluster() -> dict[str, str]:
    """The kind cluster, made or reused by `hack/kind.sh up` (which only checks a running one)."""
    if os.geteuid() != 0:
        raise PrerequisiteMissing("the kind tier needs root (podman, debootstrap): run it as root")
    proc = run(["bash", str(KIND_SH), "up"], check=False, timeout=3600)
    if proc.returncode != 0:
        raise PrerequisiteMissing(f"`hack/kind.sh up` failed:\n{proc.stderr[-3000:]}")
    return cluster_env(KIND_SH)


# The logs a failure report shows first: a CI report keeps only the start of a long one.
FIRST_LOGS = ("bridge-operator", "slurmctld")


def log_tails(state_dir: Path, lines: int = 30) -> dict[str, str]:
    """The last lines of every daemon log, for failure reports (FIRST_LOGS first)."""
    tails: dict[str, str] = {}
    first = {name: i for i, name in enumerate(FIRST_LOGS)}
    for log in sorted((state_dir / "logs").glob("*.log"), key=lambda f: (first.get(f.stem, len(first)), f.stem)):
        try:
            text = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        tails[log.stem] = "\n".join(text[-lines:])
    return tails


@dataclass(frozen=True)
class Tenant:
    """A Unix + Slurm user of the local cluster's accounting (hack/cluster.sh makes them with sacctmgr)."""

    user: str
    uid: int
    group: str
    gid: int
    accounts: tuple[str, ...]  # the first is the user's default account
    qos: str  # a QOS with a limit (GrpTRES=cpu=QOS_CPU_LIMIT)


ACCOUNTING_ENV = REPO / "hack" / "accounting.env"


def _accounting() -> tuple[dict[str, Tenant], int]:
    """The tenants hack/cluster.sh creates from hack/accounting.env (the one place both read), as
    "a", "b", ... in their order there, and the CPUs each tenant's QOS allows at once."""
    values = dict(shlex.split(line)[0].split("=", 1) for line in ACCOUNTING_ENV.read_text().splitlines()
                  if line and not line.startswith("#"))  # fmt: skip
    tenants = {}
    for key, word in zip("abcdefgh", values["TENANTS"].split(), strict=False):
        user, uid, group, gid, accounts, qos = word.split(":")
        tenants[key] = Tenant(user, int(uid), group, int(gid), tuple(accounts.split(",")), qos.split(",")[0])
    limit = values["TENANT_QOS_LIMIT"]
    if not limit.startswith("GrpTRES=cpu="):
        raise ValueError(f"{ACCOUNTING_ENV}: TENANT_QOS_LIMIT must be GrpTRES=cpu=N for the tenancy tests, not {limit}")
    return tenants, int(limit.removeprefix("GrpTRES=cpu="))


TENANTS, QOS_CPU_LIMIT = _accounting()


@dataclass
class SlurmEnv:
    """The real Slurm of the local cluster."""

    url: str
    token_file: Path
    partition: str
    nodes: list[str]  # the external nodes of ``partition`` (no slurmd)
    gpu_nodes: list[str]
    root: Path
    state_dir: Path
    hybrid_nodes: list[str] = field(default_factory=list)  # kwok nodes served by a slurmd each
    hybrid_partition: str = ""
    real_node: str = ""  # the real kubelet node, a Slurm node with its own slurmd too
    real_partition: str = ""
    # A hybrid node whose kwok side is half its Slurm size (the SlurmResourcesFit condition's False).
    missized_node: str = ""
    missized_partition: str = ""
    # topology -> the partition placed by it (Topology=): SB_BLOCK_PARTITION, SB_SWITCH_PARTITION.
    topology_partitions: dict[str, str] = field(default_factory=dict)
    _token: str = field(default="", repr=False)
    # How Slurm's commands run: in the local cluster's Slurm root, or in the kind cluster's slurmctld pod.
    slurm_command: tuple[str, ...] = ("bash", str(CLUSTER_SH), "slurm")

    @property
    def slurm_nodes(self) -> list[str]:
        """Every node slurm.conf declares: external, hybrid, the real node and the mis-sized one."""
        extra = [n for n in (self.real_node, self.missized_node) if n]
        return [*self.nodes, *self.hybrid_nodes, *extra]

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def scontrol(self, *args: str) -> str:
        return run([*self.slurm_command, "scontrol", *args]).stdout

    def node_cpus(self, node: str) -> int:
        """The CPUs Slurm counts on ``node`` (CPUTot)."""
        out = self.scontrol("show", "node", node, "-o")
        return int(next(t.split("=", 1)[1] for t in out.split() if t.startswith("CPUTot=")))

    def headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-TOKEN": self.token}

    @property
    def handoff_log(self) -> Path:
        """The handoff script's log (slurm-hooks/slurm-bridge-handoff.sh), in the Slurm root."""
        return self.root / "var" / "log" / "slurm-bridge" / "handoff.log"

    def handoff_log_size(self) -> int:
        """Where the handoff log ends now: what a test reads from, so that lines an earlier Slurm wrote
        for the same job ids (they restart with a fresh slurmctld state) are not taken for its own."""
        return self.handoff_log.stat().st_size if self.handoff_log.exists() else 0

    def handoff_log_since(self, offset: int) -> list[str]:
        """The handoff log's lines written after ``offset`` (``handoff_log_size``)."""
        if not self.handoff_log.exists():
            return []
        with self.handoff_log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace").splitlines()

    def sacct(self, *args: str) -> str:
        """``sacct`` (hack/cluster.sh slurm sacct, or hack/kind.sh's): accounting as slurmdbd records it."""
        return run([*self.slurm_command, "sacct", *args]).stdout

    def slurm(self, command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Any Slurm client command (sbatch, squeue, scancel, ...) where this Slurm runs."""
        return run([*self.slurm_command, command, *args], check=check)

    def native(
        self, user: str, *command: str, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm command run by ``user`` (a tenant's Unix user) in Slurm's root, as a user on a
        login node would (`hack/cluster.sh slurm --as USER ...`): sbatch, salloc, srun, squeue, ...
        The result is returned whatever its exit status; callers assert on it."""
        cmd = ["bash", str(CLUSTER_SH), "slurm", "--as", user, *command]
        return subprocess.run(cmd, input=stdin, text=True, capture_output=True, timeout=timeout, check=False)


def slurm_env_from(env: dict[str, str]) -> SlurmEnv:
    return SlurmEnv(
        url=env["SLURM_REST_URL"],
        token_file=Path(env["SLURM_JWT_FILE"]),
        partition=env["SB_PARTITION"],
        nodes=env["SB_NODE_NAMES"].split(),
        gpu_nodes=env["SB_GPU_NODE_NAMES"].split(),
        root=Path(env.get("SLURM_ROOT", "")),
        state_dir=Path(env["SB_STATE_DIR"]),
        hybrid_nodes=env.get("SB_HYBRID_NODE_NAMES", "").split(),
        hybrid_partition=env.get("SB_HYBRID_PARTITION", ""),
        real_node=env.get("SB_REAL_NODE", ""),
        real_partition=env.get("SB_REAL_NODE_PARTITION", ""),
        missized_node=env.get("SB_MISSIZED_NODE", ""),
        missized_partition=env.get("SB_MISSIZED_PARTITION", ""),
        topology_partitions={
            t: p for t, p in (("block", env.get("SB_BLOCK_PARTITION")), ("switch", env.get("SB_SWITCH_PARTITION"))) if p
        },
        slurm_command=("bash", str(KIND_SH if env.get("SB_CLUSTER") == "kind" else CLUSTER_SH), "slurm"),
    )


# What hack/demo.sh leaves running (examples/demo.yaml): its namespace, and its jobs in Slurm.
DEMO_NAMESPACE = "slurm-bridge-demo"
MANAGED_LABEL = "slurm-bridge.local/managed"
LIVE_JOB_STATES = {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING"}


def clean_slate(env: dict[str, str], timeout: float = 90) -> None:
    """Make the cluster whole before a session: what the demo or an aborted run left behind (the
    demo's namespace, managed test namespaces, their Slurm jobs) is removed, so that no test waits
    on nodes something it cannot see still holds.

    The namespaces go first, while whatever bridge made their jobs still runs and ends them;
    PlaceholderJobs no bridge finalizes in time lose their finalizer. Every live Slurm job left
    is then cancelled (the local Slurm serves only these tests).
    """
    import httpx
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    try:
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        stale = [
            n.metadata.name
            for n in core.list_namespace().items
            if n.metadata.name == DEMO_NAMESPACE or (n.metadata.labels or {}).get(MANAGED_LABEL) == "true"
        ]
        for name in stale:
            _found(core.delete_namespace, name)

        def left() -> list[str]:
            return [n for n in stale if _found(core.read_namespace, n)]

        deadline = time.monotonic() + timeout
        while left() and time.monotonic() < deadline:
            time.sleep(0.5)
        for ns in left():  # no bridge ended them: let the namespaces go
            for phj in custom.list_namespaced_custom_object("slinky.slurm.net", "v1alpha1", ns, "placeholderjobs")[
                "items"
            ]:
                _found(custom.patch_namespaced_custom_object, "slinky.slurm.net", "v1alpha1", ns, "placeholderjobs",
                       phj["metadata"]["name"], {"metadata": {"finalizers": None}})  # fmt: skip
    finally:
        api.close()
    headers = {"X-SLURM-USER-TOKEN": Path(env["SLURM_JWT_FILE"]).read_text().strip()}
    api_url = f"{env['SLURM_REST_URL']}/slurm/v0.0.44"

    def live() -> list[int]:
        jobs = httpx.get(f"{api_url}/jobs", headers=headers, timeout=30).raise_for_status().json()["jobs"]
        return [j["job_id"] for j in jobs if set(j.get("job_state") or []) & LIVE_JOB_STATES]

    for job_id in live():
        httpx.delete(f"{api_url}/job/{job_id}", headers=headers, timeout=30)
    wait_for(lambda: not live(), timeout, "every Slurm job left by an earlier run (or the demo) to end")


def _found(call: Callable[..., Any], *args: Any) -> bool:
    """Run a Kubernetes call; False when its object does not exist (any other error is raised)."""
    from kubernetes.client.exceptions import ApiException

    try:
        call(*args)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def cluster_minor() -> int:
    """The Kubernetes minor of the local cluster: the one running, else the one `hack/cluster.sh up`
    will start (SB_KUBERNETES or the default of hack/versions.env)."""
    out = run(["bash", "-c", f'. "{REPO}/hack/lib.sh" && echo "$KUBERNETES_MINOR"'], check=False, timeout=60)
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise PrerequisiteMissing(f"cannot read the Kubernetes version from hack/lib.sh: {out.stderr[-1000:]}")
    return int(out.stdout.strip())


# ---- native Slurm work on the hybrid nodes (slurmd; hack/cluster/slurmd.sh) ---------------------
SACCT_FIELDS = ("JobID", "State", "User", "Account", "Partition", "NodeList", "ExitCode")


def sbatch_as(slurm: SlurmEnv, user: str, script: str, *options: str) -> int:
    """Submit a batch script as ``user`` (`sbatch --parsable OPTIONS` reading the script on stdin)
    and return its job id; a refused submission fails with Slurm's own message."""
    proc = slurm.native(user, "sbatch", "--parsable", *options, stdin=script)
    assert proc.returncode == 0, f"sbatch as {user} {' '.join(options)} was refused: {proc.stderr.strip()}"
    return int(proc.stdout.strip().split(";")[0])


def sacct_record(slurm: SlurmEnv, job_id: int) -> dict[str, str] | None:
    """The job's allocation as slurmdbd recorded it (sacct -X), or None while it has no record."""
    out = slurm.sacct("-j", str(job_id), "-X", "-n", "-P", "-o", ",".join(SACCT_FIELDS))
    for line in out.splitlines():
        record = dict(zip(SACCT_FIELDS, line.split("|"), strict=False))
        if record.get("JobID") == str(job_id):
            return record
    return None


def squeue_state(slurm: SlurmEnv, job_id: int) -> str:
    """The job's state as slurmctld sees it now (squeue), or "" once it has left the queue."""
    out = run(["bash", str(CLUSTER_SH), "slurm", "squeue", "-h", "-j", str(job_id), "-o", "%T"], check=False)
    return out.stdout.strip()
