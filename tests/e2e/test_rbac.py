"""The chart's RBAC is enough, and only what is needed: the local bridge runs as the chart's
ServiceAccounts (hack/bridge.sh's SB_IMPERSONATE mode) through the core scenario, and no
component logs an RBAC denial. The normal mode is restored afterwards."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.e2e.util import get_phj, make_pod, read_pod, slurm_job
from tests.harness import BRIDGE_SH, SlurmEnv, wait_for
from tests.unit.test_chart import CHART, helm, pinned_kube_version

pytestmark = pytest.mark.usefixtures("bridge")

# Started in this order; the operator last, once everything it hands pods to is up.
RESTART_ORDER = ("extender", "scheduler", "webhook", "operator")
# What the apiserver and the clients say when RBAC denies a request (not other 403s, such as
# "unable to create new content in namespace ... because it is being terminated").
RBAC_DENIAL = re.compile(r'is forbidden: User "|cannot \w+ resource "|Not enough permissions', re.I)


@dataclass(frozen=True)
class ChartIdentity:
    namespace: str
    fullname: str
    manifest: str
    bridge_dir: Path
    logs: Path
    log_offsets: dict[str, int]  # each bridge log's size before the restarts

    def sa(self, component: str) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}-{component}"


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def _bridge(component: str, impersonate: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SB_IMPERSONATE"}
    if impersonate:
        env["SB_IMPERSONATE"] = impersonate
    proc = subprocess.run(
        ["bash", str(BRIDGE_SH), "restart", component], capture_output=True, text=True, timeout=300, env=env
    )
    mode = f"as {impersonate}" if impersonate else "normally"
    assert proc.returncode == 0, f"hack/bridge.sh restart {component} ({mode}) failed:\n{proc.stderr[-3000:]}"


@contextlib.contextmanager
def _exclusive(lock_file: Path, timeout: float = 900) -> Iterator[None]:
    """One impersonating run at a time per cluster (test sessions may share the cluster)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("w") as f:
        wait_for(lambda: _try_lock(f.fileno()), timeout, f"the lock {lock_file} (another impersonating run)", 1.0)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@pytest.fixture
def as_chart_accounts(core: k8s.CoreV1Api, cluster: dict[str, str]) -> Iterator[ChartIdentity]:
    """The chart's ServiceAccounts and RBAC applied, and the bridge running as them."""
    with _exclusive(Path(cluster["SB_STATE_DIR"]) / "bridge" / "impersonate.lock"):
        yield from _as_chart_accounts(core, cluster)


def _as_chart_accounts(core: k8s.CoreV1Api, cluster: dict[str, str]) -> Iterator[ChartIdentity]:
    tag = secrets.token_hex(3)
    ns, fullname = f"rbac-{tag}", f"sbr-{tag}"
    # The Lease names follow bridgeId and schedulerName, which must be the local bridge's.
    proc = helm(
        "template", fullname, str(CHART), "-n", ns, "--set", f"fullnameOverride={fullname}",
        "--set", "config.bridgeId=slurm-bridge", "--set", "config.schedulerName=slurm-bridge",
        "--show-only", "templates/serviceaccounts.yaml", "--show-only", "templates/rbac.yaml",
        "--kube-version", pinned_kube_version(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    state = Path(cluster["SB_STATE_DIR"])
    ident = ChartIdentity(ns, fullname, proc.stdout, state / "bridge", state / "logs", _log_sizes(state / "logs"))
    kc = cluster["KUBECONFIG"]
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    try:
        applied = _kubectl(kc, "apply", "-f", "-", stdin=ident.manifest)
        assert applied.returncode == 0, applied.stderr
        try:
            for c in RESTART_ORDER:
                _bridge(c, f"{ns}/{fullname}")
            yield ident
        finally:
            errors = []
            for c in RESTART_ORDER:  # every component, even if one fails to come back
                try:
                    _bridge(c, None)
                except AssertionError as e:
                    errors.append(str(e))
            assert not errors, "restoring the normal mode failed:\n" + "\n".join(errors)
    finally:
        _kubectl(kc, "delete", "--ignore-not-found", "-f", "-", stdin=ident.manifest)
        try:
            core.delete_namespace(ns)
        except ApiException as e:
            if e.status != 404:
                raise


def _log_sizes(logs: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_size for p in logs.glob("bridge-*.log")}


def test_bridge_runs_the_core_scenario_with_only_the_charts_rbac(
    as_chart_accounts: ChartIdentity,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    api_client: k8s.ApiClient,
    managed_namespace: str,
    slurm_env: SlurmEnv,
) -> None:
    ident = as_chart_accounts
    # Each component really is its ServiceAccount, and only that.
    for component in ("operator", "extender", "scheduler"):
        kc = str(ident.bridge_dir / f"kubeconfig-sa-{component}")
        who = _kubectl(kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        assert who.returncode == 0, who.stderr
        assert who.stdout == ident.sa(component), f"{component} runs as {who.stdout!r}"
        denied = _kubectl(kc, "auth", "can-i", "get", "secrets", "-n", "kube-system")
        assert denied.stdout.strip() == "no", f"{component} may read Secrets: not least privilege"
    config = (ident.bridge_dir / "config-sa.yaml").read_text()
    assert ident.sa("operator") in config, "the webhook trusts the operator's ServiceAccount"

    # pod -> PlaceholderJob -> Slurm job -> bound, Running pod
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("rbac"))
    phj: dict[str, Any] = wait_for(
        lambda: (p := get_phj(custom, ns, "rbac")) and (p.get("status") or {}).get("phase") == "Running" and p,
        60, "PlaceholderJob Running",
    )  # fmt: skip
    job_id = phj["status"]["jobId"]
    pod = wait_for(lambda: (p := read_pod(core, ns, "rbac")) and p.status.phase == "Running" and p, 60, "pod Running")
    job = slurm_job(slurm_env, job_id)
    assert job is not None and job["job_state"] == ["RUNNING"]
    assert pod.spec.node_name == job["nodes"], "bound to the node Slurm allocated"
    assert pod.spec.scheduler_name == "slurm-bridge"

    # Both leaders hold their Lease in the chart's namespace.
    leases = k8s.CoordinationV1Api(api_client).list_namespaced_lease(ident.namespace).items
    assert {lease.metadata.name for lease in leases} >= {"slurm-bridge-operator", "slurm-bridge-scheduler"}

    # delete -> PlaceholderJob finalized -> Slurm job cancelled
    core.delete_namespaced_pod("rbac", ns)
    wait_for(lambda: get_phj(custom, ns, "rbac") is None, 60, "PlaceholderJob gone")
    ended = wait_for(
        lambda: (j := slurm_job(slurm_env, job_id)) and j["job_state"] != ["RUNNING"] and j, 60, "Slurm job ended"
    )
    assert ended["job_state"] == ["CANCELLED"]

    # No component was denied anything since it restarted as its ServiceAccount (start-up included).
    denials = {}
    for log in sorted(ident.logs.glob("bridge-*.log")):
        with log.open("rb") as f:
            f.seek(ident.log_offsets.get(log.stem, 0))
            text = f.read().decode(errors="replace")
        hits = [line for line in text.splitlines() if RBAC_DENIAL.search(line)]
        if hits:
            denials[log.stem] = hits[:5]
    assert not denials, f"RBAC denials in the component logs: {denials}"


def _cmdline(state: Path, name: str) -> list[str]:
    pid = (state / "pids" / f"{name}.pid").read_text().strip()
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def test_restart_without_the_variable_is_the_normal_mode(cluster: dict[str, str]) -> None:
    """After the scenario above, every component runs with the bridge's own kubeconfig again."""
    state = Path(cluster["SB_STATE_DIR"])
    with _exclusive(state / "bridge" / "impersonate.lock"):  # not while another session impersonates
        _assert_normal_mode(state)


def _assert_normal_mode(state: Path) -> None:
    normal_kc, normal_cfg = str(state / "kubeconfig-bridge"), str(state / "bridge" / "config.yaml")
    operator = _cmdline(state, "bridge-operator")
    assert operator[operator.index("--kubeconfig") + 1] == normal_kc
    assert operator[operator.index("--lease-namespace") + 1] == "default"
    assert operator[operator.index("--config") + 1] == normal_cfg
    extender = _cmdline(state, "bridge-extender")
    assert extender[extender.index("--kubeconfig") + 1] == normal_kc
    webhook = _cmdline(state, "bridge-webhook")
    assert webhook[webhook.index("--config") + 1] == normal_cfg
    scheduler_cfg = (state / "bridge" / "kube-scheduler.yaml").read_text()
    assert f"kubeconfig: {normal_kc}" in scheduler_cfg and "leaderElect: false" in scheduler_cfg
    assert not list((state / "pids").glob("bridge-*-proxy.pid")), "the impersonating proxies are stopped"
