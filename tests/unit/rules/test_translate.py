"""Pods and annotations -> one JobRequest: deadlines, precedence, node counts, placement
(slurm_bridge/rules/translate.py)."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.rules.nodeplacement import Placement
from slurm_bridge.rules.translate import job_request, placement_request_problems, time_limit_from_deadline
from slurm_bridge.slurm.models import JobRequest
from tests.unit.rules.test_podresources import _c, _pod

pytestmark = pytest.mark.unit


# --- deadlines ------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "minutes"), [(1, 1), (59, 1), (60, 1), (61, 2), (3600, 60), (3601, 61)])
def test_time_limit_from_deadline(seconds: int, minutes: int) -> None:
    assert time_limit_from_deadline(seconds) == minutes


@pytest.mark.parametrize("seconds", [0, -5])
def test_time_limit_from_deadline_rejects_non_positive(seconds: int) -> None:
    with pytest.raises(ValueError):
        time_limit_from_deadline(seconds)


# --- job_request ----------------------------------------------------------------------------

CFG = Config()


def test_single_pod_defaults() -> None:
    req = job_request([_pod(_c({"cpu": "2", "memory": "1Gi"}))], config=CFG)
    # The default node sharing is timeShared (the Go bridge's), with the default MCS label.
    assert req == JobRequest(
        partition="slurm-bridge",
        nodes=1,
        tasks_per_node=1,
        cpus_per_task=2,
        memory_per_node_mib=1024,
        node_sharing="timeShared",
        mcs_label="kubernetes",
    )
    assert req.gres is None and req.max_nodes is None and req.exclusive is None


def test_config_partition_and_mcs_label() -> None:
    req = job_request([_pod(_c())], config=Config(partition="k8s", mcsLabel="kube"))
    assert (req.partition, req.mcs_label) == ("k8s", "kube")


def test_group_one_node_per_pod_sized_for_the_largest() -> None:
    pods = [
        _pod(_c({"cpu": "1", "memory": "4Gi"}), name="a"),
        _pod(_c({"cpu": "8", "memory": "1Gi"}, {"nvidia.com/gpu": "1"}), name="b"),
        _pod(_c({"cpu": "2"}, {"amd.com/gpu": "2"}), name="c"),
    ]
    req = job_request(pods, config=CFG)
    assert (req.nodes, req.tasks_per_node, req.cpus_per_task) == (3, 1, 8)
    assert req.memory_per_node_mib == 4096
    assert req.gres == "gres/gpu:2"


def test_gpu_vendors_add_up_within_a_pod() -> None:
    req = job_request([_pod(_c(None, {"nvidia.com/gpu": "1", "amd.com/gpu": "1"}))], config=CFG)
    assert req.gres == "gres/gpu:2"


def test_precedence_defaults_then_derived_then_annotations() -> None:
    pod = _pod(_c({"cpu": "2", "memory": "1Gi"}, {"nvidia.com/gpu": "1"}))
    derived = {"time_limit_minutes": 30, "job_name": "job-from-workload", "partition": "derived"}
    req = job_request([pod], config=CFG, derived=derived)
    assert (req.time_limit_minutes, req.job_name, req.partition) == (30, "job-from-workload", "derived")

    ann = {
        names.ANN_TIMELIMIT: "90",
        names.ANN_PARTITION: "gpu",
        names.ANN_CPU_PER_TASK: "1",
        names.ANN_MEM_PER_NODE: "512Mi",
        names.ANN_GRES: "gpu:a100:4",
    }
    req = job_request([pod], config=CFG, derived=derived, annotations=ann)
    assert req.time_limit_minutes == 90
    assert req.job_name == "job-from-workload"  # not annotated: derived value stays
    assert req.partition == "gpu"
    assert (req.cpus_per_task, req.memory_per_node_mib, req.gres) == (1, 512, "gres/gpu:a100:4")


def test_annotation_overrides_config_mcs_free_fields() -> None:
    ann = {names.ANN_EXCLUSIVE: "false", names.ANN_ACCOUNT: "acct"}
    req = job_request([_pod(_c())], config=Config(mcsLabel="kube"), annotations=ann)
    assert (req.node_sharing, req.exclusive, req.account, req.mcs_label) == ("timeShared", None, "acct", "kube")


@pytest.mark.parametrize(
    ("pods", "ann", "nodes", "max_nodes"),
    [
        (1, {}, 1, None),
        (3, {}, 3, None),
        (3, {names.ANN_MIN_NODES: "3"}, 3, None),
        (3, {names.ANN_MIN_NODES: "5"}, 5, None),
        (3, {names.ANN_MAX_NODES: "3"}, 3, 3),
        (3, {names.ANN_MAX_NODES: "8"}, 3, 8),
        (2, {names.ANN_MIN_NODES: "2", names.ANN_MAX_NODES: "4"}, 2, 4),
    ],
)
def test_node_counts(pods: int, ann: dict[str, str], nodes: int, max_nodes: int | None) -> None:
    group = [_pod(_c(), name=f"p{i}") for i in range(pods)]
    req = job_request(group, config=CFG, annotations=ann)
    assert (req.nodes, req.max_nodes) == (nodes, max_nodes)


TOPOLOGY_KEY = names.LABEL_TOPOLOGY_PREFIX + "block"


@pytest.mark.parametrize(
    ("pods", "ann", "fragment"),
    [
        (3, {names.ANN_MIN_NODES: "2"}, f"{names.ANN_MIN_NODES} (2) is below the number of pods (3)"),
        (3, {names.ANN_MAX_NODES: "2"}, f"{names.ANN_MAX_NODES} (2) is below the node count (3)"),
        (2, {names.ANN_MIN_NODES: "4", names.ANN_MAX_NODES: "3"}, "invalid Slurm job annotations"),
        (1, {names.ANN_TIMELIMIT: "ten"}, "timelimit"),
        (2, {names.ANN_TOPOLOGY: TOPOLOGY_KEY, names.ANN_MAX_NODES: "3"}, "one segment of exactly its 2 nodes"),
    ],
)
def test_node_count_errors(pods: int, ann: dict[str, str], fragment: str) -> None:
    group = [_pod(_c(), name=f"p{i}") for i in range(pods)]
    with pytest.raises(ValueError) as info:
        job_request(group, config=CFG, annotations=ann)
    assert fragment in str(info.value)


def test_a_topology_comes_from_the_annotation_or_the_podgroup_and_needs_a_fixed_node_count() -> None:
    group = [_pod(_c(), name=f"p{i}") for i in range(2)]
    assert job_request(group, config=CFG, annotations={names.ANN_TOPOLOGY: TOPOLOGY_KEY}).topology == "block"
    assert job_request(group, config=CFG, derived={"topology": "switch"}).topology == "switch"
    ann = {names.ANN_TOPOLOGY: TOPOLOGY_KEY, names.ANN_MAX_NODES: "2"}
    assert job_request(group, config=CFG, annotations=ann).topology == "block", "a range of one is no range"
    assert job_request(group, config=CFG).topology is None


def test_derived_node_count_below_pods_is_an_error() -> None:
    with pytest.raises(ValueError, match="derived node count"):
        job_request([_pod(_c()), _pod(_c())], config=CFG, derived={"nodes": 1})


def test_no_pods_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one pod"):
        job_request([], config=CFG)


def test_unknown_derived_field_is_an_error() -> None:
    with pytest.raises(ValueError, match="time_limit"):
        job_request([_pod(_c())], config=CFG, derived={"time_limit": 5})


def test_invalid_derived_value_is_an_error() -> None:
    with pytest.raises(ValueError):
        job_request([_pod(_c())], config=CFG, derived={"time_limit_minutes": 0})


def test_job_deadline_flows_through_derived() -> None:
    derived = {"time_limit_minutes": time_limit_from_deadline(601)}
    assert job_request([_pod(_c())], config=CFG, derived=derived).time_limit_minutes == 11


def test_inputs_are_not_modified() -> None:
    pod = _pod(_c({"cpu": "1"}))
    ann = {names.ANN_TIMELIMIT: "5"}
    derived = {"job_name": "x"}
    before = (repr(pod), repr(ann), repr(derived))
    job_request([pod], config=CFG, derived=derived, annotations=ann)
    assert (repr(pod), repr(ann), repr(derived)) == before


# --- placement: nodeSelector and node affinity ------------------------------------------------

HOST = names.LABEL_HOSTNAME
FEATURE = names.LABEL_NODE_FEATURE_PREFIX
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _placed(
    selector: dict[str, str] | None = None, *terms: list[dict[str, Any]], name: str = "p", **extra: Any
) -> dict[str, Any]:
    """A pod with a nodeSelector and required node affinity terms (each a list of expressions)."""
    pod = _pod(_c(), name=name)
    if selector is not None:
        pod["spec"]["nodeSelector"] = selector
    if terms:
        selector_terms = [{"matchExpressions": t} for t in terms]
        pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": selector_terms}}}
    pod["spec"].update(extra)
    return pod


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def _not_in(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "NotIn", "values": list(values)}


def test_no_placement_sends_nothing() -> None:
    req = job_request([_pod(_c())], config=CFG, annotations={names.ANN_CONSTRAINTS: "a|b"})
    assert (req.required_nodes, req.excluded_nodes, req.constraints) == (None, None, "a|b")


def test_hostname_node_selector_is_a_required_node() -> None:
    req = job_request([_placed({HOST: "kwok-node-2"})], config=CFG)
    assert (req.required_nodes, req.excluded_nodes) == (["kwok-node-2"], None)
    assert req.crd_dict()["requiredNodes"] == ["kwok-node-2"]


def test_hostname_not_in_is_excluded_nodes() -> None:
    req = job_request([_placed(None, [_not_in(HOST, "n2", "n1")])], config=CFG)
    assert (req.required_nodes, req.excluded_nodes) == (None, ["n1", "n2"])
    assert req.crd_dict()["excludedNodes"] == ["n1", "n2"]


def test_slurm_nodename_label_is_a_required_node() -> None:
    req = job_request([_placed(None, [_in(names.LABEL_SLURM_NODENAME, "sn-7")])], config=CFG)
    assert req.required_nodes == ["sn-7"]


@pytest.mark.parametrize(
    ("annotation", "constraints"),
    [
        (None, "gpu&ib"),
        ("a100", "a100&gpu&ib"),
        ("a100|h100", "(a100|h100)&gpu&ib"),
        ("[rack1|rack2]", "[rack1|rack2]&gpu&ib"),
    ],
)
def test_feature_labels_are_anded_with_the_constraints_annotation(annotation: str | None, constraints: str) -> None:
    pod = _placed({FEATURE + "gpu": "true"}, [{"key": FEATURE + "ib", "operator": "Exists"}])
    ann = {} if annotation is None else {names.ANN_CONSTRAINTS: annotation}
    assert job_request([pod], config=CFG, annotations=ann).constraints == constraints


def test_features_that_cannot_be_combined_with_the_annotation_are_refused() -> None:
    pod = _placed(None, [_in(FEATURE + "gpu", "true")], [_in(FEATURE + "a100", "true"), _in(FEATURE + "ib", "true")])
    assert job_request([pod], config=CFG).constraints == "gpu|(a100&ib)"
    with pytest.raises(ValueError) as info:
        job_request([pod], config=CFG, annotations={names.ANN_CONSTRAINTS: "x|y"})
    assert names.ANN_CONSTRAINTS in str(info.value) and "nesting parentheses" in str(info.value)


def test_a_required_node_list_must_name_as_many_nodes_as_the_job_holds() -> None:
    pod = _placed(None, [_in(HOST, "a", "b")])
    with pytest.raises(ValueError) as info:
        job_request([pod], config=CFG)
    message = str(info.value)
    assert "allow 2 node(s) (a, b)" in message and "holds 1 node(s)" in message
    assert f"{FEATURE}<feature>" in message
    # Two nodes for one pod: Slurm allocates both, and the pod runs on one of them.
    req = job_request([pod], config=CFG, annotations={names.ANN_MAX_NODES: "2"})
    assert (req.nodes, req.max_nodes, req.required_nodes) == (1, 2, ["a", "b"])
    # A gang of two pods that may each use a or b: the job holds exactly a and b.
    pods = [_placed(None, [_in(HOST, "a", "b")], name=f"p{i}") for i in range(2)]
    assert job_request(pods, config=CFG).required_nodes == ["a", "b"]
    # A gang counted before all members exist (derived nodes) holds that many nodes.
    with pytest.raises(ValueError, match="holds 3 node"):
        job_request(pods, config=CFG, derived={"nodes": 3})


def test_a_refused_placement_names_the_pod_and_the_field() -> None:
    pod = _placed(None, topologySpreadConstraints=[{"maxSkew": 1}])
    with pytest.raises(ValueError) as info:
        job_request([pod], config=CFG)
    assert str(info.value).startswith("pod ns/p: spec.topologySpreadConstraints: ")


# --- a gang: one job whose every node suits every pod --------------------------------------------


def test_gang_members_node_lists_intersect() -> None:
    pods = [_placed(None, [_in(HOST, "a", "b", "c")], name="p0"), _placed(None, [_in(HOST, "b", "c")], name="p1")]
    assert job_request(pods, config=CFG).required_nodes == ["b", "c"]


def test_gang_members_excluded_nodes_add_up() -> None:
    pods = [_placed(None, [_not_in(HOST, "x")], name="p0"), _placed(None, [_not_in(HOST, "y")], name="p1")]
    assert job_request(pods, config=CFG).excluded_nodes == ["x", "y"]


def test_gang_members_features_are_anded() -> None:
    pods = [
        _placed({FEATURE + "gpu": "true"}, name="p0"),
        _placed(name="p1"),
        _placed({FEATURE + "ib": "true"}, name="p2"),
    ]
    assert job_request(pods, config=CFG).constraints == "gpu&ib"


def test_gang_members_without_a_common_node_are_refused() -> None:
    pods = [_placed({HOST: "a"}, name="p0"), _placed({HOST: "b"}, name="p1")]
    with pytest.raises(ValueError, match="no node in common"):
        job_request(pods, config=CFG)


def test_gang_with_one_refused_member_is_refused() -> None:
    bad = _placed(None, affinity={"podAntiAffinity": {REQUIRED: [{"topologyKey": HOST}]}}, name="p1")
    with pytest.raises(ValueError) as info:
        job_request([_placed(name="p0"), bad], config=CFG)
    assert str(info.value).startswith("pod ns/p1: spec.affinity.podAntiAffinity: ")


# --- the admission form of the same checks ---------------------------------------------------------


def test_placement_request_problems() -> None:
    two = Placement.of(nodes=["a", "b"])
    assert placement_request_problems([two], {}, pods=1) != []
    assert placement_request_problems([two], {names.ANN_MIN_NODES: "2"}, pods=1) == []
    assert placement_request_problems([two], {}, pods=None) == []  # a gang's size is not known here
    assert placement_request_problems([two, Placement.of(nodes=["c", "d"])], {}, pods=None) != []
    gpu = Placement.of(features=(frozenset({"gpu"}), frozenset({"a100", "ib"})))
    assert placement_request_problems([gpu], {names.ANN_CONSTRAINTS: "x|y"}, pods=1) != []
    # Invalid annotations are validate_annotations' to report.
    assert placement_request_problems([two], {names.ANN_MIN_NODES: "zero"}, pods=1) == []
