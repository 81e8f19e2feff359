"""The DeviceClasses the bridge maps and what Slurm allocates for each (a GRES by index, or CPUs)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

EXTENDED_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
RESOURCE_API: Final = "resource.k8s.io/v1"


@dataclass(frozen=True)
class DeviceClass:
    """What Slurm allocates for a DeviceClass: a GRES (by index) or CPUs (by core).

    ``gres_type``: the Slurm GRES type the class asks for (a MIG profile: ``gpu:1g.10gb``), and
    then ``profile``: the profile every device given for it must have (its ``type`` attribute
    ``mig``). An untyped GPU class takes whole GPUs only: a device whose ``type`` is ``mig`` is
    never given for it (nor are MIG nodes offered to its jobs: :func:`.gres.untyped_gpu_request`).
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


def mapped_class(name: str) -> DeviceClass:
    """The class ``name`` maps to, for requests already checked (ValueError when it maps to none)."""
    cls = device_class(name)
    if cls is None:  # recorded_requests and the webhook let only mapped classes through
        raise ValueError(f"DeviceClass {name!r} cannot be mapped to Slurm")
    return cls
