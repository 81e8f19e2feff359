"""Nodes whose kubelet offers less than Slurm counts (``SlurmResourcesFit=False``) are left out of
every new job's submit (slurm_bridge/rules/translate.py ``exclude_unfit``; the node controller's
``unfit_slurm_nodes``, ``excluded_unfit_nodes`` while excludeUnfitNodes is on; the shell's submit),
and a job that requires such a node is not sent to Slurm at all but refused with a reason that
names the node and the condition."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config, parse_config
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.rules.translate import exclude_unfit
from slurm_bridge.slurm.models import JobInfo, JobRequest
from tests.unit.fakes import FakeNodes, FakeNodeView, FakeSlurm
from tests.unit.operator.placeholderjobs.test_phjsync import gated_pod, placeholderjob, shell, shell_kube, status_writes

Obj = dict[str, Any]


def test_unfit_nodes_are_added_to_the_excluded_list() -> None:
    req = JobRequest(nodes=1, excluded_nodes=["a"])
    assert exclude_unfit(req, {"b", "c"}).excluded_nodes == ["a", "b", "c"]
    assert exclude_unfit(req, set()) is req


def test_a_job_that_names_its_nodes_is_sent_as_it_is_when_none_is_unfit() -> None:
    req = JobRequest(nodes=1, required_nodes=["a"])
    assert exclude_unfit(req, {"b"}) == req


def test_a_job_that_requires_an_unfit_node_is_refused_with_the_node_and_the_condition() -> None:
    with pytest.raises(ValueError) as e:
        exclude_unfit(JobRequest(nodes=2, required_nodes=["a", "b"]), {"b"})
    message = str(e.value)
    assert message.startswith(names.REASON_NODES_DO_NOT_FIT)
    assert "node(s) b" in message and f"{names.NODE_COND_SLURM_RESOURCES_FIT}=False" in message


def node(name: str, fit: str | None, slurm_name: str | None = None) -> Obj:
    labels = {names.LABEL_SLURM_NODENAME: slurm_name} if slurm_name else {}
    status: Obj = {}
    if fit is not None:
        status["conditions"] = [{"type": names.NODE_COND_SLURM_RESOURCES_FIT, "status": fit, "reason": "r"}]
    return {"kind": "Node", "metadata": {"name": name, "uid": name, "resourceVersion": "1", "labels": labels},
            "status": status}  # fmt: skip


def test_the_node_controller_names_the_slurm_nodes_whose_condition_is_false() -> None:
    ctrl = NodeController(Config(), KubeClient("http://127.0.0.1:0"), FakeNodes([]))
    for n in (node("k1", "True"), node("k2", "False"), node("k3", None), node("k4", "False", slurm_name="s4")):
        ctrl.on_node_event("ADDED", n)
    assert ctrl.unfit_slurm_nodes() == frozenset({"k2", "s4"})
    assert ctrl.excluded_unfit_nodes() == frozenset({"k2", "s4"}), "left out of new jobs"
    off = NodeController(Config(excludeUnfitNodes=False), KubeClient("http://127.0.0.1:0"), FakeNodes([]))
    off.on_node_event("ADDED", node("k2", "False"))
    assert off.unfit_slurm_nodes() == frozenset({"k2"}) and off.excluded_unfit_nodes() == frozenset(), "kept in"


async def test_the_submit_leaves_the_unfit_nodes_out() -> None:
    kube, slurm = shell_kube({}), FakeSlurm(next_id=7)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [], FakeNodeView(unfit=frozenset({"bad-1"})))
    await jobs.reconcile(("ns", "p"))
    assert [r.excluded_nodes for r in slurm.requests] == [["bad-1"]]


async def test_a_pod_pinned_to_an_unfit_node_is_told_why_and_nothing_is_sent() -> None:
    kube, slurm = shell_kube({}), FakeSlurm(JobInfo(job_id=7, states=("RUNNING",), nodes=("bad-1",)), next_id=7)
    phj = placeholderjob()
    phj["spec"]["slurm"]["requiredNodes"] = ["bad-1"]
    jobs = shell(kube, slurm, phj, gated_pod(), [], FakeNodeView(unfit=frozenset({"bad-1"})))
    requeue = await jobs.reconcile(("ns", "p"))
    assert slurm.requests == [], "nothing reaches Slurm"
    written = status_writes(kube)[-1]
    assert written["reason"] == names.REASON_SUBMIT_REJECTED
    assert names.REASON_NODES_DO_NOT_FIT in written["message"] and "bad-1" in written["message"]
    told = [(kind, reason) for kind, reason, message in kube.said if names.REASON_NODES_DO_NOT_FIT in message]
    assert ("Pod", names.REASON_SLURM_SUBMIT_REJECTED) in told, kube.said
    assert requeue is not None and requeue > 0, "tried again later: the node may be fixed"


def test_the_exclusion_is_on_by_default_and_config_turns_it_off_by_name() -> None:
    assert parse_config({}).excludeUnfitNodes is True
    assert parse_config({"excludeUnfitNodes": False}).excludeUnfitNodes is False
    with pytest.raises(Exception, match="excludeUnfitNodes"):
        parse_config({"excludeUnfitNodes": "sometimes"})
