"""A pod's cpus, memory and GPUs, as kube-scheduler counts them (slurm_bridge/rules/podresources.py)."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge.rules.podresources import PodResources, pod_resources

pytestmark = pytest.mark.unit


def _pod(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, Any] | None = None,
    pod_level: dict[str, Any] | None = None,
    name: str = "p",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    if pod_level is not None:
        spec["resources"] = pod_level
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def _c(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    *,
    name: str = "c",
    restart: str | None = None,
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    c: dict[str, Any] = {"name": name, "image": "busybox", "resources": res}
    if restart is not None:
        c["restartPolicy"] = restart
    return c


# --- pod resources --------------------------------------------------------------------------

RESOURCE_CASES: list[tuple[str, dict[str, Any], PodResources]] = [
    ("empty pod: 1 cpu, no memory", _pod(_c()), PodResources(1, None, {})),
    ("no resources key", {"spec": {"containers": [{"name": "c"}]}}, PodResources(1, None, {})),
    ("null requests", _pod({"name": "c", "resources": {"requests": None}}), PodResources(1, None, {})),
    ("request only", _pod(_c({"cpu": "2", "memory": "1Gi"})), PodResources(2, 1024, {})),
    ("limit alone is the request", _pod(_c(None, {"cpu": "3", "memory": "2Gi"})), PodResources(3, 2048, {})),
    (
        "max of request and limit",
        _pod(_c({"cpu": "1", "memory": "3Gi"}, {"cpu": "4", "memory": "1Gi"})),
        PodResources(4, 3072, {}),
    ),
    ("millicpu rounds up", _pod(_c({"cpu": "100m"})), PodResources(1, None, {})),
    ("1001m rounds up", _pod(_c({"cpu": "1001m"})), PodResources(2, None, {})),
    ("decimal cpu", _pod(_c({"cpu": "2.5"})), PodResources(3, None, {})),
    ("numeric cpu", _pod(_c({"cpu": 2})), PodResources(2, None, {})),
    ("decimal memory rounds up", _pod(_c({"memory": "1G"})), PodResources(1, 954, {})),
    ("e-notation memory", _pod(_c({"memory": "129e6"})), PodResources(1, 124, {})),
    ("memory in k", _pod(_c({"memory": "1k"})), PodResources(1, 1, {})),
    ("memory in Ki", _pod(_c({"memory": "2048Ki"})), PodResources(1, 2, {})),
    ("zero memory is unset", _pod(_c({"memory": "0"})), PodResources(1, None, {})),
    (
        "app containers add up",
        _pod(_c({"cpu": "500m", "memory": "100Mi"}), _c({"cpu": "700m", "memory": "200Mi"}, name="d")),
        PodResources(2, 300, {}),
    ),
    (
        "larger init container wins",
        _pod(_c({"cpu": "1", "memory": "1Gi"}), init=[_c({"cpu": "4", "memory": "512Mi"}, name="i")]),
        PodResources(4, 1024, {}),
    ),
    (
        "init containers do not add up",
        _pod(_c({"cpu": "1"}), init=[_c({"cpu": "3"}, name="i1"), _c({"cpu": "3"}, name="i2")]),
        PodResources(3, None, {}),
    ),
    (
        "sidecar adds to app containers",
        _pod(
            _c({"cpu": "1", "memory": "1Gi"}),
            init=[_c({"cpu": "1", "memory": "1Gi"}, name="s", restart="Always")],
        ),
        PodResources(2, 2048, {}),
    ),
    (
        "init after a sidecar runs beside it",
        _pod(
            _c({"cpu": "1"}),
            init=[_c({"cpu": "2"}, name="s", restart="Always"), _c({"cpu": "2"}, name="i")],
        ),
        PodResources(4, None, {}),
    ),
    (
        "init before a sidecar runs alone",
        _pod(
            _c({"cpu": "1"}),
            init=[_c({"cpu": "2"}, name="i"), _c({"cpu": "2"}, name="s", restart="Always")],
        ),
        PodResources(3, None, {}),
    ),
    (
        "restartPolicy other than Always is a plain init container",
        _pod(_c({"cpu": "1"}), init=[_c({"cpu": "1"}, name="i", restart="Never")]),
        PodResources(1, None, {}),
    ),
    (
        "overhead comes on top",
        _pod(_c({"cpu": "1", "memory": "1Gi"}), overhead={"cpu": "250m", "memory": "120Mi"}),
        PodResources(2, 1144, {}),
    ),
    (
        "pod-level resources replace the container total",
        _pod(_c({"cpu": "1", "memory": "1Gi"}), pod_level={"limits": {"cpu": "6", "memory": "8Gi"}}),
        PodResources(6, 8192, {}),
    ),
    (
        "pod-level memory only keeps container cpu",
        _pod(_c({"cpu": "3"}), pod_level={"requests": {"memory": "2Gi"}}),
        PodResources(3, 2048, {}),
    ),
    (
        "nvidia gpu limit",
        _pod(_c(None, {"nvidia.com/gpu": "2"})),
        PodResources(1, None, {"nvidia.com/gpu": 2}),
    ),
    ("amd gpu", _pod(_c({"amd.com/gpu": 1}, {"amd.com/gpu": 1})), PodResources(1, None, {"amd.com/gpu": 1})),
    (
        "gpus add across containers",
        _pod(_c(None, {"nvidia.com/gpu": "1"}), _c(None, {"nvidia.com/gpu": "2"}, name="d")),
        PodResources(1, None, {"nvidia.com/gpu": 3}),
    ),
    (
        "gpu init container larger than app",
        _pod(_c(None, {"nvidia.com/gpu": "1"}), init=[_c(None, {"nvidia.com/gpu": "4"}, name="i")]),
        PodResources(1, None, {"nvidia.com/gpu": 4}),
    ),
    ("zero gpus are omitted", _pod(_c(None, {"nvidia.com/gpu": "0"})), PodResources(1, None, {})),
    (
        "other extended resources are ignored",
        _pod(_c(None, {"example.com/foo": "3"})),
        PodResources(1, None, {}),
    ),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in RESOURCE_CASES], ids=[c[0] for c in RESOURCE_CASES])
def test_pod_resources(pod: dict[str, Any], expected: PodResources) -> None:
    assert pod_resources(pod) == expected


@pytest.mark.parametrize(
    ("pod", "fragment"),
    [
        (_pod(_c({"cpu": "lots"}, name="app")), "pod ns/p: container 'app': resources.requests.cpu"),
        (_pod(_c(None, {"memory": "1GB"})), "resources.limits.memory"),
        (_pod(_c(), init=[_c({"cpu": "x"}, name="init")]), "init container 'init'"),
        (_pod(_c({"cpu": "-1"})), "negative"),
        (_pod(_c(), overhead={"cpu": "?"}), "spec.overhead"),
        (_pod(_c(), pod_level={"limits": {"memory": "big"}}), "spec.resources"),
    ],
)
def test_pod_resources_bad_quantity(pod: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        pod_resources(pod)
    assert fragment in str(info.value)
