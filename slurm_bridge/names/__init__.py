"""Every well-known name, split by kind as the Go slurm-bridge's ``internal/wellknown`` is, and
re-exported here as ``names.X`` (tests/unit/names/test_names_by_kind.py); a new name goes into the module
of its kind. Keys shared with the Go bridge keep its spelling and meaning."""

# Each kind module's public names, re-exported as ``names.X`` by star imports: a new name is written
# once, in the module of its kind. The kind modules do without ``from __future__ import annotations``,
# which would bind ``annotations`` here over the module of that name.
import sys as _sys

from slurm_bridge.names.annotations import *  # noqa: F403
from slurm_bridge.names.conditions import *  # noqa: F403
from slurm_bridge.names.crd import *  # noqa: F403
from slurm_bridge.names.finalizers import *  # noqa: F403
from slurm_bridge.names.labels import *  # noqa: F403
from slurm_bridge.names.prefixes import *  # noqa: F403
from slurm_bridge.names.reasons import *  # noqa: F403
from slurm_bridge.names.scheduling import *  # noqa: F403
from slurm_bridge.names.slurm import *  # noqa: F403

_kinds = ("annotations", "conditions", "crd", "finalizers", "labels", "prefixes", "reasons", "scheduling", "slurm")


def _public(module: object) -> set[str]:
    """A kind module's constants (upper case; a prefix it imports is another kind's, the same value)
    and the functions it defines."""
    name = getattr(module, "__name__", "")
    return {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and (n.isupper() or (callable(v) and getattr(v, "__module__", None) == name))
    }


__all__ = sorted(set().union(*(_public(_sys.modules[f"{__name__}.{kind}"]) for kind in _kinds)))
