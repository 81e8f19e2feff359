"""The wiring builds the parts and hands each what it needs at construction: it assigns no attribute
of a controller (operator/wiring/app.py). A controller built without the wiring is then whole, not
a shell with silent defaults; what the PlaceholderJob controller reads of Slurm's nodes is the node
controller's view (views/slurmnodes.py ``NodeView``), given to its constructor."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.views.slurmnodes import NodesNotRead, NodeView
from tests.unit.fakes import FakeNodes, FakeNodeView

pytestmark = pytest.mark.unit

APP = Path(__file__).resolve().parents[2] / "operator" / "wiring" / "app.py"


def test_the_wiring_assigns_no_attribute_of_a_part_it_built() -> None:
    source = APP.read_text()
    assert not re.findall(r"ctrl\.\w+(?:\.\w+)* = |nodes\.\w+ = ", source)
    tree = ast.parse(source, str(APP))
    assigned = [
        (target.lineno, ast.unparse(target))
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in _targets(node)
        if isinstance(target, ast.Attribute | ast.Subscript) and not _own(target)
    ]
    assert assigned == [], f"attributes assigned from outside their object: {assigned}"


def _targets(node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> list[ast.expr]:
    """What an assignment writes, a tuple's or a list's elements one by one."""
    out: list[ast.expr] = []
    todo: list[ast.expr] = list(node.targets) if isinstance(node, ast.Assign) else [node.target]
    while todo:
        target = todo.pop()
        if isinstance(target, ast.Tuple | ast.List):
            todo.extend(target.elts)
        else:
            out.append(target)
    return out


def _own(target: ast.expr) -> bool:
    """An object's own attribute, written in its own method (``self.x = ...``)."""
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"


def test_the_node_controller_and_its_stand_ins_are_the_view() -> None:
    views: list[NodeView] = [
        NodeController(Config(), KubeClient("http://127.0.0.1:0"), FakeNodes([])),
        NodesNotRead(),
        FakeNodeView(),
    ]  # mypy checks each against the Protocol
    assert all(v.listed_nodes() is None and v.largest_cpus(None) is None for v in views), "nothing listed yet"


async def test_without_a_node_controller_nothing_is_known() -> None:
    view = NodesNotRead()
    assert view.runs_native("n1") is None and view.excluded_unfit_nodes() == frozenset()
    assert view.mig_slurm_nodes() == frozenset() and view.device_mismatch_slurm_nodes() == frozenset()
    with pytest.raises(LookupError):
        await view.partition_topology("tb")
