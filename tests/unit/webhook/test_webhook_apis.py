"""Creates that need an API the cluster may not serve (webhook/apis.py): a pod or pod template
naming a PodGroup, a Job's spec.scheduling, DRA requests, Kubernetes 1.35's spec.workloadRef. The
mutating webhook refuses them, naming the Kubernetes version and the gate and runtime-config it
lacks, because the API server would otherwise drop the field and run the pods one by one."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurm_bridge.kube.clusterapis import Discovery
from slurm_bridge.webhook import apis as checks
from slurm_bridge.webhook.certs import write_certs
from slurm_bridge.webhook.mutate import mutate
from slurm_bridge.webhook.review import AdmissionRequest
from slurm_bridge.webhook.server import WebhookServer
from tests.unit.kube.test_schedulingapi import BOTH, discovery
from tests.unit.kubefakes import FakeKube
from tests.unit.webhook.test_webhook import CONFIG, SCHED, _client_context, make_pod, make_review

pytestmark = pytest.mark.unit
Obj = dict[str, Any]

GPU = {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "2"}}
NO_WORKLOAD_API: dict[str, Obj] = {
    "/version": {"major": "1", "minor": "36", "gitVersion": "v1.36.3"},
    "/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}]},
    "/apis/resource.k8s.io/v1": {"resources": [{"name": "resourceclaims"}]},
}
NO_DRA: dict[str, Obj] = {"/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.4"}}


def request(obj: Obj, *, group: str = "", kind: str = "Pod", operation: str = "CREATE") -> AdmissionRequest:
    return AdmissionRequest("u", operation, group, "v1", kind, "", "slurm", "x", "alice", obj, None)


def job(template_spec: Obj, **spec: Any) -> Obj:
    pod_spec = {"containers": [{"name": "c", "image": "b"}], **template_spec}
    meta = {"name": "j", "namespace": "slurm"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": {"spec": pod_spec}, **spec}}


GROUPED = {"schedulingGroup": {"podGroupName": "g"}}


@pytest.mark.parametrize(
    ("req", "workload", "devices", "v1alpha1"),
    [
        (request(make_pod()), [], [], []),
        (request(make_pod(GROUPED)), ["spec.schedulingGroup"], [], []),
        (request(make_pod({**GROUPED, "schedulerName": "other"})), [], [], []),
        (request(make_pod(GROUPED), operation="UPDATE"), [], [], []),
        (request(make_pod({"containers": [{"name": "c", "resources": GPU}]})), [], ["spec.containers[*].resources"],
         []),
        (request(make_pod({"workloadRef": {"name": "w", "podGroup": "g"}})), [], [], ["spec.workloadRef"]),
        (request(job(GROUPED), group="batch", kind="Job"), ["spec.template.spec.schedulingGroup"], [], []),
        (request(job({}, scheduling={"schedulingPolicy": {"gang": {}}}), group="batch", kind="Job"),
         ["spec.scheduling"], [], []),
        (request(job({"schedulerName": "other"}, scheduling={}), group="batch", kind="Job"), [], [], []),
        (request({"spec": {"replicatedJobs": [{"template": {"spec": {"template": {"spec": GROUPED}}}}]}},
                 group="jobset.x-k8s.io", kind="JobSet"),
         ["spec.replicatedJobs[0].template.spec.template.spec.schedulingGroup"], [], []),
        (request({"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
            {"name": "c", "resources": GPU}]}}}}}, group="leaderworkerset.x-k8s.io", kind="LeaderWorkerSet"),
         [], ["spec.leaderWorkerTemplate.workerTemplate.spec.containers[*].resources"], []),
        (request({"spec": GROUPED}, group="apps", kind="Deployment"), [], [], []),
    ],
    ids=["plain pod", "pod names a PodGroup", "another scheduler's", "update", "DRA pod", "1.35 workloadRef",
         "Job template", "Job spec.scheduling", "Job of another scheduler", "JobSet template", "LWS DRA",
         "a kind the webhook does not see"],
)  # fmt: skip
def test_needs(req: AdmissionRequest, workload: list[str], devices: list[str], v1alpha1: list[str]) -> None:
    need = checks.needs(req, CONFIG)
    assert (need.workload, need.devices, need.v1alpha1) == (workload, devices, v1alpha1)
    assert bool(need) == bool(workload or devices or v1alpha1)


async def test_a_pod_naming_a_podgroup_without_the_workload_api_is_refused_naming_version_and_gate() -> None:
    need = checks.needs(request(make_pod(GROUPED)), CONFIG)
    problems = checks.problems(need, await checks.facts(need, Discovery(discovery(NO_WORKLOAD_API).get)))
    (message,) = problems
    for part in (
        "spec.schedulingGroup asks for the Kubernetes Workload API",
        "pods run one by one",
        "Kubernetes v1.36.3",
        "GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1alpha2=true",
    ):
        assert part in message
    assert checks.problems(need, await checks.facts(need, Discovery(discovery(BOTH).get))) == []


async def test_a_job_asking_for_a_podgroup_also_needs_workload_with_job() -> None:
    need = checks.needs(request(job({}, scheduling={}), group="batch", kind="Job"), CONFIG)
    (message,) = checks.problems(need, await checks.facts(need, Discovery(discovery(NO_WORKLOAD_API).get)))
    assert "spec.scheduling asks" in message and "WorkloadWithJob=true" in message


async def test_dra_requests_need_resource_claims() -> None:
    need = checks.needs(request(make_pod({"containers": [{"name": "c", "resources": GPU}]})), CONFIG)
    (message,) = checks.problems(need, await checks.facts(need, Discovery(discovery(NO_DRA).get)))
    assert "asks for DRA devices" in message and "Kubernetes v1.33.4" in message and "1.34" in message
    assert checks.problems(need, await checks.facts(need, Discovery(discovery(BOTH).get))) == []


async def test_unreadable_discovery_refuses_what_needs_it() -> None:
    docs = discovery(BOTH, fail={"/apis/scheduling.k8s.io": 503})
    need = checks.needs(request(make_pod(GROUPED)), CONFIG)
    (message,) = checks.problems(need, await checks.facts(need, Discovery(docs.get)))
    assert "cannot read the API server's discovery" in message and "try again" in message


def test_a_kubernetes_135_workload_ref_is_refused_whatever_the_cluster_serves() -> None:
    need = checks.needs(request(make_pod({"workloadRef": {"name": "w"}})), CONFIG)
    (message,) = checks.problems(need, checks.Facts())
    assert message.startswith("spec.workloadRef: ") and "1.35" in message and "spec.schedulingGroup" in message


def test_mutate_refuses_with_the_problems_and_changes_nothing() -> None:
    decision = mutate(request(make_pod(GROUPED)), CONFIG, ["one", "two"])
    assert not decision.allowed and decision.code == 422
    assert decision.message == "slurm-bridge: 2 problems: one; two" and not decision.patch
    assert mutate(request(job(GROUPED), group="batch", kind="Job"), CONFIG).allowed


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[WebhookServer, Path, FakeKube]]:
    d = tmp_path / "tls"
    write_certs(d, ["127.0.0.1"])
    config = CONFIG.model_copy(update={"webhookCertFile": d / "tls.crt", "webhookKeyFile": d / "tls.key"})
    docs = discovery(NO_WORKLOAD_API)
    srv = WebhookServer(config, listen="127.0.0.1:0", apis=Discovery(docs.get))
    await srv.start()
    try:
        yield srv, d, docs
    finally:
        await srv.stop()


async def test_the_server_asks_discovery_only_for_creates_that_need_it(
    served: tuple[WebhookServer, Path, FakeKube],
) -> None:
    srv, d, docs = served
    url = f"https://127.0.0.1:{srv.port}/mutate"
    async with httpx.AsyncClient(verify=_client_context(d / "ca.crt"), timeout=5) as client:
        plain = (await client.post(url, json=make_review(make_pod()))).json()["response"]
        assert plain["allowed"] is True and "patch" in plain
        assert docs.reads == [], "a plain pod costs no discovery"
        grouped = (await client.post(url, json=make_review(make_pod(GROUPED)))).json()["response"]
        assert grouped["allowed"] is False and grouped["status"]["code"] == 422
        assert "Kubernetes v1.36.3" in grouped["status"]["message"]
        body = make_review(job(GROUPED), group="batch", kind="Job")
        refused_job = (await client.post(url, json=body)).json()["response"]
        assert refused_job["allowed"] is False and "spec.template.spec.schedulingGroup" in json.dumps(refused_job)
        docs.docs = BOTH
        srv.apis.forget()  # type: ignore[union-attr]
        allowed = (await client.post(url, json=make_review(make_pod(GROUPED)))).json()["response"]
        assert allowed["allowed"] is True and "patch" in allowed
        assert any(p["path"] == "/spec/schedulerName" and p["value"] == SCHED for p in _patch(allowed))


def _patch(response: Obj) -> list[Obj]:
    patch: list[Obj] = json.loads(base64.b64decode(response["patch"]))
    return patch
