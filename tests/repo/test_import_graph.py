"""The folder tree is the import tree (issue 30): the imports are read from the sources with ``ast``
(every import, also those inside functions or under ``TYPE_CHECKING``, which no import list at the
top shows), the folders named as the runtime names them (pyproject.toml's mapping), and

- no module takes part in an import circle;
- the operator's ground floor, ``runtime/``, imports no controller (nor the wiring above them);
- a controller imports no other controller's rooms: what several read (the Slurm policy holder, the
  poller's job snapshot, the node controller's drains) stands in ``views/``, which imports no
  controller; only ``wiring/`` (not a controller) imports them all;
- the rooms of the PlaceholderJob controller (its sub-packages) are layered: taken each as one
  node, with the modules beside them, they form no circle either;
- the shared core stands in floors (issue 40 §4), each a sub-package of ``slurm_bridge``: a module
  imports its own floor and those below, never one above, and every module stands on a floor.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.packages import module_sources

pytestmark = pytest.mark.unit

ROOT_PACKAGE = "slurm_bridge"
OPERATOR = "slurm_bridge.operator"
RUNTIME = "slurm_bridge.operator.runtime"
PHJ_CONTROLLER = "slurm_bridge.operator.placeholderjobs"
# The operator's controllers, each a package of rooms no other controller enters; ``wiring/`` and
# ``runtime/`` are not controllers, and ``views/`` holds what several of them read.
CONTROLLERS = tuple(
    f"{OPERATOR}.{c}" for c in ("placeholderjobs", "handoff", "nodes", "nodeguard", "slurmsettings", "tenantpolicies")
)
VIEWS = "slurm_bridge.operator.views"
# The shared core's floors, lowest first (docs/architecture.md, "Layout"): the well-known names; the
# configuration, logs, metrics and process plumbing; the Slurm client; the pure rules between
# Kubernetes and Slurm; Kubernetes access. The components (operator, webhook, extender) stand on top.
FLOORS = (
    "slurm_bridge.names",
    "slurm_bridge.core",
    "slurm_bridge.slurm",
    "slurm_bridge.rules",
    "slurm_bridge.kube",
    ("slurm_bridge.operator", "slurm_bridge.webhook", "slurm_bridge.extender"),
)

Graph = dict[str, set[str]]


sources = module_sources  # every first-party module, by its runtime name


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


def floor_of(module: str, floors: Iterable[str | tuple[str, ...]]) -> int | None:
    """The index of the floor ``module`` stands on (a floor is one package or several side by side)."""
    for i, floor in enumerate(floors):
        packages = (floor,) if isinstance(floor, str) else floor
        if any(module == p or module.startswith(p + ".") for p in packages):
            return i
    return None


def upward(graph: Mapping[str, set[str]], floors: Iterable[str | tuple[str, ...]]) -> list[str]:
    """Each import from a floor into a higher one, as ``importer -> imported``."""
    order = list(floors)
    found: list[str] = []
    for m, imports in sorted(graph.items()):
        low = floor_of(m, order)
        found += [f"{m} -> {i}" for i in sorted(imports) if low is not None and (floor_of(i, order) or 0) > low]
    return found


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


def controller_of(module: str, controllers: Iterable[str]) -> str | None:
    """The controller package ``module`` belongs to (None: none)."""
    return next((c for c in controllers if module == c or module.startswith(c + ".")), None)


def crossings(graph: Mapping[str, set[str]], controllers: Iterable[str]) -> list[str]:
    """Each import from one controller's rooms into another's, as ``importer -> imported``."""
    owners = tuple(controllers)
    found: list[str] = []
    for m, imports in sorted(graph.items()):
        mine = controller_of(m, owners)
        if mine is None:
            continue
        found += [f"{m} -> {i}" for i in sorted(imports) if controller_of(i, owners) not in (None, mine)]
    return found


def test_no_controller_imports_another_controllers_rooms() -> None:
    found = crossings(import_graph(), CONTROLLERS)
    assert not found, (
        f"controllers that import another controller's rooms (move what both read into {VIEWS}, or "
        f"below the operator into slurm_bridge/): {found}"
    )


def test_a_controllers_import_of_another_is_found() -> None:
    controllers = ("p.a", "p.b")
    graph = {
        "p.a.x": {"p.a.y", "p.views.v", "p.b.z"},  # p.a.x -> p.b.z crosses
        "p.a.y": set(),
        "p.b.z": {"p.views.v"},
        "p.views.v": set(),
        "p.wiring.app": {"p.a.x", "p.b.z"},  # the wiring is no controller: it may import them all
    }
    assert crossings(graph, controllers) == ["p.a.x -> p.b.z"]


def test_the_views_import_no_controller() -> None:
    graph = import_graph()
    assert any(m.startswith(VIEWS + ".") for m in graph), f"{VIEWS} has no modules: the rule would check nothing"
    upward = {
        m: sorted(i for i in imports if controller_of(i, CONTROLLERS) or i.startswith(f"{OPERATOR}.wiring"))
        for m, imports in graph.items()
        if m == VIEWS or m.startswith(VIEWS + ".")
    }
    upward = {m: i for m, i in upward.items() if i}
    assert not upward, f"views/ modules that import a controller (or the wiring): {upward}"


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
    rules = ("slurm_bridge.rules.handoff", "slurm_bridge.rules.dra")
    up = {
        f"{m} -> {i}"
        for m, imports in import_graph().items()
        if m == client or m.startswith(client + ".")
        for i in imports
        if any(i == r or i.startswith(r + ".") for r in rules)
    }
    assert not up, f"the Slurm client imports the bridge's rules: {sorted(up)}"


def test_every_module_stands_on_a_floor() -> None:
    """A new module of the shared core goes into the floor of its concern, not beside the floors."""
    loose = sorted(m for m in import_graph() if m != ROOT_PACKAGE and floor_of(m, FLOORS) is None)
    assert not loose, f"modules on no floor (move each into one of {FLOORS}): {loose}"


def test_no_floor_imports_a_floor_above_it() -> None:
    found = upward(import_graph(), FLOORS)
    assert not found, f"imports from a floor up into a higher one (floors, lowest first: {FLOORS}): {found}"


def test_an_upward_import_is_found() -> None:
    floors = ("p.low", ("p.a", "p.b"), "p.top")
    graph = {"p.low.x": {"p.a.y"}, "p.a.y": {"p.b.z", "p.low.x"}, "p.b.z": set(), "p.top.w": {"p.a.y"}}
    assert upward(graph, floors) == ["p.low.x -> p.a.y"]
