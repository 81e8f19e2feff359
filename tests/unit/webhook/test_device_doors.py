"""Only the bridge hands out Slurm's devices in the managed namespaces (docs/security.md, "Devices"):
a pod's own claims and templates, another pod's claim, claims made by hand, ephemeral containers on
exact cores (webhook/devicedoors.py, slurm_bridge/rules/dra/userclaims.py), and device-plugin GPUs in hybrid
partitions (device_plugin_problem, at admission and in translate.job_request)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import KubeError
from slurm_bridge.rules.dra.admission import device_plugin_problem
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX
from slurm_bridge.rules.dra.userclaims import (
    ClaimRef,
    bridge_claim_problem,
    claim_classes,
    own_claim_problems,
    own_claim_refs,
)
from slurm_bridge.rules.translate import job_request
from slurm_bridge.webhook import devicedoors
from slurm_bridge.webhook.certs import write_certs
from slurm_bridge.webhook.render import webhook_configurations
from slurm_bridge.webhook.review import AdmissionRequest
from slurm_bridge.webhook.server import WebhookServer
from slurm_bridge.webhook.validate import validate
from tests.unit.webhook.test_webhook import BRIDGE_USER, CONFIG, SCHED, _client_context, make_review

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
HYBRID = CONFIG.model_copy(update={"hybridPartitions": ["hybrid", "real-node"]})


def request(obj: Obj | None, *, kind: str = "Pod", group: str = "", operation: str = "CREATE", **kw: Any) -> Any:
    fields: Obj = dict(uid="u", operation=operation, group=group, version="v1", kind=kind, sub_resource="",
                       namespace="slurm", name="p", username="alice", object=obj, old_object=None)  # fmt: skip
    fields.update(kw)
    return AdmissionRequest(**fields)


def claim(classes: list[str], **meta: Any) -> Obj:
    requests = [{"name": f"r{i}", "exactly": {"deviceClassName": c}} for i, c in enumerate(classes)]
    return {"metadata": {"name": "c", **meta}, "spec": {"devices": {"requests": requests}}}


def template(classes: list[str]) -> Obj:
    return {"metadata": {"name": "t"}, "spec": {"spec": claim(classes)["spec"]}}


def pod(*entries: Obj, annotations: Obj | None = None, scheduler: str = SCHED, limits: Obj | None = None) -> Obj:
    container: Obj = {"name": "c", "image": "busybox"}
    if limits is not None:
        container["resources"] = {"limits": limits}
    spec: Obj = {"schedulerName": scheduler, "containers": [container]}
    if entries:
        spec["resourceClaims"] = list(entries)
    return {"metadata": {"name": "p", "namespace": "slurm", "annotations": annotations or {}}, "spec": spec}


CLAIM_ENTRY = {"name": "mine", "resourceClaimName": "c"}
TEMPLATE_ENTRY = {"name": "mine", "resourceClaimTemplateName": "t"}
CLAIM_REF = ClaimRef("mine", "ResourceClaim", "c")
TEMPLATE_REF = ClaimRef("mine", "ResourceClaimTemplate", "t")


# ---- what a claim asks for ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "classes"),
    [
        ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
         ["gpu.nvidia.com"]),
        ({"devices": {"requests": [{"name": "a", "firstAvailable": [{"deviceClassName": "mig-1g.10gb.nvidia.com"},
                                                                    {"deviceClassName": "nic.example.com"}]}]}},
         ["mig-1g.10gb.nvidia.com", "nic.example.com"]),
        ({"devices": {"requests": [{"name": "a", "deviceClassName": "dra.cpu"}]}}, ["dra.cpu"]),  # v1beta1
        ({}, []),
        ({"devices": {"requests": ["junk", {"name": "a"}]}}, []),
    ],
    ids=["exactly", "first-available", "v1beta1", "empty", "malformed"],
)  # fmt: skip
def test_the_classes_a_claim_asks_for_in_every_shape(spec: Obj, classes: list[str]) -> None:
    assert claim_classes(spec) == classes


def test_the_pods_own_entries_leave_out_the_bridges() -> None:
    spec = pod(CLAIM_ENTRY, {"name": "t", "resourceClaimTemplateName": "t"},
               {"name": names.POD_CLAIM_ENTRY, "resourceClaimName": "x"})["spec"]  # fmt: skip
    assert own_claim_refs(spec) == [CLAIM_REF, ClaimRef("t", "ResourceClaimTemplate", "t")]


# ---- a pod's own entries -------------------------------------------------------------------------------
OWNED = claim(["nic.example.com"], ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "victim", "uid": "v"}])
GENERATED = claim(["nic.example.com"], annotations={names.ANN_K8S_POD_CLAIM_NAME: "gpu"})
# (case, ref, what it names, fragments of the one problem or None)
OWN_TABLE: list[tuple[str, ClaimRef, Any, list[str] | None]] = [
    ("a claim of a GPU class", CLAIM_REF, claim(["gpu.nvidia.com"]),
     ["spec.resourceClaims[mine]", "ResourceClaim c requests DeviceClass gpu.nvidia.com", "only slurm-bridge",
      "deviceclass.resource.kubernetes.io/gpu.nvidia.com: N", "docs/gpus.md"]),
    ("a template of a MIG class", TEMPLATE_REF, template(["mig-1g.10gb.nvidia.com"]),
     ["ResourceClaimTemplate t requests DeviceClass mig-1g.10gb.nvidia.com"]),
    ("a template of exact cores", TEMPLATE_REF, template(["dra.cpu"]), ["dra.cpu"]),
    ("a claim of shards", CLAIM_REF, claim(["shard.nvidia.com"]), ["shard.nvidia.com"]),
    ("the example GPU class", CLAIM_REF, claim(["gpu.example.com"]), ["gpu.example.com"]),
    ("another pod's claim", CLAIM_REF, OWNED, ["belongs to pod victim", "another pod's claim"]),
    ("a claim generated for another pod", CLAIM_REF, GENERATED, ["the pod it was generated for"]),
    ("a claim that cannot be read", CLAIM_REF, "slurm-bridge cannot read ResourceClaim c", ["cannot read"]),
    ("a claim of another class", CLAIM_REF, claim(["nic.example.com"]), None),
    ("a template of another class", TEMPLATE_REF, template(["nic.example.com"]), None),
    ("a shared claim of another class, reserved for other pods",
     CLAIM_REF, {**claim(["nic.example.com"]), "status": {"reservedFor": [{"resource": "pods", "name": "o"}]}}, None),
    ("a claim not made yet", CLAIM_REF, None, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "ref", "found", "words"), OWN_TABLE, ids=[c[0] for c in OWN_TABLE])
def test_a_pods_own_claim_entries(case: str, ref: ClaimRef, found: Any, words: list[str] | None) -> None:
    problems = own_claim_problems([ref], {ref: found})
    if words is None:
        assert problems == [], case
        return
    assert len(problems) == 1, problems
    for w in words:
        assert w in problems[0], (case, problems[0])


def test_the_bridge_entry_must_name_a_claim_not_made_yet() -> None:
    assert bridge_claim_problem("p-slurm-devices-1", None) == ""
    taken = bridge_claim_problem("victim-claim", OWNED)
    assert "ResourceClaim victim-claim already exists" in taken and names.ANN_DEVICE_REQUESTS in taken
    assert "cannot read" in bridge_claim_problem("x", "slurm-bridge cannot read ResourceClaim x")


def _with_claims(obj: Obj, claims: devicedoors.PodClaims) -> Any:
    return validate(request(obj), CONFIG, claims=claims)


def test_the_webhook_refuses_a_pod_whose_own_claim_asks_for_a_gpu_class_whatever_its_scheduler() -> None:
    for scheduler in (SCHED, "default-scheduler"):
        d = _with_claims(
            pod(CLAIM_ENTRY, scheduler=scheduler), devicedoors.PodClaims({CLAIM_REF: claim(["gpu.nvidia.com"])})
        )
        assert not d.allowed and d.code == 403 and "gpu.nvidia.com" in d.message, scheduler
    ok = _with_claims(pod(CLAIM_ENTRY), devicedoors.PodClaims({CLAIM_REF: claim(["nic.example.com"])}))
    assert ok.allowed, ok.message
    assert validate(request(pod(CLAIM_ENTRY)), CONFIG).allowed, "claims not read: not checked"


# ---- reading what a pod names --------------------------------------------------------------------------
async def test_the_reads_get_each_named_object_and_fail_closed() -> None:
    asked: list[str] = []

    async def get(path: str) -> Obj | None:
        asked.append(path)
        if path.endswith("/resourceclaimtemplates/t"):
            raise KubeError(403, "Forbidden", "no")
        return claim(["gpu.nvidia.com"]) if path.endswith("/resourceclaims/c") else None

    bridge = {"name": names.POD_CLAIM_ENTRY, "resourceClaimName": "p-slurm-devices-1"}
    req = request(pod(CLAIM_ENTRY, {"name": "t", "resourceClaimTemplateName": "t"}, bridge))
    assert devicedoors.reads_claims(req)
    got = await devicedoors.read_claims(req, get)
    assert sorted(asked) == [
        "/apis/resource.k8s.io/v1/namespaces/slurm/resourceclaims/c",
        "/apis/resource.k8s.io/v1/namespaces/slurm/resourceclaims/p-slurm-devices-1",
        "/apis/resource.k8s.io/v1/namespaces/slurm/resourceclaimtemplates/t",
    ]
    assert got.bridge == ("p-slurm-devices-1", None)
    problems = devicedoors.pod_claim_problems(got)
    assert (
        len(problems) == 2 and "gpu.nvidia.com" in problems[0] and "cannot read ResourceClaimTemplate t" in problems[1]
    )
    assert not devicedoors.reads_claims(request(pod())), "no entries: nothing to read"
    assert not devicedoors.reads_claims(request(pod(CLAIM_ENTRY), operation="UPDATE", old_object=pod(CLAIM_ENTRY)))


# ---- claims and templates made by hand -------------------------------------------------------------------
# (case, kind, object, user, refused)
MADE_TABLE: list[tuple[str, str, Obj, str, bool]] = [
    ("a tenant's claim of GPUs", "ResourceClaim", claim(["gpu.nvidia.com"]), "alice", True),
    ("a tenant's template of exact cores", "ResourceClaimTemplate", template(["dra.cpu"]), "alice", True),
    ("Kubernetes' claim from an older template", "ResourceClaim", claim(["mig-2g.20gb.nvidia.com"]),
     "system:serviceaccount:kube-system:resource-claim-controller", True),
    ("the bridge's own claim", "ResourceClaim", claim(["gpu.nvidia.com"]), BRIDGE_USER, False),
    ("a tenant's claim of another class", "ResourceClaim", claim(["nic.example.com"]), "alice", False),
    ("a tenant's template of another class", "ResourceClaimTemplate", template(["nic.example.com"]), "alice", False),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kind", "obj", "user", "refused"), MADE_TABLE, ids=[c[0] for c in MADE_TABLE])
def test_only_the_bridge_makes_claims_of_its_classes(case: str, kind: str, obj: Obj, user: str, refused: bool) -> None:
    d = validate(request(obj, kind=kind, group="resource.k8s.io", username=user), CONFIG)
    assert d.allowed is not refused, (case, d.message)
    if refused:
        assert d.code == 403 and "only slurm-bridge allocates in this namespace" in d.message
        assert EXTENDED_PREFIX in d.message


# ---- ephemeral containers ---------------------------------------------------------------------------------
CORES = {names.ANN_DEVICE_REQUESTS: json.dumps({"dra.cpu": 2})}
GPUS = {names.ANN_DEVICE_REQUESTS: json.dumps({"gpu.nvidia.com": 1})}


def _debugged(obj: Obj, *names_: str) -> Obj:
    new: Obj = json.loads(json.dumps(obj))
    new["spec"]["ephemeralContainers"] = [{"name": n, "image": "busybox"} for n in names_]
    return new


# (case, pod, ephemeral containers before, after, refused)
EPHEMERAL_TABLE: list[tuple[str, Obj, tuple[str, ...], tuple[str, ...], bool]] = [
    ("a pod on exact cores", pod(annotations=CORES), (), ("debugger",), True),
    ("a second one on exact cores", pod(annotations=CORES), ("a",), ("a", "b"), True),
    ("a pod with Slurm's GPUs but its own cores", pod(annotations=GPUS), (), ("debugger",), False),
    ("a plain bridge pod", pod(), (), ("debugger",), False),
    ("another scheduler's pod with the annotation", pod(annotations=CORES, scheduler="default-scheduler"), (),
     ("debugger",), False),
    ("an update that adds none", pod(annotations=CORES), ("a",), ("a",), False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "obj", "before", "after", "refused"), EPHEMERAL_TABLE, ids=[c[0] for c in EPHEMERAL_TABLE]
)
def test_an_ephemeral_container_may_not_join_a_pod_on_exact_cores(
    case: str, obj: Obj, before: tuple[str, ...], after: tuple[str, ...], refused: bool
) -> None:
    req = request(
        _debugged(obj, *after),
        operation="UPDATE",
        old_object=_debugged(obj, *before),
        sub_resource="ephemeralcontainers",
    )
    d = validate(req, CONFIG)
    assert d.allowed is not refused, (case, d.message)
    if refused:
        assert d.code == 403 and "kubectl debug --copy-to" in d.message and "exact CPU cores" in d.message


def test_the_webhook_sees_ephemeral_containers_and_claim_creates() -> None:
    rules = webhook_configurations(CONFIG, bundle="Y2E=", url="https://127.0.0.1:9443")[1]["webhooks"][0]["rules"]
    assert "pods/ephemeralcontainers" in rules[0]["resources"] and "UPDATE" in rules[0]["operations"]
    assert {"apiGroups": ["resource.k8s.io"], "operations": ["CREATE"],
            "resources": ["resourceclaims", "resourceclaimtemplates"]}.items() <= rules[-1].items()  # fmt: skip


# ---- device-plugin GPUs and hybrid partitions -------------------------------------------------------------
F = ['spec.containers[0].resources.limits["nvidia.com/gpu"]']
# (case, fields, partition, hybrid partitions, the plugin follows Slurm, refused)
PLUGIN_TABLE: list[tuple[str, list[str], str | None, list[str], bool, bool]] = [
    ("a hybrid partition", F, "hybrid", ["hybrid"], False, True),
    ("one of a list", F, "slurm-bridge,hybrid", ["hybrid"], False, True),
    ("Slurm's default partition, hybrid ones configured", F, None, ["hybrid"], False, True),
    ("an external partition", F, "slurm-bridge", ["hybrid"], False, False),
    ("the plugin follows Slurm", F, "hybrid", ["hybrid"], True, False),
    ("no hybrid partition configured", F, "hybrid", [], False, False),
    ("no device-plugin GPU", [], "hybrid", ["hybrid"], False, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "fields", "partition", "hybrid", "follows", "refused"), PLUGIN_TABLE, ids=[c[0] for c in PLUGIN_TABLE]
)
def test_device_plugin_gpus_in_hybrid_partitions(
    case: str, fields: list[str], partition: str | None, hybrid: list[str], follows: bool, refused: bool
) -> None:
    problem = device_plugin_problem(fields, partition, hybrid, follows)
    assert bool(problem) is refused, case
    if refused:
        assert problem.startswith(F[0]) and "deviceclass.resource.kubernetes.io/gpu.nvidia.com" in problem


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu"])
def test_the_webhook_and_the_submit_refuse_plugin_gpus_in_a_hybrid_partition(resource: str) -> None:
    hybrid = pod(annotations={names.ANN_PARTITION: "hybrid"}, limits={resource: "1"})
    d = validate(request(hybrid), HYBRID)
    assert not d.allowed and "partition hybrid, which holds hybrid nodes" in d.message
    with pytest.raises(ValueError, match="hybrid nodes"):
        job_request([hybrid], config=HYBRID, annotations={names.ANN_PARTITION: "hybrid"})
    external = pod(limits={resource: "1"})
    assert validate(request(external), HYBRID).allowed, "the config's partition holds no hybrid node"
    assert job_request([external], config=HYBRID).gres == "gres/gpu:1"
    follows = HYBRID.model_copy(update={"devicePluginFollowsSlurm": True})
    assert validate(request(hybrid), follows).allowed
    assert validate(request(hybrid), CONFIG).allowed, "no hybrid partition configured: as before"


def test_a_workload_template_with_plugin_gpus_in_a_hybrid_partition_is_refused() -> None:
    template_spec = pod(limits={"nvidia.com/gpu": "2"})["spec"]
    job: Obj = {"metadata": {"name": "j", "annotations": {names.ANN_PARTITION: "real-node"}},
           "spec": {"template": {"metadata": {}, "spec": template_spec}}}  # fmt: skip
    d = validate(request(job, kind="Job", group="batch"), HYBRID)
    assert not d.allowed and "spec.template.spec.containers[0]" in d.message and "real-node" in d.message
    job["metadata"]["annotations"] = {}
    assert validate(request(job, kind="Job", group="batch"), HYBRID).allowed


def test_the_config_keys_default_to_todays_behaviour() -> None:
    assert Config().hybridPartitions == [] and Config().devicePluginFollowsSlurm is False


# ---- the server reads what a pod names ----------------------------------------------------------------------
async def test_the_server_reads_the_claims_a_pod_create_names_and_nothing_else(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    write_certs(d, ["127.0.0.1"])
    config = CONFIG.model_copy(update={"webhookCertFile": d / "tls.crt", "webhookKeyFile": d / "tls.key"})
    asked: list[str] = []

    async def get(path: str) -> Obj | None:
        asked.append(path)
        return claim(["gpu.nvidia.com"])

    srv = WebhookServer(config, listen="127.0.0.1:0", claims=get)
    await srv.start()
    try:
        url = f"https://127.0.0.1:{srv.port}/validate"
        async with httpx.AsyncClient(verify=_client_context(d / "ca.crt"), timeout=5) as client:
            refused = (await client.post(url, json=make_review(pod(CLAIM_ENTRY)))).json()["response"]
            assert refused["allowed"] is False and refused["status"]["code"] == 403
            assert "ResourceClaim c requests DeviceClass gpu.nvidia.com" in refused["status"]["message"]
            assert asked == ["/apis/resource.k8s.io/v1/namespaces/slurm/resourceclaims/c"]
            plain = (await client.post(url, json=make_review(pod()))).json()["response"]
            assert plain["allowed"] is True and len(asked) == 1, "a pod without claims costs no read"
    finally:
        await srv.stop()
