"""The bridge's one configuration file, validated once at start-up.

Keys are those of the Go slurm-bridge (``schedulerName``, ``slurmRestApi``, ``managedNamespaces``,
``managedNamespaceSelector``, ``mcsLabel``, ``partition``), the co-residency fork's ``nodeSharing``,
plus the poll period and listen addresses. An unknown key or a bad value ends start-up with a
message that names it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from slurm_bridge.core.kubeformats import is_dns_label

_LISTEN = re.compile(r"^(?P<host>[^:\s]*|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


class ConfigError(Exception):
    """The configuration cannot be used; the message says which key and why."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class LabelSelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs a non-empty 'values' list")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no 'values'")
        return self


class LabelSelector(_Model):
    """A Kubernetes LabelSelector, as in a namespaceSelector."""

    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.matchLabels.items()):
            return False
        for r in self.matchExpressions:
            present = r.key in labels
            if r.operator == "In" and labels.get(r.key) not in r.values:
                return False
            if r.operator == "NotIn" and present and labels[r.key] in r.values:
                return False
            if r.operator == "Exists" and not present:
                return False
            if r.operator == "DoesNotExist" and present:
                return False
        return True

    def is_empty(self) -> bool:
        return not self.matchLabels and not self.matchExpressions

    def to_kubernetes(self) -> dict[str, Any]:
        return self.model_dump(exclude_defaults=True)


def namespace_names(v: list[str]) -> list[str]:
    """``v`` if every entry is a namespace name (a DNS label); the error lists those that are not."""
    bad = [n for n in v if not is_dns_label(n)]
    if bad:
        raise ValueError(
            f"not valid namespace names: {bad} (DNS labels: lowercase letters, digits and '-', at most 63)"
        )
    return v


class HandoffConfig(_Model):
    """The handoff (docs/colocation.md, "The handoff"): native work never starts under a live pod.

    ``maxGracePeriodSeconds``: the longest ``terminationGracePeriodSeconds`` a managed pod may ask
    for (the webhook refuses a longer one, naming this key): the bridge QOS's GraceTime and the
    handoff reservations are sized for it. ``marginSeconds``: how long past its grace period a pod
    may still run before its node is drained in Slurm; also how early the bridge starts ending the
    pods of a job before its time limit (when the partition's OverTimeLimit leaves less)."""

    maxGracePeriodSeconds: int = Field(default=300, ge=0, le=86400)
    marginSeconds: int = Field(default=15, ge=1, le=3600)


class NodeGuardConfig(_Model):
    """Nothing but the bridge's pods on Slurm's nodes (docs/security.md, "Kubernetes' other doors").

    ``daemonNamespaces``: namespaces whose DaemonSet pods (made by the DaemonSet controller, which
    no pod author can impersonate) may run on the bridge's nodes: node daemons (CNI, kube-proxy,
    DRA drivers, slurmd) whose CPUs and memory the site keeps out of Slurm's count. Every other pod
    that tolerates the managed-node taint is refused at admission, and one found running there
    without an allocation drains its node in Slurm."""

    daemonNamespaces: list[str] = Field(default_factory=lambda: ["kube-system"])
    # The operator drains a Slurm node where any other pod runs (operator/nodeguard/, docs/nodes.md).
    # false only where other pods share the bridge's nodes on purpose: a benchmark's baseline.
    drainNodes: bool = True

    @field_validator("daemonNamespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        return namespace_names(v)


class PreemptionConfig(_Model):
    """Preempted work comes back at its place (docs/colocation.md, "Preemption").

    ``returnToPlace``: a workload whose job Slurm preempts under ``PreemptMode=REQUEUE`` gets that
    job's place in the queue for its replacement (the bridge sets the preempted job's priority on
    the new job); ``maxReturns``: how many times in a row a workload comes back so, after which its
    replacement queues at the back (no workload holds the head of the queue by being preempted);
    ``returnWindowSeconds``: how soon after the preemption the replacement must come."""

    returnToPlace: bool = True
    maxReturns: int = Field(default=3, ge=0, le=100)
    returnWindowSeconds: int = Field(default=600, ge=10, le=86400)


Listen = Annotated[str, Field(description="host:port to listen on")]


class Config(_Model):
    """Bridge configuration (camelCase keys, as in the Go slurm-bridge's config file)."""

    schedulerName: str = "slurm-bridge"
    slurmRestApi: str = "http://127.0.0.1:6820"
    slurmJwtFile: Path = Path("/var/run/secrets/slurm-bridge/jwt")
    # Where slurmJwtFile comes from, named in every error about it (the chart: its Secret).
    slurmJwtSource: str = ""
    slurmUser: str = ""
    managedNamespaces: list[str] = Field(default_factory=list)
    managedNamespaceSelector: LabelSelector | None = None
    # How bridge jobs share nodes with other Slurm jobs, native ones included (docs/colocation.md):
    # "exclusive" (whole nodes), "timeShared" (the Go bridge's: pods share nodes among themselves
    # and take turns with native jobs, through Slurm's MCS label mcsLabel), "coResident" (core by
    # core and memory by memory beside native jobs; pods must have limits). A pod or workload may
    # name another with the annotation slurmjob.slinky.slurm.net/node-sharing.
    nodeSharing: Literal["exclusive", "timeShared", "coResident"] = "timeShared"
    # The MCS label of time-shared jobs (as the Go bridge's chart: "kubernetes"); not sent otherwise.
    mcsLabel: str = "kubernetes"
    partition: str = "slurm-bridge"
    # Identifies this bridge's jobs in Slurm, so several bridges can share one Slurm cluster.
    bridgeId: str = "slurm-bridge"
    pollPeriodSeconds: float = Field(default=1.0, gt=0, le=2.0)
    # Ask Slurm for an immediate allocation first (POST job/allocate, immediate) and queue the job
    # (job/submit) only when it cannot start now: pods start in milliseconds instead of after
    # Slurm's next scheduling pass. See bench/log for what a refused attempt costs.
    immediateAllocation: bool = True
    slurmRequestTimeoutSeconds: float = Field(default=10.0, gt=0)
    # Users (as the apiserver authenticates them) that may write the bridge's reserved keys.
    trustedUsers: list[str] = Field(default_factory=list)
    webhookListen: Listen = "0.0.0.0:9443"
    webhookCertFile: Path = Path("/etc/slurm-bridge/tls/tls.crt")
    webhookKeyFile: Path = Path("/etc/slurm-bridge/tls/tls.key")
    extenderListen: Listen = "0.0.0.0:8090"
    # When set, /healthz and /readyz are served here as well (and nothing else), so the kubelet can
    # probe an extender whose extenderListen is loopback only.
    extenderHealthListen: str = ""
    operatorHealthListen: Listen = "0.0.0.0:8080"
    operatorWorkers: int = Field(default=64, ge=1, le=256)
    # Bridge-made Slurm jobs whose PlaceholderJob is gone are cancelled once older than this.
    orphanGraceSeconds: float = Field(default=30.0, ge=0)
    # An allocation whose released pods kube-scheduler has not bound this long after Slurm started
    # the job (a node whose kubelet offers less than Slurm counts, a taint, ...) is released: the
    # PlaceholderJob ends Failed AllocationNotBound and its pods are ended (docs/design/managed-pods-and-nodes.md).
    bindTimeoutSeconds: float = Field(default=300.0, ge=5, le=86400)
    # New jobs leave out the nodes whose SlurmResourcesFit is False (translate.exclude_unfit). False
    # for a cluster whose Slurm counts more than its kubelets on purpose (a test bed, pods that
    # request less than their Slurm allocation); bindTimeoutSeconds still releases what cannot bind.
    excludeUnfitNodes: bool = True
    # The shared secret of slurmctld's hooks (slurm-hooks/slurm-bridge-notify.sh): when set, the
    # operator takes their notices of job starts and ends at POST /slurm/hook (docs/configuration.md).
    slurmHookTokenFile: Path | None = None
    # Take a notice that carries the secret itself (Authorization: Bearer, from a hook script older
    # than signing) rather than a signature: only while every slurmctld host's script is replaced.
    slurmHookAcceptBearer: bool = False
    # What a managed namespace that no TenantPolicy selects may do (docs/tenancy.md): "open" submits
    # its pods as today (annotations pass through, as in the Go slurm-bridge); "strict" refuses them.
    tenancy: Literal["open", "strict"] = "open"
    # Job fields only a Slurm operator may set (priority) that pods of a namespace no TenantPolicy
    # selects may still set (open mode). Empty: refused, since the bridge's token is an operator's
    # and Slurm would honour them (docs/security.md, "Job fields").
    untenantedOperatorFields: list[Literal["priority"]] = Field(default_factory=list)
    # Native work never starts under a live pod (docs/colocation.md, "The handoff").
    handoff: HandoffConfig = Field(default_factory=HandoffConfig)
    # The Slurm partitions that hold hybrid nodes (a slurmd beside the kubelet: native jobs use the
    # same GPUs). A pod asking nvidia.com/gpu or amd.com/gpu (a device plugin's GPUs) for a job in one
    # of them is refused, unless devicePluginFollowsSlurm says the site's device plugin hands out
    # exactly the GPUs Slurm allocated (docs/gpus.md, "Device-plugin GPUs on hybrid nodes").
    hybridPartitions: list[str] = Field(default_factory=list)
    devicePluginFollowsSlurm: bool = False
    # Kubernetes' other doors onto Slurm's nodes: who besides the bridge may run there.
    nodeGuard: NodeGuardConfig = Field(default_factory=NodeGuardConfig)
    # Preempted work comes back at its place (docs/colocation.md, "Preemption").
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)

    @field_validator("schedulerName", "bridgeId")
    @classmethod
    def _dns_label(cls, v: str) -> str:
        if not is_dns_label(v):
            raise ValueError(f"{v!r} is not a DNS label (lowercase letters, digits and '-', at most 63)")
        return v

    @field_validator("slurmRestApi")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+(/.*)?$", v):
            raise ValueError(f"{v!r} is not an http(s) URL such as http://slurmrestd:6820")
        return v.rstrip("/")

    @field_validator("managedNamespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        return namespace_names(v)

    @field_validator("webhookListen", "extenderListen", "extenderHealthListen", "operatorHealthListen")
    @classmethod
    def _listen(cls, v: str, info: ValidationInfo) -> str:
        if not v and info.field_name == "extenderHealthListen":
            return v  # optional
        m = _LISTEN.match(v)
        if not m or not 0 < int(m.group("port")) < 65536:
            raise ValueError(f"{v!r} is not host:port (for example 127.0.0.1:9443 or :9443)")
        return v

    @field_validator("mcsLabel")
    @classmethod
    def _mcs_label(cls, v: str) -> str:
        # Slurm keeps it in a job's record and matches it verbatim; its tools split on whitespace
        # and commas.
        if v and not re.fullmatch(r"[^\s,'\"\\]{1,200}", v):
            raise ValueError(
                f"{v!r} is not an MCS label: at most 200 characters, without whitespace, commas, quotes or backslashes"
            )
        return v

    @model_validator(mode="after")
    def _time_shared_needs_a_label(self) -> Config:
        if self.nodeSharing == "timeShared" and not self.mcsLabel:
            raise ValueError(
                "nodeSharing timeShared needs an mcsLabel (the MCS label that keeps native jobs off a node "
                'while pods hold it, e.g. "kubernetes"); set mcsLabel, or choose nodeSharing exclusive or '
                "coResident"
            )
        return self

    @property
    def namespace_selector(self) -> LabelSelector:
        """The namespaceSelector for webhook configurations: the label selector wins over the list."""
        if self.managedNamespaceSelector is not None and not self.managedNamespaceSelector.is_empty():
            return self.managedNamespaceSelector
        return LabelSelector(
            matchExpressions=[
                LabelSelectorRequirement(
                    key="kubernetes.io/metadata.name", operator="In", values=self.managedNamespaces or ["-"]
                )
            ]
        )

    def is_managed_namespace(self, name: str, labels: dict[str, str]) -> bool:
        if self.managedNamespaceSelector is not None and not self.managedNamespaceSelector.is_empty():
            return self.managedNamespaceSelector.matches(labels)
        return name in self.managedNamespaces


def split_listen(listen: str) -> tuple[str, int]:
    m = _LISTEN.match(listen)
    if not m:
        raise ConfigError(f"{listen!r} is not host:port")
    host = m.group("host").strip("[]") or "0.0.0.0"
    return host, int(m.group("port"))


def parse_config(data: Any, source: str = "config") -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key (check its spelling; see docs/configuration.md)"
            lines.append(f"{source}: {key}: {msg}")
        raise ConfigError("\n".join(lines)) from None


def load_config(path: str | Path | None) -> Config:
    """Read and validate the YAML file; ``None`` gives the defaults."""
    if path is None:
        return Config()
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    return parse_config(data, str(p))
