"""The ``SlurmResourcesFit`` node condition: whether what Slurm may allocate on a node (its CPUs
without the specialized ones, its RealMemory without MemSpecLimit) fits in what the kubelet
offers pods there (allocatable) minus what the pods the bridge does not place (DaemonSets, CNI, DRA
drivers, the bridge itself) request. When it does not, Slurm can allocate a job whose pod the
kubelet then refuses or evicts; the condition's message gives both sides' numbers, for
``kubectl describe node``.

:func:`decide` is pure. :class:`ResourcesFit` reads the other pods of a node (one list, by
``spec.nodeName``, from the API server's watch cache) at most every FIT_SECONDS per node
(FALSE_SECONDS while it does not fit: pods that come and go, such as a Job's that tolerates the
node's taint, must not keep the node out of every new job for minutes after they left), or when
either side's size changed, and writes the condition (``nodes/status``, a strategic merge on the
condition's type) only when it changed. A Warning Event goes with a change to False, and a Normal
one with the way back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, NamedTuple

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import KubeError, node_path, resource_path
from slurm_bridge.kube.seams import ConditionKube, FitKube
from slurm_bridge.kube.times import now_iso
from slurm_bridge.rules.podresources import pod_requests
from slurm_bridge.rules.resources import parse_quantity
from slurm_bridge.slurm.models import NodeInfo

log = logging.getLogger(__name__)
_MIB: Final = 2**20
# A node's other pods are listed again at most this often (while neither side's size changes),
# and while the node does not fit (every new job leaves it out), this often.
FIT_SECONDS: Final = 300.0
FALSE_SECONDS: Final = 10.0


class _Checked(NamedTuple):
    """A node's last decision: the sizes it was made for, when (monotonic), and whether it fit."""

    size: tuple[object, ...]
    at: float
    fits: bool

    @property
    def stands(self) -> float:
        """How long it stands while neither size changes."""
        return FIT_SECONDS if self.fits else FALSE_SECONDS


@dataclass(frozen=True)
class Fit:
    status: str  # "True" or "False"
    reason: str
    message: str


def _cpus(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else f"{float(value):.3f}".rstrip("0")


def _mib(value: Fraction) -> str:
    return _cpus(value / _MIB)


def decide(info: NodeInfo, allocatable: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> Fit | None:
    """The condition for a Slurm node (``info``), its Kubernetes node's allocatable and the live
    pods there that the bridge does not place; None when the kubelet reports no allocatable cpu
    or memory (nothing to compare: no condition)."""
    try:
        k8s_cpu, k8s_mem = parse_quantity(allocatable["cpu"]), parse_quantity(allocatable["memory"])
    except (KeyError, ValueError, TypeError):
        return None
    used_cpu, used_mem = Fraction(0), Fraction(0)
    for pod in others:
        try:
            cpu, mem = pod_requests(pod)
        except ValueError as e:
            log.warning("node %s: %s: not counted", info.name, e)
            continue
        used_cpu, used_mem = used_cpu + cpu, used_mem + mem
    slurm_cpus = info.effective_cpus if info.effective_cpus is not None else info.cpus
    slurm_mib = info.real_memory_mib - info.specialized_memory_mib
    free_cpu, free_mem = k8s_cpu - used_cpu, k8s_mem - used_mem
    numbers = (
        f"Slurm may allocate {slurm_cpus} CPUs and {slurm_mib} MiB on node {info.name}; the kubelet's allocatable "
        f"is {_cpus(k8s_cpu)} CPUs and {_mib(k8s_mem)} MiB, of which {len(others)} pod(s) the bridge does not place "
        f"request {_cpus(used_cpu)} CPUs and {_mib(used_mem)} MiB, leaving {_cpus(free_cpu)} CPUs and "
        f"{_mib(free_mem)} MiB"
    )
    over = []
    if slurm_cpus > free_cpu:
        over.append(f"{_cpus(slurm_cpus - free_cpu)} CPUs")
    if slurm_mib * _MIB > free_mem:
        over.append(f"{_mib(slurm_mib * _MIB - free_mem)} MiB")
    if not over:
        return Fit("True", names.REASON_SLURM_SIZE_FITS, numbers)
    return Fit(
        "False",
        names.REASON_SLURM_SIZE_EXCEEDS,
        f"{numbers}: Slurm's size is {' and '.join(over)} too large, so a job Slurm allocates here may get a pod "
        "the kubelet cannot run; lower the node's CPUs/RealMemory in slurm.conf (or CpuSpecList, MemSpecLimit), or "
        "give the kubelet more (kube-reserved, system-reserved, the other pods' requests)",
    )


def condition_of(node: Mapping[str, Any], ctype: str) -> Obj | None:
    """One of the bridge's node conditions as stored (the node projection keeps the bridge's own)."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return dict(c)
    return None


def current(node: Mapping[str, Any]) -> Obj | None:
    """The node's SlurmResourcesFit condition as stored."""
    return condition_of(node, names.NODE_COND_SLURM_RESOURCES_FIT)


def _size(info: NodeInfo, allocatable: Mapping[str, Any]) -> tuple[object, ...]:
    slurm = (info.cpus, info.effective_cpus, info.real_memory_mib, info.specialized_memory_mib)
    return (*slurm, allocatable.get("cpu"), allocatable.get("memory"))


class ResourcesFit:
    """Keeps the condition of each Kubernetes node that is a Slurm node."""

    def __init__(self, kube: FitKube, scheduler_name: str) -> None:
        self.kube = kube
        self.scheduler_name = scheduler_name
        self._checked: dict[str, _Checked] = {}
        self.lists = 0

    def forget(self, name: str) -> None:
        self._checked.pop(name, None)

    def recheck_in(self, name: str) -> float | None:
        """Seconds until the node's condition is due again while it does not fit (its reconcile
        comes back then: nothing else may move while the pods that made it so leave); None else."""
        last = self._checked.get(name)
        if last is None or last.fits:
            return None
        return max(1.0, last.at + last.stands - time.monotonic())

    async def reconcile(self, name: str, node: Mapping[str, Any], info: NodeInfo) -> Obj | None:
        """The condition once more, when due; the node as written (None: nothing written)."""
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        size = _size(info, allocatable)
        last = self._checked.get(name)
        if last is not None and last.size == size and time.monotonic() - last.at < last.stands:
            return None
        if "cpu" not in allocatable or "memory" not in allocatable:
            return None
        try:
            others = await self._other_pods(name)
        except KubeError as e:
            what = names.NODE_COND_SLURM_RESOURCES_FIT
            log.warning("node %s: cannot list its pods for the %s condition: %s", name, what, e)
            return None
        fit = decide(info, allocatable, others)
        self._checked[name] = _Checked(size, time.monotonic(), not (fit and fit.status == "False"))
        if fit is None:
            return None
        return await self._write(name, node, fit)

    async def _other_pods(self, name: str) -> list[Obj]:
        """The node's live pods that the bridge does not place: one list, served from the API
        server's watch cache (resourceVersion 0)."""
        self.lists += 1
        selector = (
            f"spec.nodeName={name},spec.schedulerName!={self.scheduler_name},"
            "status.phase!=Succeeded,status.phase!=Failed"
        )
        answer = await self.kube.get(
            resource_path("v1", "pods", None), params={"fieldSelector": selector, "resourceVersion": "0"}
        )
        items = (answer or {}).get("items") or []
        return [p for p in items if isinstance(p, dict)]

    async def _write(self, name: str, node: Mapping[str, Any], fit: Fit) -> Obj | None:
        if _as_stored(current(node), fit) is not None:
            return None
        written = await write_condition(self.kube, name, node, names.NODE_COND_SLURM_RESOURCES_FIT, fit)
        if written is None:
            self.forget(name)  # the write failed: decided again at the next reconcile
        return written


def _as_stored(old: Obj | None, fit: Fit) -> Obj | None:
    """``old`` when it already says ``fit`` (nothing to write)."""
    if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (
        fit.status,
        fit.reason,
        fit.message,
    ):
        return old
    return None


async def write_condition(kube: ConditionKube, name: str, node: Mapping[str, Any], ctype: str, fit: Fit) -> Obj | None:
    """One of the bridge's node conditions (``nodes/status``, a strategic merge on its type), only
    when it changed; a Warning Event with a change to False, a Normal one with the way back. The
    node as written (None: nothing written, or the write failed, logged)."""
    old = condition_of(node, ctype)
    if _as_stored(old, fit) is not None:
        return None
    now = now_iso()
    changed = old is None or old.get("status") != fit.status
    condition = {
        "type": ctype,
        "status": fit.status,
        "reason": fit.reason,
        "message": fit.message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now if changed or old is None else old.get("lastTransitionTime", now),
    }
    try:
        written = await kube.patch(node_path(name) + "/status", {"status": {"conditions": [condition]}}, "strategic")
    except KubeError as e:
        log.warning("node %s: writing the %s condition failed: %s", name, ctype, e)
        return None
    log.info("node %s: %s=%s: %s", name, ctype, fit.status, fit.message)
    if changed and (fit.status == "False" or old is not None):
        ref = {"apiVersion": "v1", "kind": "Node", "metadata": dict(objects.meta(node))}
        await kube.event(ref, fit.reason, fit.message, warning=fit.status == "False")
    return written
