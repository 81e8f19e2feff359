"""Which watch events reach the work queue: a MODIFIED event that changes nothing the stores keep
(a kubelet's condition update, managedFields) is dropped before it is queued; the echo of the
operator's own write is not (the reconcile that wrote may wait for it), nor is any DELETED."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import httpx

from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.placeholderjobs.controller import Controller
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import user_not_known
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem, PodItem
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.views.slurmnodes import NodesNotRead
from slurm_bridge.slurm.client import SlurmClient
from tests.builders import make_phj, make_pod

Obj = dict[str, Any]


def pod(rv: int, uid: str = "u1", **status: Any) -> Obj:
    built = make_pod("p").uid(uid).rv(rv).meta(managedFields=[{"manager": "kubelet", "time": f"t{rv}"}])
    built.scheduler().node("n1").container("c")
    return built.status(**({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]} | status)).obj()


def test_observe_tells_a_change_of_nothing_kept_from_a_change() -> None:
    store = ObjectStore()
    assert store.observe(pod(10)), "first sight"
    # the kubelet flips a condition: nothing the store keeps changed, but the new resourceVersion is kept
    assert not store.observe(pod(11, conditions=[{"type": "Ready", "status": "True"}]))
    assert store.get(("ns", "p"))["metadata"]["resourceVersion"] == "11"  # type: ignore[index]
    assert store.observe(pod(12, phase="Succeeded")), "a kept field changed"
    assert store.observe(pod(12, phase="Succeeded")), "the same version again (an echo) counts"
    assert store.observe(pod(9)), "an older version is reported as before (upsert ignores it)"
    assert store.get(("ns", "p"))["status"]["phase"] == "Succeeded"  # type: ignore[index]
    assert store.observe(pod(13, uid="u2")), "another incarnation"


def test_the_echo_of_the_operators_own_write_is_a_change() -> None:
    store = ObjectStore()
    store.observe(pod(10))
    written = pod(11, phase="Failed")
    store.upsert(copy.deepcopy(written))  # the write's answer, stored at once
    assert store.observe(written), "its watch event has the stored resourceVersion: not dropped"


def controller(tmp_path: Path) -> Controller:
    token = tmp_path / "jwt"
    token.write_text("t\n")
    slurm = SlurmClient("http://slurm.invalid:6820", token, api_version="v0.0.44",
                        transport=httpx.MockTransport(lambda r: httpx.Response(500)))  # fmt: skip
    return Controller(Config(), KubeClient("http://127.0.0.1:0"), slurm, nodes=NodesNotRead(), own_user=user_not_known)


def phj(rv: int, **status: Any) -> Obj:
    built = make_phj("p").uid("j1").rv(rv).meta(managedFields=[{"manager": "x", "time": f"t{rv}"}]).pods("p")
    return built.status(**({"phase": "Pending"} | status)).obj()


async def test_the_controller_queues_only_events_that_change_what_it_reads(tmp_path: Path) -> None:
    ctrl = controller(tmp_path)
    queued: list[Any] = []
    ctrl.queue.add = queued.append  # type: ignore[method-assign,assignment]
    ctrl.on_pod_event("ADDED", pod(10))
    ctrl.on_pod_event("MODIFIED", pod(11, conditions=[{"type": "Ready", "status": "True"}]))
    ctrl.on_pod_event("MODIFIED", pod(12, phase="Succeeded"))
    ctrl.on_pod_event("ADDED", pod(12, phase="Succeeded"))  # a list again: always queued
    ctrl.on_pod_event("DELETED", pod(13, phase="Succeeded"))
    assert queued == [PodItem("ns", "p")] * 4
    assert ctrl.pods.get(("ns", "p")) is None
    queued.clear()
    ctrl.on_phj_event("ADDED", phj(20))
    ctrl.on_phj_event("MODIFIED", phj(21))  # managedFields only
    ctrl.on_phj_event("MODIFIED", phj(22, phase="Running"))  # a status write: kept fields
    ctrl.on_phj_event("DELETED", phj(23, phase="Running"))
    assert queued == [PhjItem("ns", "p")] * 3
    await ctrl.slurm.aclose()


async def test_an_event_no_newer_than_what_a_reconcile_began_with_is_not_queued(tmp_path: Path) -> None:
    """A list again after a 410 sends every object as ADDED; the echo of a write may arrive after a
    reconcile already read the written version: neither brings news."""
    ctrl = controller(tmp_path)
    queued: list[Any] = []
    ctrl.queue.add = queued.append  # type: ignore[method-assign,assignment]
    seen: list[Any] = []

    async def members(key: Any) -> None:
        seen.append(ctrl.pods.get(key)["metadata"]["resourceVersion"])  # type: ignore[index]

    ctrl.members.reconcile = members  # type: ignore[method-assign]
    ctrl.on_pod_event("ADDED", pod(10))
    await ctrl._reconcile(PodItem("ns", "p"))
    assert seen == ["10"]
    ctrl.on_pod_event("ADDED", pod(10))  # listed again, unchanged since that reconcile began
    ctrl.on_pod_event("MODIFIED", pod(9))  # stale
    assert queued == [PodItem("ns", "p")]
    ctrl.pods.upsert(pod(11, phase="Failed"))  # the operator's own write, stored from its answer
    ctrl.on_pod_event("MODIFIED", pod(11, phase="Failed"))  # its echo: no reconcile read it yet
    assert queued == [PodItem("ns", "p")] * 2
    await ctrl._reconcile(PodItem("ns", "p"))
    ctrl.on_pod_event("MODIFIED", pod(11, phase="Failed"))  # a second copy (a list again): read already
    ctrl.on_pod_event("ADDED", pod(11, uid="u2"))  # another incarnation
    ctrl.on_pod_event("DELETED", pod(12, uid="u2"))
    assert queued == [PodItem("ns", "p")] * 4
    assert PodItem("ns", "p") not in ctrl.events._read, "forgotten with the object"
    await ctrl.slurm.aclose()


async def test_placeholderjobs_wait_for_the_first_job_list_without_spinning(tmp_path: Path) -> None:
    """Before the poller's first full job list, a PlaceholderJob's reconcile is parked (no timer:
    10,000 of them re-queued each second delayed that list by minutes); once it is in, every
    PlaceholderJob, parked or stored, is queued once."""
    ctrl = controller(tmp_path)
    queued: list[Any] = []
    ctrl.queue.add = queued.append  # type: ignore[method-assign,assignment]
    ctrl.poller.start = lambda: None  # type: ignore[method-assign]  # no Slurm here
    ctrl.queue.start = lambda: None  # type: ignore[method-assign]
    ctrl.on_phj_event("ADDED", phj(20))
    other = phj(30) | {"metadata": {"name": "q", "namespace": "ns", "uid": "j2", "resourceVersion": "30"}}
    ctrl.start()
    assert await ctrl._reconcile(PhjItem("ns", "gone")) is None, "parked, not re-queued on a timer"
    ctrl.phjs.upsert(other)
    queued.clear()
    ctrl.poller.synced.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(queued) == [PhjItem("ns", "gone"), PhjItem("ns", "p"), PhjItem("ns", "q")]
    await ctrl.stop()


async def test_the_orphan_sweep_waits_for_the_stores_first_lists(tmp_path: Path) -> None:
    """The poller starts before the watches' first lists are in (start_polling); a job whose
    PlaceholderJob is not listed yet must not be judged an orphan then."""
    ctrl = controller(tmp_path)
    swept: list[Any] = []
    ctrl.orphans.on_poll = swept.append  # type: ignore[method-assign,assignment]
    ctrl.poller.start = lambda: None  # type: ignore[method-assign]
    ctrl.queue.start = lambda: None  # type: ignore[method-assign]
    ctrl.start_polling()
    ctrl._on_poll("snapshot-1")
    assert swept == []
    ctrl.start()
    ctrl._on_poll("snapshot-2")
    assert swept == ["snapshot-2"]
    await ctrl.stop()
