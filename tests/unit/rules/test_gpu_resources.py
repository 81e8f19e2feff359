"""Device-plugin GPU resources have one list (resources.GPU_RESOURCES): what a pod may request as
Slurm GPUs is exactly what a registered node offers as them (operator/nodes/registration.py)."""

from __future__ import annotations

import pytest

from slurm_bridge import names
from slurm_bridge.operator.nodes import registration as reg
from slurm_bridge.rules.resources import GPU_RESOURCES

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("resource", GPU_RESOURCES)
def test_a_registered_node_offers_each_gpu_resource_as_slurm_gpus(resource: str) -> None:
    res = {"cpu": "8", "memory": "16Gi", resource: "2"}
    node = {
        "metadata": {"name": "k1", "labels": {names.LABEL_EXTERNAL_NODE: "true"}, "annotations": {}},
        "status": {"allocatable": res, "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}]},
    }
    desired = reg.desired(node, "k1", "p")
    assert isinstance(desired, reg.Desired), desired
    assert desired.gpus == 2
    assert "Gres=gpu:2" in desired.node_conf()


def test_other_resources_are_not_gpus() -> None:
    res = {"cpu": "8", "memory": "16Gi", "example.com/fpga": "2"}
    node = {
        "metadata": {"name": "k1", "labels": {}, "annotations": {}},
        "status": {"allocatable": res, "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}]},
    }
    desired = reg.desired(node, "k1", "p")
    assert isinstance(desired, reg.Desired) and desired.gpus == 0
