"""One home for every name, split by kind (issue 30 §4): ``slurm_bridge/names/`` holds each kind in
a module of its own and re-exports them all; every reason the bridge gives an Event or a condition
is a named constant there. Read from the sources with ``ast``:

- each call that carries a reason (an Event posted, an Event or a pod's end in a plan, a node's
  Event, a pod's wait for its group, a condition) is given no string literal for it;
- no reason's value is written as a literal anywhere else in the components.
"""

from __future__ import annotations

import ast
import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurm_bridge.names as names
from slurm_bridge.names import annotations as annotation_keys  # `annotations` is the __future__ feature here
from slurm_bridge.names import conditions, crd, finalizers, labels, prefixes, reasons, scheduling, slurm
from tests.packages import ROOT, package_dirs

pytestmark = pytest.mark.unit

KINDS: tuple[types.ModuleType, ...] = (  # every module of slurm_bridge/names/
    annotation_keys, conditions, crd, finalizers, labels, prefixes, reasons, scheduling, slurm,
)  # fmt: skip
NAMES_DIR = ROOT / "slurm_bridge" / "names"
# The calls that carry an Event's or a condition's reason, by the name they are called by, with the
# parameter that holds it (its position is read from the definition, so a signature change is
# followed): KubeClient.event, the plan's Event / TellPods / EndPods, the node controller's
# NodeEvent and the helper that makes them, GroupError (the pod's Event while its group waits),
# the membership's and the DRA binder's Warning Events, the conditions and the PodGroups'.
CARRIERS = frozenset({
    "event", "Event", "TellPods", "EndPods", "NodeEvent", "kube", "GroupError", "tell", "_tell", "set_condition",
    "set_condition_dicts", "terminal_status", "ReportPodGroup", "Verdict", "Condition", "TellGroup", "tell_group",
    "_settle",
})  # fmt: skip
CAMEL_CASE = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def public(module: types.ModuleType) -> set[str]:
    """The names a kind module defines itself (not those it imports from another kind)."""
    tree = ast.parse(Path(str(module.__file__)).read_text())
    out = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    for n in tree.body:
        target = n.targets[0] if isinstance(n, ast.Assign) else n.target if isinstance(n, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id.isupper():
            out.add(target.id)
    return out


def sources() -> Iterator[tuple[Path, ast.Module]]:
    """The components' modules, but for the names themselves."""
    for folder in package_dirs().values():
        for path in sorted(folder.rglob("*.py")):
            if not path.is_relative_to(NAMES_DIR):
                yield path, ast.parse(path.read_text(), str(path))


def reason_positions() -> dict[str, set[int]]:
    """Each carrier's positional index of its ``reason`` parameter, from its definitions."""
    found: dict[str, set[int]] = {}
    for _, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in CARRIERS:
                args = [a.arg for a in node.args.posonlyargs + node.args.args]
                if "reason" in args:
                    found.setdefault(node.name, set()).add(args.index("reason") - (args[:1] in (["self"], ["cls"])))
            elif isinstance(node, ast.ClassDef) and node.name in CARRIERS:
                init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
                fields = (
                    [a.arg for a in init.args.args][1:]
                    if init is not None
                    else [
                        s.target.id
                        for s in node.body
                        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    ]
                )
                if "reason" in fields:
                    found.setdefault(node.name, set()).add(fields.index("reason"))
    return found


def literal(expr: ast.expr) -> bool:
    """Whether a string is written out in ``expr`` (an empty one, "no reason", aside)."""
    return any(
        isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value)
        for n in ast.walk(expr)
    )


def test_the_package_reexports_every_name_of_every_kind_and_defines_none() -> None:
    by_kind = {m.__name__: public(m) for m in KINDS}
    assert set(names.__all__) == set().union(*by_kind.values())
    seen: dict[str, str] = {}
    for kind, defined in by_kind.items():
        for name in defined:
            assert name not in seen, f"{name} is defined in {seen.get(name)} and {kind}"
            seen[name] = kind
    own = {n for n in vars(names) if n.isupper()} - set(names.__all__)
    assert not own, f"names defined in slurm_bridge/names/__init__.py rather than in a module of their kind: {own}"
    modules = {p.stem for p in NAMES_DIR.glob("*.py")} - {"__init__"}
    assert modules == {m.__name__.rsplit(".", 1)[1] for m in KINDS}, "a kind module is not checked here"


def test_every_reason_is_camel_case_and_says_one_thing() -> None:
    values = {n: v for n, v in vars(reasons).items() if n.isupper() and isinstance(v, str)}
    assert values
    bad = {n: v for n, v in values.items() if not CAMEL_CASE.match(v) or len(v) > 128}
    assert not bad, f"reasons must be CamelCase (Kubernetes' convention): {bad}"
    twice = {v for v in values.values() if list(values.values()).count(v) > 1}
    assert not twice, f"reasons named twice: {twice}"
    assert set(reasons.SLURM_JOB_ENDED.values()) <= set(values.values())
    assert {reasons.slurm_job_ended(s) for s in reasons.SLURM_JOB_ENDED} == set(reasons.SLURM_JOB_ENDED.values())
    assert reasons.slurm_job_ended("RESV_DEL_HOLD") == "SlurmJobResvDelHold", "a state Slurm adds"


def test_every_reason_passed_to_an_event_or_a_condition_is_a_named_constant() -> None:
    positions = reason_positions()
    assert {"event", "Event", "TellPods", "EndPods", "NodeEvent", "GroupError", "tell", "set_condition"} <= set(
        positions
    ), positions
    written: list[str] = []
    for path, tree in sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name not in positions:
                continue
            if name == "event" and not (isinstance(func, ast.Attribute) and ast.unparse(func.value).endswith("kube")):
                continue  # kopf.on.event and the like: not an Event posted
            given = [k.value for k in node.keywords if k.arg == "reason"]
            given += [node.args[i] for i in positions[name] if i < len(node.args)]
            written += [f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(r)}" for r in given if literal(r)]
    assert not written, f"reasons written as literals (add them to slurm_bridge/names/reasons.py): {written}"


def test_no_reason_is_written_out_anywhere_else() -> None:
    other_kinds = {v for m in KINDS if m is not reasons for v in vars(m).values() if isinstance(v, str)}
    values = {v: n for n, v in vars(reasons).items() if n.isupper() and isinstance(v, str) and v not in other_kinds}
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r} (names.{values[node.value]})"
        for path, tree in sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values
    ]
    assert not found, f"reasons written out instead of named: {found}"


def test_a_literal_reason_is_found() -> None:
    tree = ast.parse('kube.event(pod, "Oops", "m")\nEvent(names.REASON_SUBMITTED, f"{x}")\nGroupError(f"{k}Gone", "m")')
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert [literal(c.args[0] if ast.unparse(c.func) != "kube.event" else c.args[1]) for c in calls] == [
        True, False, True,
    ]  # fmt: skip
