"""Whether what Slurm holds for a bridge job still covers what its pods need (pure;
docs/security.md, "A job's owner in Slurm").

A tenant's job is submitted as the tenant, so the tenant owns it in Slurm and may change it with
``scontrol update``: move a running job to other nodes, or shrink a pending one's CPUs and memory.
Slurm then gives away what the pods still use (a native job starts on the pod's node), or starts
the job with less than the pods were sized for. The reference is what the bridge asked for
(``spec.slurm``, made by :mod:`.translate` from the pods: limits for ``coResident``, requests
otherwise, :mod:`.podresources` and :mod:`.nodesharing`): per node, that many CPUs, that much
memory, those GRES, and for ``timeShared`` the MCS label that keeps native jobs off; and every
pod placed (released or bound) on a node the job holds. More than asked is fine (Slurm gives whole
cores, an exclusive job the whole node); less is a difference, said in the user's words.

What Slurm holds comes from the job's record (``JobInfo``): its TRES (allocated when it runs,
requested while it waits), its GRES per node and its MCS label. A field not read (None) is not
compared. CPUs and memory per node are the TRES divided by the job's node count: Slurm gives each
node of a bridge job the same (it asks so many tasks of so many CPUs per node).

A heterogeneous job (a CompositePodGroup's) is compared component by component
(:func:`compare_components`): each component is a job of its own in Slurm (the leader's id plus
its offset), with its own record, which its owner may change on its own; what the bridge asked for
that component against that record, with the pods placed in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import hostlist

from slurm_bridge.rules.dra.gres import gres_items
from slurm_bridge.slurm.models import JobInfo, JobRequest

__all__ = [
    "Difference",
    "Held",
    "HetVerdict",
    "Need",
    "Verdict",
    "compare",
    "compare_components",
    "held_of",
    "need_of",
    "parse_tres",
]

Kind = Literal["nodes", "cpus", "memory", "gres", "mcs"]
# A TRES memory amount's unit -> MiB (Slurm writes mem=100M, mem=2G, ...; no unit is MiB).
_MIB: Final = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


@dataclass(frozen=True)
class Difference:
    """One thing Slurm holds less of than the pods need (``kind``), said for a user."""

    kind: Kind
    message: str


@dataclass(frozen=True)
class Verdict:
    """Every difference between job ``job_id`` in Slurm and what its pods need; none: it matches."""

    job_id: int
    differences: tuple[Difference, ...] = ()

    @property
    def matches(self) -> bool:
        return not self.differences

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return tuple(d.kind for d in self.differences)

    def message(self) -> str:
        """One sentence for the PlaceholderJob and its Events."""
        return f"Slurm job {self.job_id} holds less than its pods need: " + "; ".join(
            d.message for d in self.differences
        )


@dataclass(frozen=True)
class HetVerdict:
    """Each component's verdict (by offset) of heterogeneous job ``leader``: all match, or none of
    the job's pods runs on it (Slurm starts and ends the components together). ``labels``: how a
    user knows each component (its PodGroup), by offset."""

    leader: int
    parts: tuple[Verdict, ...]
    labels: tuple[str, ...] = ()

    @property
    def matches(self) -> bool:
        return all(p.matches for p in self.parts)

    @property
    def short(self) -> tuple[int, ...]:
        """The offsets of the components that differ."""
        return tuple(offset for offset, p in enumerate(self.parts) if not p.matches)

    def message(self) -> str:
        """One sentence for the PlaceholderJob and its Events, each difference under its component."""
        said = []
        for offset in self.short:
            part = self.parts[offset]
            label = self.labels[offset] if offset < len(self.labels) else ""
            named = f"{label}, Slurm job {part.job_id}" if label else f"Slurm job {part.job_id}"
            said.append(f"in component {offset} ({named}), " + "; ".join(d.message for d in part.differences))
        return f"heterogeneous Slurm job {self.leader} holds less than its pods need: " + "; ".join(said)


@dataclass(frozen=True)
class Need:
    """What the pods need of each node, as the bridge asked Slurm for it."""

    cpus: int
    memory_mib: int | None = None  # None: the bridge asked for no amount (Slurm's default)
    gres: Mapping[str, int] = field(default_factory=dict)  # "gpu", "gpu:a100", "shard" -> count
    mcs_label: str | None = None  # the label that keeps native jobs off (timeShared)


@dataclass(frozen=True)
class Held:
    """What Slurm holds (or, for a pending job, will give) on each node of the job; None: not read."""

    nodes: tuple[str, ...] = ()
    cpus: int | None = None
    memory_mib: int | None = None
    gres: Mapping[str, int] | None = None
    mcs_label: str | None = None


def need_of(request: JobRequest) -> Need:
    """Per node: the tasks' CPUs, the memory, the GRES and (time-shared) the MCS label asked for."""
    timeshared = request.node_sharing == "timeShared" or (request.node_sharing is None and bool(request.mcs_label))
    return Need(
        cpus=request.tasks_per_node * request.cpus_per_task,
        memory_mib=request.memory_per_node_mib,
        gres=_gres(request.gres),
        mcs_label=request.mcs_label if timeshared else None,
    )


def parse_tres(tres: str) -> dict[str, float]:
    """A TRES string (``cpu=2,mem=2G,node=1,billing=2,gres/gpu=1``) -> name -> amount, memory in
    MiB; an item that does not parse is left out."""
    out: dict[str, float] = {}
    for item in filter(None, (i.strip() for i in tres.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not value:
            continue
        scale = 1.0
        if name == "mem" and value[-1].upper() in _MIB:
            scale, value = _MIB[value[-1].upper()], value[:-1]
        try:
            out[name] = float(value) * scale
        except ValueError:
            continue
    return out


def held_of(job: JobInfo) -> Held:
    """What the job's record says Slurm holds per node (TRES over its node count)."""
    cpus = memory = None
    if job.tres is not None:
        tres = parse_tres(job.tres)
        count = len(job.nodes) or int(tres.get("node", 0))
        if count > 0:
            cpus = int(tres["cpu"]) // count if "cpu" in tres else None
            memory = int(tres["mem"]) // count if "mem" in tres else None
    gres = _gres(job.gres_per_node) if job.gres_per_node is not None else None
    return Held(job.nodes, cpus, memory, gres, job.mcs_label)


def compare(request: JobRequest, job: JobInfo, placed: Mapping[str, str]) -> Verdict:
    """The differences between job ``job`` as Slurm has it and what the bridge asked for it
    (``request``), with ``placed``: each member pod released or bound to a node (pod -> node)."""
    need, held = need_of(request), held_of(job)
    found: list[Difference] = []
    if held.nodes:
        for pod, node in sorted(placed.items()):
            if node not in held.nodes:
                holds = str(hostlist.collect_hostlist(list(held.nodes)))  # named only in a difference
                found.append(
                    Difference(
                        "nodes", f"pod {pod} is on node {node}, which Slurm no longer holds for it (it holds {holds})"
                    )
                )
    if held.cpus is not None and held.cpus < need.cpus:
        found.append(Difference("cpus", f"{held.cpus} CPU(s) per node where the pods need {need.cpus}"))
    if need.memory_mib is not None and held.memory_mib is not None and held.memory_mib < need.memory_mib:
        found.append(
            Difference("memory", f"{held.memory_mib} MiB of memory per node where the pods need {need.memory_mib} MiB")
        )
    if held.gres is not None:
        for name, count in sorted(need.gres.items()):
            have = held.gres.get(name, 0)
            if have < count:
                found.append(Difference("gres", f"{have} gres/{name} per node where the pods need {count}"))
    # No label at all is what a Slurm without MCSPlugin=mcs/label reports for every job (the setup
    # check says so); another label is a change.
    if need.mcs_label is not None and held.mcs_label and held.mcs_label != need.mcs_label:
        found.append(
            Difference(
                "mcs",
                f"MCS label {held.mcs_label!r} where the bridge set {need.mcs_label!r}, "
                "so other jobs may share its nodes",
            )
        )
    return Verdict(job.job_id, tuple(found))


def compare_components(
    leader: int,
    parts: Sequence[tuple[JobRequest, JobInfo, Mapping[str, str]]],
    labels: Sequence[str] = (),
) -> HetVerdict:
    """Heterogeneous job ``leader``, component by component (by offset): what the bridge asked for
    the component, the component's own record in Slurm, and the pods placed in it (pod -> node)."""
    return HetVerdict(leader, tuple(compare(r, job, placed) for r, job, placed in parts), tuple(labels))


def _gres(gres: str | None) -> dict[str, int]:
    """A GRES list per node (``gres/gpu:2``, ``gres/gpu:a100:1,gres/shard:2``; Slurm's older
    ``gres:gpu:2`` too) -> name[:type] -> count (1 when none is given, as Slurm counts it)."""
    items = ",".join(i.strip().removeprefix("gres:") for i in (gres or "").split(","))
    out: dict[str, int] = {}
    for name, typed, count in gres_items(items):
        key = f"{name}:{typed}" if typed else name
        out[key] = out.get(key, 0) + (1 if count is None else count)
    return out
