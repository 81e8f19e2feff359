"""The shipped form, for real: the image built from the Dockerfile, installed with `helm install`
(hack/deploy.sh, as docs/quickstart.md shows), 2 operator and 2 webhook replicas on the local
cluster's real node, with only the chart's ServiceAccounts and RBAC, a real JWT Secret and a
slurmrestd URL pods reach. Everything is observed through kubectl-level interfaces and Slurm.

The kind tier (SB_CLUSTER=kind) runs the same tests on the kind cluster: the bridge on its control
plane, the pods really running on the hybrid workers (tests/e2e/util.make_pod gives them a command
that does what kwok's stages do).

The tests run in file order: the release is installed once (conftest.py), then upgraded, given
bad input and rolled back, and uninstalled last."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.deployed.conftest import Deployed, deploy
from tests.e2e.util import bridge_jobs_in, get_phj, has_gate, list_phjs, make_pod, read_pod, slurm_job
from tests.harness import SlurmEnv, wait_for
from tests.repo.test_chart import helm

pytestmark = pytest.mark.usefixtures("deployed")

KEEP_RUNNING = {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}
COMPLETE_SOON = {"pod-complete.stage.kwok.x-k8s.io/delay": "3s"}
# Each pod is a Slurm job of at least one CPU whatever it asks for; on kind its request also has to
# fit the kubelet's allocatable, the few cores of this machine, 60 pods at once.
POD_CPU = "10m"
LEASE_SECONDS = 15  # the operator's Lease duration (operator/runtime/leader.py)
# What the API server says when RBAC denies a request (not other 403s).
RBAC_DENIAL = re.compile(r'is forbidden: User "|cannot \w+ resource "|Not enough permissions', re.I)


# ---- helpers -------------------------------------------------------------------------------------
def component_pods(core: k8s.CoreV1Api, d: Deployed, component: str) -> list[k8s.V1Pod]:
    selector = f"app.kubernetes.io/instance={d.release},app.kubernetes.io/component={component}"
    pods: list[k8s.V1Pod] = core.list_namespaced_pod(d.namespace, label_selector=selector).items
    return pods


def is_ready(pod: k8s.V1Pod) -> bool:
    return pod.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])
    )


def ready_count(core: k8s.CoreV1Api, d: Deployed, component: str) -> int:
    return sum(is_ready(p) for p in component_pods(core, d, component))


def wait_all_ready(core: k8s.CoreV1Api, d: Deployed, timeout: float = 120) -> None:
    want = {"operator": 2, "webhook": 2, "scheduler": 1}
    wait_for(
        lambda: all(ready_count(core, d, c) == n and len(component_pods(core, d, c)) == n for c, n in want.items()),
        timeout,
        f"exactly {want} Ready bridge pods",
    )


def lease_holder(api: k8s.ApiClient, d: Deployed) -> str:
    lease = k8s.CoordinationV1Api(api).read_namespaced_lease("slurm-bridge-operator", d.namespace)
    return str(lease.spec.holder_identity or "")


def pod_logs(d: Deployed, pod: str, container: str | None = None, previous: bool = False) -> str:
    args = (
        ["-n", d.namespace, "logs", pod]
        + (["-c", container] if container else [])
        + (["--previous"] if previous else [])
    )
    proc = d.kubectl(*args)
    return proc.stdout if proc.returncode == 0 else ""


def run_pods(core: k8s.CoreV1Api, ns: str, names_: list[str], annotations: dict[str, str]) -> None:
    for name in names_:
        core.create_namespaced_pod(ns, make_pod(name, cpu=POD_CPU, annotations=annotations))


def running_with_job(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, name: str) -> int | None:
    """The pod's Slurm job id once it runs on the node its PlaceholderJob's job was given."""
    pod, phj = read_pod(core, ns, name), get_phj(custom, ns, name)
    if pod is None or phj is None or pod.status.phase != "Running":
        return None
    status = phj.get("status") or {}
    if status.get("phase") != "Running" or not status.get("jobId"):
        return None
    return int(status["jobId"])


def wait_running(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, names_: list[str],
                 timeout: float = 90) -> dict[str, int]:  # fmt: skip
    jobs: dict[str, int] = {}

    def all_running() -> bool:
        for n in names_:
            if n not in jobs and (job := running_with_job(core, custom, ns, n)) is not None:
                jobs[n] = job
        return len(jobs) == len(names_)

    wait_for(all_running, timeout, f"pods {names_} in {ns} Running with their Slurm jobs")
    return jobs


def assert_one_job_per_placeholderjob(custom: k8s.CustomObjectsApi, slurm: SlurmEnv, ns: str) -> None:
    """No duplicate and no orphan: exactly one live Slurm job per PlaceholderJob, and it is the
    one the PlaceholderJob's status names."""
    live = [j for j in bridge_jobs_in(slurm, ns) if j["job_state"] in (["RUNNING"], ["PENDING"])]
    per_phj = Counter(j["_ref"]["name"] for j in live)
    duplicates = {n: c for n, c in per_phj.items() if c > 1}
    assert not duplicates, f"more than one live Slurm job for PlaceholderJobs {duplicates}"
    phjs = {p["metadata"]["name"]: (p.get("status") or {}).get("jobId") for p in list_phjs(custom, ns)}
    orphans = sorted(set(per_phj) - set(phjs))
    assert not orphans, f"live Slurm jobs without a PlaceholderJob: {orphans}"
    for job in live:
        assert phjs[job["_ref"]["name"]] == job["job_id"], f"{job['_ref']['name']}: status names another job"


# ---- the tests, in order -------------------------------------------------------------------------
def test_the_chart_runs_the_built_image_on_the_real_node(
    core: k8s.CoreV1Api, deployed: Deployed, cluster: dict[str, str]
) -> None:
    wait_all_ready(core, deployed)
    image = f"localhost/slurm-bridge:{deployed.image_tag}"
    # The node the values put the bridge on: the local cluster's real node, kind's control plane.
    bridge_node = cluster.get("SB_BRIDGE_NODE") or cluster["SB_REAL_NODE"]
    for component in ("operator", "webhook", "scheduler"):
        for pod in component_pods(core, deployed, component):
            assert pod.spec.node_name == bridge_node, f"{pod.metadata.name} is not on {bridge_node}"
            for c in pod.status.container_statuses:
                assert c.ready and c.state.running, f"{pod.metadata.name}/{c.name} is not running"
            bridge = [c for c in pod.spec.containers if c.name != "kube-scheduler"]
            assert all(c.image == image for c in bridge), f"{pod.metadata.name} does not run {image}"
            assert pod.spec.security_context.run_as_user == 65532 and pod.spec.security_context.run_as_non_root
    # The API server reaches the webhook through its Service: two ready endpoints.
    slices = k8s.DiscoveryV1Api(core.api_client).list_namespaced_endpoint_slice(
        deployed.namespace, label_selector=f"kubernetes.io/service-name={deployed.release}-webhook"
    )
    ready = [e for s in slices.items for e in s.endpoints or [] if e.conditions.ready]
    assert len(ready) == 2, f"the webhook Service has {len(ready)} ready endpoints, want 2"


def test_pipeline_through_the_chart_installed_bridge(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("p", cpu=POD_CPU, annotations=COMPLETE_SOON))
    (job_id,) = wait_running(core, custom, ns, ["p"]).values()
    pod = read_pod(core, ns, "p")
    assert pod is not None and pod.spec.scheduler_name == "slurm-bridge" and not has_gate(pod)
    job = slurm_job(slurm_env, job_id)
    assert job is not None and "EXTERNAL_JOB" in job["flags"]
    assert job["nodes"] == pod.spec.node_name, "bound to exactly the node Slurm allocated"
    assert pod.spec.node_name in slurm_env.nodes, "a Slurm node (kwok's, or a kind worker), never the bridge's node"
    # The pod completes (kwok, or its command on kind), and its Slurm job ends with it.
    wait_for(lambda: (p := read_pod(core, ns, "p")) and p.status.phase == "Succeeded", 60, "pod Succeeded")
    wait_for(
        lambda: (get_phj(custom, ns, "p") or {}).get("status", {}).get("phase") == "Completed", 60,
        "PlaceholderJob Completed",
    )  # fmt: skip
    wait_for(
        lambda: (j := slurm_job(slurm_env, job_id)) is None or j["job_state"] not in (["RUNNING"], ["PENDING"]),
        60, f"Slurm job {job_id} to end",
    )  # fmt: skip


def test_leader_failover_loses_nothing_and_duplicates_nothing(
    api_client: k8s.ApiClient,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    managed_namespace: str,
    slurm_env: SlurmEnv,
    deployed: Deployed,
) -> None:
    ns = managed_namespace
    wait_all_ready(core, deployed)
    before = [f"before-{i}" for i in range(5)]
    run_pods(core, ns, before, KEEP_RUNNING)
    jobs = wait_running(core, custom, ns, before)

    old_holder = lease_holder(api_client, deployed)
    leader_pod = old_holder.rsplit("_", 1)[0]
    assert leader_pod in {p.metadata.name for p in component_pods(core, deployed, "operator")}, old_holder
    deleted = time.monotonic()
    core.delete_namespaced_pod(leader_pod, deployed.namespace)  # SIGTERM, 30 s grace: as a rollout does
    during = [f"during-{i}" for i in range(10)]
    run_pods(core, ns, during, KEEP_RUNNING)  # created while the leader goes away
    new_holder = wait_for(
        lambda: (h := lease_holder(api_client, deployed)) and h != old_holder and h, 60, "a new operator leader"
    )
    takeover = time.monotonic() - deleted
    print(f"\nfailover: {new_holder} took the Lease {takeover:.2f}s after {leader_pod} was deleted")
    assert takeover < LEASE_SECONDS, (
        f"the standby took over after {takeover:.1f}s: the old leader did not release its Lease on SIGTERM "
        f"(a {LEASE_SECONDS}s expiry is what release avoids)"
    )
    jobs |= wait_running(core, custom, ns, during, timeout=120)
    print(f"failover: all {len(jobs)} pods running {time.monotonic() - deleted:.2f}s after the deletion")
    assert len(set(jobs.values())) == len(jobs), "two pods share a Slurm job"
    for name in before:
        phj = get_phj(custom, ns, name)
        assert phj is not None and phj["status"]["jobId"] == jobs[name], f"{name}: the takeover resubmitted it"
    assert_one_job_per_placeholderjob(custom, slurm_env, ns)
    wait_all_ready(core, deployed)  # the Deployment replaced the deleted pod; it stands by


def test_a_deleted_webhook_pod_lets_no_managed_pod_through_unmanaged(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, deployed: Deployed
) -> None:
    ns = managed_namespace
    wait_all_ready(core, deployed)
    victim = component_pods(core, deployed, "webhook")[0].metadata.name
    created: list[str] = []
    refused: list[str] = []
    started = threading.Event()

    def create_pods() -> None:
        api = k8s.CoreV1Api(core.api_client)
        for i in range(60):
            if i == 5:
                started.set()
            try:
                api.create_namespaced_pod(ns, make_pod(f"w-{i}", cpu=POD_CPU, annotations=KEEP_RUNNING))
                created.append(f"w-{i}")
            except ApiException as e:
                refused.append(f"w-{i}: {e.status} {e.reason}: {(e.body or '')[:300]}")
            time.sleep(0.1)

    creator = threading.Thread(target=create_pods)
    creator.start()
    assert started.wait(60)
    core.delete_namespaced_pod(victim, deployed.namespace)
    creator.join(180)
    print(f"\nwebhook deletion: {len(created)} pods created, {len(refused)} refused: {refused}")
    assert len(created) + len(refused) == 60
    unmanaged = []
    for name in created:
        pod = read_pod(core, ns, name)
        assert pod is not None
        # The pods ask for no scheduler: "slurm-bridge" is the webhook's mutation (one patch with the
        # gate). The gate alone proves nothing late: the operator lifts it once Slurm allocates,
        # and the pod is gateless and unbound until the extender binds it (wait_running below).
        if pod.spec.scheduler_name != "slurm-bridge":
            unmanaged.append(name)
    assert not unmanaged, f"pods created without the bridge's mutation: {unmanaged}"
    # failurePolicy Fail refuses rather than lets through; with the drain the deletion refuses none.
    assert not refused, f"pod creations refused while a webhook replica stopped: {refused}"
    wait_running(core, custom, ns, created, timeout=180)
    wait_all_ready(core, deployed)


def test_helm_upgrade_rolls_the_pods_and_keeps_every_placeholderjob(
    api_client: k8s.ApiClient,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    managed_namespace: str,
    slurm_env: SlurmEnv,
    deployed: Deployed,
) -> None:
    ns = managed_namespace
    wait_all_ready(core, deployed)
    admission = k8s.AdmissionregistrationV1Api(api_client)
    ca_before = admission.read_mutating_webhook_configuration(deployed.release).webhooks[0].client_config.ca_bundle
    before = [f"u-{i}" for i in range(5)]
    run_pods(core, ns, before, KEEP_RUNNING)
    jobs = wait_running(core, custom, ns, before)
    pods_before = {
        p.metadata.name for c in ("operator", "webhook", "scheduler") for p in component_pods(core, deployed, c)
    }

    proc = helm("upgrade", *deployed.helm_args("--set", "config.pollPeriodSeconds=0.5", "--wait", "--timeout", "5m"),
                env=deployed.env, timeout=400)  # fmt: skip
    assert proc.returncode == 0, f"helm upgrade failed:\n{proc.stderr}"
    for c in ("operator", "webhook", "scheduler"):
        rollout = deployed.kubectl("-n", deployed.namespace, "rollout", "status", f"deploy/{deployed.release}-{c}",
                                   "--timeout=180s", timeout=200)  # fmt: skip
        assert rollout.returncode == 0, rollout.stderr
    wait_all_ready(core, deployed)
    pods_after = {
        p.metadata.name for c in ("operator", "webhook", "scheduler") for p in component_pods(core, deployed, c)
    }
    assert not pods_before & pods_after, f"pods not rolled by the config change: {pods_before & pods_after}"
    config = core.read_namespaced_config_map(f"{deployed.release}-config", deployed.namespace).data["config.yaml"]
    assert "pollPeriodSeconds: 0.5" in config
    # The generated webhook CA is kept, so the registered caBundle stays valid.
    assert (
        admission.read_mutating_webhook_configuration(deployed.release).webhooks[0].client_config.ca_bundle == ca_before
    )

    for name in before:
        phj = get_phj(custom, ns, name)
        assert phj is not None, f"PlaceholderJob {name} lost in the upgrade"
        assert phj["status"]["jobId"] == jobs[name] and phj["status"]["phase"] == "Running", name
    after = [f"v-{i}" for i in range(3)]
    run_pods(core, ns, after, KEEP_RUNNING)
    jobs |= wait_running(core, custom, ns, after)
    assert_one_job_per_placeholderjob(custom, slurm_env, ns)


def _bad_upgrade(d: Deployed, *settings: str) -> None:
    """An upgrade whose new operator pods cannot work: no --wait, the rollout stalls on them."""
    args = [a for s in settings for a in ("--set", s)]
    proc = helm("upgrade", *d.helm_args(*args), env=d.env, timeout=120)
    assert proc.returncode == 0, f"helm upgrade failed:\n{proc.stderr}"


def _rollback(core: k8s.CoreV1Api, d: Deployed) -> None:
    proc = helm("rollback", d.release, "--namespace", d.namespace, "--wait", "--timeout", "5m", env=d.env, timeout=400)
    assert proc.returncode == 0, f"helm rollback failed:\n{proc.stderr}"
    wait_all_ready(core, d, timeout=180)


def _new_operator_pod_not_ready(core: k8s.CoreV1Api, d: Deployed, old: set[str], words: str) -> str:
    """The new ReplicaSet's operator pod: running, not Ready, its log naming ``words``."""

    def found() -> str | None:
        for pod in component_pods(core, d, "operator"):
            if pod.metadata.name in old or pod.status.phase != "Running" or pod.metadata.deletion_timestamp:
                continue
            if words in pod_logs(d, pod.metadata.name):
                return str(pod.metadata.name)
        return None

    name: str = wait_for(found, 120, f"a new operator pod whose log names {words!r}")
    pod = core.read_namespaced_pod(name, d.namespace)
    assert not is_ready(pod), f"{name} is Ready although it cannot do the bridge's work"
    return name


def test_missing_jwt_secret_leaves_the_new_operator_not_ready_naming_the_secret(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, deployed: Deployed
) -> None:
    wait_all_ready(core, deployed)
    old = {p.metadata.name for p in component_pods(core, deployed, "operator")}
    _bad_upgrade(deployed, "slurmJwt.secretName=no-such-jwt")
    name = _new_operator_pod_not_ready(core, deployed, old, f"Secret {deployed.namespace}/no-such-jwt, key jwt")
    print(f"\n{name}: not Ready; its log names Secret {deployed.namespace}/no-such-jwt")
    # The rollout stalls on the unready pod: the old operators keep the bridge working meanwhile.
    core.create_namespaced_pod(managed_namespace, make_pod("still-served", cpu=POD_CPU, annotations=KEEP_RUNNING))
    wait_running(core, custom, managed_namespace, ["still-served"])
    _rollback(core, deployed)


def test_unreachable_slurm_url_leaves_the_new_operator_not_ready_naming_the_url(
    core: k8s.CoreV1Api, deployed: Deployed
) -> None:
    wait_all_ready(core, deployed)
    old = {p.metadata.name for p in component_pods(core, deployed, "operator")}
    bad = f"http://{deployed.env['SLURM_REST_URL_FOR_PODS'].split('//')[1].split(':')[0]}:1"
    _bad_upgrade(deployed, f"config.slurmRestApi={bad}")
    name = _new_operator_pod_not_ready(core, deployed, old, f"cannot reach slurmrestd at {bad}")
    print(f"\n{name}: not Ready; its log names {bad}")
    _rollback(core, deployed)


@pytest.mark.parametrize(("setting", "key"), [("operater.replicas=2", "operater"),
                                              ("config.pollPeriodSecond=1", "pollPeriodSecond")])  # fmt: skip
def test_an_invalid_values_key_fails_helm_install_naming_it(deployed: Deployed, setting: str, key: str) -> None:
    args = deployed.helm_args("--set", setting)
    args[0], args[3] = "bad-values", "bad-values-test"  # another release, another namespace
    proc = helm("install", *args, "--create-namespace", env=deployed.env, timeout=120)
    assert proc.returncode != 0, "helm install accepted an unknown key"
    assert key in proc.stderr and "not allowed" in proc.stderr, proc.stderr
    assert "bad-values" not in helm("list", "-A", "-q", env=deployed.env).stdout.split()


def test_no_bridge_component_was_denied_by_rbac(core: k8s.CoreV1Api, deployed: Deployed) -> None:
    denials = []
    for component, containers in (
        ("operator", [None]),
        ("webhook", [None]),
        ("scheduler", ["kube-scheduler", "extender"]),
    ):
        for pod in component_pods(core, deployed, component):
            for c in containers:
                for previous in (False, True):
                    text = pod_logs(deployed, pod.metadata.name, c, previous)
                    denials += [
                        f"{pod.metadata.name}: {ln[:300]}" for ln in text.splitlines() if RBAC_DENIAL.search(ln)
                    ]
    assert not denials, f"RBAC denials in the bridge's logs: {denials}"


def test_uninstall_leaves_no_webhook_keeps_the_crd_and_live_jobs_and_a_reinstall_adopts_them(
    api_client: k8s.ApiClient,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    managed_namespace: str,
    slurm_env: SlurmEnv,
    deployed: Deployed,
) -> None:
    ns = managed_namespace
    run_pods(core, ns, ["live"], KEEP_RUNNING)
    (job_id,) = wait_running(core, custom, ns, ["live"]).values()

    proc = deploy("uninstall", timeout=300)
    assert proc.returncode == 0, proc.stderr
    admission = k8s.AdmissionregistrationV1Api(api_client)
    selector = f"app.kubernetes.io/instance={deployed.release}"
    assert not admission.list_mutating_webhook_configuration(label_selector=selector).items
    assert not admission.list_validating_webhook_configuration(label_selector=selector).items
    assert not admission.list_mutating_admission_policy(label_selector=selector).items

    # The API server drops a deleted admission policy from its cache a moment later: until then a
    # plain pod would still be handed to the bridge (and wait, gated, for a reinstall).
    def unmutated() -> bool:
        probe = core.create_namespaced_pod(ns, make_pod("probe", cpu=POD_CPU), dry_run="All")
        return probe.spec.scheduler_name == "default-scheduler" and not has_gate(probe)

    wait_for(unmutated, 30, "the API server to drop the uninstalled pod policy")
    # Nothing blocks pod creation, even in a managed namespace: such a pod is now simply unmanaged.
    core.create_namespaced_pod(ns, make_pod("after-uninstall", cpu=POD_CPU))
    pod = read_pod(core, ns, "after-uninstall")
    assert pod is not None and pod.spec.scheduler_name == "default-scheduler" and not has_gate(pod)
    # The CRD stays (Helm never deletes crds/), and so do live PlaceholderJobs and their Slurm jobs.
    k8s.ApiextensionsV1Api(api_client).read_custom_resource_definition(f"{names.PLURAL}.{names.GROUP}")
    phj = get_phj(custom, ns, "live")
    assert phj is not None and phj["status"]["jobId"] == job_id
    job = slurm_job(slurm_env, job_id)
    assert job is not None and job["job_state"] == ["RUNNING"], "the uninstall cancelled a live job"

    # Installing again adopts what is there: the same job, no second one.
    proc = deploy("install")
    assert proc.returncode == 0, proc.stderr[-3000:]
    wait_all_ready(core, deployed)
    wait_for(lambda: (get_phj(custom, ns, "live") or {}).get("status", {}).get("jobId") == job_id, 30, "same job id")
    wait_for(lambda: json.dumps(sorted(j["job_id"] for j in bridge_jobs_in(slurm_env, ns)
                                       if j["job_state"] == ["RUNNING"])) == json.dumps([job_id]), 30,
             "exactly the one live job")  # fmt: skip
    assert_one_job_per_placeholderjob(custom, slurm_env, ns)
    # The bridge works again and ends the adopted job with its pod.
    core.delete_namespaced_pod("live", ns)
    wait_for(
        lambda: (j := slurm_job(slurm_env, job_id)) is None or j["job_state"] != ["RUNNING"], 60, "adopted job ended"
    )
