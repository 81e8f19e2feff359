"""A pod's required node placement, in Slurm's terms: required and excluded nodes, node features.

Slurm, not kube-scheduler, chooses the node of a managed pod, but kube-scheduler still checks the
pod's ``nodeSelector`` and node affinity against the one node Slurm allocated. A requirement that
Slurm was not told about therefore leaves the pod Pending for ever on a node it does not fit, and
a preference (or a spread, or a pod (anti-)affinity) is silently ignored. So only what translates
*exactly* is accepted, and everything else is refused with a message that names the field and
says what to use instead: at admission (``placement_problems``) and again when the operator builds
the job (``pod_placement``), so a pod that reached the bridge another way is not placed wrongly.

The mapping (docs/annotations.md, "Placement: nodeSelector and node affinity"):

- ``kubernetes.io/hostname``, ``slinky.slurm.net/slurm-nodename`` and the field ``metadata.name``
  hold Slurm node names: ``In`` -> the pod runs on one of them, ``NotIn`` -> never on them;
- ``feature.slinky.slurm.net/<feature>`` with value ``"true"`` (or ``Exists``) -> the Slurm
  node feature ``<feature>``, ANDed within a term and ORed across terms;
- ``kubernetes.io/os`` ``In`` a list with ``linux`` needs nothing: Slurm nodes are Linux nodes, and
  many charts put ``kubernetes.io/os: linux`` on every pod;
- any other key, and every other operator, is refused.

Everything here is pure: callers pass pod specs as the dicts the Kubernetes API returns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slurm_bridge import names

__all__ = [
    "NODE_NAME_LABELS",
    "Placement",
    "parse_placement",
    "placement_problems",
    "pod_placement",
]

# Label keys whose values are Slurm node names. The bridge binds a pod to the Kubernetes node
# named like its Slurm node, so the hostname label (the node's name) is a Slurm node name too.
NODE_NAME_LABELS: Final = (names.LABEL_HOSTNAME, names.LABEL_SLURM_NODENAME)
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
_FEATURE_LABEL: Final = names.LABEL_NODE_FEATURE_PREFIX + "<feature>"
# An OR of more feature sets than this is not a placement anyone means, and its constraint is long.
_MAX_TERMS: Final = 32

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# A label's name part; none of its characters is a Slurm constraint operator.
_FEATURE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")

# Node features as an OR of AND-sets (disjunctive normal form): (frozenset(),) needs nothing.
Features = tuple[frozenset[str], ...]
_NO_FEATURES: Final[Features] = (frozenset(),)


def _simplify(terms: Iterable[frozenset[str]]) -> Features:
    """Canonical DNF: duplicates and absorbed sets dropped (a | a&b == a), in a stable order."""
    unique = set(terms)
    kept = [t for t in unique if not any(other < t for other in unique)]
    return tuple(sorted(kept, key=lambda t: (len(t), sorted(t))))


def _features_and(a: Features, b: Features) -> Features:
    return _simplify(x | y for x in a for y in b)


def _features_or(a: Features, b: Features) -> Features:
    return _simplify((*a, *b))


@dataclass(frozen=True)
class Placement:
    """Where a pod may run: on one of ``nodes`` (None: any node), never on ``excluded``, and only
    on a node with every feature of at least one set in ``features``.

    Build it with :meth:`of`, which drops excluded names from ``nodes`` so that equal placements
    compare equal; ``nodes`` empty means no node at all.
    """

    nodes: frozenset[str] | None = None
    excluded: frozenset[str] = frozenset()
    features: Features = _NO_FEATURES

    @classmethod
    def of(
        cls,
        nodes: Iterable[str] | None = None,
        excluded: Iterable[str] = (),
        features: Features = _NO_FEATURES,
    ) -> Placement:
        out = frozenset(excluded)
        if nodes is None:
            return cls(None, out, features)
        # With a node list, the excluded names only shorten it; nothing else is ever allocated.
        return cls(frozenset(nodes) - out, frozenset(), features)

    def __and__(self, other: Placement) -> Placement:
        """Both placements at once: what every node of a job shared by two pods must satisfy."""
        if self == other:  # the common case: the pods of one template
            return self
        if self.nodes is None or other.nodes is None:
            nodes = self.nodes if other.nodes is None else other.nodes
        else:
            nodes = self.nodes & other.nodes
        return Placement.of(nodes, self.excluded | other.excluded, _features_and(self.features, other.features))

    @property
    def impossible(self) -> bool:
        return self.nodes is not None and not self.nodes

    def constraint(self) -> str | None:
        """The features as a Slurm constraint expression, None when no feature is needed.

        One set is ``a&b``; sets that share features and differ by one each are ``x&(a|b)``;
        other sets are ORed, each set of two or more in parentheses (``(a&b)|c``). One level of
        parentheses, as Slurm allows, and placed so that the meaning does not depend on whether
        Slurm reads ``&`` and ``|`` left to right or AND first.
        """
        if self.features == _NO_FEATURES:
            return None
        if len(self.features) == 1:
            return "&".join(sorted(self.features[0]))
        common = frozenset.intersection(*self.features)
        rest = [t - common for t in self.features]
        if common and all(len(t) == 1 for t in rest):
            return "&".join(sorted(common)) + "&(" + "|".join(sorted(next(iter(t)) for t in rest)) + ")"
        return "|".join(f"({'&'.join(sorted(t))})" if len(t) > 1 else next(iter(t)) for t in self.features)


# --- one requirement --------------------------------------------------------------------------


def _show(key: str, operator: str, values: Sequence[str]) -> str:
    return f"{key} {operator}" + (f" {json.dumps(list(values))}" if values else "")


def _unknown_key(where: str, key: str, what: str = "node label") -> str:
    return (
        f"{where}: {what} {key} has no Slurm equivalent, so Slurm could allocate a node without it "
        f"and the pod would never start there; select nodes by {names.LABEL_HOSTNAME} or "
        f"{names.LABEL_SLURM_NODENAME} (Slurm node names), or by a node feature label {_FEATURE_LABEL} "
        f'("true" on the nodes that have that Slurm feature), or remove it and use the '
        f"{names.ANN_CONSTRAINTS} annotation"
    )


def _node_names(where: str, key: str, operator: str, values: Sequence[str], problems: list[str]) -> Placement | None:
    shown = _show(key, operator, values)
    if operator not in ("In", "NotIn"):
        problems.append(
            f"{where} ({shown}): Slurm can only require a node (In) or exclude one (NotIn), not {operator}; "
            "use In or NotIn with Slurm node names"
        )
        return None
    bad = [v for v in values if not _NODE.fullmatch(v)]
    if not values or bad:
        problems.append(f"{where} ({shown}): expected one or more Slurm node names, e.g. {json.dumps(['node-1'])}")
        return None
    return Placement.of(nodes=values) if operator == "In" else Placement.of(excluded=values)


def _feature(where: str, key: str, operator: str, values: Sequence[str], problems: list[str]) -> Placement | None:
    shown = _show(key, operator, values)
    feature = key.removeprefix(names.LABEL_NODE_FEATURE_PREFIX)
    if not _FEATURE.fullmatch(feature):
        problems.append(f"{where} ({shown}): {feature!r} is not a feature name; expected {_FEATURE_LABEL}")
        return None
    if operator == "Exists" or (operator == "In" and set(values) == {"true"}):
        return Placement.of(features=(frozenset({feature}),))
    if operator in ("NotIn", "DoesNotExist"):
        problems.append(
            f"{where} ({shown}): Slurm constraints can require a node feature but not exclude one; require "
            f'a feature the wanted nodes have instead ({_FEATURE_LABEL} In ["true"], or Exists)'
        )
    else:
        problems.append(
            f'{where} ({shown}): a node feature label is "true" on the nodes with that Slurm feature and absent '
            f'elsewhere; use {key} In ["true"] (or "true" in a nodeSelector), or Exists'
        )
    return None


def _requirement(
    where: str, key: str, operator: str, values: Sequence[str], problems: list[str], *, field: bool = False
) -> Placement | None:
    """One label (or field) requirement; None, with a problem recorded, when it cannot be expressed."""
    if field:
        if key == names.FIELD_NODE_NAME:
            return _node_names(where, key, operator, values, problems)
        problems.append(_unknown_key(where, key, "node field"))
        return None
    if key in NODE_NAME_LABELS:
        return _node_names(where, key, operator, values, problems)
    if key == names.LABEL_OS and operator == "In" and "linux" in values:
        return Placement()  # every Slurm node runs Linux
    if key.startswith(names.LABEL_NODE_FEATURE_PREFIX):
        return _feature(where, key, operator, values, problems)
    problems.append(_unknown_key(where, key))
    return None


# --- terms and the pod spec -------------------------------------------------------------------


def _term(term: Any, where: str, problems: list[str]) -> Placement | None:
    """One nodeSelectorTerm: its requirements ANDed. None when a requirement cannot be expressed."""
    if not isinstance(term, Mapping):
        problems.append(f"{where}: expected an object with matchExpressions or matchFields")
        return None
    placement: Placement | None = Placement()
    count = 0
    for part, is_field in (("matchExpressions", False), ("matchFields", True)):
        for i, req in enumerate(term.get(part) or []):
            count += 1
            at = f"{where}.{part}[{i}]"
            if not isinstance(req, Mapping):
                problems.append(f"{at}: expected an object with key, operator and values")
                placement = None
                continue
            values = [str(v) for v in req.get("values") or []]
            p = _requirement(
                at, str(req.get("key", "")), str(req.get("operator", "")), values, problems, field=is_field
            )
            placement = None if p is None or placement is None else placement & p
    if count == 0:
        return Placement.of(nodes=())  # Kubernetes: an empty term matches no node
    return placement


def _either(terms: Sequence[Placement]) -> Placement | None:
    """The OR of nodeSelectorTerms, when Slurm can express it exactly; None otherwise.

    Terms that agree on their nodes OR their features; terms that agree on excluded nodes and
    features join their node lists. A mix of the two (node list or features) has no Slurm form.
    """
    distinct = list(dict.fromkeys(t for t in terms if not t.impossible))
    if not distinct:
        return Placement.of(nodes=())
    first = distinct[0]
    if all((t.nodes, t.excluded) == (first.nodes, first.excluded) for t in distinct):
        features = first.features
        for t in distinct[1:]:
            features = _features_or(features, t.features)
        return Placement.of(first.nodes, first.excluded, features)
    if all((t.excluded, t.features) == (first.excluded, first.features) for t in distinct):
        lists = [t.nodes for t in distinct]
        nodes = None if any(n is None for n in lists) else frozenset().union(*(n for n in lists if n is not None))
        return Placement.of(nodes, first.excluded, first.features)
    return None


def _has_terms(value: Any) -> bool:
    """Whether a pod (anti-)affinity says anything: empty objects and lists change nothing."""
    return isinstance(value, Mapping) and any(bool(v) for v in value.values())


def _refused_fields(spec: Mapping[str, Any], where: str, problems: list[str]) -> Mapping[str, Any]:
    """Record the spread, pod (anti-)affinity and preferences Slurm would ignore; the node affinity
    (empty when malformed), whose requirements are read next."""
    if spec.get("topologySpreadConstraints"):
        problems.append(
            f"{where}.topologySpreadConstraints: Slurm allocates the nodes and knows nothing of Kubernetes "
            "topology domains, so the spread would not be honoured; remove it, and steer where Slurm places "
            f'the job with the {names.ANN_CONSTRAINTS} annotation (e.g. "[rack1|rack2]": all nodes in one rack)'
        )
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, Mapping):
        problems.append(f"{where}.affinity: expected an object")
        affinity = {}
    if _has_terms(affinity.get("podAffinity")):
        problems.append(
            f"{where}.affinity.podAffinity: Slurm allocates nodes without knowing where other pods run, so this "
            "would not be honoured; remove it, and run pods that belong together as one gang (a JobSet, a "
            "LeaderWorkerSet group or a PodGroup become one Slurm job), or select nodes by a node feature "
            f"label {_FEATURE_LABEL} or the {names.ANN_CONSTRAINTS} annotation"
        )
    if _has_terms(affinity.get("podAntiAffinity")):
        problems.append(
            f"{where}.affinity.podAntiAffinity: Slurm allocates nodes without knowing where other pods run, so "
            "this would not be honoured; remove it: each pod of a job already gets a node of its own, and "
            f'{names.ANN_EXCLUSIVE}: "true" keeps other Slurm jobs off its nodes'
        )
    node_affinity = affinity.get("nodeAffinity") or {}
    if not isinstance(node_affinity, Mapping):
        problems.append(f"{where}.affinity.nodeAffinity: expected an object")
        node_affinity = {}
    if node_affinity.get(_PREFERRED):
        problems.append(
            f"{where}.affinity.nodeAffinity.{_PREFERRED}: Slurm chooses the node, so a preference would be "
            f"silently ignored; make it a requirement ({_REQUIRED}) or remove it"
        )
    return node_affinity


def _node_selector(spec: Mapping[str, Any], where: str, problems: list[str]) -> Placement | None:
    """The nodeSelector's labels ANDed; None when one cannot be expressed."""
    placement: Placement | None = Placement()
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        problems.append(f"{where}.nodeSelector: expected a map of node labels to values")
        selector = {}
    for key in sorted(selector):
        p = _requirement(f"{where}.nodeSelector[{json.dumps(key)}]", str(key), "In", [str(selector[key])], problems)
        placement = None if p is None or placement is None else placement & p
    return placement


def _required_terms(required: Any, where: str, problems: list[str]) -> Placement | None:
    """The required node affinity's nodeSelectorTerms ORed; None when Slurm cannot express them."""
    at = f"{where}.affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        problems.append(f"{at}: expected at least one term")
        return None
    parsed = [_term(t, f"{at}[{i}]", problems) for i, t in enumerate(terms)]
    if any(p is None for p in parsed):
        return None
    either = _either([p for p in parsed if p is not None])
    if either is None:
        problems.append(
            f"{at}: Kubernetes ORs these {len(terms)} terms, but they differ in node names and in other "
            "requirements at once, and Slurm has no OR between a node list and anything else; use one "
            "term, or terms that differ only in node features, or only in their In node lists"
        )
    return either


def _whole_problems(placement: Placement, where: str) -> list[str]:
    """What is wrong with the placement as a whole: no node at all, or too many feature sets."""
    if placement.impossible:
        return [
            f"{where}: no node satisfies the nodeSelector and required node affinity together (empty terms, "
            "or In and NotIn that leave no node name), so the pod could never run; fix the node selection"
        ]
    if len(placement.features) > _MAX_TERMS:
        return [
            f"{where}.affinity.nodeAffinity.{_REQUIRED}: the node feature requirements expand to "
            f"{len(placement.features)} alternatives (at most {_MAX_TERMS}); write them as one "
            f"{names.ANN_CONSTRAINTS} annotation instead"
        ]
    return []


def parse_placement(spec: Mapping[str, Any], where: str = "spec") -> tuple[Placement, list[str]]:
    """The pod spec's required placement and every problem with it, each naming its field under
    ``where``. The placement is only meaningful when there is no problem."""
    problems: list[str] = []
    node_affinity = _refused_fields(spec, where, problems)
    placement = _node_selector(spec, where, problems)
    required = node_affinity.get(_REQUIRED)
    if required is not None:
        either = _required_terms(required, where, problems)
        placement = None if either is None or placement is None else placement & either
    if placement is not None:
        problems.extend(_whole_problems(placement, where))
    return placement or Placement(), problems


def placement_problems(spec: Mapping[str, Any], where: str = "spec") -> list[str]:
    """Every placement field of a pod spec that Slurm cannot honour, each naming its field."""
    return parse_placement(spec, where)[1]


def pod_placement(spec: Mapping[str, Any], where: str = "spec") -> Placement:
    """The pod's required placement; ValueError listing every problem when Slurm cannot honour it."""
    placement, problems = parse_placement(spec, where)
    if problems:
        raise ValueError("; ".join(problems))
    return placement
