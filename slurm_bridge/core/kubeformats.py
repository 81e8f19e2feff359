"""Kubernetes' formats, as pure values every floor may check against: object-name limits and the
RFC 1123 checks, bounded names and label values, JSON pointers for patches, and a pod's
containers' exit codes (read by the operator's pod store and its decisions alike).

They live below the Kubernetes client (slurm_bridge/kube/client.py) because the configuration
(slurm_bridge/core/config.py) and the pure rules (slurm_bridge/rules/dra/) check and write them
too, and neither may import the floor that talks to the API server (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

# Kubernetes' limits: object names (DNS subdomains) and label values.
MAX_NAME_LENGTH = 253
MAX_LABEL_VALUE_LENGTH = 63
MAX_DNS_LABEL_LENGTH = 63
# RFC 1123 as Kubernetes applies it: a label is lowercase alphanumerics and '-', alphanumeric at
# both ends; a subdomain is labels joined by '.'. The one pattern of the project; fullmatch, as
# '$' would let a trailing newline through.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def is_dns_label(value: str) -> bool:
    """An RFC 1123 label (at most 63 characters): namespace and Service names, the scheduler name."""
    return len(value) <= MAX_DNS_LABEL_LENGTH and _DNS_LABEL_RE.fullmatch(value) is not None


def is_dns_subdomain(value: str, limit: int = MAX_NAME_LENGTH) -> bool:
    """An RFC 1123 subdomain of at most ``limit`` characters, as most object names must be.

    Like Kubernetes, this bounds the whole name only, not each label (a host name bounds each
    label too: check its labels with ``is_dns_label``)."""
    return len(value) <= limit and _DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def bounded(name: str, limit: int) -> str:
    """``name``, or when longer than ``limit`` its head and a hash of the whole (10 hex digits).

    Two different names never share a bounded form in practice (40 bits of hash), and the head
    keeps it readable. A DNS subdomain or label value stays one: the head loses any trailing
    ``-``/``.``/``_`` and the hash ends it with an alphanumeric character.
    """
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return name[: limit - len(digest) - 1].rstrip("-._") + "-" + digest


def label_value(name: str) -> str:
    """An object name as a label value (at most 63 characters; the full name goes in an annotation)."""
    return bounded(name, MAX_LABEL_VALUE_LENGTH)


def escape_pointer(key: str) -> str:
    """JSON-pointer escaping for label/annotation keys in JSON patches."""
    return key.replace("~", "~0").replace("/", "~1")


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) to the given path, escaping '~' and '/' in keys."""
    return "".join("/" + escape_pointer(str(p)) for p in parts)


def exit_codes(pod: Mapping[str, Any]) -> list[int]:
    """The exit codes of the pod's terminated containers (init containers left out)."""
    return [
        code
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
        if isinstance(code := ((cs.get("state") or {}).get("terminated") or {}).get("exitCode"), int)
    ]
