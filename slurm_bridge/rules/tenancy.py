"""Tenancy: which Slurm identity, accounts and limits a namespace's pods may use (pure rules).

A cluster-scoped ``TenantPolicy`` (crds/tenantpolicies.slinky.slurm.net.yaml, docs/tenancy.md)
selects namespaces by name or label and says whom their jobs run as, what they are charged to and
what they may ask for. The webhook refuses what is outside it, the operator checks again before
every submit and fills in the tenant's defaults. Everything here is a pure function of the
policies, the namespace and the request, so both apply exactly the same rules; the caches that
feed them are :mod:`slurm_bridge.kube.cache`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import LabelSelector
from slurm_bridge.slurm.models import JobRequest, NodeSharing

Mode = Literal["open", "strict"]
# A job field that Slurm honours only from an operator (root, SlurmUser, AdminLevel=Operator):
# the bridge's token is SlurmUser's, so the bridge refuses it for a tenant unless allowed.
OperatorField = Literal["priority"]
# The largest CPU count of a node in a job's partitions (a comma list; None: the bridge's default
# partition), from Slurm's node list; None when the operator cannot tell (not read yet, no node).
NodeCpus = Callable[[str | None], int | None]

# A Slurm name as the CRD's schema allows it (no whitespace, commas, quotes, backslashes, colons).
SLURM_NAME: Final = re.compile(r"""^[^\s,'"\\:\x00-\x1f\x7f]{1,64}$""")
# Violations listed in one message; the rest are counted.
MAX_LISTED: Final = 10


class _Model(BaseModel):
    # The API server prunes fields its schema does not know, so a newer policy still parses.
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class Identity(_Model):
    """A Slurm user or group, by name or by numeric id (exactly one)."""

    name: str | None = Field(default=None, pattern=SLURM_NAME.pattern)
    id: int | None = Field(default=None, ge=0, le=2**31 - 1)

    @model_validator(mode="after")
    def _one(self) -> Identity:
        if (self.name is None) == (self.id is None):
            raise ValueError("set exactly one of name and id")
        return self

    def __str__(self) -> str:
        return self.name if self.name is not None else str(self.id)


class Choice(_Model):
    """Accounts or QOS: the default a job gets when it asks for none, and those it may ask for."""

    default: str | None = Field(default=None, pattern=SLURM_NAME.pattern)
    allowed: tuple[str, ...] = Field(default=(), max_length=256)

    @model_validator(mode="after")
    def _default_allowed(self) -> Choice:
        if self.default is not None and self.allowed and self.default not in self.allowed:
            raise ValueError(f"default {self.default!r} is not in allowed {list(self.allowed)}")
        return self

    def permitted(self) -> tuple[str, ...]:
        """Every value allowed; empty means any."""
        if self.allowed:
            return self.allowed
        return (self.default,) if self.default is not None else ()


class Limits(_Model):
    maxNodes: int | None = Field(default=None, ge=1)
    maxCPUs: int | None = Field(default=None, ge=1)
    maxGPUs: int | None = Field(default=None, ge=0)
    maxTimeLimitMinutes: int | None = Field(default=None, ge=1)


class TenantPolicySpec(_Model):
    namespaces: tuple[str, ...] = Field(default=(), max_length=1024)
    namespaceSelector: LabelSelector | None = None
    user: Identity | None = None
    group: Identity | None = None
    accounts: Choice | None = None
    qos: Choice | None = None
    partitions: tuple[str, ...] = ()
    reservations: tuple[str, ...] = ()
    wckeys: tuple[str, ...] = ()
    limits: Limits | None = None
    # The node sharing modes a job may use (empty: any); docs/tenancy.md.
    nodeSharing: tuple[NodeSharing, ...] = Field(default=(), max_length=3)
    # Operator-only job fields the namespaces' jobs may set anyway (docs/security.md).
    allowedOperatorFields: tuple[OperatorField, ...] = Field(default=(), max_length=8)

    @model_validator(mode="after")
    def _group_with_user(self) -> TenantPolicySpec:
        # Slurm gives a job submitted for another user the *submitter's* group unless it names
        # one (checked on Slurm 26.05), so a tenant's jobs would run with the bridge's group.
        if self.user is not None and self.group is None:
            raise ValueError("set group too when user is set: without it Slurm runs the jobs with the bridge's group")
        return self

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if namespace in self.namespaces:
            return True
        return self.namespaceSelector is not None and self.namespaceSelector.matches(dict(labels))


@dataclass(frozen=True)
class TenantPolicy:
    """One policy object: its name and generation, and its spec (None when it does not parse)."""

    name: str
    spec: TenantPolicySpec | None
    generation: int = 0
    problem: str = ""  # why spec is None
    # spec.namespaces as written, so that a policy that does not parse still claims (and refuses)
    # the namespaces it names instead of leaving them open.
    raw_namespaces: tuple[str, ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> TenantPolicy:
        meta = objects.meta(obj)
        name, generation = str(meta.get("name", "")), int(meta.get("generation") or 0)
        spec = obj.get("spec") or {}
        try:
            return cls(name, TenantPolicySpec.model_validate(spec), generation)
        except ValidationError as e:
            where = "; ".join(f"spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
            raw = spec.get("namespaces") if isinstance(spec, Mapping) else None
            listed = tuple(str(n) for n in raw) if isinstance(raw, list) else ()
            return cls(name, None, generation, where, listed)


# ---- which policy a namespace has ------------------------------------------------------------
@dataclass(frozen=True)
class Match:
    """The namespace's policy; ``conflict`` names every policy when more than one selects it."""

    policy: TenantPolicy | None = None
    conflict: tuple[str, ...] = ()


def policy_for(namespace: str, labels: Mapping[str, str], policies: Iterable[TenantPolicy]) -> Match:
    """The one policy that selects the namespace (by name or by its labels), if any.

    A policy whose spec does not parse selects what its names list says, so that a broken
    policy refuses its namespaces rather than leaving them open.
    """
    found = []
    for p in policies:
        if p.spec is not None:
            if p.spec.selects(namespace, labels):
                found.append(p)
        elif namespace in p.raw_namespaces:
            found.append(p)
    found.sort(key=lambda p: p.name)
    if len(found) > 1:
        return Match(None, tuple(p.name for p in found))
    return Match(found[0] if found else None)


# ---- the rules ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Violation:
    """One value outside the policy, worded for the user who asked for it."""

    key: str  # the annotation key (or what the bridge derived the value from)
    value: str
    allowed: str
    policy: str

    def __str__(self) -> str:
        return f"{self.key}: {self.value!r} is not allowed by TenantPolicy {self.policy}: {self.allowed}"


# JobRequest field -> the annotation a user sets it with (what a violation names).
FIELD_KEYS: Final[Mapping[str, str]] = {
    "account": names.ANN_ACCOUNT,
    "qos": names.ANN_QOS,
    "partition": names.ANN_PARTITION,
    "reservation": names.ANN_RESERVATION,
    "wckey": names.ANN_WCKEY,
    "user_id": names.ANN_USER_ID,
    "user_name": names.ANN_USER_ID,
    "group_id": names.ANN_GROUP_ID,
    "group_name": names.ANN_GROUP_ID,
    "nodes": names.ANN_MIN_NODES,
    "max_nodes": names.ANN_MAX_NODES,
    "time_limit_minutes": names.ANN_TIMELIMIT,
    "gres": names.ANN_GRES,
    "priority": names.ANN_PRIORITY,
    "node_sharing": names.ANN_NODE_SHARING,
    "exclusive": names.ANN_EXCLUSIVE,
}
# Why each operator-only field is refused, for the message.
OPERATOR_FIELD_WHY: Final[Mapping[str, str]] = {
    "priority": (
        "Slurm keeps a job's submitted priority only from an operator, which the bridge's token is: it would "
        "put the job ahead of every other user's fair share"
    ),
}
_GPU = re.compile(r"^(?:gres/)?gpu(?::[^:,]*[^:,\d][^:,]*)?(?::(\d+))?$")


def _one_of(values: Iterable[str]) -> str:
    return "allowed: " + ", ".join(sorted(values))


def _identity_problem(
    kind: Literal["user", "group"], value: int | str, by_name: bool, allowed: Identity | None
) -> str | None:
    """Why a requested user or group is not the tenant's (None: it is)."""
    if allowed is None:
        who = "the bridge's own Slurm user" if kind == "user" else "the bridge's own Slurm group"
        return f"the policy sets no {kind}, so jobs run with {who}; leave the key out"
    if by_name:
        if allowed.name is not None and value == allowed.name:
            return None
    elif allowed.id is not None and value == allowed.id:
        return None
    if allowed.name is not None and not by_name:
        return (
            f"the policy names the {kind} {allowed.name!r}, which the bridge cannot compare with a numeric id; "
            "leave the key out (the tenant's is applied)"
        )
    return f"only the tenant's {kind} {allowed} (leave the key out to get it)"


def gpus_per_node(gres: str | None) -> int:
    """The ``gpu`` count of a TRES-per-node string such as ``gres/gpu:2,gres/shard:1``."""
    total = 0
    for item in filter(None, (gres or "").split(",")):
        m = _GPU.match(item.strip())
        if m:
            total += int(m.group(1) or 1)
    return total


def check(
    values: Mapping[str, object], policy: TenantPolicy, *, derived: bool = True, node_cpus: NodeCpus | None = None
) -> list[Violation]:
    """Every value of a job request (JobRequest field names -> values) outside the policy.

    ``values`` holds what was asked for: the annotations' values at admission, the whole request
    (with the defaults applied) at submit. ``derived``: caps on totals (CPUs, GPUs, nodes) are
    checked from ``nodes``, ``tasks_per_node``, ``cpus_per_task`` and ``gres`` only when the whole
    request is known. ``node_cpus``: an exclusive job holds whole nodes, so with it (the operator,
    which reads Slurm's nodes) such a job counts as its nodes' CPUs; without it (admission) only
    what its pods ask for is counted.
    """
    spec = policy.spec
    if spec is None:
        return [Violation("TenantPolicy", policy.name, f"the policy is invalid ({policy.problem})", policy.name)]
    out: list[Violation] = []

    def add(field_name: str, value: object, allowed: str) -> None:
        out.append(Violation(FIELD_KEYS.get(field_name, field_name), str(value), allowed, policy.name))

    for kind, id_field, name_field, allowed_id in (
        ("user", "user_id", "user_name", spec.user),
        ("group", "group_id", "group_name", spec.group),
    ):
        for fname, by_name in ((id_field, False), (name_field, True)):
            value = values.get(fname)
            if isinstance(value, int | str) and not isinstance(value, bool):
                why = _identity_problem(kind, value, by_name, allowed_id)  # type: ignore[arg-type]
                if why:
                    add(fname, value, why)
    for fname, choice in (("account", spec.accounts), ("qos", spec.qos)):
        value = values.get(fname)
        allowed = choice.permitted() if choice is not None else ()
        if isinstance(value, str) and allowed and value not in allowed:
            add(fname, value, _one_of(allowed))
    for fname, allowed in (("partition", spec.partitions), ("reservation", spec.reservations)):
        value = values.get(fname)
        if isinstance(value, str) and allowed:
            outside = [v for v in value.split(",") if v not in allowed]
            if outside:
                add(fname, value, _one_of(allowed))
    wckey = values.get("wckey")
    if isinstance(wckey, str) and spec.wckeys and wckey not in spec.wckeys:
        add("wckey", wckey, _one_of(spec.wckeys))
    out += operator_field_violations(values, spec.allowedOperatorFields, policy.name)
    sharing = job_sharing(values)
    if sharing is not None and spec.nodeSharing and sharing[1] not in spec.nodeSharing:
        modes = _one_of(spec.nodeSharing) + " (the annotation, or the bridge's nodeSharing when the job names none)"
        add(sharing[0], sharing[1], modes)
    if spec.limits is not None:
        out += _caps(values, spec.limits, policy.name, derived, node_cpus)
    return out


def operator_field_violations(
    values: Mapping[str, object], allowed: Iterable[str], policy: str | None
) -> list[Violation]:
    """The operator-only fields the job sets that ``allowed`` does not list (``policy``: the
    TenantPolicy's name; None: a namespace no policy selects, ruled by the config)."""
    where = (
        "the policy's allowedOperatorFields"
        if policy is not None
        else "the bridge's config untenantedOperatorFields (the namespace has no TenantPolicy)"
    )
    allow = set(allowed)
    return [
        Violation(
            FIELD_KEYS[f],
            str(values[f]),
            f"{why}; {where} does not list {f}: remove the annotation, or ask the cluster administrator to allow it",
            policy or "(none)",
        )
        for f, why in OPERATOR_FIELD_WHY.items()
        if values.get(f) is not None and f not in allow
    ]


def job_sharing(values: Mapping[str, object]) -> tuple[str, NodeSharing] | None:
    """(field, mode) of the job's node sharing where its values name one: ``node_sharing`` (the
    annotation, or the whole request's resolved mode), or ``exclusive: true`` (the Go bridge's key)."""
    mode = values.get("node_sharing")
    if mode == "exclusive" or mode == "timeShared" or mode == "coResident":
        return "node_sharing", mode
    if values.get("exclusive") is True:
        return "exclusive", "exclusive"
    return None


def _caps(
    values: Mapping[str, object], limits: Limits, policy: str, derived: bool, node_cpus: NodeCpus | None
) -> list[Violation]:
    out: list[Violation] = []

    def num(name: str, default: int | None = None) -> int | None:
        v = values.get(name, default)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    nodes, max_nodes = num("nodes"), num("max_nodes")
    most = max((n for n in (nodes, max_nodes) if n is not None), default=None)
    if limits.maxNodes is not None and most is not None and most > limits.maxNodes:
        key = "max_nodes" if max_nodes is not None and max_nodes == most else "nodes"
        what = "the job's nodes (one per pod, or min-nodes/max-nodes)"
        out.append(Violation(FIELD_KEYS[key], str(most), f"{what}: at most {limits.maxNodes}", policy))
    limit = values.get("time_limit_minutes")
    if limits.maxTimeLimitMinutes is not None and isinstance(limit, int) and limit > limits.maxTimeLimitMinutes:
        out.append(
            Violation(
                FIELD_KEYS["time_limit_minutes"],
                f"{limit} minutes",
                f"at most {limits.maxTimeLimitMinutes} minutes",
                policy,
            )
        )
    if not derived:
        return out
    job_nodes = most or 1
    if limits.maxCPUs is not None:
        out += _cpu_cap(values, limits.maxCPUs, job_nodes, policy, node_cpus)
    if limits.maxGPUs is not None:
        gres = values.get("gres")
        gpus = job_nodes * gpus_per_node(gres if isinstance(gres, str) else None)
        if gpus > limits.maxGPUs:
            out.append(
                Violation(
                    "gpus", f"{gpus} GPUs", f"the job's GPUs (nodes x GPUs per pod): at most {limits.maxGPUs}", policy
                )
            )
    return out


def _cpu_cap(
    values: Mapping[str, object], cap: int, job_nodes: int, policy: str, node_cpus: NodeCpus | None
) -> list[Violation]:
    """maxCPUs: nodes x the largest pod's CPUs; an exclusive job holds its nodes whole, so (where
    ``node_cpus`` can tell) nodes x the largest CPU count of a node it may get: Slurm allocates and
    charges it every CPU of each node, whatever its pods ask."""
    tasks, per_task = values.get("tasks_per_node", 1), values.get("cpus_per_task", 1)
    per_node = (tasks if isinstance(tasks, int) else 1) * (per_task if isinstance(per_task, int) else 1)
    what = "the job's CPUs (nodes x the largest pod's CPUs)"
    sharing = job_sharing(values)
    if node_cpus is not None and sharing is not None and sharing[1] == "exclusive":
        partition = values.get("partition")
        whole = node_cpus(partition if isinstance(partition, str) else None)
        if whole is not None and whole > per_node:
            per_node = whole
            what = (
                "an exclusive job holds whole nodes: nodes x the largest node's CPUs in its partitions "
                f"({whole}); ask for fewer nodes or another node-sharing mode"
            )
    cpus = job_nodes * per_node
    if cpus <= cap:
        return []
    return [Violation("cpus", f"{cpus} CPUs", f"{what}: at most {cap}", policy)]


def apply_defaults(request: JobRequest, policy: TenantPolicy) -> JobRequest:
    """The request with the tenant's user, group, default account and QOS, and the time limit cap,
    wherever the request leaves them unset."""
    spec = policy.spec
    if spec is None:
        return request
    update: dict[str, object] = {}
    for ident, id_field, name_field in ((spec.user, "user_id", "user_name"), (spec.group, "group_id", "group_name")):
        if ident is not None and getattr(request, id_field) is None and getattr(request, name_field) is None:
            update[name_field if ident.name is not None else id_field] = ident.name or ident.id
    if spec.accounts is not None and spec.accounts.default and request.account is None:
        update["account"] = spec.accounts.default
    if spec.qos is not None and spec.qos.default and request.qos is None:
        update["qos"] = spec.qos.default
    cap = spec.limits.maxTimeLimitMinutes if spec.limits else None
    if cap is not None and request.time_limit_minutes is None:
        update["time_limit_minutes"] = cap
    return request.model_copy(update=update) if update else request


# ---- the verdict for one job ----------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """What the policy says about one job: the request to submit (defaults applied), or why not.

    ``reason`` is empty when the job may go; ``waiting`` says the policies are not read yet.
    """

    request: JobRequest
    policy: str | None = None
    reason: str = ""
    problems: tuple[str, ...] = ()
    waiting: str = ""

    @property
    def allowed(self) -> bool:
        return not self.reason and not self.waiting

    @property
    def message(self) -> str:
        shown = list(self.problems[:MAX_LISTED])
        more = len(self.problems) - len(shown)
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def untenanted_message(v: Violation) -> str:
    """A refused operator-only field of a namespace no TenantPolicy selects."""
    return f"{v.key}: {v.value!r} is not allowed: {v.allowed}"


def no_policy_message(namespace: str) -> str:
    return (
        f"namespace {namespace} is selected by no TenantPolicy, and the bridge's tenancy mode is strict; "
        "ask the cluster administrator for a TenantPolicy that selects it"
    )


def conflict_message(namespace: str, policies: Iterable[str]) -> str:
    listed = ", ".join(policies)
    return (
        f"namespace {namespace} is selected by more than one TenantPolicy ({listed}); "
        "the administrator must change them so that exactly one selects it"
    )


def verdict(
    match: Match,
    namespace: str,
    request: JobRequest,
    mode: Mode,
    *,
    untenanted_fields: Iterable[str] = (),
    node_cpus: NodeCpus | None = None,
) -> Verdict:
    """The policy's verdict on a whole job request (the operator, before each submit or update).

    ``untenanted_fields``: the operator-only fields a namespace no policy selects may set (open
    mode; the config's untenantedOperatorFields). ``node_cpus``: see :func:`check`; while it cannot
    tell for an exclusive job under a CPU cap, the verdict waits (Slurm's nodes not read yet)."""
    if match.conflict:
        return Verdict(
            request, None, names.REASON_TENANT_POLICY_CONFLICT, (conflict_message(namespace, match.conflict),)
        )
    if match.policy is None:
        if mode == "strict":
            return Verdict(request, None, names.REASON_NO_TENANT_POLICY, (no_policy_message(namespace),))
        refused = operator_field_violations(request.model_dump(exclude_none=True), untenanted_fields, None)
        if refused:
            return Verdict(
                request, None, names.REASON_OPERATOR_FIELD_REFUSED, tuple(untenanted_message(v) for v in refused)
            )
        return Verdict(request)
    policy = match.policy
    full = apply_defaults(request, policy)
    values = full.model_dump(exclude_none=True)
    limits = policy.spec.limits if policy.spec is not None else None
    sharing = job_sharing(values)
    if node_cpus is not None and limits is not None and limits.maxCPUs is not None and sharing is not None:
        partition = full.partition
        if sharing[1] == "exclusive" and node_cpus(partition) is None:
            return Verdict(
                full, policy.name, waiting="Slurm's nodes are not read yet (an exclusive job's CPUs are its nodes')"
            )
    found = check(values, policy, node_cpus=node_cpus)
    if found:
        return Verdict(full, policy.name, names.REASON_TENANT_POLICY_VIOLATION, tuple(str(v) for v in found))
    return Verdict(full, policy.name)


@dataclass
class TenantIndex:
    """The policies and namespace labels a component has read, ready for lookups."""

    policies: list[TenantPolicy] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def build(cls, policies: Iterable[Mapping[str, Any]], namespaces: Iterable[Mapping[str, Any]]) -> TenantIndex:
        labels: dict[str, dict[str, str]] = {}
        for ns in namespaces:
            meta = objects.meta(ns)
            labels[str(meta.get("name", ""))] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        return cls([TenantPolicy.from_object(p) for p in policies], labels)

    def labels(self, namespace: str) -> dict[str, str]:
        # A namespace not read yet still has the label every namespace gets from the API server.
        return self.namespaces.get(namespace) or {"kubernetes.io/metadata.name": namespace}

    def match(self, namespace: str) -> Match:
        return policy_for(namespace, self.labels(namespace), self.policies)

    def selected(self, policy: TenantPolicy) -> list[str]:
        """Namespaces the policy selects, sorted."""
        if policy.spec is None:
            return []
        return sorted(n for n, labels in self.namespaces.items() if policy.spec.selects(n, labels))

    def conflicts(self, policy: TenantPolicy) -> dict[str, list[str]]:
        """Namespace -> the other policies that select it too."""
        out: dict[str, list[str]] = {}
        for ns in self.selected(policy):
            others = [
                p.name
                for p in self.policies
                if p.name != policy.name and p.spec and p.spec.selects(ns, self.namespaces[ns])
            ]
            if others:
                out[ns] = sorted(others)
        return out
