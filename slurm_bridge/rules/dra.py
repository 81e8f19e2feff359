"""DRA device requests: Slurm picks the devices, and the pod gets exactly those.

A managed pod asks for devices of a DRA DeviceClass through its extended resource
``deviceclass.resource.kubernetes.io/<class>``. The bridge maps the classes it knows to what Slurm
allocates (:data:`DEVICE_CLASSES`: a GPU class to the ``gpu`` GRES, ``dra.cpu`` to CPUs). Left as
it is, the request would let kube-scheduler's DRA plugin pick devices itself, which Slurm may
have given to another job. So the mutating webhook rewrites it (:func:`rewrite`): the extended
resource goes, the pod references a ResourceClaim the bridge will make (``spec.resourceClaims``
and the container's ``resources.claims``), and the request is kept in the annotation
``slinky.slurm.net/device-requests``. Once Slurm has allocated the job, the operator reads which
device indices it got on the pod's node (:class:`~slurm_bridge.slurm.models.NodeDevices`), finds
those devices in the node's ResourceSlices (:func:`plan_claim`), and creates the claim already
allocated to them and reserved for the pod before it releases the pod.

Device index mapping: a device's Slurm index is its ``index`` attribute (as the NVIDIA DRA driver
publishes it; for ``dra.cpu`` the CPU's number in Slurm's core order), or else its position among
the driver's devices on that node in natural name order (``gpu-2`` before ``gpu-10``).

Everything here is pure: callers pass the API objects as dicts.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from slurm_bridge import names
from slurm_bridge.core.kubeformats import pointer
from slurm_bridge.rules.resources import GPU_RESOURCES, parse_quantity
from slurm_bridge.slurm.models import NodeDevices

Obj = dict[str, Any]
EXTENDED_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
RESOURCE_API: Final = "resource.k8s.io/v1"


@dataclass(frozen=True)
class DeviceClass:
    """What Slurm allocates for a DeviceClass: a GRES (by index) or CPUs (by core).

    ``gres_type``: the Slurm GRES type the class asks for (a MIG profile: ``gpu:1g.10gb``), and
    then ``profile``: the profile every device given for it must have (its ``type`` attribute
    ``mig``). An untyped GPU class takes whole GPUs only: a device whose ``type`` is ``mig`` is
    never given for it (nor are MIG nodes offered to its jobs: :func:`untyped_gpu_request`).
    """

    name: str
    driver: str
    kind: Literal["gres", "cpus"]
    gres: str = ""  # the Slurm GRES name of kind "gres"
    gres_type: str = ""
    profile: str = ""

    @property
    def request(self) -> str:
        """The claim's request name for this class (and the label in the pod's device annotation):
        a DNS label, so a profile's dots become dashes (``mig-1g-10gb``)."""
        if self.kind != "gres":
            return "cpu"
        return f"mig-{self.profile.replace('.', '-')}" if self.profile else self.gres

    @property
    def slurm_gres(self) -> str:
        """``gpu`` or ``gpu:1g.10gb``: the GRES (and type) Slurm is asked for."""
        return f"{self.gres}:{self.gres_type}" if self.gres_type else self.gres

    @property
    def shared(self) -> bool:
        """A class of GPU shares (Slurm's ``shard``): its count is shards of one GPU, which the claim
        consumes from that GPU's ``shards`` capacity (DRA consumable capacity)."""
        return self.gres == SHARD_GRES


# Slurm's shared GPU GRES, and the capacity of a DRA device that holds it (docs/gpus.md#shards).
SHARD_GRES: Final = "shard"
SHARD_CAPACITY: Final = "shards"

# The classes the bridge maps (as the Go slurm-bridge 1.3: the upstream drivers' DeviceClasses),
# and ``shard.nvidia.com``: shards of one GPU (a site's class, docs/gpus.md#shards).
DEVICE_CLASSES: Final[Mapping[str, DeviceClass]] = {
    c.name: c
    for c in (
        DeviceClass("gpu.nvidia.com", "gpu.nvidia.com", "gres", "gpu"),
        DeviceClass("gpu.example.com", "gpu.example.com", "gres", "gpu"),
        DeviceClass("shard.nvidia.com", "gpu.nvidia.com", "gres", SHARD_GRES),
        DeviceClass("dra.cpu", "dra.cpu", "cpus"),
    )
}
# A DeviceClass per MIG profile (docs/gpus.md): ``mig-<profile>.nvidia.com`` selects the NVIDIA
# driver's MIG devices of that profile, and the bridge asks Slurm for the GRES ``gpu:<profile>``
# (the site names each MIG instance's Slurm type by its profile).
MIG_CLASS: Final = re.compile(r"^mig-(?P<profile>[1-7]g\.[0-9]{1,3}gb)\.nvidia\.com$")
MIG_CLASS_EXAMPLE: Final = "mig-1g.10gb.nvidia.com"
# A Slurm GPU type that is a MIG instance's: a profile, alone or after the GPU's type (AutoDetect
# names them like ``h100_1g.10gb``).
MIG_TYPE: Final = re.compile(r"(^|_)[1-7]g\.[0-9]{1,3}gb(\+me)?$")


def device_class(name: str) -> DeviceClass | None:
    """The class ``name`` maps to, or None: the bridge cannot map it."""
    if name in DEVICE_CLASSES:
        return DEVICE_CLASSES[name]
    m = MIG_CLASS.match(name)
    if m:
        return DeviceClass(name, "gpu.nvidia.com", "gres", "gpu", gres_type=m["profile"], profile=m["profile"])
    return None


def known_classes() -> str:
    """The classes the bridge maps, for messages."""
    return ", ".join([*sorted(DEVICE_CLASSES), f"mig-<profile>.nvidia.com (e.g. {MIG_CLASS_EXAMPLE})"])


# ---- admission: the pod's request -----------------------------------------------------------
def _containers(spec: Mapping[str, Any]) -> Iterable[tuple[str, int, Mapping[str, Any]]]:
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            if isinstance(c, Mapping):
                yield kind, i, c


@dataclass
class _Scan:
    """What the containers' resources say, gathered for the checks across containers."""

    counts: dict[str, int] = field(default_factory=dict)  # DeviceClass -> devices
    problems: list[str] = field(default_factory=list)
    holders: set[str] = field(default_factory=set)  # the containers that request DRA devices
    native_cpu: list[str] = field(default_factory=list)  # paths of native cpu requests and limits
    plugin_gpus: list[str] = field(default_factory=list)  # paths of device-plugin GPU requests and limits


def _scan_request(scan: _Scan, path: str, key: str, value: Any, holder: str) -> None:
    """One entry of a container's requests or limits."""
    if key == "cpu":
        scan.native_cpu.append(path)
    if key in GPU_RESOURCES:
        scan.plugin_gpus.append(path)
    if not key.startswith(EXTENDED_PREFIX):
        return
    cls = key.removeprefix(EXTENDED_PREFIX)
    if device_class(cls) is None:
        scan.problems.append(
            f"{path}: DeviceClass {cls!r} cannot be mapped to Slurm; the bridge maps {known_classes()} "
            f"(or request nvidia.com/gpu, or use the {names.ANN_GRES} annotation)"
        )
        return
    try:
        amount = parse_quantity(value)
    except ValueError as e:
        scan.problems.append(f"{path}: {e}")
        return
    if amount.denominator != 1 or amount < 1:
        scan.problems.append(f"{path}: {value!r} is not a whole number of devices")
        return
    scan.counts[cls] = max(scan.counts.get(cls, 0), int(amount))
    scan.holders.add(holder)


def _conflicts(scan: _Scan, where: str) -> list[str]:
    """Requests that cannot stand together: devices in two containers, dra.cpu beside native cpu,
    two classes of one GRES, DRA GPUs beside device-plugin GPUs."""
    problems: list[str] = []
    if len(scan.holders) > 1:
        problems.append(
            f"{where}: containers {sorted(scan.holders)} all request DRA devices; Slurm allocates a pod's devices "
            "as one set, which the bridge gives to one container: request them in one container only"
        )
    if "dra.cpu" in scan.counts and scan.native_cpu:
        problems.append(
            f"{scan.native_cpu[0]}: a pod that requests {EXTENDED_PREFIX}dra.cpu cannot also request native cpu "
            "(its CPUs are the dra.cpu devices); remove the cpu requests and limits"
        )
    gres_classes: dict[str, list[str]] = {}
    typed: dict[str, list[str]] = {}  # GRES name -> classes of a typed GRES (MIG profiles)
    shared: list[str] = []
    for cls in scan.counts:
        dc = device_class(cls)
        assert dc is not None
        if dc.kind == "gres":
            gres_classes.setdefault(dc.slurm_gres, []).append(cls)
            if dc.gres_type:
                typed.setdefault(dc.gres, []).append(cls)
            if dc.shared:
                shared.append(cls)
    if shared and (len(gres_classes) > 1 or scan.plugin_gpus):
        others = sorted(c for gres, classes in gres_classes.items() if gres != SHARD_GRES for c in classes)
        problems.append(
            f"{where}: DeviceClass {shared[0]} (shards of one GPU) with "
            f"{', '.join(others) if others else 'device-plugin GPUs'} in one pod: a GPU is Slurm's either whole "
            "or as shards; ask for shards and GPUs in different pods"
        )
    for gres, classes in sorted(gres_classes.items()):
        if len(classes) > 1:
            problems.append(
                f"{where}: DeviceClasses {sorted(classes)} are all the Slurm GRES {gres!r}; request one of them"
            )
        if gres in typed:
            problems.append(
                f"{where}: DeviceClasses {sorted(classes)} (whole GPUs) and {sorted(typed[gres])} (MIG slices) "
                f"in one pod: Slurm's untyped {gres!r} could be met with a MIG slice; ask for whole GPUs and "
                "MIG slices in different pods"
            )
        if gres == "gpu" and scan.plugin_gpus:
            problems.append(
                f"{scan.plugin_gpus[0]}: a pod that requests GPUs through a DeviceClass ({classes[0]}) cannot also "
                "request device-plugin GPUs: Slurm would not know which of its GPUs are whose; use one or the other"
            )
    return problems


def device_requests(spec: Mapping[str, Any], where: str = "spec") -> tuple[dict[str, int], str | None, list[str]]:
    """The pod's DRA requests ({class: count}), the container that makes them, and every problem
    (each naming its field). Kubernetes requires an extended resource's request to equal its
    limit, so either gives the count."""
    scan = _Scan()
    for kind, i, c in _containers(spec):
        resources = c.get("resources") or {}
        name = str(c.get("name") or f"{kind}[{i}]")
        for part in ("requests", "limits"):
            for key, value in (resources.get(part) or {}).items():
                _scan_request(scan, f'{where}.{kind}[{i}].resources.{part}["{key}"]', key, value, name)
    holder = next(iter(scan.holders)) if len(scan.holders) == 1 else None
    return scan.counts, holder, scan.problems + _conflicts(scan, where)


def recorded_requests(annotations: Mapping[str, str]) -> dict[str, int]:
    """The DRA requests the webhook recorded on the pod; ValueError when the annotation is bad."""
    raw = annotations.get(names.ANN_DEVICE_REQUESTS)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise ValueError(f"annotation {names.ANN_DEVICE_REQUESTS} is not JSON: {raw!r}") from None
    if (
        not isinstance(data, dict)
        or not data
        or not all(
            isinstance(k, str) and device_class(k) is not None and type(v) is int and v >= 1 for k, v in data.items()
        )
    ):
        raise ValueError(
            f"annotation {names.ANN_DEVICE_REQUESTS} must map DeviceClasses "
            f'({known_classes()}) to counts >= 1, e.g. {{"gpu.nvidia.com": 2}}: {raw!r}'
        )
    return dict(data)


def rewrite(pod: Mapping[str, Any]) -> tuple[list[Obj], list[str]]:
    """JSON patch that replaces the pod's DRA extended resources by a claim the bridge will make
    (empty when there are none), and the problems that forbid the pod.

    The container that asked gets the whole claim; with ``dra.cpu`` every other container gets
    the claim's CPUs (its ``cpu`` request), so the whole pod runs on the cores Slurm allocated.

    The claim's name is chosen here, because a pod's resourceClaims cannot change later: the
    pod's name (or generateName), which may be unknown yet, plus a random suffix.
    """
    spec = pod.get("spec") or {}
    counts, holder, problems = device_requests(spec)
    if problems or not counts:
        return [], problems
    meta = pod.get("metadata") or {}
    base = str(meta.get("name") or meta.get("generateName") or "pod")[:200].rstrip("-.")
    claim_name = f"{base}-{names.POD_CLAIM_ENTRY}-{secrets.token_hex(4)}"
    patch: list[Obj] = []
    for kind, i, c in _containers(spec):
        resources = c.get("resources") or {}
        for part in ("requests", "limits"):
            for key in resources.get(part) or {}:
                if key.startswith(EXTENDED_PREFIX):
                    patch.append({"op": "remove", "path": pointer("spec", kind, i, "resources", part, key)})
        entry: dict[str, str] = {"name": names.POD_CLAIM_ENTRY}
        if str(c.get("name") or f"{kind}[{i}]") != holder:
            if "dra.cpu" not in counts:
                continue
            # The pod's CPUs are the cores Slurm allocated: every container (init and sidecar
            # containers too) runs on them, or one outside them could share a core with a native job.
            entry["request"] = DEVICE_CLASSES["dra.cpu"].request
        if resources.get("claims"):
            patch.append({"op": "add", "path": pointer("spec", kind, i, "resources", "claims", "-"), "value": entry})
        elif "resources" in c:
            patch.append({"op": "add", "path": pointer("spec", kind, i, "resources", "claims"), "value": [entry]})
        else:
            patch.append({"op": "add", "path": pointer("spec", kind, i, "resources"), "value": {"claims": [entry]}})
    ref = {"name": names.POD_CLAIM_ENTRY, "resourceClaimName": claim_name}
    if spec.get("resourceClaims"):
        patch.append({"op": "add", "path": "/spec/resourceClaims/-", "value": ref})
    else:
        patch.append({"op": "add", "path": "/spec/resourceClaims", "value": [ref]})
    value = json.dumps(counts, sort_keys=True)
    if meta.get("annotations"):
        patch.append(
            {"op": "add", "path": pointer("metadata", "annotations", names.ANN_DEVICE_REQUESTS), "value": value}
        )
    else:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {names.ANN_DEVICE_REQUESTS: value}})
    return patch, []


def claim_name_of(pod: Mapping[str, Any]) -> str | None:
    """The ResourceClaim the pod's bridge entry references (None: it asked for no devices)."""
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if isinstance(entry, Mapping) and entry.get("name") == names.POD_CLAIM_ENTRY:
            name = entry.get("resourceClaimName")
            return str(name) if name else None
    return None


def consistency_problems(pod: Mapping[str, Any]) -> list[str]:
    """The request annotation and the claim entry come together and the annotation parses (a
    user who writes both by hand asks for Slurm-allocated devices, which is fine)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    has_annotation = names.ANN_DEVICE_REQUESTS in annotations
    has_entry = any(
        isinstance(e, Mapping) and e.get("name") == names.POD_CLAIM_ENTRY
        for e in (pod.get("spec") or {}).get("resourceClaims") or []
    )
    if has_annotation:
        try:
            recorded_requests(annotations)
        except ValueError as e:
            return [f"metadata.annotations: {e}"]
    if has_annotation and not claim_name_of(pod):
        return [
            f"metadata.annotations[{names.ANN_DEVICE_REQUESTS}]: set without the spec.resourceClaims entry "
            f"{names.POD_CLAIM_ENTRY!r} naming a ResourceClaim; request devices with "
            f"{EXTENDED_PREFIX}<class> instead"
        ]
    if has_entry and not has_annotation:
        return [
            f"spec.resourceClaims: the entry name {names.POD_CLAIM_ENTRY!r} is the bridge's, for the devices "
            f"Slurm allocates; rename it, or request devices with {EXTENDED_PREFIX}<class>"
        ]
    return []


# ---- admission: devices past the bridge (docs/security.md, "Devices") ---------------------------
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
    """Those of ``classes`` the bridge maps to Slurm (:func:`device_class`): only it allocates them."""
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
    meta = claim.get("metadata") or {}
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
    name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName") or ""
    return [
        f"{kind} {name}: requests DeviceClass {', '.join(classes)}, which only slurm-bridge allocates in this "
        "namespace (Slurm picks those devices on its nodes; a claim made by hand would let Kubernetes give a pod "
        f"devices Slurm may have given a native job); {ask_instead(classes)}"
    ]


def plugin_gpu_fields(spec: Mapping[str, Any], where: str = "spec") -> list[str]:
    """The fields of a pod spec that ask for a device plugin's GPUs (``nvidia.com/gpu``, ``amd.com/gpu``)."""
    out: list[str] = []
    for kind, i, c in _containers(spec):
        resources = c.get("resources") or {}
        for part in ("requests", "limits"):
            out += [
                f'{where}.{kind}[{i}].resources.{part}["{k}"]' for k in resources.get(part) or {} if k in GPU_RESOURCES
            ]
    return out


def device_plugin_problem(fields: Sequence[str], partition: str | None, hybrid: Sequence[str], follows: bool) -> str:
    """Why a job whose pods ask for a device plugin's GPUs (``fields``) may not run in ``partition``
    (a comma list; None: Slurm's default) ("" when it may). On a hybrid node native jobs use the
    same GPUs, and the plugin, not Slurm, picks the container's: refused in a partition of
    ``hybrid`` (or Slurm's default one, which may be such), unless ``follows``: the site's plugin
    hands out exactly the GPUs Slurm allocated."""
    if not fields or follows or not hybrid:
        return ""
    asked = [p.strip() for p in (partition or "").split(",") if p.strip()]
    hits = [p for p in asked if p in hybrid] if asked else []
    if asked and not hits:
        return ""
    what = f"partition {', '.join(hits)}, which holds" if hits else "Slurm's default partition, which may hold"
    return (
        f"{fields[0]}: a device plugin's GPUs in {what} hybrid nodes (native Slurm jobs use the same GPUs): Slurm "
        "counts the GPUs but the device plugin picks which ones the container gets, which may be a native job's; "
        f"ask with {EXTENDED_PREFIX}gpu.nvidia.com: N instead (Slurm picks the GPUs and the pod gets exactly those, "
        "docs/gpus.md), or choose a partition without hybrid nodes"
    )


# ---- translation: what Slurm is asked for ------------------------------------------------------
def _class(name: str) -> DeviceClass:
    cls = device_class(name)
    if cls is None:  # recorded_requests and the webhook let only mapped classes through
        raise ValueError(f"DeviceClass {name!r} cannot be mapped to Slurm")
    return cls


def _gpu_items(gres: str | None) -> list[tuple[str, int | None]]:
    """(type, count) of each ``gpu`` item of a GRES list: a job's TRES per node (``gres/gpu:2``,
    ``gres/gpu:1g.10gb:1,gres/shard:2``) or a node's Gres (``gpu:h100:2(S:0)``); type "" when
    untyped, count None when not given."""
    return [(typed, count) for name, typed, count in gres_items(gres) if name == "gpu"]


def gres_items(gres: str | None) -> list[tuple[str, str, int | None]]:
    """(name, type, count) of each item of a GRES list (``gres/shard:2``, ``gpu:h100:2(S:0)``); type
    "" when untyped, count None when not given."""
    out: list[tuple[str, str, int | None]] = []
    for item in filter(None, (gres or "").split(",")):
        parts = item.split("(")[0].strip().removeprefix("gres/").split(":")
        typed = parts[1] if len(parts) >= 2 and not parts[1].isdigit() else ""
        out.append((parts[0], typed, int(parts[-1]) if len(parts) >= 2 and parts[-1].isdigit() else None))
    return out


def untyped_gpu_request(gres: str | None) -> bool:
    """A job's TRES per node asks for GPUs of any type: Slurm could meet it with a MIG instance,
    which is not a GPU to give whole."""
    return any(not typed for typed, _ in _gpu_items(gres))


def typed_gpu_request(gres: str | None) -> bool:
    """A job's TRES per node asks for GPUs of a MIG profile (``gres/gpu:1g.10gb:1``)."""
    return any(MIG_TYPE.search(typed) for typed, _ in _gpu_items(gres))


def shard_request(gres: str | None) -> bool:
    """A job's TRES per node asks for GPU shares (``gres/shard:2``)."""
    return any(name == SHARD_GRES and count is not None for name, _, count in gres_items(gres))


def mig_node(node_gres: str) -> bool:
    """A Slurm node (its ``Gres``, e.g. ``gpu:1g.10gb:4,gpu:3g.40gb:1``) with MIG instances among
    its GPUs: jobs asking for untyped GPUs are kept off it (submitted with it excluded)."""
    return typed_gpu_request(node_gres)


def slurm_needs(counts: Mapping[str, int]) -> tuple[dict[str, int], int | None]:
    """({GRES[:type]: count per node}, CPUs or None) that the requests ask Slurm for."""
    gres: dict[str, int] = {}
    cpus: int | None = None
    for cls_name, count in counts.items():
        cls = _class(cls_name)
        if cls.kind == "gres":
            gres[cls.slurm_gres] = gres.get(cls.slurm_gres, 0) + count
        else:
            cpus = (cpus or 0) + count
    return gres, cpus


# ---- after the allocation: which devices the pod gets ---------------------------------------------
@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    type: str = ""  # the driver's ``type`` attribute: "gpu", "mig" ("" when it gives none)
    profile: str = ""  # a MIG device's ``profile``
    shards: int = 0  # its ``shards`` capacity, when it allows several allocations (consumable capacity)


@dataclass(frozen=True)
class ClaimPlan:
    """The devices a pod's claim is allocated to, by request, and the indices for its annotation."""

    node: str
    results: dict[str, list[Device]] = field(default_factory=dict)  # request name -> devices
    indices: dict[str, list[int]] = field(default_factory=dict)  # request name -> Slurm indices
    consumed: dict[str, int] = field(default_factory=dict)  # request name -> shards it consumes

    def annotation(self) -> str:
        """``gpu:0,2`` (one ``name:indices`` item per request, ``;``-separated)."""
        return ";".join(f"{k}:{','.join(map(str, v))}" for k, v in sorted(self.indices.items()))


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _attr(device: Mapping[str, Any], key: str, kind: str) -> Any:
    value = (device.get("attributes") or {}).get(key)
    if isinstance(value, Mapping):
        found = value.get(kind)
        if (kind == "int" and type(found) is int) or (kind == "string" and isinstance(found, str)):
            return found
    return None


def _device_index(device: Mapping[str, Any]) -> int | None:
    return _attr(device, "index", "int")  # type: ignore[no-any-return]


def _shards(device: Mapping[str, Any]) -> int:
    """The device's ``shards`` capacity when it may be allocated several times (0 otherwise)."""
    if device.get("allowMultipleAllocations") is not True:
        return 0
    value = ((device.get("capacity") or {}).get(SHARD_CAPACITY) or {}).get("value")
    try:
        amount = parse_quantity(value) if value is not None else None
    except ValueError:
        return 0
    return int(amount) if amount is not None and amount.denominator == 1 and amount > 0 else 0


# The NVIDIA driver's device names since it stopped publishing ``index`` and ``minor``: a GPU
# ``gpu-<minor>``, a MIG device ``gpu-<parent minor>-mig-<GI profile id>-<placement start>-<size>``.
_GPU_NAME: Final = re.compile(r"^gpu-(?P<gpu>[0-9]+)$")
_MIG_NAME: Final = re.compile(r"^gpu-(?P<gpu>[0-9]+)-mig-[0-9]+-(?P<start>[0-9]+)-[0-9]+$")


def _slurm_order(device: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """Where Slurm numbers a device among a node's GPUs (docs/gpus.md): GPU by GPU (``index``; a
    MIG device's GPU is its ``parentIndex``), a whole GPU alone, a MIG GPU's instances by ``minor``;
    without those attributes, from the driver's names (the GPU's minor, the instance's placement
    start); None when neither says."""
    name = str(device.get("name") or "")
    if _attr(device, "type", "string") == "mig":
        parent = _attr(device, "parentIndex", "int")
        minor = _attr(device, "minor", "int")
        if parent is not None and minor is not None:
            return (parent, 1, minor)
        m = _MIG_NAME.match(name)
        return (int(m["gpu"]), 1, int(m["start"])) if m else None
    index = _device_index(device)
    if index is not None:
        return (index, 0, 0)
    m = _GPU_NAME.match(name)
    return (int(m["gpu"]), 0, 0) if m and _attr(device, "type", "string") == "gpu" else None


def node_devices(slices: Sequence[Mapping[str, Any]], driver: str, node: str) -> dict[int, Device]:
    """Slurm index -> device, over the driver's ResourceSlices for ``node`` (the newest generation
    of each pool).

    Whole GPUs only: a device's ``index``. With MIG devices (``type`` ``mig``), Slurm numbers the
    node's GPU GRES in one sequence, GPU by GPU and a MIG GPU instance by instance: the devices'
    position in :func:`_slurm_order`. Without those attributes: the natural name order. A
    partitionable device (one that consumes a shared counter) is never given: it is left out."""
    newest: dict[str, int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == driver and spec.get("nodeName") == node:
            pool = spec.get("pool") or {}
            name = str(pool.get("name") or node)
            newest[name] = max(newest.get(name, 0), int(pool.get("generation") or 0))
    found: list[tuple[tuple[int, int, int] | None, Device]] = []
    indexed: list[int | None] = []  # each device's index attribute
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver or spec.get("nodeName") != node:
            continue
        pool = spec.get("pool") or {}
        name = str(pool.get("name") or node)
        if int(pool.get("generation") or 0) != newest[name]:
            continue
        for d in spec.get("devices") or []:
            if d.get("consumesCounters"):
                continue
            device = Device(
                driver,
                name,
                str(d.get("name")),
                _attr(d, "type", "string") or "",
                _attr(d, "profile", "string") or "",
                _shards(d),
            )
            found.append((_slurm_order(d), device))
            indexed.append(_device_index(d))
    if any(d.type == "mig" for _, d in found) and all(o is not None for o, _ in found):
        return dict(enumerate(d for _, d in sorted(found, key=lambda f: f[0] or (0, 0, 0))))
    if found and all(i is not None for i in indexed):
        return {i: d for i, (_, d) in zip(indexed, found, strict=True) if i is not None}
    ordered = sorted((d for _, d in found), key=lambda d: (_natural(d.pool), _natural(d.name)))
    return dict(enumerate(ordered))


def plan_claim(
    counts: Mapping[str, int], node: str, held: NodeDevices | None, slices: Sequence[Mapping[str, Any]], job_id: int
) -> ClaimPlan | str:
    """The devices for a pod on ``node``, or why there are none (for a Warning Event).

    ``held``: what Slurm says the job holds on the node. The pod is the job's only pod there, so
    every device of a requested kind on the node is the pod's.
    """
    if held is None:
        return f"Slurm job {job_id} reports nothing allocated on node {node}"
    plan = ClaimPlan(node)
    for cls_name, count in sorted(counts.items()):
        cls = _class(cls_name)
        if cls.shared:
            found = _plan_shards(cls, count, node, held, slices, job_id)
            if isinstance(found, str):
                return found
            plan.results[cls.request], plan.indices[cls.request] = [found[1]], [found[0]]
            plan.consumed[cls.request] = count
            continue
        if cls.kind == "gres":
            indices = held.gres.get(cls.slurm_gres)
            if indices is None:
                return (
                    f"Slurm does not say which {cls.slurm_gres} devices job {job_id} holds on node {node}: its "
                    "GRES has no device files in gres.conf, so Slurm keeps no indices and exact devices cannot be "
                    "given"
                )
        else:
            indices = held.cpus
        if len(indices) != count:
            return (
                f"Slurm job {job_id} holds {len(indices)} {cls.request} device(s) on node {node} "
                f"({list(indices)}), the pod asked for {count}"
            )
        by_index = node_devices(slices, cls.driver, node)
        missing = [i for i in indices if i not in by_index]
        if missing:
            return (
                f"node {node}'s ResourceSlices (driver {cls.driver}) publish no device with Slurm index "
                f"{', '.join(map(str, missing))} of the {cls.request} devices job {job_id} holds there "
                f"({len(by_index)} published)"
            )
        devices = [by_index[i] for i in indices]
        wrong = _kind_problem(cls, devices, indices)
        if wrong:
            return (
                f"Slurm and node {node}'s ResourceSlices disagree: job {job_id} holds {cls.slurm_gres} {wrong}; "
                "no device is given until gres.conf and the DRA driver describe the same GPUs (docs/gpus.md)"
            )
        plan.results[cls.request] = devices
        plan.indices[cls.request] = list(indices)
    return plan


def _plan_shards(
    cls: DeviceClass, count: int, node: str, held: NodeDevices, slices: Sequence[Mapping[str, Any]], job_id: int
) -> tuple[int, Device] | str:
    """(the GPU's Slurm index, its device) that the job's ``count`` shards are on, or why there is
    none. Slurm says how many of the job's shards each of the node's shard records holds; the n-th
    record is the n-th GPU with shards, in Slurm's order (docs/gpus.md#shards). One GPU only: a
    claim's request of shards is one device (Slurm gives one unless MULTIPLE_SHARING_GRES_PJ)."""
    shares = held.shares.get(cls.gres)
    if shares is None:
        return f"Slurm does not say which GPU the {count} {cls.gres} of job {job_id} are on, on node {node}"
    whole = [(i, d) for i, d in sorted(node_devices(slices, cls.driver, node).items()) if d.type != "mig"]
    gpus = [(i, d) for i, d in whole if d.shards]
    if len(gpus) != len(shares):
        return (
            f"Slurm and node {node}'s ResourceSlices disagree: Slurm has {len(shares)} {cls.gres} record(s) there, "
            f"the driver {len(gpus)} GPU(s) with a {SHARD_CAPACITY!r} capacity; no device is given until gres.conf "
            "and the DRA driver describe the same GPUs (docs/gpus.md)"
        )
    on = [(n, gpus[pos]) for pos, n in enumerate(shares) if n]
    if sum(n for n, _ in on) != count or len(on) != 1:
        return (
            f"Slurm job {job_id} holds {cls.gres} {list(shares)} (per GPU) on node {node}; the pod asked for {count} "
            f"on one GPU (a site that sets SelectTypeParameters=MULTIPLE_SHARING_GRES_PJ spreads them: unset it)"
        )
    n, (index, device) = on[0]
    if n > device.shards:
        return f"Slurm job {job_id} holds {n} {cls.gres} on {device.name} of node {node}, which has {device.shards}"
    return index, device


def _kind_problem(cls: DeviceClass, devices: Sequence[Device], indices: Sequence[int]) -> str:
    """Why the devices at Slurm's indices are not what the class asks for ("" when they are): a
    MIG class's must be MIG devices of its profile, a whole-GPU class's no MIG device."""
    for i, d in zip(indices, devices, strict=True):
        if cls.profile and (d.type != "mig" or d.profile != cls.profile):
            what = f"a {d.type or 'device'}" + (f" of profile {d.profile}" if d.profile else "")
            return f"index {i}, which is {d.name} ({what}), not a MIG device of profile {cls.profile}"
        if not cls.profile and cls.kind == "gres" and d.type == "mig":
            return f"index {i}, which is the MIG device {d.name} (profile {d.profile}), not a whole GPU"
    return ""


def claim_object(pod: Mapping[str, Any], name: str, counts: Mapping[str, int]) -> Obj:
    """The ResourceClaim for the pod: owned by it (garbage collection removes it with the pod) and
    protected by Kubernetes' own finalizer, which kube-controller-manager lifts once no pod uses it."""
    meta = pod["metadata"]
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
    requests = [_claim_request(c, n) for c, n in sorted(counts.items())]
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {names.LABEL_APP_MANAGED_BY: names.APP_NAME},
            "finalizers": [names.RESOURCE_CLAIM_FINALIZER],
            "ownerReferences": [owner],
        },
        "spec": {"devices": {"requests": requests}},
    }


def _claim_request(class_name: str, count: int) -> Obj:
    """One request of the claim: ``count`` devices, or for shards one GPU and ``count`` of its
    ``shards`` capacity."""
    cls = _class(class_name)
    exactly: Obj = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    if cls.shared:
        exactly.update(count=1, capacity={"requests": {SHARD_CAPACITY: str(count)}})
    return {"name": cls.request, "exactly": exactly}


def _result(pod_uid: str, request: str, device: Device, shards: int | None) -> Obj:
    """One allocation result; a share of a device that allows several allocations names its share
    (an ID of the pod and the device: the same each time the operator computes it) and what it consumes."""
    out: Obj = {"request": request, "driver": device.driver, "pool": device.pool, "device": device.name}
    if shards is not None:
        out["shareID"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{pod_uid}/{device.pool}/{device.name}"))
        out["consumedCapacity"] = {SHARD_CAPACITY: str(shards)}
    return out


def allocation_status(pod: Mapping[str, Any], plan: ClaimPlan) -> Obj:
    """The claim's status as kube-scheduler writes it: allocated to exactly the plan's devices on
    its node, and reserved for the pod. The scheduler then only checks it and binds the pod there."""
    meta = pod["metadata"]
    results = [
        _result(meta["uid"], req, d, plan.consumed.get(req))
        for req, devices in sorted(plan.results.items())
        for d in devices
    ]
    return {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [plan.node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
    }


def allocated_to(claim: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
    """(request, driver, pool, device) of each device a claim is allocated to."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    return {(str(r.get("request")), str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results}


# ---- the two views of a node's GPUs ---------------------------------------------------------------
def slurm_gpu_inventory(node_gres: str) -> dict[str, int]:
    """A Slurm node's GPUs (its ``Gres``) by kind: ``gpu`` for whole GPUs (untyped, or of a GPU
    type such as ``h100``), ``gpu:<profile>`` for MIG instances (type ``1g.10gb``, or AutoDetect's
    ``h100_1g.10gb``)."""
    out: dict[str, int] = {}
    for typed, count in _gpu_items(node_gres):
        if count is None:
            continue
        m = MIG_TYPE.search(typed)
        kind = f"gpu:{m.group(0).lstrip('_')}" if m else "gpu"
        out[kind] = out.get(kind, 0) + count
    shards = sum(n for name, _, n in gres_items(node_gres) if name == SHARD_GRES and n is not None)
    if shards:
        out[SHARD_GRES] = shards
    return out


def slice_gpu_inventory(slices: Sequence[Mapping[str, Any]], driver: str, node: str) -> dict[str, int]:
    """The driver's GPUs on ``node`` (newest pool generations, partitionable devices left out) by
    the same kinds as :func:`slurm_gpu_inventory`."""
    out: dict[str, int] = {}
    for d in node_devices(slices, driver, node).values():
        kind = f"gpu:{d.profile}" if d.type == "mig" else "gpu"
        out[kind] = out.get(kind, 0) + 1
        if d.shards:
            out[SHARD_GRES] = out.get(SHARD_GRES, 0) + d.shards
    return out


def devices_differ(
    node_gres: str, slices: Sequence[Mapping[str, Any]], node: str, driver: str = "gpu.nvidia.com"
) -> str:
    """Why Slurm's GPUs on a node and the DRA driver's are not the same devices ("" when they are,
    and when the node has neither): a new layout published (a MIG change) that gres.conf does not
    have yet, or the other way round."""
    slurm = slurm_gpu_inventory(node_gres)
    published = slice_gpu_inventory(slices, driver, node)
    if slurm == published:
        return ""
    return f"Slurm's GRES on node {node} has {said(slurm)}; driver {driver}'s ResourceSlices publish {said(published)}"


def said(inventory: Mapping[str, int], empty: str = "none") -> str:
    """An inventory of :func:`slurm_gpu_inventory` in words: ``2 whole GPU(s), 4 1g.10gb``."""
    words = (
        f"{n} {'whole GPU(s)' if k == 'gpu' else 'shard(s)' if k == SHARD_GRES else k.split(':', 1)[1]}"
        for k, n in sorted(inventory.items())
    )
    return ", ".join(words) or empty


def largest_request(slices: Sequence[Mapping[str, Any]], cls: DeviceClass) -> int | None:
    """The most devices of ``cls`` any one node publishes (None: no ResourceSlice of its driver
    at all, so nothing can be judged). A pod's devices come from one node. One pass over the
    slices to group them by node: a webhook call must not cost nodes x slices."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == cls.driver and spec.get("nodeName"):
            by_node.setdefault(str(spec["nodeName"]), []).append(s)
    if not by_node:
        return None
    best = 0
    for node, mine in by_node.items():
        if cls.kind == "cpus":
            count = len(node_devices(mine, cls.driver, node))
        elif cls.shared:  # a pod's shards come from one GPU
            count = max((d.shards for d in node_devices(mine, cls.driver, node).values()), default=0)
        else:
            count = slice_gpu_inventory(mine, cls.driver, node).get(
                "gpu" if not cls.profile else f"gpu:{cls.profile}", 0
            )
        best = max(best, count)
    return best
