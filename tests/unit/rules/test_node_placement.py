"""A pod's nodeSelector and node affinity -> Slurm required/excluded nodes and feature constraints,
and the refusal of every placement rule Slurm cannot honour (slurm_bridge/rules/nodeplacement.py)."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.rules.nodeplacement import Placement, parse_placement, placement_problems, pod_placement
from slurm_bridge.rules.slurmconstraints import combine_constraints

pytestmark = pytest.mark.unit

JSON = dict[str, Any]
HOST = names.LABEL_HOSTNAME
SLURM_NAME = names.LABEL_SLURM_NODENAME
F = names.LABEL_NODE_FEATURE_PREFIX
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
TERMS = f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"


def expr(key: str, operator: str, *values: str) -> JSON:
    e: JSON = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    return e


def term(*exprs: JSON, fields: list[JSON] | None = None) -> JSON:
    t: JSON = {}
    if exprs:
        t["matchExpressions"] = list(exprs)
    if fields is not None:
        t["matchFields"] = fields
    return t


def required(*terms: JSON, selector: dict[str, str] | None = None) -> JSON:
    spec: JSON = {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}}
    if selector is not None:
        spec["nodeSelector"] = selector
    return spec


# --- what translates --------------------------------------------------------------------------

TRANSLATED: list[tuple[str, JSON, frozenset[str] | None, frozenset[str], str | None]] = [
    # (case, pod spec, nodes, excluded, constraint)
    ("nothing", {}, None, frozenset(), None),
    ("empty objects change nothing", {"affinity": {"podAffinity": {}, "nodeAffinity": {}}}, None, frozenset(), None),
    ("nodeSelector hostname", {"nodeSelector": {HOST: "n1"}}, frozenset({"n1"}), frozenset(), None),
    ("nodeSelector slurm node name", {"nodeSelector": {SLURM_NAME: "sn-7"}}, frozenset({"sn-7"}), frozenset(), None),
    ("hostname In", required(term(expr(HOST, "In", "a"))), frozenset({"a"}), frozenset(), None),
    ("hostname NotIn", required(term(expr(HOST, "NotIn", "a", "b"))), None, frozenset({"a", "b"}), None),
    (
        "metadata.name field (DaemonSet pods)",
        required(term(fields=[expr("metadata.name", "In", "n3")])),
        frozenset({"n3"}),
        frozenset(),
        None,
    ),
    (
        "In and NotIn in one term: the list shrinks",
        required(term(expr(HOST, "In", "a", "b"), expr(HOST, "NotIn", "b"))),
        frozenset({"a"}),
        frozenset(),
        None,
    ),
    (
        "nodeSelector AND the term",
        required(term(expr(HOST, "In", "a", "b")), selector={HOST: "a"}),
        frozenset({"a"}),
        frozenset(),
        None,
    ),
    (
        "both node name labels intersect",
        required(term(expr(SLURM_NAME, "In", "a", "b"), expr(HOST, "In", "b", "c"))),
        frozenset({"b"}),
        frozenset(),
        None,
    ),
    ("feature nodeSelector", {"nodeSelector": {F + "gpu": "true"}}, None, frozenset(), "gpu"),
    (
        "features In true and Exists are ANDed",
        required(term(expr(F + "gpu", "In", "true"), expr(F + "ib", "Exists"))),
        None,
        frozenset(),
        "gpu&ib",
    ),
    (
        "terms with one feature each are ORed",
        required(term(expr(F + "gpu", "Exists")), term(expr(F + "a100", "Exists"))),
        None,
        frozenset(),
        "a100|gpu",
    ),
    (
        "terms with feature sets are ORed in parentheses",
        required(term(expr(F + "gpu", "Exists")), term(expr(F + "a100", "Exists"), expr(F + "ib", "Exists"))),
        None,
        frozenset(),
        "gpu|(a100&ib)",
    ),
    (
        "a shared feature is factored out",
        required(term(expr(F + "gpu", "Exists")), term(expr(F + "a100", "Exists")), selector={F + "x": "true"}),
        None,
        frozenset(),
        "x&(a100|gpu)",
    ),
    (
        "a term absorbs a stricter one",
        required(term(expr(F + "gpu", "Exists")), term(expr(F + "gpu", "Exists"), expr(F + "ib", "Exists"))),
        None,
        frozenset(),
        "gpu",
    ),
    (
        "terms that differ only in In lists join them",
        required(
            term(expr(HOST, "In", "a"), expr(F + "g", "Exists")),
            term(expr(HOST, "In", "b"), expr(F + "g", "Exists")),
        ),
        frozenset({"a", "b"}),
        frozenset(),
        "g",
    ),
    (
        "terms with the same nodes OR their features",
        required(
            term(expr(HOST, "In", "a"), expr(F + "gpu", "Exists")),
            term(expr(HOST, "In", "a"), expr(F + "ib", "Exists")),
        ),
        frozenset({"a"}),
        frozenset(),
        "gpu|ib",
    ),
    (
        "identical terms",
        required(term(expr(HOST, "NotIn", "x")), term(expr(HOST, "NotIn", "x"))),
        None,
        frozenset({"x"}),
        None,
    ),
    (
        "a term that matches no node drops out of the OR",
        required(term(expr(HOST, "In", "a"), expr(HOST, "NotIn", "a")), term(expr(F + "gpu", "Exists"))),
        None,
        frozenset(),
        "gpu",
    ),
    (
        "excluded nodes and features together",
        required(term(expr(HOST, "NotIn", "bad"), expr(F + "gpu", "Exists"))),
        None,
        frozenset({"bad"}),
        "gpu",
    ),
]


@pytest.mark.parametrize(
    ("spec", "nodes", "excluded", "constraint"), [c[1:] for c in TRANSLATED], ids=[c[0] for c in TRANSLATED]
)
def test_translated(spec: JSON, nodes: frozenset[str] | None, excluded: frozenset[str], constraint: str | None) -> None:
    placement, problems = parse_placement(spec)
    assert problems == []
    assert (placement.nodes, placement.excluded, placement.constraint()) == (nodes, excluded, constraint)
    assert pod_placement(spec) == placement


# --- what is refused --------------------------------------------------------------------------

REFUSED: list[tuple[str, JSON, list[str]]] = [
    # (case, pod spec, words in the one problem)
    (
        "topology spread",
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
        ["spec.topologySpreadConstraints", "not be honoured", names.ANN_CONSTRAINTS],
    ),
    (
        "pod affinity",
        {"affinity": {"podAffinity": {REQUIRED: [{"topologyKey": HOST}]}}},
        ["spec.affinity.podAffinity", "gang", F + "<feature>", names.ANN_CONSTRAINTS],
    ),
    (
        "preferred pod affinity",
        {"affinity": {"podAffinity": {PREFERRED: [{"weight": 1}]}}},
        ["spec.affinity.podAffinity"],
    ),
    (
        "pod anti-affinity",
        {"affinity": {"podAntiAffinity": {REQUIRED: [{"topologyKey": HOST}]}}},
        ["spec.affinity.podAntiAffinity", "a node of its own", names.ANN_EXCLUSIVE],
    ),
    (
        "preferred node affinity",
        {"affinity": {"nodeAffinity": {PREFERRED: [{"weight": 1, "preference": term(expr(HOST, "In", "a"))}]}}},
        [f"spec.affinity.nodeAffinity.{PREFERRED}", "silently ignored", REQUIRED],
    ),
    (
        "unknown label in nodeSelector",
        {"nodeSelector": {"topology.kubernetes.io/zone": "z1"}},
        [
            'spec.nodeSelector["topology.kubernetes.io/zone"]',
            "no Slurm equivalent",
            HOST,
            SLURM_NAME,
            F + "<feature>",
            names.ANN_CONSTRAINTS,
        ],
    ),
    (
        "unknown label in a term",
        required(term(expr("topology.kubernetes.io/zone", "In", "z1"))),
        [f"{TERMS}[0].matchExpressions[0]", "topology.kubernetes.io/zone"],
    ),
    (
        "unknown field",
        required(term(fields=[expr("spec.unschedulable", "In", "false")])),
        [f"{TERMS}[0].matchFields[0]", "node field spec.unschedulable"],
    ),
    ("hostname Exists", required(term(expr(HOST, "Exists"))), [f"{HOST} Exists", "not Exists", "In or NotIn"]),
    ("hostname Gt", required(term(expr(HOST, "Gt", "3"))), ["not Gt"]),
    ("hostname without values", required(term(expr(HOST, "In"))), ["expected one or more Slurm node names"]),
    (
        "hostname empty value",
        {"nodeSelector": {HOST: ""}},
        ['spec.nodeSelector["kubernetes.io/hostname"]', "node names"],
    ),
    (
        "feature NotIn",
        required(term(expr(F + "gpu", "NotIn", "true"))),
        ["but not exclude one", f'{F}<feature> In ["true"]'],
    ),
    ("feature DoesNotExist", required(term(expr(F + "gpu", "DoesNotExist"))), ["but not exclude one"]),
    (
        "feature In false",
        required(term(expr(F + "gpu", "In", "false"))),
        [f'{F}gpu In ["false"]', f'{F}gpu In ["true"]'],
    ),
    ("feature In true and more", required(term(expr(F + "gpu", "In", "true", "yes"))), ['In ["true"]']),
    ("feature nodeSelector yes", {"nodeSelector": {F + "gpu": "yes"}}, [f'spec.nodeSelector["{F}gpu"]', '"true"']),
    ("feature Gt", required(term(expr(F + "gpu", "Gt", "1"))), ["Exists"]),
    (
        "terms that differ in nodes and features",
        required(term(expr(HOST, "In", "a")), term(expr(F + "gpu", "Exists"))),
        [TERMS, "ORs these 2 terms", "one term"],
    ),
    (
        "terms that differ in nodes and excluded nodes",
        required(term(expr(HOST, "In", "a")), term(expr(HOST, "NotIn", "b"))),
        ["ORs these 2 terms"],
    ),
    ("no terms", required(), [TERMS, "at least one term"]),
    ("an empty term matches no node", required(term()), ["spec: no node satisfies"]),
    ("In and NotIn of the same node", required(term(expr(HOST, "In", "a"), expr(HOST, "NotIn", "a"))), ["no node"]),
    ("nodeSelector and affinity disagree", required(term(expr(HOST, "In", "b")), selector={HOST: "a"}), ["no node"]),
    (
        "too many feature alternatives",
        required(*(term(expr(F + f"f{i}", "Exists")) for i in range(33))),
        ["33 alternatives", "at most 32", names.ANN_CONSTRAINTS],
    ),
    ("affinity not an object", {"affinity": "x"}, ["spec.affinity: expected an object"]),
    ("nodeSelector not a map", {"nodeSelector": ["a"]}, ["spec.nodeSelector: expected a map"]),
    ("term not an object", required("x"), [f"{TERMS}[0]: expected an object"]),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("spec", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused(spec: JSON, words: list[str]) -> None:
    problems = placement_problems(spec)
    assert len(problems) == 1, problems
    for w in words:
        assert w in problems[0]
    with pytest.raises(ValueError) as info:
        pod_placement(spec)
    assert str(info.value) == problems[0]


def test_every_problem_is_reported_under_the_given_location() -> None:
    spec = {
        "topologySpreadConstraints": [{"maxSkew": 1}],
        "affinity": {"podAntiAffinity": {REQUIRED: [{}]}, "nodeAffinity": {PREFERRED: [{"weight": 1}]}},
        "nodeSelector": {"disk": "ssd", F + "gpu": "no"},
    }
    problems = placement_problems(spec, "spec.template.spec")
    assert [p.split(":")[0].split(" (")[0] for p in problems] == [
        "spec.template.spec.topologySpreadConstraints",
        "spec.template.spec.affinity.podAntiAffinity",
        f"spec.template.spec.affinity.nodeAffinity.{PREFERRED}",
        'spec.template.spec.nodeSelector["disk"]',
        f'spec.template.spec.nodeSelector["{F}gpu"]',
    ]
    with pytest.raises(ValueError) as info:
        pod_placement(spec, "spec.template.spec")
    assert str(info.value) == "; ".join(problems)


def test_the_spec_is_not_modified() -> None:
    spec = required(term(expr(HOST, "In", "a")), selector={F + "gpu": "true"})
    before = repr(spec)
    pod_placement(spec)
    assert repr(spec) == before


# --- placements of several pods ---------------------------------------------------------------


def test_intersection() -> None:
    a = Placement.of(nodes=["a", "b", "c"], features=(frozenset({"gpu"}),))
    b = Placement.of(nodes=["b", "c", "d"], excluded=["c"], features=(frozenset({"ib"}), frozenset({"a100"})))
    both = a & b
    assert both.nodes == frozenset({"b"})
    assert both.excluded == frozenset()
    assert both.constraint() == "gpu&(a100|ib)"
    assert (a & Placement()) == a and (Placement() & a) == a and (a & a) == a


def test_excluded_nodes_add_up_and_shorten_a_node_list() -> None:
    x = Placement.of(excluded=["x"])
    y = Placement.of(excluded=["y"])
    assert (x & y).excluded == frozenset({"x", "y"})
    listed = Placement.of(nodes=["x", "z"]) & x
    assert (listed.nodes, listed.excluded) == (frozenset({"z"}), frozenset())


def test_disjoint_node_lists_leave_no_node() -> None:
    assert (Placement.of(nodes=["a"]) & Placement.of(nodes=["b"])).impossible
    assert not Placement().impossible


# --- combining with the constraints annotation ------------------------------------------------


@pytest.mark.parametrize(
    ("given", "features", "combined"),
    [
        (None, None, None),
        ("a100", None, "a100"),
        (None, "gpu", "gpu"),
        ("a100&ib", "gpu", "a100&ib&gpu"),
        ("a100,ib", "gpu&x", "a100,ib&gpu&x"),
        ("a|b", "gpu", "(a|b)&gpu"),
        ("a", "x|y", "a&(x|y)"),
        ("a|b", "x|y", "(a|b)&(x|y)"),
        ("[rack1|rack2]", "gpu", "[rack1|rack2]&gpu"),
        ("(a|b)&c", "x&(y|z)", "(a|b)&c&x&(y|z)"),
        ("knl*2", "gpu", "knl*2&gpu"),
    ],
)
def test_combine_constraints(given: str | None, features: str | None, combined: str | None) -> None:
    assert combine_constraints(given, features) == combined


@pytest.mark.parametrize(("given", "features"), [("(a|b)|c", "gpu"), ("[r1|r2]|c", "gpu"), ("a|b", "(x&y)|z")])
def test_combine_constraints_refuses_nested_parentheses(given: str, features: str) -> None:
    with pytest.raises(ValueError) as info:
        combine_constraints(given, features)
    message = str(info.value)
    assert names.ANN_CONSTRAINTS in message and "nesting parentheses" in message
    assert "write the whole condition in the annotation" in message


def test_linux_nodes_need_no_slurm_constraint() -> None:
    """kubernetes.io/os: linux (set by many charts) is every Slurm node; another OS is not."""
    assert placement_problems({"nodeSelector": {"kubernetes.io/os": "linux"}}) == []
    assert pod_placement({"nodeSelector": {"kubernetes.io/os": "linux"}}) == Placement()
    assert placement_problems({"nodeSelector": {"kubernetes.io/os": "windows"}})
