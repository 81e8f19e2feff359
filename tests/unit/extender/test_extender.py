"""The extender's filter: only the node Slurm allocated passes; its health-only listener."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import socket
from pathlib import Path
from typing import Any

import httpx

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.core.logs import JsonFormatter
from slurm_bridge.extender.filter import filter_nodes
from slurm_bridge.extender.main import serve
from slurm_bridge.extender.protocol import ExtenderArgs
from slurm_bridge.extender.server import make_app
from slurm_bridge.rules.namespaces import ManagedNamespaces


def _args(annotations: dict[str, str], node_names: list[str] | None = None, nodes: bool = False) -> ExtenderArgs:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "n", "annotations": annotations}}
    if nodes:
        items = [{"metadata": {"name": n}} for n in node_names or []]
        return ExtenderArgs.model_validate({"Pod": pod, "Nodes": {"items": items}})
    return ExtenderArgs.model_validate({"Pod": pod, "NodeNames": node_names})


def test_only_the_allocated_node_passes() -> None:
    r = filter_nodes(_args({names.ANN_SLURM_NODE: "b"}, ["a", "b", "c"]))
    assert r.NodeNames == ["b"]
    assert set(r.FailedNodes) == {"a", "c"}
    assert "Slurm allocated node b" in r.FailedNodes["a"]
    assert r.FailedAndUnresolvableNodes == {}


def test_full_node_objects_are_filtered_too() -> None:
    r = filter_nodes(_args({names.ANN_SLURM_NODE: "c"}, ["a", "c"], nodes=True))
    assert r.Nodes is not None and [n["metadata"]["name"] for n in r.Nodes.items] == ["c"]


def test_unallocated_pod_fails_everywhere_as_unresolvable() -> None:
    r = filter_nodes(_args({}, ["a", "b"]))
    assert r.NodeNames == []
    assert set(r.FailedAndUnresolvableNodes) == {"a", "b"}
    assert "waiting for Slurm" in r.FailedAndUnresolvableNodes["a"]


def test_allocated_node_missing_from_candidates_passes_nothing() -> None:
    r = filter_nodes(_args({names.ANN_SLURM_NODE: "z"}, ["a"]))
    assert r.NodeNames == [] and set(r.FailedNodes) == {"a"}


def test_wire_format_uses_go_field_names() -> None:
    dumped = filter_nodes(_args({names.ANN_SLURM_NODE: "a"}, ["a"])).model_dump(exclude_none=True)
    assert set(dumped) >= {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_the_health_listener_serves_health_and_nothing_else(tmp_path: Path) -> None:
    """With extenderListen on loopback, the kubelet probes extenderHealthListen, which must not
    offer /filter or /bind to the pod network."""
    main_port, health_port = _free_port(), _free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    cfg = Config(extenderListen=f"127.0.0.1:{main_port}", extenderHealthListen=f"127.0.0.1:{health_port}")
    task = asyncio.create_task(serve(cfg, str(kubeconfig)))
    async with httpx.AsyncClient(timeout=2) as client:
        for _ in range(100):
            try:
                if (await client.get(f"http://127.0.0.1:{health_port}/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
        assert (await client.get(f"http://127.0.0.1:{health_port}/readyz")).status_code == 200
        assert (await client.post(f"http://127.0.0.1:{health_port}/bind", json={})).status_code == 404
        assert (await client.post(f"http://127.0.0.1:{health_port}/filter", json={})).status_code == 404
        assert (await client.post(f"http://127.0.0.1:{main_port}/filter", json={})).status_code == 400
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class _BindingKube:
    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def test_the_bind_log_line_names_the_slurm_job_the_filter_saw() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("slurm_bridge.extender.server")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "uid-1", "labels": {names.LABEL_SLURM_JOB_ID: "4242"},
                        "annotations": {names.ANN_SLURM_NODE: "node-1"}}}  # fmt: skip
    managed = ManagedNamespaces(Config(managedNamespaces=["n"]))
    client = TestClient(TestServer(make_app(_BindingKube(), managed)))
    await client.start_server()
    try:
        assert (await client.post("/filter", json={"Pod": pod, "NodeNames": ["node-1"]})).status == 200
        bind = {"PodName": "p", "PodNamespace": "n", "PodUID": "uid-1", "Node": "node-1"}
        assert (await client.post("/bind", json=bind)).status == 200
    finally:
        await client.close()
        logger.removeHandler(handler)
    [line] = [json.loads(x) for x in stream.getvalue().splitlines() if '"bound ' in x]
    assert line["jobId"] == 4242 and line["namespace"] == "n" and line["name"] == "p"
