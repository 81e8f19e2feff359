"""Device taints reach Slurm (docs/gpus.md, "Device taints"). Pure.

Kubernetes taints a DRA device (a ``taints`` entry of its ResourceSlice device, or a DeviceTaintRule
selecting it) to keep new pods off it (``NoSchedule``) or to evict the pods using it
(``NoExecute``). On a Slurm node, Slurm hands out the GPUs, not kube-scheduler: a taint Slurm does
not hear of still lets native jobs, and the bridge's own next jobs, have the faulty GPU. Slurm
cannot take one GRES of a node out of service, so a node with such a tainted GPU (a device of a
driver the bridge maps to Slurm GRES: a whole GPU, a MIG instance, a GPU of shards) is drained in
Slurm, with a reason that names the device and its taint, and the drain is lifted once no such
taint is left.

The drain's reason in Slurm is the record (:func:`drain_reason`): a restart finds it there, and
only a drain whose reason names this bridge exactly is ever lifted; a drain someone else made (an
administrator, Slurm itself, the node sync, the node guard, the handoff) stands, neither
overwritten nor lifted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.rules.dra.classes import DEVICE_CLASSES
from slurm_bridge.slurm.models import NodeInfo

# The drivers whose devices Slurm hands out as GRES (whole GPUs, shards; the MIG classes' driver is
# the NVIDIA one, among these).
GRES_DRIVERS: Final = frozenset(c.driver for c in DEVICE_CLASSES.values() if c.kind == "gres")
# The effects that keep pods off a device. The API says an effect it does not know is to be treated
# as None (no effect), as ``None`` itself.
EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})

_DRAIN: Final = re.compile(
    rf"^{re.escape(names.DEVICE_TAINT_DRAIN_REASON_PREFIX)}(?P<bridge>[a-z0-9-]+)\]: "
    r"device (?P<device>\S+) taint (?P<taint>\S+)"
)


@dataclass(frozen=True, order=True)
class TaintedDevice:
    """A device of the node with one taint that keeps pods off it; ``rule``: the DeviceTaintRule that
    sets it ("" when the ResourceSlice itself carries it)."""

    device: str
    key: str
    value: str
    effect: str
    driver: str = ""
    pool: str = ""
    rule: str = ""

    @property
    def taint(self) -> str:
        """``key=value:Effect`` (``key:Effect`` without a value), as kubectl writes a node taint."""
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"

    @property
    def named(self) -> tuple[str, str]:
        """What the drain's reason names of it: the device and the taint."""
        return (self.device, self.taint)

    @property
    def text(self) -> str:
        """The words of the drain's reason and Events (``sinfo -R`` shows them)."""
        by = f" (DeviceTaintRule {self.rule})" if self.rule else ""
        return f"device {self.device} taint {self.taint}{by}"


def _selects(selector: Mapping[str, Any], driver: str, pool: str, device: str) -> bool:
    """A DeviceTaintRule's ``deviceSelector``: each field that is set must equal the device's."""
    return all(selector.get(k) in (None, v) for k, v in (("driver", driver), ("pool", pool), ("device", device)))


def _keeps_off(taint: Mapping[str, Any]) -> bool:
    return taint.get("effect") in EFFECTS and bool(taint.get("key"))


def tainted(slices: Iterable[Mapping[str, Any]], rules: Iterable[Mapping[str, Any]]) -> list[TaintedDevice]:
    """The taints that keep pods off the GRES devices of one node's ``slices`` (the newest
    generation of each pool), their own and those of the DeviceTaintRules in ``rules``; sorted, so
    that the drain names the same one while the set stays."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        at = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
        newest[at] = max(newest.get(at, 0), int(pool.get("generation") or 0))
    rule_taints = [
        (str((r.get("metadata") or {}).get("name") or ""), (r.get("spec") or {}).get("deviceSelector") or {}, taint)
        for r in rules
        if _keeps_off(taint := (r.get("spec") or {}).get("taint") or {})
    ]
    found: set[TaintedDevice] = set()
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool_spec = str(spec.get("driver") or ""), spec.get("pool") or {}
        pool = str(pool_spec.get("name") or "")
        if driver not in GRES_DRIVERS or int(pool_spec.get("generation") or 0) != newest[(driver, pool)]:
            continue
        for d in spec.get("devices") or []:
            device = str(d.get("name") or "")
            own = [("", t) for t in d.get("taints") or [] if _keeps_off(t)]
            ruled = [(name, t) for name, sel, t in rule_taints if _selects(sel, driver, pool, device)]
            for rule, t in own + ruled:
                key, value, effect = str(t["key"]), str(t.get("value") or ""), str(t["effect"])
                found.add(TaintedDevice(device, key, value, effect, driver, pool, rule))
    return sorted(found)


# ---- the drain --------------------------------------------------------------------------------------


def drain_reason(bridge_id: str, found: Sequence[TaintedDevice]) -> str:
    """The Slurm node reason of the drain (``sinfo -R``): the first tainted device and its taint, how
    many more, and the bridge; the record of the drain (:func:`drain_of`)."""
    more = f" and {len(found) - 1} more device taint(s)" if len(found) > 1 else ""
    return f"{names.DEVICE_TAINT_DRAIN_REASON_PREFIX}{bridge_id}]: {found[0].text}{more}"


def drain_of(reason: str, bridge_id: str) -> tuple[str, str] | None:
    """The (device, taint) a device-taint drain of ``bridge_id`` names; None for any other reason."""
    m = _DRAIN.match(reason or "")
    if m is None or m.group("bridge") != bridge_id:
        return None
    return (m.group("device"), m.group("taint"))


@dataclass(frozen=True)
class Drain:
    slurm_node: str
    found: tuple[TaintedDevice, ...]
    reason: str


@dataclass(frozen=True)
class Undrain:
    slurm_node: str
    named: tuple[str, str]


def step(
    slurm_node: str, info: NodeInfo | None, found: Sequence[TaintedDevice], bridge_id: str
) -> Drain | Undrain | None:
    """The one Slurm write that brings ``slurm_node`` in line: drain it while a GRES device of it is
    tainted (again, naming another, once the taint its drain names is gone); lift this bridge's own
    drain once no such taint is left. A drain someone else made stands."""
    if info is None:
        return None
    drained = "DRAIN" in info.states
    ours = drain_of(info.reason, bridge_id) if drained else None
    if found:
        if not drained or (ours is not None and all(f.named != ours for f in found)):
            return Drain(slurm_node, tuple(found), drain_reason(bridge_id, found))
        return None
    return Undrain(slurm_node, ours) if ours is not None else None
