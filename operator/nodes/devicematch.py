"""The ``SlurmDevicesMatch`` node condition: whether Slurm's GPUs on a node (its GRES, from
gres.conf) and the NVIDIA DRA driver's ResourceSlices there describe the same devices: as many
whole GPUs, and as many MIG instances of each profile (docs/gpus.md).

They differ when a node's MIG layout changes: the driver republishes a new pool generation at
once, while slurmd keeps its gres.conf until it is restarted (or the other way round). Slurm's
indices then no longer name the devices the bridge would give, so while the condition is False
no new MIG job is submitted with that node in reach (``translate.exclude_nodes_for_mig``); a pod
already running keeps its devices, and a whole-GPU job there is checked device by device at
release (``plan_claim`` fails closed). The condition's message names both sides' counts.

The ResourceSlices come from one watch (:class:`~slurm_bridge.kube.cache.WatchCache`); a change
to a node's slices queues that node, and the condition is decided at its reconcile, with the
Slurm node list the controller already has: no call of its own but the condition's write (only
when it changed, operator/nodes/resourcesfit.py's ``write_condition``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.cache import slices_cache
from slurm_bridge.kube.seams import DeviceMatchKube
from slurm_bridge.operator.nodes.resourcesfit import Fit, condition_of, write_condition
from slurm_bridge.rules.dra.gres import mig_node
from slurm_bridge.rules.dra.inventory import devices_differ, said, slurm_gpu_inventory
from slurm_bridge.slurm.models import NodeInfo

log = logging.getLogger(__name__)
DRIVER: Final = "gpu.nvidia.com"  # the driver whose MIG devices Slurm's typed GRES mirror


def decide(info: NodeInfo, slices: list[Obj], node: str) -> Fit | None:
    """The condition for a Kubernetes node and its Slurm node; None where neither side has GPUs
    of the driver's kind to compare (no condition: nodes without DRA GPUs are not concerned)."""
    mine = [s for s in slices if (s.get("spec") or {}).get("nodeName") == node]
    published = any((s.get("spec") or {}).get("driver") == DRIVER for s in mine)
    if not published and not mig_node(info.gres):
        return None
    differ = devices_differ(info.gres, mine, node, DRIVER)
    if not differ:
        seen = slurm_gpu_inventory(info.gres)
        return Fit(
            "True",
            names.REASON_SLURM_DEVICES_MATCH,
            f"Slurm's GRES and driver {DRIVER}'s ResourceSlices on node {node} agree: {said(seen, 'no GPUs')}",
        )
    return Fit(
        "False",
        names.REASON_SLURM_DEVICES_DIFFER,
        f"{differ}: no new MIG pod is placed on this node until they agree (running pods keep their devices); "
        "restart slurmd with a gres.conf of the new layout, or restore the layout (docs/gpus.md)",
    )


class DeviceMatch:
    """Keeps each node's condition from the slices' watch and the Slurm node list."""

    def __init__(self, kube: DeviceMatchKube, on_node: Callable[[str], None]) -> None:
        self.kube = kube
        self.on_node = on_node
        self.slices = slices_cache(kube, self._changed)
        # node -> the names of its slices, so that a node's reconcile (one per allocation on it)
        # reads its own slices, not every node's
        self._by_node: dict[str, set[str]] = {}
        self._node_of: dict[str, str] = {}

    def _changed(self, name: str, obj: Obj) -> None:
        old = self._node_of.pop(name, None)
        if old is not None:
            self._by_node.get(old, set()).discard(name)
            if not self._by_node.get(old):
                self._by_node.pop(old, None)
            self.on_node(old)
        node = (obj.get("spec") or {}).get("nodeName")
        if name in self.slices.objects and isinstance(node, str) and node:
            self._node_of[name] = node
            self._by_node.setdefault(node, set()).add(name)
            if node != old:
                self.on_node(node)

    def slices_of(self, node: str) -> list[Obj]:
        return [self.slices.objects[n] for n in sorted(self._by_node.get(node, ())) if n in self.slices.objects]

    async def reconcile(self, name: str, node: Mapping[str, Any], info: NodeInfo) -> Obj | None:
        """The condition once more (the node as written; None: nothing written). Nothing is decided
        before the slices are listed: a node whose slices are not read yet would seem to differ."""
        if not self.slices.synced.is_set():
            return None
        fit = decide(info, self.slices_of(name), name)
        if fit is None:
            return None
        return await write_condition(self.kube, name, node, names.NODE_COND_SLURM_DEVICES_MATCH, fit)


def differs(node: Mapping[str, Any]) -> bool:
    """The node says ``SlurmDevicesMatch=False`` (read from the node store, which keeps it)."""
    return (condition_of(node, names.NODE_COND_SLURM_DEVICES_MATCH) or {}).get("status") == "False"
