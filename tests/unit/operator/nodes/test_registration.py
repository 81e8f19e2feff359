"""Registration of labelled Kubernetes nodes as Slurm dynamic nodes: the node line, and the pure
decision table (operator/nodes/registration.py), including whole sequences applied step by step."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.operator.nodes import nodesync
from slurm_bridge.operator.nodes import registration as reg
from slurm_bridge.slurm.models import NodeInfo

A = reg.Action
BRIDGE = "sb"
PARTS = frozenset({"slurm-bridge", "gpu", "other"})


def node(
    labelled: bool = True, annotations: dict[str, str] | None = None, allocatable: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = {names.LABEL_EXTERNAL_NODE: "true"} if labelled else {}
    res = {"cpu": "8", "memory": "16Gi", **(allocatable or {})}
    return {
        "metadata": {"name": "k1", "labels": labels, "annotations": dict(annotations or {})},
        "status": {"allocatable": res, "capacity": res,
                   "addresses": [{"type": "Hostname", "address": "k1"}, {"type": "InternalIP", "address": "10.1.2.3"}]},
    }  # fmt: skip


def want(n: dict[str, Any]) -> reg.Desired:
    d = reg.desired(n, "k1", "slurm-bridge")
    assert isinstance(d, reg.Desired), d
    return d


def slurm(d: reg.Desired, *, ours: bool = True, dynamic: bool = True, states: tuple[str, ...] = ("IDLE",),
          reason: str = "", partitions: tuple[str, ...] | None = None, **changes: Any) -> NodeInfo:  # fmt: skip
    info = NodeInfo(
        name=d.name,
        states=states + (("DYNAMIC_NORM",) if dynamic else ()) + ("EXTERNAL",),
        reason=reason,
        cpus=d.cpus,
        real_memory_mib=d.memory_mib,
        gres=f"gpu:{d.gpus}" if d.gpus else "",
        features=d.partitions,
        partitions=d.partitions if partitions is None else partitions,
        comment=reg.bridge_comment(BRIDGE, "k1") if ours else "",
    )
    return info.model_copy(update=changes)


def _with(info: NodeInfo, **changes: Any) -> NodeInfo:
    return info.model_copy(update=changes)


def decide(n: dict[str, Any] | None, info: NodeInfo | None, refused: str | None = None) -> reg.Plan:
    w = (reg.desired(n, "k1", "slurm-bridge") if reg.labelled(n) else None) if n is not None else None
    return reg.decide(n, w, info, bridge_id=BRIDGE, known_partitions=PARTS, refused=refused)


# ---- the node line ------------------------------------------------------------------------------
def test_the_node_line_comes_from_allocatable_and_the_annotations() -> None:
    n = node(allocatable={"cpu": "3500m", "memory": "4000Mi", "nvidia.com/gpu": "2"})
    n["metadata"]["annotations"] = {names.ANN_EXTERNAL_NODE_PARTITIONS: "gpu, other,gpu",
                                    names.ANN_TOPOLOGY_SPEC: "topo-1:block-2"}  # fmt: skip
    d = want(n)
    assert (d.cpus, d.memory_mib, d.gpus, d.partitions) == (3, 4000, 2, ("gpu", "other"))
    assert d.node_conf() == ("NodeName=k1 NodeAddr=10.1.2.3 CPUs=3 RealMemory=4000 Gres=gpu:2 Features=gpu,other "
                             "Topology=topo-1:block-2 State=EXTERNAL")  # fmt: skip


def test_without_the_partitions_annotation_the_node_joins_the_default_partition() -> None:
    n = node()
    assert (
        want(n).node_conf()
        == "NodeName=k1 NodeAddr=10.1.2.3 CPUs=8 RealMemory=16384 Features=slurm-bridge State=EXTERNAL"
    )
    n["status"]["addresses"] = [{"type": "ExternalIP", "address": "10.9.9.9"}]
    assert want(n).node_conf().startswith("NodeName=k1 NodeAddr=10.9.9.9 CPUs=8 ")


@pytest.mark.parametrize(
    ("addresses", "words"),
    [
        ([], "reports no InternalIP or ExternalIP address; it is registered once its kubelet reports one"),
        ([{"type": "Hostname", "address": "k1"}], "reports no InternalIP or ExternalIP address"),
        # never into the node line
        ([{"type": "InternalIP", "address": "1.2.3.4 State=DOWN"}], "(only '1.2.3.4 State=DOWN', not an IP address)"),
    ],
)
def test_a_node_without_an_ip_address_is_not_registered(addresses: list[dict[str, str]], words: str) -> None:
    """slurmctld would resolve the name at each allocation (ten seconds each for an unknown name)."""
    n = node()
    n["status"]["addresses"] = addresses
    problem = reg.desired(n, "k1", "slurm-bridge")
    assert isinstance(problem, str) and words in problem and problem.startswith("node k1 ")


@pytest.mark.parametrize(
    ("annotations", "allocatable", "words"),
    [
        ({names.ANN_EXTERNAL_NODE_PARTITIONS: "a b"}, {}, "invalid partition names ['a b']"),
        ({names.ANN_EXTERNAL_NODE_PARTITIONS: "a,State=DOWN"}, {}, "invalid partition names"),
        ({names.ANN_EXTERNAL_NODE_PARTITIONS: " , "}, {}, "names no partition"),
        ({names.ANN_TOPOLOGY_SPEC: "x y"}, {}, "is not a Slurm topology spec"),
        ({}, {"cpu": "500m"}, "needs at least 1 of each"),
        ({}, {"memory": "lots"}, "unreadable allocatable resources"),
    ],
)
def test_labels_that_cannot_make_a_node_line_are_named(
    annotations: dict[str, str], allocatable: dict[str, str], words: str
) -> None:
    problem = reg.desired(node(annotations=annotations, allocatable=allocatable), "k1", "p")
    assert isinstance(problem, str) and words in problem
    plan = reg.decide(node(), problem, None, bridge_id=BRIDGE, known_partitions=PARTS)
    assert plan.action == A.WARN and plan.warning and words in plan.message


# ---- the decision table ----------------------------------------------------------------------------
def test_registration_writes_the_record_first_then_creates() -> None:
    n = node()
    assert decide(n, None).action == A.ANNOTATE
    assert reg.decide(n, want(n), None, bridge_id=BRIDGE, known_partitions=None).action is None, "partitions first"
    n["metadata"]["annotations"][names.ANN_SLURM_REGISTRATION] = want(n).node_conf()
    plan = decide(n, None)
    assert plan.action == A.CREATE and want(n).node_conf() in plan.message


def test_an_unknown_partition_registers_nothing() -> None:
    n = node(annotations={names.ANN_EXTERNAL_NODE_PARTITIONS: "gpu,nope"})
    plan = decide(n, None)
    assert plan.action == A.WARN and plan.warning and "['nope'] do not exist" in plan.message


def test_a_registered_node_that_matches_needs_nothing() -> None:
    n = node(annotations={names.ANN_SLURM_REGISTRATION: want(node()).node_conf()})
    assert decide(n, slurm(want(n))).action is None


def test_a_create_interrupted_before_its_comment_is_finished() -> None:
    n = node(annotations={names.ANN_SLURM_REGISTRATION: want(node()).node_conf()})
    assert decide(n, slurm(want(n), ours=False)).action == A.SET_COMMENT


def test_nodes_in_slurm_conf_or_made_by_others_are_left_alone() -> None:
    n = node()
    assert decide(n, slurm(want(n), ours=False, dynamic=False)).action is None  # slurm.conf already has it
    plan = decide(n, slurm(want(n), ours=False))
    assert plan.action == A.WARN and "did not register" in plan.message
    # Never deleted, even when the label goes: only the bridge's record goes.
    unlabelled = node(labelled=False, annotations={names.ANN_SLURM_REGISTRATION: "x"})
    assert decide(unlabelled, slurm(want(n), ours=False, dynamic=False)).action == A.UNANNOTATE


def test_removing_the_label_drains_first_and_deletes_only_when_idle() -> None:
    d = want(node())
    n = node(labelled=False, annotations={names.ANN_SLURM_REGISTRATION: d.node_conf()})
    plan = decide(n, slurm(d, states=("MIXED",)))
    assert plan.action == A.DRAIN and plan.reason.startswith(names.SLURM_REGISTRATION_REASON_PREFIX)
    drained = slurm(d, states=("MIXED", "DRAIN"), reason=plan.reason)
    assert decide(n, drained).action is None, "jobs still run: no pod is killed"
    assert decide(n, _with(drained, states=("IDLE", "DRAIN", "COMPLETING", "DYNAMIC_NORM"))).action is None
    assert decide(n, _with(drained, states=("IDLE", "DRAIN", "DYNAMIC_NORM"))).action == A.DELETE
    assert decide(n, None).action == A.UNANNOTATE
    assert decide(node(labelled=False), None).action is None


def test_the_node_sync_mirrors_a_registration_drain_as_an_outage_and_never_lifts_it() -> None:
    d = want(node())
    plan = decide(node(labelled=False, annotations={names.ANN_SLURM_REGISTRATION: d.node_conf()}), slurm(d))
    view = nodesync.slurm_view(slurm(d, states=("IDLE", "DRAIN"), reason=plan.reason))
    assert view.outage == "drain" and not view.bridge_drain


def test_a_node_whose_kubernetes_node_is_gone_leaves_slurm() -> None:
    d = want(node())
    assert decide(None, slurm(d)).action == A.DRAIN
    assert decide(None, slurm(d, states=("IDLE", "DRAIN"), reason=names.SLURM_REGISTRATION_REASON_PREFIX
                                + " gone")).action == A.DELETE  # fmt: skip
    assert decide(None, slurm(d, ours=False)).action is None, "not the bridge's: never touched"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"cpu": "16"}, "CPUs 8 -> 16"),
        ({"memory": "8Gi"}, "RealMemory 16384 -> 8192"),
        ({"nvidia.com/gpu": "1"}, "GPUs 0 -> 1"),
    ],
)
def test_a_capacity_change_re_registers_the_node(change: dict[str, str], words: str) -> None:
    old = want(node())
    n = node(annotations={names.ANN_SLURM_REGISTRATION: old.node_conf()}, allocatable=change)
    plan = decide(n, slurm(old))
    assert plan.action == A.DRAIN and words in plan.message


def test_a_partitions_change_re_registers_and_a_new_label_undrains() -> None:
    old = want(node())
    n = node(annotations={names.ANN_SLURM_REGISTRATION: old.node_conf(), names.ANN_EXTERNAL_NODE_PARTITIONS: "gpu"})
    plan = decide(n, slurm(old))
    assert plan.action == A.DRAIN and "partitions slurm-bridge -> gpu" in plan.message
    # The label comes back while the node drains for leaving: it is wanted again.
    back = node(annotations={names.ANN_SLURM_REGISTRATION: old.node_conf()})
    leaving = slurm(old, states=("MIXED", "DRAIN"), reason=names.SLURM_REGISTRATION_REASON_PREFIX + " x")
    assert decide(back, leaving).action == A.UNDRAIN
    # An administrator's drain is not the bridge's to lift.
    assert decide(back, slurm(old, states=("MIXED", "DRAIN"), reason="bad disk")).action is None


def test_a_node_that_joins_none_of_its_partitions_is_taken_out_and_not_made_again() -> None:
    d = want(node())
    n = node(annotations={names.ANN_SLURM_REGISTRATION: d.node_conf()})
    plan = decide(n, slurm(d, partitions=()))
    assert plan.action == A.DRAIN and "NodeSet" in plan.message and plan.remember
    gone = decide(n, None, refused=plan.remember)
    assert gone.action == A.WARN and "NodeSet" in gone.message


def test_whole_sequences_converge() -> None:
    """Label, register, change capacity, unlabel: each plan applied to a model, decided again."""
    n = node()
    info: NodeInfo | None = None
    steps: list[str] = []

    def run(limit: int = 10) -> None:
        nonlocal info
        for _ in range(limit):
            plan = decide(n, info)
            if plan.action is None:
                return
            steps.append(plan.action.value)
            anns = n["metadata"]["annotations"]
            if plan.action == A.ANNOTATE:
                anns[names.ANN_SLURM_REGISTRATION] = plan.message
            elif plan.action == A.UNANNOTATE:
                anns.pop(names.ANN_SLURM_REGISTRATION)
            elif plan.action == A.CREATE:
                info = slurm(want(n))
            elif plan.action == A.DRAIN:
                assert info is not None
                info = _with(info, states=("IDLE", "DRAIN", "DYNAMIC_NORM"), reason=plan.reason)
            elif plan.action == A.DELETE:
                info = None
        raise AssertionError(f"no fixpoint: {steps}")

    run()
    assert steps == ["Annotate", "Create"]
    n["status"]["allocatable"]["cpu"] = "4"
    steps.clear()
    run()
    assert steps == ["Drain", "Delete", "Annotate", "Create"]
    assert info is not None and info.cpus == 4
    n["metadata"]["labels"].clear()
    steps.clear()
    run()
    assert steps == ["Drain", "Delete", "Unannotate"] and info is None
