"""What the mutating webhook records on a pod for the operator: the DRA requests (the annotation
``slinky.slurm.net/device-requests``) and the claim entry naming the ResourceClaim the bridge makes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.rules.dra.classes import device_class, known_classes


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


def claim_name_of(pod: Mapping[str, Any]) -> str | None:
    """The ResourceClaim the pod's bridge entry references (None: it asked for no devices)."""
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if isinstance(entry, Mapping) and entry.get("name") == names.POD_CLAIM_ENTRY:
            name = entry.get("resourceClaimName")
            return str(name) if name else None
    return None
