"""The Mutating- and ValidatingWebhookConfiguration that register the webhook with the apiserver.

Both carry the configured namespaceSelector: it is the only place namespace scoping happens,
so the server itself never has to look namespaces up.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import yaml
from cryptography import x509

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.core.kubeformats import MAX_NAME_LENGTH, is_dns_label, is_dns_subdomain
from slurm_bridge.kube import schedulingapi
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX

from .podpolicy import webhook_skip_condition
from .validate import PLACEMENT_FIELDS

ADMISSION_API: Final = "admissionregistration.k8s.io/v1"
TIMEOUT_SECONDS: Final = 10


class RenderError(Exception):
    """An argument cannot be used; the message names it."""


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    port: int = 443


def parse_service(value: str) -> ServiceRef:
    """``NAMESPACE/NAME[:PORT]``."""
    m = re.match(r"^([^/:]+)/([^/:]+)(?::(\d+))?$", value)
    if not m:
        raise RenderError(f"--service {value!r} is not NAMESPACE/NAME[:PORT]")
    namespace, name, port = m.group(1), m.group(2), int(m.group(3) or 443)
    if not is_dns_label(namespace) or not is_dns_label(name):
        raise RenderError(f"--service {value!r}: namespace and name must be DNS labels")
    if not 0 < port < 65536:
        raise RenderError(f"--service {value!r}: port {port} is out of range")
    return ServiceRef(namespace, name, port)


def check_url(url: str) -> str:
    """The apiserver only calls https URLs without query or fragment."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise RenderError(f"--url {url!r} must be an https URL such as https://127.0.0.1:9443")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise RenderError(f"--url {url!r} must not have user info, a query or a fragment")
    return url.rstrip("/")


def ca_bundle(pem: bytes, source: str = "CA file") -> str:
    """Base64 of the PEM, after checking it holds at least one certificate."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise RenderError(f"{source} is not a PEM certificate: {e}") from None
    if not certs:
        raise RenderError(f"{source} holds no certificate")
    return base64.b64encode(pem).decode()


def _client_config(url: str | None, service: ServiceRef | None, path: str, bundle: str) -> dict[str, Any]:
    if service is not None:
        svc = {"namespace": service.namespace, "name": service.name, "path": path, "port": service.port}
        return {"service": svc, "caBundle": bundle}
    if url is None:
        raise RenderError("either --url or --service is needed")
    return {"url": check_url(url) + path, "caBundle": bundle}


# Every key validate() looks at on a pod (the reserved labels and annotations, slurmjob.*, the
# device-request annotation) contains this; a unit test checks it.
BRIDGE_KEY_MARK: Final = names.SLINKY_PREFIX


def _requests_devices(containers: str) -> str:
    res = "c.resources.{0}.exists(r, r.startsWith('{1}'))"
    prefix = EXTENDED_PREFIX
    return (
        f"has(object.spec.{containers}) && object.spec.{containers}.exists(c, has(c.resources) && "
        f"((has(c.resources.requests) && {res.format('requests', prefix)}) || "
        f"(has(c.resources.limits) && {res.format('limits', prefix)})))"
    )


# A pod create that carries nothing validate() checks needs no validating call: no key of the
# bridge's, no placement field (nodeSelector, affinity, topologySpreadConstraints), no
# resourceClaims and no DRA extended resource. Such a create then costs one admission round trip
# (the mutating one) instead of two; in a burst each took 80-110 ms inside the apiserver
# (bench/log, run 10). Evaluated on the final object, so it is exact: a mutation by any
# webhook that adds one of these sends the create to validation. Everything else is still reviewed.
PLAIN_POD_CREATE_CHECK: Final = " || ".join(
    [
        "request.operation != 'CREATE'",
        "request.resource.resource != 'pods'",
        f"(has(object.metadata.labels) && object.metadata.labels.exists(k, k.contains('{BRIDGE_KEY_MARK}')))",
        f"(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.contains('{BRIDGE_KEY_MARK}')))",
        *(f"has(object.spec.{f})" for f in (*PLACEMENT_FIELDS, "resourceClaims")),
        f"({_requests_devices('initContainers')})",
        f"({_requests_devices('containers')})",
    ]
)


def _lacks_limits(containers: str) -> str:
    return (
        f"has(object.spec.{containers}) && object.spec.{containers}.exists(c, !has(c.resources) || "
        "!has(c.resources.limits) || !('memory' in c.resources.limits) || !('cpu' in c.resources.limits))"
    )


# With nodeSharing coResident, a pod create must also be reviewed when a container lacks a memory
# or cpu limit, or when the pod has pod-level resources: what validate() then checks
# (slurm_bridge/rules/nodesharing.py). A pod whose containers all have both limits still skips it.
CO_RESIDENT_CHECK: Final = " || ".join(
    ["has(object.spec.resources)", f"({_lacks_limits('initContainers')})", f"({_lacks_limits('containers')})"]
)


def _labels() -> dict[str, str]:
    return {
        names.LABEL_APP_NAME: names.APP_NAME,
        names.LABEL_APP_COMPONENT: "webhook",
        names.LABEL_APP_MANAGED_BY: names.APP_NAME,
    }


MUTATING_PREFIX: Final = "mutate-pods."
VALIDATING_PREFIX: Final = "validate."
WEBHOOK_SUFFIX: Final = ".slinky.slurm.net"
# The longest --name whose webhook names (``mutate-pods.<name>.slinky.slurm.net``) are still
# DNS subdomains of 253 characters.
MAX_NAME: Final = MAX_NAME_LENGTH - len(MUTATING_PREFIX) - len(WEBHOOK_SUFFIX)


def check_name(name: str) -> str:
    """The name of both configuration objects, also the middle of their webhooks' names."""
    if not is_dns_subdomain(name, MAX_NAME):
        raise RenderError(
            f"--name {name!r} is not a DNS subdomain name of at most {MAX_NAME} characters (lowercase letters, "
            f"digits, '-' and '.'; the webhook name {MUTATING_PREFIX}<name>{WEBHOOK_SUFFIX} must fit "
            f"{MAX_NAME_LENGTH})"
        )
    return name


_POD_RULE: Final = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}


def _mutating_rules() -> list[dict[str, Any]]:
    """Pod creates, and the creates of the workload kinds with pod templates: the mutating webhook
    alone sees a pod template's spec.schedulingGroup (or a Job's spec.scheduling) before an API
    server without the Workload API drops it (webhook/apis.py); it changes nothing in them."""
    templates = [
        {
            "operations": ["CREATE"],
            "apiGroups": [k.group],
            "apiVersions": ["*"],
            "resources": [k.plural],
            "scope": "Namespaced",
        }
        for k in workloadkinds.CONFIGURING
        if k.pod_templates
    ]
    return [{"operations": ["CREATE"], **_POD_RULE}, *templates]


# The creates of what asks for DRA devices by hand: only the bridge makes those of the classes it
# maps (webhook/devicedoors.py).
CLAIM_RULE: Final = {
    "operations": ["CREATE"],
    "apiGroups": [schedulingapi.RESOURCE_GROUP],
    "apiVersions": ["*"],
    "resources": [schedulingapi.RESOURCE_CLAIMS, "resourceclaimtemplates"],
    "scope": "Namespaced",
}


def _validating_rules() -> list[dict[str, Any]]:
    """Pods (their in-place resize: webhook/resize.py; their ephemeral containers, kubectl debug:
    webhook/devicedoors.py), the workload kinds whose annotations configure Slurm jobs, the
    controllers that make pods from a template for ever (a Deployment's ReplicaSet would otherwise
    make refused pods in a loop: refused at the object instead; slurm_bridge/rules/workloadkinds.py),
    and the creates of ResourceClaims and templates (CLAIM_RULE)."""
    kinds = [
        {"apiGroups": [k.group], "apiVersions": ["*"], "resources": [k.plural], "scope": "Namespaced"}
        for k in workloadkinds.VALIDATED
    ]
    # In-place resize (Kubernetes 1.35) and ephemeral containers are subresources, which a rule for
    # pods does not match.
    pods = {**_POD_RULE, "resources": ["pods", "pods/resize", "pods/ephemeralcontainers"]}
    return [*({"operations": ["CREATE", "UPDATE"], **r} for r in [pods, *kinds]), dict(CLAIM_RULE)]


def _match_conditions(config: Config) -> list[dict[str, str]]:
    """The validating calls the apiserver may skip.

    The bridge's own writes (trustedUsers: the operator releasing pods) need no review: the
    webhook would allow them anyway, and skipping it saves the apiserver a TLS round trip per pod.
    Nor does a plain pod's create (PLAIN_POD_CREATE_CHECK) while tenancy is open: it asks for
    nothing a TenantPolicy could refuse, and gets the tenant's defaults at submit (with
    nodeSharing coResident, only when every container also has its limits: CO_RESIDENT_CHECK). In strict mode
    every pod is reviewed, since one in a namespace no policy selects is refused (docs/tenancy.md).
    """
    conditions = []
    if config.trustedUsers:
        users = json.dumps(list(dict.fromkeys(config.trustedUsers)), separators=(",", ":"))
        conditions.append({"name": "not-the-bridge", "expression": f"!(request.userInfo.username in {users})"})
    if config.tenancy == "open":
        # A grace period the handoff cannot hold is refused (docs/colocation.md): such a pod is
        # reviewed too. (Defaulting runs before admission: the field is always set.)
        grace = (
            "(has(object.spec.terminationGracePeriodSeconds) && "
            f"object.spec.terminationGracePeriodSeconds > {config.handoff.maxGracePeriodSeconds})"
        )
        check = f"{PLAIN_POD_CREATE_CHECK} || {grace}"
        if config.nodeSharing == names.NODE_SHARING_CO_RESIDENT:
            check += " || " + CO_RESIDENT_CHECK
        conditions.append({"name": "something-to-check", "expression": check})
    return conditions


def webhook_configurations(
    config: Config,
    *,
    bundle: str,
    url: str | None = None,
    service: ServiceRef | None = None,
    name: str = names.APP_NAME,
) -> list[dict[str, Any]]:
    """[MutatingWebhookConfiguration, ValidatingWebhookConfiguration] as plain objects."""
    check_name(name)
    common: dict[str, Any] = {
        "namespaceSelector": config.namespace_selector.to_kubernetes(),
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": TIMEOUT_SECONDS,
    }
    mutating = {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": _labels()},
        "webhooks": [
            {
                "name": f"{MUTATING_PREFIX}{name}{WEBHOOK_SUFFIX}",
                "clientConfig": _client_config(url, service, "/mutate", bundle),
                "rules": _mutating_rules(),
                # A plain pod the pod policy (webhook/podpolicy.py) already handed over is not sent.
                "matchConditions": [webhook_skip_condition(config.schedulerName)],
                "reinvocationPolicy": "IfNeeded",
                **common,
            }
        ],
    }
    conditions = _match_conditions(config)
    validating = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": _labels()},
        "webhooks": [
            {
                "name": f"{VALIDATING_PREFIX}{name}{WEBHOOK_SUFFIX}",
                "clientConfig": _client_config(url, service, "/validate", bundle),
                "rules": _validating_rules(),
                **({"matchConditions": conditions} if conditions else {}),
                **common,
            }
        ],
    }
    return [mutating, validating]


def render_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
