"""operator/placeholderjobs/members.py: a PlaceholderJob the API server refuses to create (HTTP 422) is reported on
the pod once and not created again in a loop: no Slurm job exists yet, and the same object would be
refused again (issue 22, "a write that can never succeed is reported")."""

from __future__ import annotations

from typing import Any

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import Invalid
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.members import Membership
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from tests.builders import make_pod
from tests.unit.fakes import FakeJobReads
from tests.unit.kubefakes import FakeKube

Obj = dict[str, Any]


def refusing_kube() -> FakeKube:
    """An API server that refuses the PlaceholderJob the bridge makes (its name too long)."""
    refusal = Invalid(422, "Invalid", 'PlaceholderJob.slinky.slurm.net "p" is invalid: spec.slurm.jobName: Too long')
    return FakeKube(refuse=refusal)


async def _noop(_: Any) -> None:
    return None


async def test_a_refused_placeholderjob_is_reported_on_the_pod_and_not_retried() -> None:
    config, kube = Config(managedNamespaces=["ns"]), refusing_kube()
    pods, phjs = ObjectStore(), ParsedStore(PlaceholderJob.parse)
    built = make_pod("p").uid("u1").rv(1).meta(annotations={}).scheduler(config.schedulerName).gated()
    pod = built.container("c", requests={"cpu": "1"}).phase("Pending").obj()
    pods.upsert(pod)
    poller = SlurmPoller(FakeJobReads(), config.bridgeId, config.pollPeriodSeconds, lambda _: None)
    poller.synced.set()
    members = Membership(config, kube, pods, phjs, WorkQueue(_noop, 1), poller)
    assert await members.reconcile(("ns", "p")) is None, "not looked at again on a timer"
    assert kube.creates == 1
    [(reason, message)] = kube.told("reason", "message")
    assert reason == names.REASON_PHJ_REFUSED and "spec.slurm.jobName: Too long" in message
    await members.reconcile(("ns", "p"))  # the pod changes again: the same refusal is not told twice
    assert len(kube.told("reason", "message")) == 1
