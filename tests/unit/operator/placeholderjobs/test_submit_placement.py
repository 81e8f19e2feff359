"""Where a new job may go, decided before anything reaches Slurm (pure;
operator/placeholderjobs/decisions/placement.py): a gang placed by a topology only where one unit
holds it, every job without the nodes the node controller names (unfit, MIG, mismatched), the
partitions read for it, and the words of each refusal."""

from __future__ import annotations

import pytest

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.decisions.placement import (
    NODES_NOT_READ,
    NodeSets,
    Refusal,
    decide,
    left_out,
    partition_unread,
    partitions_to_read,
    placed_by_topology,
)
from slurm_bridge.operator.placeholderjobs.decisions.plan import Submit
from slurm_bridge.slurm.models import JobRequest, NodeInfo

pytestmark = pytest.mark.unit

WHOLE, MIG = "gres/gpu:1", "gres/gpu:3g.40gb:1"
TABLE = {
    n.name: n
    for n in (
        NodeInfo(name="n1", topology="block:b1", partitions=("tb",)),
        NodeInfo(name="n2", topology="block:b1", partitions=("tb",)),
        NodeInfo(name="n3", topology="block:b2", partitions=("tb",)),
    )
}


def submit(*components: JobRequest, request: JobRequest | None = None) -> Submit:
    return Submit(request or components[0], ("p",), components)


def gang(nodes: int = 2, partition: str | None = "tb") -> JobRequest:
    return JobRequest(nodes=nodes, topology="block", partition=partition)


@pytest.mark.parametrize(
    ("request_", "sets", "excluded", "refusal"),
    [(JobRequest(nodes=1), NodeSets(), None, None),
     (JobRequest(nodes=1, excluded_nodes=["a"]), NodeSets(unfit=frozenset({"u"})), ["a", "u"], None),
     (JobRequest(gres=WHOLE), NodeSets(mig=frozenset({"m"}), mismatched=frozenset({"x"})), ["m"], None),
     (JobRequest(gres=MIG), NodeSets(mig=frozenset({"m"}), mismatched=frozenset({"x"})), ["x"], None),
     (JobRequest(), NodeSets(mig=frozenset({"m"}), mismatched=frozenset({"x"})), None, None),
     (JobRequest(required_nodes=["u"]), NodeSets(unfit=frozenset({"u"})), None, names.REASON_NODES_DO_NOT_FIT),
     (JobRequest(gres=WHOLE, required_nodes=["m"]), NodeSets(mig=frozenset({"m"})), None, "whose GPUs are MIG"),
     (JobRequest(gres=MIG, required_nodes=["x"]), NodeSets(mismatched=frozenset({"x"})), None,
      f"{names.NODE_COND_SLURM_DEVICES_MATCH}=False")],
)  # fmt: skip
def test_a_submit_goes_without_the_nodes_the_node_controller_names(
    request_: JobRequest, sets: NodeSets, excluded: list[str] | None, refusal: str | None
) -> None:
    decided = decide(submit(request=request_), sets, None, {})
    if refusal is None:
        assert isinstance(decided, Submit) and decided.request.excluded_nodes == excluded, decided
    else:
        assert isinstance(decided, Refusal) and refusal in decided.words, decided


def test_nothing_to_leave_out_sends_the_submit_as_it_is() -> None:
    action = submit(request=JobRequest(nodes=1))
    assert decide(action, NodeSets(), None, {}) is action


def test_each_component_of_a_heterogeneous_job_goes_without_them() -> None:
    a, b = JobRequest(nodes=1), JobRequest(nodes=2, gres=WHOLE)
    decided = decide(submit(a, b), NodeSets(unfit=frozenset({"u"}), mig=frozenset({"m"})), None, {})
    assert isinstance(decided, Submit)
    assert [c.excluded_nodes for c in decided.components] == [["u"], ["m", "u"]]
    assert decided.request.excluded_nodes == ["u"]


@pytest.mark.parametrize(
    ("requests", "nodes", "topologies", "fragment"),
    [((gang(),), TABLE, {"tb": "block"}, None),
     ((gang(3),), TABLE, {"tb": "block"}, "needs 3 nodes within one block unit, but the largest in partition tb has 2"),
     ((gang(),), None, {}, NODES_NOT_READ),
     ((gang(partition=None),), TABLE, {}, f"name a partition with Topology=block ({names.ANN_PARTITION})"),
     ((gang(),), TABLE, {"tb": "switch"}, "by topology switch"),
     ((gang(),), TABLE, {"tb": ""}, "by the cluster's default topology"),
     ((gang(),), TABLE, {"tb": None}, "Slurm has no partition tb"),
     ((JobRequest(nodes=1), gang(3)), TABLE, {"tb": "block"}, "needs 3 nodes within one block unit"),
     ((JobRequest(nodes=5),), None, {}, None)],
)  # fmt: skip
def test_a_gang_goes_only_where_one_unit_of_its_topology_holds_it(
    requests: tuple[JobRequest, ...],
    nodes: dict[str, NodeInfo] | None,
    topologies: dict[str, str | None],
    fragment: str | None,
) -> None:
    action = submit(*requests) if len(requests) > 1 else submit(request=requests[0])
    decided = decide(action, NodeSets(unfit=frozenset({"n9"})), nodes, topologies)
    if fragment is None:
        assert isinstance(decided, Submit) and decided.request.excluded_nodes == ["n9"], decided
    else:
        assert isinstance(decided, Refusal) and decided.words.startswith("not submitted: "), decided
        assert fragment in decided.words, decided


def test_the_topologys_refusal_comes_before_the_nodes_left_out() -> None:
    pinned = JobRequest(nodes=2, topology="block", partition="tb", required_nodes=["u"])
    decided = decide(submit(request=pinned), NodeSets(unfit=frozenset({"u"})), None, {})
    assert decided == Refusal(f"not submitted: {NODES_NOT_READ}")


def test_the_partitions_read_are_those_a_topology_gang_names_once_each() -> None:
    plain, a, b = JobRequest(partition="x"), gang(partition="tb,other"), gang(partition="tb")
    assert placed_by_topology(submit(plain, a, b)) == (a, b)
    assert placed_by_topology(submit(request=plain)) == ()
    assert partitions_to_read((a, b)) == ("tb", "other")
    assert partitions_to_read((a, gang(partition=None))) == (), "refused without a read"
    assert partition_unread("Access/permission denied") == Refusal(
        "not submitted: its partition could not be read: Access/permission denied"
    )


@pytest.mark.parametrize(
    ("asked", "sent", "words"),
    [(JobRequest(), JobRequest(), ""),
     (JobRequest(excluded_nodes=["a"]), JobRequest(excluded_nodes=["a"]), ""),
     (JobRequest(excluded_nodes=["a"]), JobRequest(excluded_nodes=["a", "u"]),
      f"; submitted without node(s) u ({names.NODE_COND_SLURM_RESOURCES_FIT}=False) (docs/gpus.md, "
      "docs/colocation.md): tried again while the pod waits"),
     (JobRequest(gres=WHOLE), JobRequest(gres=WHOLE, excluded_nodes=["m", "u"]),
      f"node(s) m (whose GPUs are MIG instances), u ({names.NODE_COND_SLURM_RESOURCES_FIT}=False)"),
     (JobRequest(gres=MIG), JobRequest(gres=MIG, excluded_nodes=["x"]),
      f"node(s) x ({names.NODE_COND_SLURM_DEVICES_MATCH}=False)")],
)  # fmt: skip
def test_slurms_refusal_says_which_nodes_the_job_went_without_and_why(
    asked: JobRequest, sent: JobRequest, words: str
) -> None:
    said = left_out(asked, sent, NodeSets(unfit=frozenset({"u"}), mig=frozenset({"m"}), mismatched=frozenset({"x"})))
    assert (said == "") if not words else (words in said), said
