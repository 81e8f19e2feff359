"""A pod that names the bridge's scheduler in a namespace the bridge does not manage never passed
the webhook's checks: the operator makes no PlaceholderJob for it (one Warning Event says why), and
the extender never lets it bind (slurm_bridge/rules/namespaces.py; docs/design/managed-pods-and-nodes.md,
"Only the bridge's pods, and nodes kube-scheduler can use")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config, parse_config
from slurm_bridge.extender.filter import filter_nodes
from slurm_bridge.extender.protocol import ExtenderArgs
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.members import NAMESPACES_WAIT_SECONDS, Membership
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.rules.namespaces import ManagedNamespaces, is_managed, not_managed_message
from tests.builders import make_pod
from tests.unit.fakes import FakeJobReads
from tests.unit.kubefakes import FakeKube
from tests.unit.operator.placeholderjobs.test_members_refused import _noop, refusing_kube

Obj = dict[str, Any]
SELECTOR = {"managedNamespaceSelector": {"matchLabels": {"hpc": "yes"}}}


def test_the_rule_is_the_configs_and_unknown_labels_decide_nothing() -> None:
    listed = parse_config({"managedNamespaces": ["hpc"]})
    assert is_managed(listed, "hpc", None) is True and is_managed(listed, "other", None) is False
    selected = parse_config(SELECTOR)
    assert is_managed(selected, "a", {"hpc": "yes"}) is True
    assert is_managed(selected, "a", {}) is False
    assert is_managed(selected, "a", None) is None, "labels not read yet: nobody guesses"


def test_the_message_says_why_and_what_to_do() -> None:
    message = not_managed_message(parse_config(SELECTOR), "team-x")
    assert "namespace team-x is not managed by slurm-bridge" in message
    assert "{'matchLabels': {'hpc': 'yes'}}" in message and "managed namespace" in message
    assert "another schedulerName than 'slurm-bridge'" in message


def membership(config: Config, labels: Mapping[str, str] | None) -> tuple[Membership, FakeKube]:
    kube = refusing_kube()
    pods, phjs = ObjectStore(), ParsedStore(PlaceholderJob.parse)
    pod = make_pod("p").uid("u1").rv(1).scheduler(config.schedulerName).container("c", requests={"cpu": "1"})
    pods.upsert(pod.phase("Pending").obj())
    poller = SlurmPoller(FakeJobReads(), config.bridgeId, config.pollPeriodSeconds, lambda _: None)
    poller.synced.set()

    async def labels_of(_: str) -> Mapping[str, str] | None:
        return labels

    managed = ManagedNamespaces(config, labels_of)
    members = Membership(config, kube, pods, phjs, WorkQueue(_noop, 1), poller, managed)
    return members, kube


@pytest.mark.parametrize(("config", "labels"), [(Config(), None), (parse_config(SELECTOR), {"other": "x"})])
async def test_a_pod_of_an_unmanaged_namespace_gets_no_placeholderjob_and_one_event(
    config: Config, labels: Mapping[str, str] | None
) -> None:
    members, kube = membership(config, labels)
    assert await members.reconcile(("ns", "p")) is None
    assert kube.creates == 0, "no PlaceholderJob, so no Slurm job"
    [(reason, message)] = kube.told("reason", "message")
    assert reason == names.REASON_NAMESPACE_NOT_MANAGED and "namespace ns is not managed" in message
    await members.reconcile(("ns", "p"))  # the pod changes again: told once
    assert len(kube.told("reason", "message")) == 1 and kube.creates == 0


async def test_a_pod_waits_while_the_namespaces_labels_are_not_read() -> None:
    members, kube = membership(parse_config(SELECTOR), None)
    assert await members.reconcile(("ns", "p")) == NAMESPACES_WAIT_SECONDS
    assert kube.creates == 0 and kube.told("reason", "message") == []


async def test_a_pod_of_a_managed_namespace_goes_on_to_its_placeholderjob() -> None:
    members, kube = membership(parse_config(SELECTOR), {"hpc": "yes"})
    await members.reconcile(("ns", "p"))
    assert kube.creates == 1, "the create is tried (this fake refuses it)"


def args(namespace: str, annotations: dict[str, str]) -> ExtenderArgs:
    pod = {"metadata": {"name": "p", "namespace": namespace, "uid": "u", "annotations": annotations}}
    return ExtenderArgs.model_validate({"Pod": pod, "NodeNames": ["n1", "n2"]})


def test_the_extender_passes_no_node_for_a_pod_of_an_unmanaged_namespace() -> None:
    """Even a pod whose author wrote the bridge's node annotation himself (no webhook checks it there)."""
    forged = args("elsewhere", {names.ANN_SLURM_NODE: "n1"})
    result = filter_nodes(forged, managed=False, why="namespace elsewhere is not managed by slurm-bridge")
    assert result.NodeNames == [] and result.FailedNodes == {}
    assert set(result.FailedAndUnresolvableNodes) == {"n1", "n2"}
    assert "not managed" in result.FailedAndUnresolvableNodes["n1"]
    assert filter_nodes(forged, managed=True).NodeNames == ["n1"], "a managed pod passes as before"


async def test_the_extender_server_neither_filters_in_nor_binds_a_pod_of_an_unmanaged_namespace() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from slurm_bridge.extender.server import make_app
    from tests.unit.extender.test_extender import _BindingKube

    managed = ManagedNamespaces(Config(managedNamespaces=["hpc"]))
    client = TestClient(TestServer(make_app(_BindingKube(), managed)))
    await client.start_server()
    try:
        pod = {
            "metadata": {"name": "p", "namespace": "elsewhere", "uid": "u", "annotations": {names.ANN_SLURM_NODE: "n1"}}
        }
        filtered = await (await client.post("/filter", json={"Pod": pod, "NodeNames": ["n1"]})).json()
        assert filtered.get("NodeNames") == [] and "not managed" in filtered["FailedAndUnresolvableNodes"]["n1"]
        bind = {"PodName": "p", "PodNamespace": "elsewhere", "PodUID": "u", "Node": "n1"}
        bound = await (await client.post("/bind", json=bind)).json()
        assert "namespace elsewhere is not managed" in bound["Error"]
        ok = await (await client.post("/bind", json=dict(bind, PodNamespace="hpc"))).json()
        assert ok["Error"] == ""
    finally:
        await client.close()
