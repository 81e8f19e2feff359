"""Pure decisions for Kubernetes nodes that join Slurm by label (dynamic external nodes).

A Kubernetes node with the label ``scheduler.slinky.slurm.net/external-node`` (the Go bridge's key)
is registered as a Slurm *dynamic* node in state EXTERNAL, with its CPUs, memory and GPUs from
``status.allocatable`` and its partitions (the annotation
``scheduler.slinky.slurm.net/external-node-partitions``, default: the config's partition) as node
features, which a ``NodeSet`` in slurm.conf turns into partition membership. docs/nodes.md says
what slurm.conf needs.

Ownership is recorded on both sides, so nothing the bridge did not register is ever deleted:
the Kubernetes node's ``slinky.slurm.net/slurm-registration`` annotation (the node line, written
*before* the node is created, so a crash in between re-creates rather than forgets it), and the
Slurm node's comment ``slurm-bridge:<bridgeId>:<Kubernetes node>`` (which finds a node whose
Kubernetes node is gone). A node leaves Slurm the safe way: DRAIN (running jobs finish, no pod is killed; the node
sync mirrors the drain as a cordon), then, once idle, DELETE. Slurm cannot change a dynamic node's
CPUs, memory or partitions in place, so a change of capacity or of the annotation re-registers
the node the same way: drain, delete when idle, create.

:func:`decide` returns one step at a time; applied and decided again, it converges.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from fractions import Fraction

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.rules.resources import GPU_RESOURCES, parse_quantity
from slurm_bridge.slurm.models import NodeInfo

# Partition and feature names, and a topology line: nothing that could end the node line early.
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_TOPOLOGY = re.compile(r"^[A-Za-z0-9_.:,-]{1,256}$")
_ADDRESS = re.compile(r"^[0-9A-Fa-f.:]{2,45}$")  # an IPv4 or IPv6 address
# Slurm states in which a node runs nothing (a drained node in them can go).
_IDLE_STATES = frozenset({"IDLE", "DOWN", "FUTURE", "UNKNOWN"})


class Action(enum.StrEnum):
    ANNOTATE = "Annotate"  # record the node line on the Kubernetes node (before creating it)
    CREATE = "Create"  # POST new/node, then set the Slurm node's comment
    SET_COMMENT = "SetComment"  # a create interrupted before its comment
    DRAIN = "Drain"
    UNDRAIN = "Undrain"
    DELETE = "Delete"
    UNANNOTATE = "Unannotate"
    WARN = "Warn"  # nothing to do but say why (an Event on the Node, a log line)


@dataclass(frozen=True)
class Desired:
    """The Slurm node a labelled Kubernetes node should be."""

    name: str
    cpus: int
    memory_mib: int
    gpus: int
    partitions: tuple[str, ...]
    topology: str | None = None
    # The Kubernetes node's InternalIP: slurmctld resolves a node's address, and a node name that
    # no DNS knows stalls it for seconds at every allocation.
    address: str | None = None

    def node_conf(self) -> str:
        """The slurm.conf node line for ``POST new/node``."""
        parts = [f"NodeName={self.name}"]
        if self.address:
            parts.append(f"NodeAddr={self.address}")
        parts += [f"CPUs={self.cpus}", f"RealMemory={self.memory_mib}"]
        if self.gpus:
            parts.append(f"Gres=gpu:{self.gpus}")
        parts.append(f"Features={','.join(self.partitions)}")
        if self.topology:
            parts.append(f"Topology={self.topology}")
        parts.append("State=EXTERNAL")
        return " ".join(parts)

    def as_created(self, comment: str) -> NodeInfo:
        """The Slurm node as POST new/node makes it, for deciding before the next node list."""
        return NodeInfo(
            name=self.name,
            states=("IDLE", "EXTERNAL", "DYNAMIC_NORM"),
            cpus=self.cpus,
            real_memory_mib=self.memory_mib,
            gres=f"gpu:{self.gpus}" if self.gpus else "",
            features=self.partitions,
            partitions=self.partitions,
            comment=comment,
        )

    def differences(self, info: NodeInfo) -> list[str]:
        """What the Slurm node has that this does not (empty: it is this node)."""
        diffs = []
        if info.cpus != self.cpus:
            diffs.append(f"CPUs {info.cpus} -> {self.cpus}")
        if info.real_memory_mib != self.memory_mib:
            diffs.append(f"RealMemory {info.real_memory_mib} -> {self.memory_mib}")
        if info.gpus != self.gpus:
            diffs.append(f"GPUs {info.gpus} -> {self.gpus}")
        if set(info.features) != set(self.partitions):
            diffs.append(f"partitions {','.join(info.features) or '-'} -> {','.join(self.partitions)}")
        return diffs


@dataclass(frozen=True)
class Plan:
    action: Action | None
    message: str = ""  # for the Event on the Node and the log
    reason: str = ""  # the Slurm reason of a DRAIN
    warning: bool = False
    # Why this node line must not be created again (the shell passes it back as ``refused``).
    remember: str = ""


NOTHING = Plan(None)


def labelled(node: Obj) -> bool:
    return names.LABEL_EXTERNAL_NODE in objects.labels(node)


def registration(node: Obj) -> str | None:
    """The node line the bridge registered for this node, from its annotation."""
    return objects.annotations(node).get(names.ANN_SLURM_REGISTRATION)


def bridge_comment(bridge_id: str, node: str) -> str:
    """The Slurm node comment that marks it as this bridge's, for Kubernetes node ``node``."""
    return f"{names.SLURM_NODE_COMMENT_PREFIX}{bridge_id}:{node}"


def registered_for(info: NodeInfo, bridge_id: str) -> str | None:
    """The Kubernetes node a Slurm node was registered for by this bridge (None: not by it)."""
    prefix = f"{names.SLURM_NODE_COMMENT_PREFIX}{bridge_id}:"
    if not info.dynamic or not info.comment.startswith(prefix):
        return None
    return info.comment[len(prefix) :] or None


def desired(node: Obj, slurm_name: str, default_partition: str) -> Desired | str:
    """The Slurm node for a labelled Kubernetes node, or what is wrong with its labels."""
    meta, status = node["metadata"], node.get("status") or {}
    annotations = meta.get("annotations") or {}
    resources = status.get("allocatable") or status.get("capacity") or {}
    where = f"node {meta['name']}"
    try:
        cpus = math.floor(parse_quantity(resources.get("cpu", 0)))
        memory = math.floor(parse_quantity(resources.get("memory", 0)) / Fraction(2**20))
        gpus = sum(math.floor(parse_quantity(resources.get(r, 0))) for r in GPU_RESOURCES)
    except ValueError as e:
        return f"{where}: unreadable allocatable resources: {e}"
    if cpus < 1 or memory < 1:
        return f"{where} reports {cpus} CPUs and {memory} MiB allocatable; a Slurm node needs at least 1 of each"
    raw = annotations.get(names.ANN_EXTERNAL_NODE_PARTITIONS)
    partitions = tuple(p.strip() for p in raw.split(",") if p.strip()) if raw is not None else (default_partition,)
    if not partitions:
        return f"{where}: annotation {names.ANN_EXTERNAL_NODE_PARTITIONS} names no partition"
    bad = [p for p in partitions if not _PARTITION.match(p)]
    if bad:
        return (
            f"{where}: annotation {names.ANN_EXTERNAL_NODE_PARTITIONS} has invalid partition names {bad} "
            "(letters, digits, '_', '.', '-')"
        )
    topology = annotations.get(names.ANN_TOPOLOGY_SPEC)
    if topology is not None and not _TOPOLOGY.match(topology):
        return (
            f"{where}: annotation {names.ANN_TOPOLOGY_SPEC}={topology!r} is not a Slurm topology spec "
            "such as 'topo-1:block-2' (letters, digits and '_.:,-')"
        )
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or [] if isinstance(a, dict)}
    address = addresses.get("InternalIP") or addresses.get("ExternalIP")
    if address is None or not _ADDRESS.match(address):
        # Without NodeAddr slurmctld resolves the node's name at each allocation: a name no DNS
        # knows stalled it about ten seconds each time and failed the allocation's answer (measured).
        return (
            f"{where} reports no InternalIP or ExternalIP address"
            + (f" (only {address!r}, not an IP address)" if address else "")
            + "; it is registered once its kubelet reports one"
        )
    return Desired(slurm_name, cpus, memory, gpus, tuple(dict.fromkeys(partitions)), topology or None, address)


def _drained_by_us(info: NodeInfo) -> bool:
    return "DRAIN" in info.states and info.reason.startswith(names.SLURM_REGISTRATION_REASON_PREFIX)


def _idle(info: NodeInfo) -> bool:
    return info.state in _IDLE_STATES and "COMPLETING" not in info.states


def _leave(info: NodeInfo, why: str, remember: str = "") -> Plan:
    """Take a registered node out of Slurm: drain, then delete once it runs nothing."""
    if not _drained_by_us(info):
        return Plan(
            Action.DRAIN,
            f"draining Slurm node {info.name} before removing it: {why}",
            reason=f"{names.SLURM_REGISTRATION_REASON_PREFIX} {why}",
            remember=remember,
        )
    if _idle(info):
        return Plan(
            Action.DELETE, f"Slurm node {info.name} is drained and idle: deleting it ({why})", remember=remember
        )
    return NOTHING  # jobs still run: the next list brings it back


def decide(
    node: Obj | None,
    want: Desired | str | None,
    info: NodeInfo | None,
    *,
    bridge_id: str,
    known_partitions: frozenset[str] | None,
    refused: str | None = None,
) -> Plan:
    """The next step for one node.

    ``node`` is the Kubernetes node (None: it is gone, and ``info`` carries the bridge's comment);
    ``want`` is :func:`desired` for a labelled node (None when not labelled); ``info`` is the
    Slurm node of that name (None: absent); ``known_partitions`` are Slurm's partitions, needed
    only before a node is created (None: not read yet); ``refused`` is why this very node line
    was taken out again after it was created (the shell remembers it, so it is not created again
    and again until the labels change).
    """
    ours_in_slurm = info is not None and registered_for(info, bridge_id) is not None
    recorded_conf = registration(node) if node is not None else None
    recorded = recorded_conf is not None
    if want is None:  # not labelled (or the Kubernetes node is gone)
        if info is None:
            return Plan(Action.UNANNOTATE) if recorded else NOTHING
        if not (ours_in_slurm or (recorded and info.dynamic)):
            return Plan(Action.UNANNOTATE) if recorded else NOTHING  # a slurm.conf node: never removed
        why = "its Kubernetes node is gone" if node is None else f"label {names.LABEL_EXTERNAL_NODE} removed"
        return _leave(info, why)
    if isinstance(want, str):
        return Plan(Action.WARN, f"not registered in Slurm: {want}", warning=True)
    if info is None:
        return _create(want, recorded_conf, known_partitions, refused)
    if not info.dynamic or not (recorded or ours_in_slurm):
        if info.dynamic and not ours_in_slurm:
            return Plan(
                Action.WARN,
                f"Slurm already has a dynamic node {info.name} that the bridge did not register; it is left alone",
                warning=True,
            )
        return NOTHING  # in slurm.conf already: nothing to register
    if not ours_in_slurm:
        return Plan(Action.SET_COMMENT, f"marking Slurm node {info.name} as registered by the bridge")
    diffs = want.differences(info)
    if diffs:
        return _leave(info, "re-registering for a change: " + "; ".join(diffs))
    missing = sorted(set(want.partitions) - set(info.partitions))
    if missing:
        why = not_in_partitions(missing)
        return _leave(info, why, remember=why)
    if _drained_by_us(info):
        return Plan(Action.UNDRAIN, f"Slurm node {info.name} is wanted again: undraining it")
    if recorded_conf != want.node_conf():
        return Plan(Action.ANNOTATE, want.node_conf())  # adopted after a crash, or the topology changed
    return NOTHING


def _create(
    want: Desired, recorded_conf: str | None, known_partitions: frozenset[str] | None, refused: str | None
) -> Plan:
    """A labelled node Slurm does not have: the node line goes on the Kubernetes node first (the
    bridge's record that the Slurm node is its own), then into Slurm, unless that line was
    refused before or names a partition Slurm lacks."""
    if refused is not None:
        return Plan(Action.WARN, f"not registered in Slurm: {refused}", warning=True)
    if known_partitions is None:
        return NOTHING  # the shell reads the partitions first
    missing = sorted(set(want.partitions) - known_partitions)
    if missing:
        return Plan(
            Action.WARN,
            f"not registered in Slurm: partitions {missing} do not exist (annotation "
            f"{names.ANN_EXTERNAL_NODE_PARTITIONS})",
            warning=True,
        )
    if recorded_conf != want.node_conf():
        return Plan(Action.ANNOTATE, want.node_conf())
    return Plan(Action.CREATE, f"registering Slurm node: {want.node_conf()}")


def not_in_partitions(missing: list[str]) -> str:
    """Why a node just created is taken out again (the shell remembers it as refused)."""
    return (
        f"it joined no partition among {missing}: slurm.conf needs a NodeSet with Feature=<partition> "
        "in each of them (docs/nodes.md)"
    )
