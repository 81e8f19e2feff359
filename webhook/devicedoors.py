"""The doors to Slurm's devices besides the bridge's own claim (docs/security.md, "Devices").

On a hybrid node Slurm allocates every GPU and a bridge pod's CPUs; only the bridge's claim, which
the operator allocates to exactly what Slurm chose, may give them to a pod. So, in the managed
namespaces: a pod's own claim entries may not name a claim or template of a class the bridge maps,
nor another pod's claim (slurm_bridge/rules/dra/userclaims.py, :func:`own_claim_problems`); the bridge's
entry may not name a claim that exists already; only the bridge makes a claim or template of such a
class (:func:`claim_object_problems`, the operator being a trusted user); and an ephemeral
container may not join a pod bound to exact ``dra.cpu`` cores (:func:`ephemeral_problems`).

:func:`read_claims` is the thin I/O shell: a GET of each claim or template a pod's create names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import FAILED
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX, RESOURCE_API
from slurm_bridge.rules.dra.recorded import claim_name_of, recorded_requests
from slurm_bridge.rules.dra.userclaims import (
    ClaimRef,
    bridge_claim_problem,
    claim_object_problems,
    own_claim_problems,
    own_claim_refs,
)

from .review import AdmissionRequest
from .templates import spec_of

Obj = Mapping[str, Any]
Found = Obj | str | None  # the object, why it could not be read, or None: it does not exist
Get = Callable[[str], Awaitable[dict[str, Any] | None]]
# The reads share the webhook's call budget (timeoutSeconds 10): a slow API server refuses the pod.
READ_SECONDS: Final = 4.0
_PATHS: Final = {"ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates"}


@dataclass(frozen=True)
class PodClaims:
    """What a pod's create names: each own entry's object, and the bridge entry's claim (if any)."""

    found: dict[ClaimRef, Found] = field(default_factory=dict)
    bridge: tuple[str, Found] | None = None


def reads_claims(request: AdmissionRequest) -> bool:
    """A pod's create that names claims or templates: they are read before the decision."""
    return (
        request.operation == "CREATE"
        and not request.sub_resource
        and request.kind == "Pod"
        and not request.group
        and bool(spec_of(request.object).get("resourceClaims"))
    )


def _path(namespace: str, kind: str, name: str) -> str:
    return f"/apis/{RESOURCE_API}/namespaces/{namespace}/{_PATHS[kind]}/{name}"


async def read_claims(request: AdmissionRequest, get: Get) -> PodClaims:
    """GET what the pod's entries name, all at once; a read that fails is refused with why (fail closed)."""
    spec = spec_of(request.object)
    refs = own_claim_refs(spec)
    bridge = claim_name_of(request.object or {})
    wanted = [(_path(request.namespace, r.kind, r.name), f"{r.kind} {r.name}") for r in refs]
    if bridge:
        wanted.append((_path(request.namespace, "ResourceClaim", bridge), f"ResourceClaim {bridge}"))

    async def one(path: str, what: str) -> Found:
        try:
            async with asyncio.timeout(READ_SECONDS):
                return await get(path)
        except FAILED as e:
            return f"slurm-bridge cannot read {what} to check it ({str(e) or 'timed out'}); try again"

    got = await asyncio.gather(*(one(p, w) for p, w in wanted))
    found = dict(zip(refs, got[: len(refs)], strict=True))
    return PodClaims(found, (bridge, got[-1]) if bridge else None)


def pod_claim_problems(claims: PodClaims) -> list[str]:
    """The verdict on what a pod's create names (slurm_bridge/rules/dra/userclaims.py)."""
    problems = own_claim_problems(list(claims.found), claims.found)
    if claims.bridge is not None:
        problem = bridge_claim_problem(*claims.bridge)
        problems += [problem] if problem else []
    return problems


def claim_create_problems(request: AdmissionRequest, config: Config) -> list[str]:
    """A ResourceClaim or ResourceClaimTemplate created in a managed namespace by anyone but the
    bridge (its trustedUsers: the operator makes the pods' claims) may not ask for a class it maps."""
    if request.operation != "CREATE" or request.username in config.trustedUsers:
        return []
    return claim_object_problems(request.kind, request.object or {})


def _ephemeral_names(pod: Obj | None) -> set[str]:
    return {str(c.get("name")) for c in spec_of(pod).get("ephemeralContainers") or [] if isinstance(c, Mapping)}


def ephemeral_problems(pod: Obj, old: Obj | None, config: Config) -> list[str]:
    """An ephemeral container added to a bridge pod bound to exact ``dra.cpu`` cores: it cannot
    reference the pod's claim, so it would run outside the cores Slurm allocated, perhaps on a
    native job's. Other pods' ephemeral containers run within the pod's cgroup (they have no
    resources of their own) and are allowed."""
    if spec_of(pod).get("schedulerName") != config.schedulerName:
        return []
    try:
        counts = recorded_requests(objects.annotations(pod))
    except ValueError:
        return []  # such a pod was refused at its create
    added = sorted(_ephemeral_names(pod) - _ephemeral_names(old))
    if "dra.cpu" not in counts or not added:
        return []
    return [
        f"spec.ephemeralContainers: {', '.join(added)} cannot be added: the pod runs on the exact CPU cores Slurm "
        f"allocated ({EXTENDED_PREFIX}dra.cpu, annotation {names.ANN_SLURM_DEVICES}), and an ephemeral "
        "container cannot be bound to them, so it would run on cores Slurm may have given another job; debug a "
        "copy instead (kubectl debug --copy-to=<name>, which makes a new pod the bridge places), or a pod without "
        "exact cores"
    ]
