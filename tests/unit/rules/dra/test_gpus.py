"""GPUs and MIG slices shared with native jobs (docs/gpus.md), the pure parts: which DeviceClasses
map to which Slurm GRES, the job's GPU TRES, whole-GPU jobs kept off MIG nodes, Slurm's indices
mapped to the NVIDIA driver's devices (MIG devices by GPU and minor, each checked for its profile),
the handoff holding a GPU job's whole node, and the local cluster's layout (hack/cluster/gpus.py)
agreeing with the mapping."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.nodes.devicematch import DeviceMatch
from slurm_bridge.operator.nodes.devicematch import decide as decide_match
from slurm_bridge.rules.dra.admission import device_requests
from slurm_bridge.rules.dra.claims import ClaimPlan, allocation_status, claim_object, plan_claim
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX, device_class
from slurm_bridge.rules.dra.gres import mig_node, shard_request, slurm_needs, untyped_gpu_request
from slurm_bridge.rules.dra.inventory import largest_request, node_devices
from slurm_bridge.rules.handoff import job_handoff_scope
from slurm_bridge.rules.translate import exclude_mig_nodes, gpu_gres, job_request
from slurm_bridge.slurm.formats import parse_gres_detail
from slurm_bridge.slurm.models import JobRequest, NodeDevices, NodeInfo
from slurm_bridge.webhook.mutate import mutate
from slurm_bridge.webhook.validate import validate
from tests.unit.webhook.test_webhook import CONFIG, apply, make_pod, make_request

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
MIG1 = "mig-1g.10gb.nvidia.com"
MIG3 = "mig-3g.40gb.nvidia.com"
SHARD = "shard.nvidia.com"


def _layout_module() -> Any:
    path = Path(__file__).resolve().parents[4] / "hack" / "cluster" / "gpus.py"
    spec = importlib.util.spec_from_file_location("hack_cluster_gpus", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gpus_layout = _layout_module()
LAYOUT = "n1=h100,h100 n2=h100:1g.10gb+1g.10gb+1g.10gb+1g.10gb+3g.40gb n3=h100,h100:1g.10gb+3g.40gb"


# --- classes and requests -------------------------------------------------------------------------


def test_a_mig_profile_class_is_its_typed_gres() -> None:
    cls = device_class(MIG1)
    assert cls is not None
    assert (cls.driver, cls.slurm_gres, cls.profile, cls.request) == (
        "gpu.nvidia.com",
        "gpu:1g.10gb",
        "1g.10gb",
        "mig-1g-10gb",
    )
    assert device_class("gpu.nvidia.com") is not None and device_class("gpu.nvidia.com").slurm_gres == "gpu"  # type: ignore[union-attr]
    for unknown in ("mig.nvidia.com", "mig-9g.10gb.nvidia.com", "mig-1g.10gb.example.com", "mig-1g10gb.nvidia.com"):
        assert device_class(unknown) is None, unknown


@pytest.mark.parametrize(
    ("counts", "problem"),
    [({MIG1: 2, MIG3: 1}, None),
     ({"gpu.nvidia.com": 1, MIG1: 1}, "could be met with a MIG slice"),
     ({"mig.nvidia.com": 1}, "cannot be mapped to Slurm"),
     ({SHARD: 4}, None),
     ({SHARD: 2, "gpu.nvidia.com": 1}, "a GPU is Slurm's either whole or as shards"),
     ({SHARD: 2, MIG1: 1}, "a GPU is Slurm's either whole or as shards")],
)  # fmt: skip
def test_admission_of_mig_and_shard_requests(counts: Obj, problem: str | None) -> None:
    resources = {"limits": {EXTENDED_PREFIX + c: str(n) for c, n in counts.items()}}
    got, _, problems = device_requests({"containers": [{"name": "c", "resources": resources}]})
    if problem is None:
        assert problems == [] and got == counts
    else:
        assert any(problem in p for p in problems), problems
        if "mapped" in problem:
            assert "mig-<profile>.nvidia.com" in problems[0], "the message names what would work"


@pytest.mark.parametrize(
    ("per_pod", "gres"),
    [([{"dra/gpu:1g.10gb": 2, "dra/gpu:3g.40gb": 1}], "gres/gpu:1g.10gb:2,gres/gpu:3g.40gb:1"),
     ([{"nvidia.com/gpu": 1}, {"dra/gpu": 3}], "gres/gpu:3"),
     ([{"dra/gpu:1g.10gb": 1}, {"dra/gpu:1g.10gb": 2}], "gres/gpu:1g.10gb:2"),
     ([{}], "")],
)  # fmt: skip
def test_the_jobs_gpu_tres_per_node(per_pod: list[Obj], gres: str) -> None:
    assert gpu_gres(per_pod) == gres


def test_a_mig_pods_job_asks_for_typed_gres_never_an_untyped_gpu() -> None:
    pod = make_pod({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "1Gi"}}}]},
                   annotations={names.ANN_DEVICE_REQUESTS: json.dumps({MIG1: 2, MIG3: 1})})  # fmt: skip
    pod["metadata"]["namespace"] = "ns"
    request = job_request([pod], config=Config())
    assert request.gres == "gres/gpu:1g.10gb:2,gres/gpu:3g.40gb:1"
    assert not untyped_gpu_request(request.gres)


@pytest.mark.parametrize(
    ("gres", "untyped"),
    [("gres/gpu:2", True), ("gres/gpu", True), ("gres/gpu:1g.10gb:1", False), ("gres/shard:2", False),
     ("gres/gpu:1g.10gb:1,gres/gpu:1", True), (None, False), ("gres/gpu:h100:1", False)],
)  # fmt: skip
def test_untyped_gpu_requests(gres: str | None, untyped: bool) -> None:
    assert untyped_gpu_request(gres) is untyped


@pytest.mark.parametrize(
    ("node_gres", "mig"),
    [("gpu:1g.10gb:4,gpu:3g.40gb:1", True), ("gpu:h100:2", False), ("gpu:2", False),
     ("gpu:h100_1g.10gb:7(S:0)", True), ("gpu:h100:1,gpu:1g.10gb:2", True), ("", False), ("shard:8", False)],
)  # fmt: skip
def test_mig_nodes(node_gres: str, mig: bool) -> None:
    assert mig_node(node_gres) is mig


def test_whole_gpu_jobs_are_submitted_without_mig_nodes() -> None:
    whole = JobRequest(gres="gres/gpu:1", excluded_nodes=["n9"])
    assert exclude_mig_nodes(whole, {"n2"}).excluded_nodes == ["n2", "n9"]
    mig = JobRequest(gres="gres/gpu:1g.10gb:1")
    assert exclude_mig_nodes(mig, {"n2"}) is mig, "a MIG job may go to a MIG node"
    assert exclude_mig_nodes(JobRequest(), {"n2"}).excluded_nodes is None
    with pytest.raises(ValueError, match=r"requires node\(s\) n2, whose GPUs are MIG instances"):
        exclude_mig_nodes(JobRequest(gres="gres/gpu:1", required_nodes=["n2"]), {"n2"})


def test_a_gpu_job_is_held_whole_node_at_the_handoff() -> None:
    assert job_handoff_scope(JobRequest(gres="gres/gpu:1g.10gb:1"), []) == names.HANDOFF_SCOPE_NODE
    assert job_handoff_scope(JobRequest(gres="gres/gpu:1"), []) == names.HANDOFF_SCOPE_NODE
    assert job_handoff_scope(JobRequest(), []) == names.HANDOFF_SCOPE_CORES


# --- Slurm's indices to devices -------------------------------------------------------------------


def node_slices(node: str, layout: str = LAYOUT) -> list[Obj]:
    nodes = gpus_layout.layout(layout)
    return [
        i
        for i in gpus_layout.manifests(nodes)["items"]
        if i["kind"] == "ResourceSlice" and i["spec"]["nodeName"] == node
    ]


def test_the_local_clusters_gres_conf_and_slices_number_alike() -> None:
    """gres.conf's record order (Slurm's indices, checked on Slurm 26.05: a job's 3g.40gb is IDX 4
    on the MIG node) is the order the bridge maps the driver's devices in."""
    nodes = gpus_layout.layout(LAYOUT)
    for node in nodes:
        records = [r for r in gpus_layout.gres_conf(nodes) if r.startswith(f"NodeName={node} ")]
        by_index = node_devices(node_slices(node), "gpu.nvidia.com", node)
        assert len(by_index) == len(records)
        for i, record in enumerate(records):
            slurm_type = record.split("Type=")[1].split()[0]
            device = by_index[i]
            assert (device.profile or "h100") == slurm_type, (node, i, record, device)
    assert gpus_layout.gres(nodes["n3"]) == "gpu:h100:1,gpu:1g.10gb:1,gpu:3g.40gb:1"


def test_mig_slices_are_given_by_slurms_index_and_profile() -> None:
    held = NodeDevices(**_held("gpu:1g.10gb:2(IDX:1-2),gpu:3g.40gb:1(IDX:4)"))
    plan = plan_claim({MIG1: 2, MIG3: 1}, "n2", held, node_slices("n2"), 7)
    assert isinstance(plan, ClaimPlan), plan
    assert [d.name for d in plan.results["mig-1g-10gb"]] == ["gpu-0-mig-1g10gb-1", "gpu-0-mig-1g10gb-2"]
    assert [d.name for d in plan.results["mig-3g-40gb"]] == ["gpu-0-mig-3g40gb-4"]
    assert plan.annotation() == "mig-1g-10gb:1,2;mig-3g-40gb:4"


def test_a_whole_gpu_beside_a_mig_gpu_on_one_node() -> None:
    held = NodeDevices(**_held("gpu:h100:1(IDX:0)"))
    plan = plan_claim({"gpu.nvidia.com": 1}, "n3", held, node_slices("n3"), 7)
    assert isinstance(plan, ClaimPlan) and [d.name for d in plan.results["gpu"]] == ["gpu-0"]
    held = NodeDevices(**_held("gpu:3g.40gb:1(IDX:2)"))
    plan = plan_claim({MIG3: 1}, "n3", held, node_slices("n3"), 7)
    assert isinstance(plan, ClaimPlan) and [d.name for d in plan.results["mig-3g-40gb"]] == ["gpu-1-mig-3g40gb-1"]


@pytest.mark.parametrize(
    ("counts", "detail", "slices_layout", "words"),
    [  # the driver republished another layout: Slurm's 1g.10gb index 4 is now a 3g.40gb slice
     ({MIG1: 1}, "gpu:1g.10gb:1(IDX:4)", LAYOUT, "index 4, which is gpu-0-mig-3g40gb-4 (a mig of profile 3g.40gb)"),
     # a whole GPU's job that landed on a MIG slice (a node Slurm did not say was MIG)
     ({"gpu.nvidia.com": 1}, "gpu:1g.10gb:1(IDX:0)", LAYOUT, "not a whole GPU"),
     # the driver shows whole GPUs where Slurm has MIG slices
     ({MIG1: 1}, "gpu:1g.10gb:1(IDX:0)", "n2=h100", "not a MIG device of profile 1g.10gb")],
)  # fmt: skip
def test_disagreeing_views_give_nothing(counts: Obj, detail: str, slices_layout: str, words: str) -> None:
    plan = plan_claim(counts, "n2", NodeDevices(**_held(detail)), node_slices("n2", slices_layout), 7)
    assert isinstance(plan, str), plan
    assert "disagree" in plan and words in plan, plan


def test_a_partitionable_device_is_never_given() -> None:
    slices = node_slices("n1")
    slices[0]["spec"]["devices"][1]["consumesCounters"] = [{"counterSet": "gpu-1-counters", "counters": {}}]
    by_index = node_devices(slices, "gpu.nvidia.com", "n1")
    assert [d.name for d in by_index.values()] == ["gpu-0"]


def _held(detail: str) -> Obj:
    indices, counts = parse_gres_detail(detail)
    return {"gres": indices, "gres_counts": counts}


# --- layout changes: the SlurmDevicesMatch node condition -----------------------------------------


def test_the_condition_compares_slurms_gres_with_the_drivers_newest_slices() -> None:
    info = NodeInfo(name="n2", gres="gpu:1g.10gb:4,gpu:3g.40gb:1")
    agree = decide_match(info, node_slices("n2"), "n2")
    assert agree is not None and agree.status == "True" and "4 1g.10gb, 1 3g.40gb" in agree.message
    # The driver republished the GPU as seven 1g.10gb slices (a new pool generation); gres.conf did not change.
    changed = node_slices("n2", "n2=h100:" + "+".join(["1g.10gb"] * 7))
    changed[0]["spec"]["pool"]["generation"] = 2
    fit = decide_match(info, node_slices("n2") + changed, "n2")
    assert fit is not None and fit.status == "False" and fit.reason == names.REASON_SLURM_DEVICES_DIFFER
    assert "has 4 1g.10gb, 1 3g.40gb" in fit.message and "publish 7 1g.10gb" in fit.message, fit.message
    # A node without DRA GPUs and without MIG is not concerned; one with whole GPUs only, compared.
    assert decide_match(NodeInfo(name="n9", gres="gpu:4"), [], "n9") is None
    whole = decide_match(NodeInfo(name="n1", gres="gpu:h100:2"), node_slices("n1"), "n1")
    assert whole is not None and whole.status == "True"
    assert decide_match(NodeInfo(name="n2", gres="gpu:1g.10gb:4,gpu:3g.40gb:1"), [], "n2").status == "False"  # type: ignore[union-attr]


def test_mig_jobs_are_submitted_without_nodes_whose_views_differ() -> None:
    mig = JobRequest(gres="gres/gpu:1g.10gb:1")
    assert exclude_mig_nodes(mig, {"n2"}, {"n3"}).excluded_nodes == ["n3"]
    whole = JobRequest(gres="gres/gpu:1")
    assert exclude_mig_nodes(whole, {"n2"}, {"n3"}).excluded_nodes == ["n2"], "whole GPUs: checked device by device"
    with pytest.raises(ValueError, match="SlurmDevicesMatch=False"):
        exclude_mig_nodes(JobRequest(gres="gres/gpu:3g.40gb:1", required_nodes=["n3"]), set(), {"n3"})


def test_admission_knows_the_largest_request_a_node_can_hold() -> None:
    slices = node_slices("n1") + node_slices("n2")
    assert largest_request(slices, device_class(MIG1)) == 4  # type: ignore[arg-type]
    assert largest_request(slices, device_class(MIG3)) == 1  # type: ignore[arg-type]
    assert largest_request(slices, device_class("gpu.nvidia.com")) == 2  # type: ignore[arg-type]
    assert largest_request(slices, device_class("gpu.example.com")) is None  # type: ignore[arg-type]


def test_the_current_nvidia_drivers_names_order_mig_devices_without_index_attributes() -> None:
    """NVIDIA's driver now publishes no index, minor or parentIndex: its names carry the GPU's minor
    and the instance's placement start, which give the same order."""

    def mig(name: str, profile: str) -> Obj:
        return {"name": name, "attributes": {"type": {"string": "mig"}, "profile": {"string": profile}}}

    whole = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}
    devices = [
        mig("gpu-1-mig-9-4-4", "3g.40gb"),
        mig("gpu-1-mig-19-0-1", "1g.10gb"),
        whole,
        mig("gpu-1-mig-19-1-1", "1g.10gb"),
    ]
    spec = {"driver": "gpu.nvidia.com", "nodeName": "n", "pool": {"name": "n"}, "devices": devices}
    by_index = node_devices([{"spec": spec}], "gpu.nvidia.com", "n")
    assert [d.name for _, d in sorted(by_index.items())] == [
        "gpu-0",
        "gpu-1-mig-19-0-1",
        "gpu-1-mig-19-1-1",
        "gpu-1-mig-9-4-4",
    ]


def test_admission_refuses_a_request_no_nodes_slices_can_hold_naming_the_class() -> None:
    slices = node_slices("n1") + node_slices("n2")

    def decide(counts: Obj, listed: list[Obj] | None) -> Any:
        limits = {EXTENDED_PREFIX + c: str(n) for c, n in counts.items()}
        pod = make_pod({"containers": [{"name": "c", "image": "i", "resources": {"limits": limits}}]})
        pod["metadata"]["namespace"] = "slurm"
        mutated = mutate(make_request(pod), CONFIG)
        assert mutated.allowed, mutated.message
        return validate(make_request(apply(pod, mutated.patch)), CONFIG, None, listed)

    assert decide({MIG1: 4}, slices).allowed
    refused = decide({MIG1: 5}, slices)
    assert not refused.allowed and f"5 device(s) of DeviceClass {MIG1}" in refused.message, refused.message
    assert "no node has more than 4" in refused.message
    assert not decide({"gpu.nvidia.com": 3}, slices).allowed
    assert decide({"gpu.nvidia.com": 3}, None).allowed, "slices not read yet: not judged"
    assert decide({"gpu.example.com": 9}, slices).allowed, "a driver that publishes nothing: not judged"


def test_the_operator_reads_each_nodes_own_slices_and_queues_the_node_a_slice_change_touches() -> None:
    queued: list[str] = []
    match = DeviceMatch(cast(KubeClient, object()), queued.append)

    def event(etype: str, node: str, name: str) -> None:
        match.slices._apply(etype, {"metadata": {"name": name, "uid": name}, "spec": {"nodeName": node, "devices": []}})

    event("ADDED", "n1", "s1")
    event("ADDED", "n2", "s2")
    assert [s["metadata"]["name"] for s in match.slices_of("n1")] == ["s1"] and queued == ["n1", "n2"]
    event("MODIFIED", "n3", "s1")  # a slice moved to another node: both are decided again
    assert match.slices_of("n1") == [] and [s["metadata"]["name"] for s in match.slices_of("n3")] == ["s1"]
    assert queued[2:] == ["n1", "n3"]
    event("DELETED", "n2", "s2")
    assert match.slices_of("n2") == [] and queued[-1] == "n2"


# --- shards: a GPU shared by Slurm's shard GRES and DRA consumable capacity (docs/gpus.md#shards) ----
SHARDED = "n1=h100/8,h100/8 n2=h100:1g.10gb+3g.40gb"


def test_the_local_layouts_shards_are_slurm_records_and_shareable_devices() -> None:
    nodes = gpus_layout.layout(SHARDED)
    assert gpus_layout.gres(nodes["n1"]) == "gpu:h100:2,shard:16"
    records = [r for r in gpus_layout.gres_conf(nodes) if "Name=shard" in r]
    assert records == [
        "NodeName=n1 Name=shard Count=8 File=/dev/nvidia0",
        "NodeName=n1 Name=shard Count=8 File=/dev/nvidia1",
    ]
    by_index = node_devices(node_slices("n1", SHARDED), "gpu.nvidia.com", "n1")
    assert [(d.name, d.shards) for d in by_index.values()] == [("gpu-0", 8), ("gpu-1", 8)]
    classes = [i["metadata"]["name"] for i in gpus_layout.manifests(nodes)["items"] if i["kind"] == "DeviceClass"]
    assert SHARD in classes
    for bad in ("n1=h100:1g.10gb/8", "n1=h100/0", "n1=h100/x"):
        with pytest.raises(SystemExit):
            gpus_layout.layout(bad)


def test_a_shard_class_asks_slurm_for_shards_and_its_claim_for_one_gpus_capacity() -> None:
    cls = device_class(SHARD)
    assert cls is not None and cls.shared and cls.slurm_gres == "shard" and cls.request == "shard"
    assert slurm_needs({SHARD: 3}) == ({"shard": 3}, None)
    assert gpu_gres([{"dra/shard": 3}, {"dra/shard": 2}]) == "gres/shard:3"
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
    request = claim_object(pod, "c", {SHARD: 3})["spec"]["devices"]["requests"][0]
    assert request == {
        "name": "shard",
        "exactly": {"deviceClassName": SHARD, "allocationMode": "ExactCount", "count": 1,
                    "capacity": {"requests": {"shards": "3"}}},
    }  # fmt: skip


def test_slurms_shard_detail_says_which_gpu() -> None:
    from slurm_bridge.slurm.formats import parse_gres_shares

    assert parse_gres_shares("shard:2(2/8,0/8)") == {"shard": (2, 0)}
    assert parse_gres_shares("gpu:h100:1(IDX:0),shard:3(0/8,3/8)") == {"shard": (0, 3)}
    assert parse_gres_shares("shard:h100:3(0/8,3/8)") == {"shard": (0, 3)}, "typed as Slurm 26.05 shows it"
    assert parse_gres_detail("shard:h100:3(0/8,3/8)")[1] == {"shard": 3}
    assert parse_gres_detail("shard:2(2/8,0/8)")[1] == {"shard": 2}
    assert parse_gres_shares("gpu:h100:1(IDX:0)") == {}


def _shard_held(detail: str) -> NodeDevices:
    from slurm_bridge.slurm.formats import parse_gres_shares

    return NodeDevices(**_held(detail), shares=parse_gres_shares(detail))


def test_shards_are_given_on_the_gpu_slurm_chose_with_their_capacity() -> None:
    slices = node_slices("n1", SHARDED)
    plan = plan_claim({SHARD: 3}, "n1", _shard_held("shard:3(0/8,3/8)"), slices, 7)
    assert isinstance(plan, ClaimPlan), plan
    assert [d.name for d in plan.results["shard"]] == ["gpu-1"] and plan.annotation() == "shard:1"
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
    (result,) = allocation_status(pod, plan)["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-1" and result["consumedCapacity"] == {"shards": "3"}
    again = allocation_status(pod, plan)["allocation"]["devices"]["results"][0]
    assert result["shareID"] == again["shareID"], "the same share each time the operator computes it"
    whole = plan_claim({"gpu.nvidia.com": 1}, "n1", _shard_held("gpu:h100:1(IDX:0)"), slices, 8)
    assert isinstance(whole, ClaimPlan)
    assert "shareID" not in allocation_status(pod, whole)["allocation"]["devices"]["results"][0]


@pytest.mark.parametrize(
    ("detail", "layout", "words"),
    [("shard:4(2/8,2/8)", SHARDED, "on one GPU"),  # spread over two GPUs (MULTIPLE_SHARING_GRES_PJ)
     ("shard:4(0/8,0/8,4/8)", SHARDED, "disagree"),  # Slurm has a third shard record
     ("shard:4(4/8,0/8)", "n1=h100,h100", "disagree"),  # the driver publishes no shareable GPU
     ("gpu:h100:1(IDX:0)", SHARDED, "does not say which GPU")],
)  # fmt: skip
def test_shards_fail_closed_when_the_views_disagree(detail: str, layout: str, words: str) -> None:
    plan = plan_claim({SHARD: 4}, "n1", _shard_held(detail), node_slices("n1", layout), 7)
    assert isinstance(plan, str) and words in plan, plan


def test_shards_in_the_node_condition_and_admission() -> None:
    """As the operator's and webhook's slice watch keeps them (``project_slice``)."""
    from slurm_bridge.kube.cache import project_slice

    slices = [project_slice(s) for s in node_slices("n1", SHARDED)]
    agree = decide_match(NodeInfo(name="n1", gres="gpu:h100:2,shard:h100:16"), slices, "n1")
    assert agree is not None and agree.status == "True" and "16 shard(s)" in agree.message, agree
    differ = decide_match(NodeInfo(name="n1", gres="gpu:h100:2,shard:8"), slices, "n1")
    assert differ is not None and differ.status == "False", differ
    assert largest_request(slices, device_class(SHARD)) == 8  # type: ignore[arg-type]
    assert shard_request("gres/shard:2") and not shard_request("gres/gpu:2")
    job = JobRequest(gres="gres/shard:2")
    assert exclude_mig_nodes(job, {"n2"}, {"n1"}).excluded_nodes == ["n1"], "shards: not where the views differ"
