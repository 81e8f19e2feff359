"""Exact DRA devices: admission (requests rewritten into the bridge's claim, or refused naming the
field), translation (GRES and CPUs for Slurm), Slurm's answer (device indices per node), the
mapping to ResourceSlice devices, and the claim made before release (fakes stand in for the API
server and slurmrestd)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.operator.placeholderjobs.decisions.pods import release_pod_patch
from slurm_bridge.operator.placeholderjobs.sync.devices import SLICES_PATH, DeviceBinder, wants_devices
from slurm_bridge.rules.dra.claims import ClaimPlan, allocation_status, claim_object, plan_claim
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX
from slurm_bridge.rules.dra.inventory import Device
from slurm_bridge.rules.translate import job_request
from slurm_bridge.slurm.formats import parse_gres_detail
from slurm_bridge.slurm.models import NodeDevices
from slurm_bridge.slurm.versions import CodecV0044
from slurm_bridge.webhook.mutate import mutate
from slurm_bridge.webhook.validate import validate
from tests.builders import make_pod as build_pod
from tests.unit.fakes import FakeJobDevices
from tests.unit.kubefakes import FakeKube
from tests.unit.webhook.test_webhook import CONFIG, JOB, SCHED, _job_with, apply, make_pod, make_request, managed_pod

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
GPU = EXTENDED_PREFIX + "gpu.nvidia.com"
CPU = EXTENDED_PREFIX + "dra.cpu"


def container(name: str = "c", **resources: Obj) -> Obj:
    return {"name": name, "image": "busybox", "resources": resources}


def admitted(pod: Obj) -> Obj:
    """The pod after the mutating webhook, which must allow it."""
    decision = mutate(make_request(pod), CONFIG)
    assert decision.allowed, decision.message
    return apply(pod, decision.patch)


DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# --- admission ------------------------------------------------------------------------------------


def test_gpu_request_becomes_the_bridges_claim() -> None:
    pod = make_pod({"containers": [container(requests={"cpu": "1"}, limits={GPU: "2", "memory": "1Gi"})]},
                   annotations={"keep": "me"})  # fmt: skip
    out = admitted(pod)
    c = out["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"memory": "1Gi"}, "the extended resource is gone"
    assert c["resources"]["claims"] == [{"name": names.POD_CLAIM_ENTRY}]
    (entry,) = out["spec"]["resourceClaims"]
    assert entry["name"] == names.POD_CLAIM_ENTRY
    assert entry["resourceClaimName"].startswith(f"p-{names.POD_CLAIM_ENTRY}-")
    assert json.loads(out["metadata"]["annotations"][names.ANN_DEVICE_REQUESTS]) == {"gpu.nvidia.com": 2}
    assert out["metadata"]["annotations"]["keep"] == "me"
    assert validate(make_request(out), CONFIG).allowed, "the rewritten pod passes validation"
    assert mutate(make_request(out), CONFIG).patch == [
        op for op in mutate(make_request(out), CONFIG).patch if "resourceClaims" not in op["path"]
    ], "a second mutation (reinvocation) adds no second claim"


def test_generate_name_pod_claims_are_distinct_and_init_container_may_hold_them() -> None:
    pod = make_pod({"initContainers": [container("init", requests={CPU: "2"}, limits={CPU: "2"})],
                    "resourceClaims": [{"name": "other", "resourceClaimTemplateName": "t"}]})  # fmt: skip
    pod["metadata"] = {"generateName": "train-", "namespace": "slurm"}
    a, b = admitted(pod), admitted(pod)
    assert a["spec"]["initContainers"][0]["resources"]["claims"] == [{"name": names.POD_CLAIM_ENTRY}]
    assert [e["name"] for e in a["spec"]["resourceClaims"]] == ["other", names.POD_CLAIM_ENTRY]
    names_ = {x["spec"]["resourceClaims"][1]["resourceClaimName"] for x in (a, b)}
    assert len(names_) == 2 and all(n.startswith("train-slurm-devices-") for n in names_)


REFUSED: list[tuple[str, Obj, list[str]]] = [
    ("a DeviceClass the bridge cannot map",
     {"containers": [container(limits={EXTENDED_PREFIX + "fpga.example.com": "1"})]},
     ['spec.containers[0].resources.limits["deviceclass.resource.kubernetes.io/fpga.example.com"]',
      "cannot be mapped to Slurm", "gpu.nvidia.com"]),
    ("native cpu beside dra.cpu",
     {"containers": [container(requests={"cpu": "1", CPU: "2"}, limits={CPU: "2"})]},
     ['spec.containers[0].resources.requests["cpu"]', "cannot also request native cpu"]),
    ("DRA requests in two containers",
     {"containers": [container("a", limits={GPU: "1"}), container("b", limits={GPU: "1"})]},
     ["containers ['a', 'b']", "one container only"]),
    ("a DRA GPU beside a device-plugin GPU",
     {"containers": [container(limits={GPU: "1", "nvidia.com/gpu": "1"})]},
     ['resources.limits["nvidia.com/gpu"]', "cannot also request device-plugin GPUs"]),
    ("two GPU DeviceClasses: both are the gpu GRES",
     {"containers": [container(limits={GPU: "1", EXTENDED_PREFIX + "gpu.example.com": "1"})]},
     ["are all the Slurm GRES 'gpu'"]),
    ("a fraction of a device",
     {"containers": [container(limits={GPU: "500m"})]}, ["'500m' is not a whole number of devices"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "spec", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_at_admission_naming_the_field(case: str, spec: Obj, words: list[str]) -> None:
    decision = mutate(make_request(make_pod(spec)), CONFIG)
    assert not decision.allowed and decision.code == 422
    for w in words:
        assert w in decision.message


def test_unmanaged_pods_keep_their_dra_requests() -> None:
    pod = make_pod({"schedulerName": "other", "containers": [container(limits={EXTENDED_PREFIX + "x": "1"})]})
    assert mutate(make_request(pod), CONFIG).allowed


def _claimed(annotations: Obj | None = None, entry: bool = True) -> Obj:
    claims = {"claims": [{"name": names.POD_CLAIM_ENTRY}]}
    spec: Obj = {"containers": [{"name": "c", "image": "busybox", "resources": claims}]}
    if entry:
        spec["resourceClaims"] = [{"name": names.POD_CLAIM_ENTRY, "resourceClaimName": "p-claim"}]
    return managed_pod(spec, annotations=annotations)


VALIDATED: list[tuple[str, dict[str, Any], list[str]]] = [
    ("DRA resources left in a bridge pod (the mutating webhook was skipped)",
     {"obj": managed_pod({"containers": [container(limits={GPU: "1"})]})}, ["were not turned into", "create the pod"]),
    ("the request annotation without the claim entry",
     {"obj": managed_pod(annotations={names.ANN_DEVICE_REQUESTS: '{"gpu.nvidia.com": 1}'})},
     ["without the spec.resourceClaims entry"]),
    ("the bridge's claim entry without the request annotation",
     {"obj": _claimed()}, ["the entry name 'slurm-devices' is the bridge's"]),
    ("a request annotation that does not parse",
     {"obj": _claimed({names.ANN_DEVICE_REQUESTS: '{"gpu.nvidia.com": 0}'})}, ["counts >= 1"]),
    ("the request annotation changed by an update",
     {"obj": _claimed({names.ANN_DEVICE_REQUESTS: '{"gpu.nvidia.com": 2}'}), "operation": "UPDATE",
      "old": _claimed({names.ANN_DEVICE_REQUESTS: '{"gpu.nvidia.com": 1}'})}, ["cannot change"]),
    ("the Slurm devices annotation is the bridge's",
     {"obj": managed_pod(annotations={names.ANN_SLURM_DEVICES: "gpu:0"})}, [names.ANN_SLURM_DEVICES, "reserved"]),
    ("a Job whose pods would be refused",
     {"obj": _job_with({"containers": [container(limits={EXTENDED_PREFIX + "fpga.example.com": "1"})]}), **JOB},
     ["spec.template.spec.containers[0]", "cannot be mapped"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kw", "words"), VALIDATED, ids=[c[0] for c in VALIDATED])
def test_validated(case: str, kw: dict[str, Any], words: list[str]) -> None:
    kw = dict(kw)
    decision = validate(make_request(kw.pop("obj"), **kw), CONFIG)
    assert not decision.allowed, case
    for w in words:
        assert w in decision.message


def test_a_hand_written_claim_with_its_annotation_is_accepted() -> None:
    assert validate(make_request(_claimed({names.ANN_DEVICE_REQUESTS: '{"dra.cpu": 4}'})), CONFIG).allowed


# --- translation --------------------------------------------------------------------------------


def _recorded(counts: Obj, **spec: Any) -> Obj:
    pod = make_pod({"containers": [container(requests={"memory": "1Gi"})], **spec},
                   annotations={names.ANN_DEVICE_REQUESTS: json.dumps(counts)})  # fmt: skip
    pod["metadata"]["namespace"] = "ns"
    return pod


@pytest.mark.parametrize(
    ("counts", "gres", "cpus"),
    [({"gpu.nvidia.com": 2}, "gres/gpu:2", 1), ({"dra.cpu": 6}, None, 6),
     ({"gpu.example.com": 1, "dra.cpu": 3}, "gres/gpu:1", 3)],
)  # fmt: skip
def test_job_request_asks_slurm_for_the_devices(counts: Obj, gres: str | None, cpus: int) -> None:
    request = job_request([_recorded(counts)], config=Config())
    assert (request.gres, request.cpus_per_task) == (gres, cpus)


def test_a_gang_asks_for_its_largest_member() -> None:
    request = job_request([_recorded({"gpu.nvidia.com": 1}), _recorded({"gpu.nvidia.com": 3})], config=Config())
    assert (request.gres, request.nodes) == ("gres/gpu:3", 2)


def test_a_bad_request_annotation_names_the_pod() -> None:
    pod = make_pod(annotations={names.ANN_DEVICE_REQUESTS: '{"tpu": 1}'})
    with pytest.raises(ValueError, match=r"pod slurm/p: annotation slinky.slurm.net/device-requests"):
        job_request([pod], config=Config())


# --- Slurm's answer ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("detail", "indices", "counts"),
    [("gpu:1(IDX:0)", {"gpu": (0,)}, {"gpu": 1}),
     ("gpu:a100:2(IDX:0,2)", {"gpu": (0, 2), "gpu:a100": (0, 2)}, {"gpu": 2, "gpu:a100": 2}),
     ("gpu:4(IDX:0-3)", {"gpu": (0, 1, 2, 3)}, {"gpu": 4}),
     ("gpu:a100:1(IDX:3),shard:0(IDX:N/A)", {"gpu": (3,), "gpu:a100": (3,)}, {"gpu": 1, "gpu:a100": 1, "shard": 0}),
     # a MIG node's typed GRES (Slurm 26.05's detail of a job holding two 1g.10gb slices)
     ("gpu:1g.10gb:2(IDX:0-1),gpu:3g.40gb:0(IDX:)",
      {"gpu": (0, 1), "gpu:1g.10gb": (0, 1)}, {"gpu": 2, "gpu:1g.10gb": 2, "gpu:3g.40gb": 0}),
     ("gpu(CNT:2)", {}, {"gpu": 2}), ("gpu:2", {}, {"gpu": 2}), ("", {}, {})],
)  # fmt: skip
def test_parse_gres_detail(detail: str, indices: Obj, counts: Obj) -> None:
    assert parse_gres_detail(detail) == (indices, counts)


def _socket(index: int, allocated: bool) -> Obj:
    return {"index": index, "cores": [{"index": 0, "status": ["ALLOCATED" if allocated else "UNALLOCATED"]}]}


def test_decode_job_devices_as_slurm_26_05_answers() -> None:
    body = {"jobs": [{
        "job_id": 7, "nodes": "kwok-dyn-[1-2]", "gres_detail": ["gpu:1(IDX:1)", "gpu(CNT:1)"],
        "job_resources": {"nodes": {"allocation": [
            {"name": "kwok-dyn-1", "sockets": [_socket(i, i in (2, 3)) for i in range(4)]},
            {"name": "kwok-dyn-2", "sockets": [
                {"index": 1, "cores": [{"index": 0, "status": ["ALLOCATED"]}, {"index": 1, "status": "UNALLOCATED"}]},
                {"index": 0, "cores": [{"index": 0, "status": []}, {"index": 1, "status": ["ALLOCATED"]}]}]},
        ]}},
    }]}  # fmt: skip
    got = CodecV0044().decode_job_devices(body, 7)
    assert got == {
        "kwok-dyn-1": NodeDevices(gres={"gpu": (1,)}, gres_counts={"gpu": 1}, cpus=(2, 3)),
        "kwok-dyn-2": NodeDevices(gres={}, gres_counts={"gpu": 1}, cpus=(1, 2)),  # socket 0 first: cores 0-1
    }
    assert CodecV0044().decode_job_devices(body, 8) is None


# --- the mapping to devices -----------------------------------------------------------------------


def rslice(node: str, devices: list[Obj], driver: str = "gpu.nvidia.com", pool: str = "", gen: int = 0) -> Obj:
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": pool or node, "generation": gen},
                     "devices": devices}}  # fmt: skip


def dev(name: str, index: int | None = None) -> Obj:
    return {"name": name, **({"attributes": {"index": {"int": index}}} if index is not None else {})}


def test_devices_by_index_attribute() -> None:
    slices = [rslice("n1", [dev("gpu-a", 1), dev("gpu-b", 0), dev("gpu-c", 2)]), rslice("n2", [dev("x", 0)])]
    plan = plan_claim({"gpu.nvidia.com": 2}, "n1", NodeDevices(gres={"gpu": (0, 2)}), slices, 5)
    assert isinstance(plan, ClaimPlan)
    assert [d.name for d in plan.results["gpu"]] == ["gpu-b", "gpu-c"]
    assert plan.annotation() == "gpu:0,2"


def test_devices_by_natural_name_order_without_the_attribute_and_newest_pool_generation() -> None:
    old = rslice("n1", [dev(f"stale-{i}") for i in range(12)], gen=1)
    new = rslice("n1", [dev(f"gpu-{i}") for i in (10, 2, 0, 1, 11, 3, 4, 5, 6, 7, 8, 9)], gen=2)
    plan = plan_claim({"gpu.nvidia.com": 2}, "n1", NodeDevices(gres={"gpu": (2, 10)}), [old, new], 5)
    assert isinstance(plan, ClaimPlan)
    assert [d.name for d in plan.results["gpu"]] == ["gpu-2", "gpu-10"]


def test_cpus_and_gpus_in_one_claim() -> None:
    slices = [rslice("n1", [dev(f"cpu{i}", i) for i in range(8)], driver="dra.cpu"), rslice("n1", [dev("g", 0)])]
    held = NodeDevices(gres={"gpu": (0,)}, cpus=(4, 5))
    plan = plan_claim({"dra.cpu": 2, "gpu.nvidia.com": 1}, "n1", held, slices, 5)
    assert isinstance(plan, ClaimPlan)
    assert plan.annotation() == "cpu:4,5;gpu:0"
    assert [(d.driver, d.name) for d in plan.results["cpu"]] == [("dra.cpu", "cpu4"), ("dra.cpu", "cpu5")]


@pytest.mark.parametrize(
    ("held", "slices", "words"),
    [(None, [], "reports nothing allocated on node n1"),
     (NodeDevices(gres_counts={"gpu": 1}), [rslice("n1", [dev("g", 0)])], "no device files in gres.conf"),
     (NodeDevices(gres={"gpu": (0, 1)}), [rslice("n1", [dev("g", 0)])], "holds 2 gpu device(s)"),
     (NodeDevices(gres={"gpu": (3,)}), [rslice("n1", [dev("g0", 0), dev("g1", 1)])],
      "publish no device with Slurm index 3"),
     (NodeDevices(gres={"gpu": (0,)}), [rslice("n2", [dev("g0", 0)])], "(0 published)")],
)  # fmt: skip
def test_why_no_devices(held: NodeDevices | None, slices: list[Obj], words: str) -> None:
    plan = plan_claim({"gpu.nvidia.com": 1}, "n1", held, slices, 5)
    assert isinstance(plan, str) and words in plan, plan


def test_claim_and_its_allocation() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
    claim = claim_object(pod, "p-claim", {"gpu.nvidia.com": 2})
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "controller": True, "blockOwnerDeletion": False}
    ]
    assert claim["metadata"]["finalizers"] == [names.RESOURCE_CLAIM_FINALIZER]
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}
    ]
    plan = ClaimPlan("n1", {"gpu": [Device("gpu.nvidia.com", "n1", "g1")]}, {"gpu": [1]})
    status = allocation_status(pod, plan)
    assert status["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "g1"}
    ]
    terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    assert status["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "u1"}]


def test_release_patch_carries_the_device_annotation() -> None:
    pod = {"metadata": {"name": "p", "uid": "u", "annotations": {"a": "b"}}, "spec": {}}
    ops = release_pod_patch(pod, "n1", 5, "phj", {names.ANN_SLURM_DEVICES: "gpu:0,2"})
    assert {"op": "add", "path": "/metadata/annotations/slinky.slurm.net~1slurm-devices", "value": "gpu:0,2"} in ops


# --- the claim before release -------------------------------------------------------------------


CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
PHJ = {"metadata": {"name": "phj", "namespace": "ns"}}


def dpod(name: str, counts: Obj | None = None) -> Obj:
    """A pod that asked for DRA devices (``counts``: DeviceClass -> count, as the webhook records them)."""
    built = build_pod(name).uid(f"uid-{name}").meta(annotations={})
    if counts:
        built.annotation(names.ANN_DEVICE_REQUESTS, json.dumps(counts))
        built.spec(resourceClaims=[{"name": names.POD_CLAIM_ENTRY, "resourceClaimName": f"{name}-claim"}])
    return built.obj()


def binder(kube: FakeKube, slurm: FakeJobDevices) -> DeviceBinder:
    return DeviceBinder(kube, slurm)


SLICES = [rslice("n1", [dev("g0", 0), dev("g1", 1)]), rslice("n2", [dev("h0", 0), dev("h1", 1)])]


async def test_claims_made_allocated_and_reserved_then_annotated() -> None:
    kube = FakeKube(collections={SLICES_PATH: SLICES})
    slurm = FakeJobDevices(devices={"n1": NodeDevices(gres={"gpu": (1,)}), "n2": NodeDevices(gres={"gpu": (0, 1)})})
    pods = {"a": (dpod("a", {"gpu.nvidia.com": 1}), "n1"), "b": (dpod("b", {"gpu.nvidia.com": 2}), "n2"),
            "c": (dpod("c"), "n3")}  # fmt: skip
    out = await binder(kube, slurm).prepare(PHJ, 5, pods)
    assert not out.problem
    assert out.annotations == {"a": {names.ANN_SLURM_DEVICES: "gpu:1"}, "b": {names.ANN_SLURM_DEVICES: "gpu:0,1"}}
    claim = kube.objects[f"{CLAIMS}/a-claim"]
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["g1"]
    assert claim["status"]["reservedFor"][0]["uid"] == "uid-a"
    # Again (a restart before the pods were released): nothing is written twice.
    patches = len(kube.patches)
    again = await binder(kube, slurm).prepare(PHJ, 5, pods)
    assert again.annotations == out.annotations and len(kube.patches) == patches


async def test_pods_without_devices_cost_no_slurm_call() -> None:
    slurm = FakeJobDevices(devices={})
    assert (await binder(FakeKube(), slurm).prepare(PHJ, 5, {"c": (dpod("c"), "n1")})).annotations == {}
    assert slurm.calls == []
    assert not wants_devices(dpod("c")) and wants_devices(dpod("d", {"dra.cpu": 1}))


async def test_a_missing_device_releases_no_member_and_is_told_once() -> None:
    kube = FakeKube(collections={SLICES_PATH: SLICES})
    slurm = FakeJobDevices(devices={"n1": NodeDevices(gres={"gpu": (0,)}), "n2": NodeDevices(gres={"gpu": (5,)})})
    b = binder(kube, slurm)
    pods = {"a": (dpod("a", {"gpu.nvidia.com": 1}), "n1"), "b": (dpod("b", {"gpu.nvidia.com": 1}), "n2")}
    for _ in range(2):
        out = await b.prepare(PHJ, 5, pods)
        assert "publish no device with Slurm index 5" in out.problem
    reasons = [(who, reason) for who, reason, _ in kube.told("name", "reason", "message")]
    assert reasons == [("b", "SlurmDevicesNotFound"), ("phj", "SlurmDevicesNotFound")], "one Event each, once"
    assert not [k for k in kube.objects if k.startswith(CLAIMS)], "no claim is made while any member lacks devices"


@pytest.mark.parametrize(
    ("existing", "words"),
    [({"metadata": {"name": "a-claim", "ownerReferences": [{"kind": "Pod", "uid": "someone-else"}]}},
      "does not belong to this pod"),
     ({"metadata": {"name": "a-claim", "ownerReferences": [{"kind": "Pod", "uid": "uid-a"}]},
       "status": {"allocation": {"devices": {"results": [
           {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "g0"}]}}}},
      "already allocated to other devices (['g0'])")],
)  # fmt: skip
async def test_an_existing_claim_that_does_not_fit_stops_the_release(existing: Obj, words: str) -> None:
    kube = FakeKube({f"{CLAIMS}/a-claim": existing}, collections={SLICES_PATH: SLICES})
    out = await binder(kube, FakeJobDevices(devices={"n1": NodeDevices(gres={"gpu": (1,)})})).prepare(
        PHJ, 5, {"a": (dpod("a", {"gpu.nvidia.com": 1}), "n1")}
    )
    assert words in out.problem
    assert kube.reasons and kube.reasons[0] == "SlurmDevicesNotBound"


async def test_a_job_slurm_forgot_releases_nothing() -> None:
    out = await binder(FakeKube(), FakeJobDevices(devices=None)).prepare(
        PHJ, 5, {"a": (dpod("a", {"dra.cpu": 1}), "n1")}
    )
    assert "no longer knows job 5" in out.problem


def test_sched_name_is_the_bridges() -> None:
    assert CONFIG.schedulerName == SCHED


@pytest.mark.parametrize("name", ["a" * 199 + "." + "b" * 53, "a" * 253, "a" * 199 + "-" + "b" * 53])
def test_a_pod_named_with_253_characters_gets_a_valid_claim_name(name: str) -> None:
    pod = make_pod({"containers": [container(limits={GPU: "1"})]})
    pod["metadata"]["name"] = name
    (entry,) = admitted(pod)["spec"]["resourceClaims"]
    claim = entry["resourceClaimName"]
    assert len(claim) <= 253 and DNS_SUBDOMAIN.match(claim), claim
