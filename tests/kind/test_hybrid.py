"""The kind cluster of hack/kind.sh, as issue 29 builds it: its workers are hybrid nodes (a kubelet
and a slurmd each, the Slurm node named as the Kubernetes node), the pod network spans the
workers, and a bridge pod and a native batch job run on one worker at the same time.

Run with SB_CLUSTER=kind (hack/test.sh's kind tier). The co-location tests of the hybrid-nodes
issue are in test_colocation.py, beside this file: they need real slurmd and real containers, which
only this cluster has both of on every Slurm node."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import API, get_phj, make_pod, read_pod, slurm_job
from tests.harness import TENANTS, SlurmEnv, wait_for

KEEP_RUNNING = {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}


def worker_names(core: k8s.CoreV1Api) -> list[str]:
    nodes = core.list_node(label_selector="!node-role.kubernetes.io/control-plane").items
    return sorted(n.metadata.name for n in nodes)


def internal_ip(core: k8s.CoreV1Api, name: str) -> str:
    node = core.read_node(name)
    return str(next(a.address for a in node.status.addresses if a.type == "InternalIP"))


def slurm_nodes(slurm: SlurmEnv) -> dict[str, dict[str, Any]]:
    r = httpx.get(f"{slurm.url}{API}/nodes", headers=slurm.headers(), timeout=20)
    r.raise_for_status()
    return {n["name"]: n for n in r.json()["nodes"]}


def test_every_worker_is_a_slurm_node_of_the_same_name_served_by_its_slurmd(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv
) -> None:
    workers = worker_names(core)
    assert len(workers) >= 2, f"the kind cluster has {len(workers)} workers, want at least 2"
    nodes = slurm_nodes(slurm_env)
    assert sorted(nodes) == workers, f"Slurm's nodes {sorted(nodes)} are not the Kubernetes workers {workers}"
    assert sorted(slurm_env.nodes) == workers, "hack/kind.sh env names other nodes"
    for name in workers:
        node = nodes[name]
        assert "EXTERNAL" not in node["state"], f"{name} is an external node: {node['state']}"
        assert node["state"][0] in ("IDLE", "MIXED", "ALLOCATED"), f"{name} is {node['state']}"
        # Only a registered slurmd reports its version and start time.
        assert node.get("version"), f"{name} has no slurmd version: no slurmd registered it"
        assert node["slurmd_start_time"]["number"] > 0, f"{name}: no slurmd start time"
        assert node["address"] == internal_ip(core, name), f"{name}: Slurm reaches it at another address"


def test_a_bridge_pod_and_a_native_batch_job_run_on_the_same_worker_at_once(
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    managed_namespace: str,
    slurm_env: SlurmEnv,
    kind_bridge: dict[str, str],
) -> None:
    ns = managed_namespace
    # coResident: the pod and the native job share the worker core by core (the default timeShared
    # would have them take turns, tests/e2e/test_node_sharing.py); it needs its limits.
    manifest = make_pod("pod", cpu="100m", annotations={**KEEP_RUNNING, names.ANN_NODE_SHARING: "coResident"})
    manifest["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "100m", "memory": "64Mi"}
    core.create_namespaced_pod(ns, manifest)

    def running() -> tuple[str, int] | None:
        pod, phj = read_pod(core, ns, "pod"), get_phj(custom, ns, "pod")
        status = (phj or {}).get("status") or {}
        if pod is None or pod.status.phase != "Running" or not status.get("jobId"):
            return None
        return str(pod.spec.node_name), int(status["jobId"])

    node, bridge_job = wait_for(running, 120, "the bridge pod Running with its Slurm job")
    # A real container on that worker (not a simulated kubelet): it reports its own host name.
    pod = read_pod(core, ns, "pod")
    assert pod is not None and pod.status.container_statuses[0].state.running is not None
    alice = TENANTS["a"]
    out = slurm_env.slurm("sbatch", "--parsable", f"--uid={alice.uid}", f"--gid={alice.gid}", "-A", alice.accounts[0],
                          "-w", node, "-c", "1", "--mem=64M", "--chdir=/tmp", "-o", "/dev/null",
                          "--wrap", "sleep 300").stdout  # fmt: skip
    native = int(out.strip().split(";")[0])
    try:
        wait_for(
            lambda: (j := slurm_job(slurm_env, native)) and j["job_state"] == ["RUNNING"] and j["nodes"] == node,
            60, f"native job {native} RUNNING on {node}",
        )  # fmt: skip
        job = slurm_job(slurm_env, bridge_job)
        assert job is not None and job["job_state"] == ["RUNNING"] and job["nodes"] == node
        assert "EXTERNAL_JOB" in job["flags"]
        pod = read_pod(core, ns, "pod")
        assert pod is not None and pod.status.phase == "Running" and pod.spec.node_name == node
        state = slurm_nodes(slurm_env)[node]["state"]
        assert "MIXED" in state or "ALLOCATED" in state, f"{node} is {state} with two jobs on it"
        # Accounting records both, side by side: the bridge's job and alice's.
        lines = slurm_env.sacct("-n", "-P", "-X", "-j", f"{bridge_job},{native}",
                                "--format=JobID,User,Account,NodeList,State").splitlines()  # fmt: skip
        rows = {int(f[0]): f[1:] for f in (ln.split("|") for ln in lines) if f[0].isdigit()}
        assert set(rows) == {bridge_job, native}, f"sacct shows {lines}"
        assert rows[native][:3] == [alice.user, alice.accounts[0], node], rows[native]
        assert rows[bridge_job][2] == node and rows[bridge_job][3] == "RUNNING", rows[bridge_job]
    finally:
        slurm_env.slurm("scancel", str(native), check=False)


SERVER = (
    "use IO::Socket::INET; my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die;"
    " $SIG{TERM} = sub { exit 0 }; while (my $c = $s->accept) { my $request = <$c>;"
    ' print $c "HTTP/1.0 200 OK\\r\\n\\r\\nserved by $ENV{NODE}\\n"; close $c }'
)


def pinned_pod(name: str, node: str, command: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A bridge pod on ``node`` (its Slurm node, named by nodeSelector): only the bridge's pods may
    tolerate the managed-node taint of Slurm's nodes (the node guard, docs/security.md)."""
    pod = make_pod(name, cpu="10m", labels=labels)
    container = pod["spec"]["containers"][0]
    container["command"] = command
    container["env"] = [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    pod["spec"] |= {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1}
    return pod


@pytest.fixture
def server(core: k8s.CoreV1Api, managed_namespace: str) -> Iterator[tuple[str, str]]:
    """A tiny HTTP server (perl, which the Slurm image has) on the last worker, behind a Service."""
    namespace = managed_namespace
    node = worker_names(core)[-1]
    core.create_namespaced_pod(namespace, pinned_pod("server", node, ["perl", "-e", SERVER], {"app": "server"}))
    core.create_namespaced_service(namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "server"},
        "spec": {"selector": {"app": "server"}, "ports": [{"port": 80, "targetPort": 8080}]},
    })  # fmt: skip
    pod = wait_for(
        lambda: (p := read_pod(core, namespace, "server")) and p.status.pod_ip and p.status.phase == "Running" and p,
        120, "the server pod Running",
    )  # fmt: skip
    yield node, str(pod.status.pod_ip)


def fetch(cluster: dict[str, str], ns: str, pod: str, host: str, port: int) -> str:
    """An HTTP GET from inside ``pod`` (bash's /dev/tcp; name resolution through cluster DNS)."""
    script = f"exec 3<>/dev/tcp/{host}/{port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 5 cat <&3"
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", cluster["KUBECONFIG"], "-n", ns, "exec", pod, "--", "bash", "-c", script],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return proc.stdout if proc.returncode == 0 else f"failed ({proc.returncode}): {proc.stderr.strip()[-300:]}"


def test_pods_on_different_workers_reach_each_other_directly_and_through_a_service(
    core: k8s.CoreV1Api,
    managed_namespace: str,
    server: tuple[str, str],
    cluster: dict[str, str],
    kind_bridge: dict[str, str],  # the pods are the bridge's
) -> None:
    namespace = managed_namespace
    server_node, server_ip = server
    client_node = worker_names(core)[0]
    assert client_node != server_node
    core.create_namespaced_pod(namespace, pinned_pod("client", client_node, ["sleep", "600"]))
    wait_for(lambda: (p := read_pod(core, namespace, "client")) and p.status.phase == "Running", 120, "client Running")
    for host, port in ((server_ip, 8080), (f"server.{namespace}.svc.cluster.local", 80), ("server", 80)):

        def answered(h: str = host, p: int = port) -> str | None:
            answer = fetch(cluster, namespace, "client", h, p)
            return answer if "served by" in answer else None

        answer = wait_for(answered, 30, f"an answer from {host}:{port} on {client_node}")
        assert f"served by {server_node}" in answer, answer


def test_slurm_and_the_bridge_run_on_the_control_plane_only(core: k8s.CoreV1Api, kind_bridge: dict[str, str]) -> None:
    """Workers are Slurm nodes, which the bridge taints NoExecute: its pods and Slurm's controller stay off them."""
    cp = kind_bridge["SB_BRIDGE_NODE"]
    for ns, selector in (("slurm", "app.kubernetes.io/name!=slurmd"), ("slurm-bridge-system", "")):
        for pod in core.list_namespaced_pod(ns, label_selector=selector).items:
            assert pod.spec.node_name == cp, f"{ns}/{pod.metadata.name} runs on {pod.spec.node_name}"
    taint = names.TAINT_MANAGED_NODE
    for worker in worker_names(core):

        def tainted(w: str = worker) -> bool:
            return any(t.key == taint for t in core.read_node(w).spec.taints or [])

        wait_for(tainted, 60, f"the bridge's {taint} taint on {worker}")
