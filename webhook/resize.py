"""In-place resize (``pods/resize``, GA since Kubernetes 1.35) of the bridge's pods.

A ``coResident`` pod's limits are its Slurm job's size: Slurm reserved exactly those CPUs and that
memory beside native jobs (docs/colocation.md), and the limits are what holds the containers to
it. A resize would raise them past what Slurm allocated, onto cores and memory Slurm has given to
other jobs, without Slurm knowing. So a resize of such a pod is refused, saying why and what to do;
every other pod's resize is allowed (a ``timeShared`` or ``exclusive`` job's node is not shared with
native jobs while it runs).

The job's mode: stamped on the pod at its release (``ANN_JOB_NODE_SHARING``: what the operator
submitted, a reserved key only the bridge writes). Before that nothing a tenant cannot change says
it: whether a pod is its own job or a workload's is read from labels and owner references, which
the pod's author may edit, and a workload's mode is merged from its group in the operator. So a
pod's resize is refused until it is released (fail safe).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config

from .templates import spec_of

_WHAT_TO_DO = (
    "delete the pod and create it with the new resources (its Slurm job is then made that size), or name "
    f"another mode with {names.ANN_NODE_SHARING}"
)


def _resources(pod: Mapping[str, Any] | None) -> list[Any]:
    spec = spec_of(pod)
    out: list[Any] = [spec.get("resources")]
    for kind in ("initContainers", "containers"):
        items = spec.get(kind)
        out += [(c.get("name"), c.get("resources")) for c in items or [] if isinstance(c, Mapping)]
    return out


def job_mode(pod: Mapping[str, Any]) -> str | None:
    """The node sharing of the pod's Slurm job, as the operator stamped it at the release; None
    before (admission cannot tell it from what only the bridge sets)."""
    stamped = objects.annotations(pod).get(names.ANN_JOB_NODE_SHARING)
    return stamped if stamped in names.NODE_SHARING_MODES else None


def resize_problems(pod: Mapping[str, Any], old: Mapping[str, Any] | None, config: Config) -> list[str]:
    """Why a ``pods/resize`` of ``pod`` (from ``old``) is refused; [] when it is allowed."""
    if spec_of(pod).get("schedulerName") != config.schedulerName or _resources(pod) == _resources(old):
        return []
    mode = job_mode(pod)
    if mode is None:
        return [
            "pods/resize: this pod's Slurm job is not allocated yet; if it is coResident the pod's limits are "
            "the job's size in Slurm, and the bridge tells the job's node sharing only at its release, so no pod "
            f"is resized before Slurm allocated it (then a pod that is not coResident can be); {_WHAT_TO_DO}"
        ]
    if mode != names.NODE_SHARING_CO_RESIDENT:
        return []
    return [
        "pods/resize: this pod's limits are its Slurm job's size (coResident node sharing: Slurm reserved exactly "
        "these CPUs and this memory beside native jobs, and the limits hold the containers to it, "
        "docs/colocation.md); a resize would let it use cores and memory that Slurm gave to other jobs; " + _WHAT_TO_DO
    ]
