"""Admission of devices past the bridge (docs/security.md, "Devices"): claims a pod names itself, and
claims or templates made by hand, that ask for a class the bridge maps or hold another pod's devices."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX, device_class

# Only the bridge allocates the classes it maps, in the managed namespaces: a claim of the pod's own
# (or one it generates from a template) would be allocated by kube-scheduler, which may pick a device
# Slurm gave a native job; another pod's claim holds that pod's devices.
ClaimKind = Literal["ResourceClaim", "ResourceClaimTemplate"]


@dataclass(frozen=True)
class ClaimRef:
    """One of a pod's own ``spec.resourceClaims`` entries (not the bridge's) and what it names."""

    entry: str
    kind: ClaimKind
    name: str

    @property
    def where(self) -> str:
        return f"spec.resourceClaims[{self.entry}]"


def own_claim_refs(spec: Mapping[str, Any]) -> list[ClaimRef]:
    """The pod's ``spec.resourceClaims`` entries but the bridge's own (``slurm-devices``)."""
    out: list[ClaimRef] = []
    for e in spec.get("resourceClaims") or []:
        if not isinstance(e, Mapping) or e.get("name") == names.POD_CLAIM_ENTRY:
            continue
        if e.get("resourceClaimName"):
            out.append(ClaimRef(str(e.get("name")), "ResourceClaim", str(e["resourceClaimName"])))
        elif e.get("resourceClaimTemplateName"):
            out.append(ClaimRef(str(e.get("name")), "ResourceClaimTemplate", str(e["resourceClaimTemplateName"])))
    return out


def claim_spec_of(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ResourceClaim's spec, or the spec of the claims a ResourceClaimTemplate makes."""
    spec = obj.get("spec") or {}
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {} if isinstance(spec, Mapping) else {}
    return spec if isinstance(spec, Mapping) else {}


def claim_classes(claim_spec: Mapping[str, Any]) -> list[str]:
    """The DeviceClasses a claim's spec asks for: each request's ``exactly``, each of its
    ``firstAvailable`` choices, and v1beta1's ``deviceClassName`` on the request itself."""
    out: list[str] = []
    devices = claim_spec.get("devices") or {}
    for r in (devices.get("requests") if isinstance(devices, Mapping) else None) or []:
        if not isinstance(r, Mapping):
            continue
        exactly = r.get("exactly")
        choices = [c for c in r.get("firstAvailable") or [] if isinstance(c, Mapping)]
        for c in (r, exactly if isinstance(exactly, Mapping) else {}, *choices):
            name = c.get("deviceClassName")
            if isinstance(name, str) and name:
                out.append(name)
    return list(dict.fromkeys(out))


def managed_classes(classes: Iterable[str]) -> list[str]:
    """Those of ``classes`` the bridge maps to Slurm (:func:`.classes.device_class`): only it allocates them."""
    return [c for c in classes if device_class(c) is not None]


def ask_instead(classes: Sequence[str]) -> str:
    """How a pod asks for devices of ``classes`` through the bridge."""
    asks = ", ".join(f"{EXTENDED_PREFIX}{c}: N" for c in classes)
    return (
        f"ask for them in one container's resources.limits instead ({asks}): Slurm then picks the devices and "
        "the bridge gives the pod exactly those (docs/gpus.md)"
    )


def claim_owner(claim: Mapping[str, Any]) -> str:
    """The pod a ResourceClaim belongs to ("" when none): the owner of the bridge's claims and of
    those Kubernetes generates from a template, or the generated claim's annotation."""
    meta = objects.meta(claim)
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
            return f"pod {ref.get('name')}"
    if names.ANN_K8S_POD_CLAIM_NAME in (meta.get("annotations") or {}):
        return "the pod it was generated for"
    return ""


def own_claim_problems(refs: Sequence[ClaimRef], found: Mapping[ClaimRef, Mapping[str, Any] | str | None]) -> list[str]:
    """Why a pod may not have its own claim entries ``refs``, given what each names (``found``: the
    object, None when it does not exist, or why it could not be read: refused, fail closed).

    Refused: a claim or template asking for a class the bridge maps, and another pod's claim. A
    name that does not exist yet passes: whoever makes it later passes the same rule at its create.
    A claim of other classes shared by several pods (DRA's shared claims) stays allowed: its devices
    are not Slurm's."""
    problems: list[str] = []
    for ref in refs:
        got = found.get(ref)
        if isinstance(got, str):
            problems.append(f"{ref.where}: {got}")
            continue
        if got is None:
            continue
        classes = managed_classes(claim_classes(claim_spec_of(ref.kind, got)))
        if classes:
            problems.append(
                f"{ref.where}: {ref.kind} {ref.name} requests DeviceClass {', '.join(classes)}, which only "
                "slurm-bridge allocates here (Slurm picks those devices; one Kubernetes picked could be a native "
                f"Slurm job's); remove the entry and {ask_instead(classes)}"
            )
        owner = claim_owner(got) if ref.kind == "ResourceClaim" else ""
        if owner:
            problems.append(
                f"{ref.where}: ResourceClaim {ref.name} belongs to {owner}: a pod may not use another pod's claim "
                "(its devices are that pod's); remove the entry and ask for devices of your own"
            )
    return problems


def bridge_claim_problem(name: str, existing: Mapping[str, Any] | str | None) -> str:
    """The bridge's entry of a pod being created must name a claim that does not exist yet: the
    operator makes it for this pod once Slurm has allocated the job ("" when so)."""
    where = f"spec.resourceClaims[{names.POD_CLAIM_ENTRY}]"
    if isinstance(existing, str):
        return f"{where}: {existing}"
    if existing is None:
        return ""
    return (
        f"{where}: ResourceClaim {name} already exists; the entry {names.POD_CLAIM_ENTRY!r} names the claim "
        f"slurm-bridge makes for this pod after Slurm's allocation, never an existing one: remove the entry and "
        f"the {names.ANN_DEVICE_REQUESTS} annotation and ask with {EXTENDED_PREFIX}<class>: N (docs/gpus.md)"
    )


def claim_object_problems(kind: str, obj: Mapping[str, Any]) -> list[str]:
    """Why a ResourceClaim or ResourceClaimTemplate may not be made in a managed namespace by
    anyone but the bridge: it asks for a class the bridge maps."""
    classes = managed_classes(claim_classes(claim_spec_of(kind, obj)))
    if not classes:
        return []
    name = objects.name(obj) or objects.meta(obj).get("generateName") or ""
    return [
        f"{kind} {name}: requests DeviceClass {', '.join(classes)}, which only slurm-bridge allocates in this "
        "namespace (Slurm picks those devices on its nodes; a claim made by hand would let Kubernetes give a pod "
        f"devices Slurm may have given a native job); {ask_instead(classes)}"
    ]
