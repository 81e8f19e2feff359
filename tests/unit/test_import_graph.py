"""The folder tree is the import tree (issue 30): the imports are read from the sources with ``ast``
(every import, also those inside functions or under ``TYPE_CHECKING``, which no import list at the
top shows), the folders named as the runtime names them (pyproject.toml's mapping), and

- no module takes part in an import circle;
- the operator's ground floor, ``runtime/``, imports no controller (nor the wiring above them);
- the rooms of the PlaceholderJob controller (its sub-packages) are layered: taken each as one
  node, with the modules beside them, they form no circle either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.packages import module_name, package_dirs

pytestmark = pytest.mark.unit

ROOT_PACKAGE = "slurm_bridge"
OPERATOR = "slurm_bridge.operator"
RUNTIME = "slurm_bridge.operator.runtime"
PHJ_CONTROLLER = "slurm_bridge.operator.placeholderjobs"

Graph = dict[str, set[str]]


def sources() -> dict[str, Path]:
    """Every first-party module, by its runtime name."""
    found: dict[str, Path] = {}
    for folder in package_dirs().values():
        for path in folder.rglob("*.py"):
            found.setdefault(module_name(path), path)
    return found


def imported(module: str, path: Path, known: Iterable[str]) -> set[str]:
    """The first-party modules ``module`` imports (``from pkg import mod`` names ``pkg.mod``)."""
    modules = set(known)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m == ROOT_PACKAGE or m.startswith(ROOT_PACKAGE + ".")} - {module}


def import_graph() -> Graph:
    mods = sources()
    return {m: {i for i in imported(m, p, mods) if i in mods} for m, p in mods.items()}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def rooms(graph: Mapping[str, set[str]], package: str) -> Graph:
    """``package``'s modules with each of its sub-packages taken as one node."""
    depth = package.count(".") + 2

    def node(m: str) -> str:
        return ".".join(m.split(".")[:depth])

    inside = [m for m in graph if m.startswith(package + ".")]
    out: Graph = {}
    for m in inside:
        out.setdefault(node(m), set()).update(node(i) for i in graph[m] if i in inside and node(i) != node(m))
    return out


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert f"{RUNTIME}.store" in graph[f"{PHJ_CONTROLLER}.controller"]
    assert f"{PHJ_CONTROLLER}.lifecycle" in graph[f"{PHJ_CONTROLLER}.sync.phjsync"], "`from pkg import mod as x`"
    assert "slurm_bridge.names" in graph[f"{PHJ_CONTROLLER}.lifecycle"], "`from slurm_bridge import names`"
    assert "slurm_bridge.operator.wiring.app" in graph["slurm_bridge.operator.main"], "an import inside a function"


def test_no_import_circle() -> None:
    found = circles(import_graph())
    assert not found, f"import circles (each a set of modules that import each other): {found}"


def test_the_ground_floor_imports_no_controller() -> None:
    graph = import_graph()
    upward = {
        m: sorted(i for i in imports if i.startswith(OPERATOR + ".") and not i.startswith(RUNTIME + "."))
        for m, imports in graph.items()
        if m == RUNTIME or m.startswith(RUNTIME + ".")
    }
    upward = {m: i for m, i in upward.items() if i}
    assert not upward, f"runtime/ modules that import the floors above it: {upward}"


def test_the_placeholderjob_controllers_rooms_are_layered() -> None:
    found = circles(rooms(import_graph(), PHJ_CONTROLLER))
    assert not found, f"rooms of the PlaceholderJob controller that import each other: {found}"


def test_a_circle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles(rooms({"p.x.a": {"p.y.b"}, "p.y.b": {"p.x.c"}, "p.x.c": set()}, "p")) == [["p.x", "p.y"]]


def test_the_slurm_client_reaches_up_to_no_bridge_rule() -> None:
    """The Slurm client (``slurm_bridge.slurm``) returns plain data: the bridge's rules are applied
    above it (issue 40 §1: ``handoffcalls`` parsed the handoff's reservation names with
    ``slurm_bridge.rules.handoff``, and through it imported ``dra``)."""
    client = "slurm_bridge.slurm"
    rules = {"slurm_bridge.rules.handoff", "slurm_bridge.rules.dra"}
    up = {
        f"{m} -> {i}"
        for m, imports in import_graph().items()
        if m == client or m.startswith(client + ".")
        for i in imports & rules
    }
    assert not up, f"the Slurm client imports the bridge's rules: {sorted(up)}"
