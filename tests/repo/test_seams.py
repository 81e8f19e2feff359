"""A consumer of the API server takes the seam of the calls it makes (slurm_bridge/kube/seams.py),
never the whole ``KubeClient``: only the wiring that builds the clients, and the processes' entry
points, name it as a parameter's type. The parameters are read from the sources with ``ast``
(string annotations too), so that a unit test can hand the consumer the fake of its seam
(tests/unit/kubefakes.py) without silencing the type checker.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from tests.packages import module_sources

pytestmark = pytest.mark.unit

CLIENT = "KubeClient"
# Where the clients are built and handed on: the operator's wiring, and each process's entry point.
WIRING = "slurm_bridge.operator.wiring"
ENTRY_POINTS = frozenset({"slurm_bridge.operator.main", "slurm_bridge.webhook.main", "slurm_bridge.extender.main"})


def _names(annotation: ast.expr) -> set[str]:
    """The names an annotation mentions (``client.KubeClient`` as ``KubeClient``), a string one parsed."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    found: set[str] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= _names(node)  # a quoted part of a subscript: Optional["KubeClient"]
    return found


def client_parameters(source: str, filename: str = "<source>") -> list[str]:
    """``"line function(parameter)"`` for each parameter of ``source`` whose type names ``KubeClient``,
    in the order of the lines."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]:
            if arg.annotation is not None and CLIENT in _names(arg.annotation):
                found.append((node.lineno, f"{node.lineno} {node.name}({arg.arg})"))
    return [text for _, text in sorted(found)]


def _builds_clients(module: str) -> bool:
    return module == WIRING or module.startswith(WIRING + ".") or module in ENTRY_POINTS


def test_only_the_wiring_takes_the_whole_client() -> None:
    sources = module_sources()
    assert not ENTRY_POINTS - sources.keys(), "an entry point listed here is gone: update ENTRY_POINTS"
    offending = {
        module: found
        for module, path in sorted(sources.items())
        if not _builds_clients(module) and (found := client_parameters(path.read_text(), str(path)))
    }
    assert offending == {}, (
        f"parameters typed {CLIENT} outside the wiring: take the seam of the calls made "
        f"(slurm_bridge/kube/seams.py) instead: {offending}"
    )


BAD = """
from slurm_bridge.kube import client
from slurm_bridge.kube.client import KubeClient

class Reader:
    def __init__(self, kube: KubeClient) -> None: ...

async def post(path: str, *, kube: KubeClient | None = None) -> None: ...

def optional(kube: "Optional[KubeClient]", /) -> None: ...

def qualified(*kubes: client.KubeClient) -> None: ...

def fine(kube: KubeReads, clients: list[str]) -> KubeClient: ...
"""


def test_the_check_finds_every_spelling_of_a_client_parameter() -> None:
    assert client_parameters(textwrap.dedent(BAD)) == [
        "6 __init__(kube)",
        "8 post(kube)",
        "10 optional(kube)",
        "12 qualified(kubes)",
    ]


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("slurm_bridge.operator.wiring", True),
        ("slurm_bridge.operator.wiring.app", True),
        ("slurm_bridge.webhook.main", True),
        ("slurm_bridge.operator.wiringx", False),
        ("slurm_bridge.operator.nodes.controller", False),
        ("slurm_bridge.webhook.server", False),
    ],
)
def test_only_the_wiring_and_the_entry_points_build_clients(module: str, allowed: bool) -> None:
    assert _builds_clients(module) is allowed
