"""Credential loading and small helpers of the async Kubernetes client."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from slurm_bridge import names
from slurm_bridge.kube import Conflict, KubeClient, NotFound, _load_credentials, escape_pointer, object_path

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


async def test_token_kubeconfig_sends_the_bearer_token(tmp_path: Path) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.path.endswith("/missing"):
            return web.json_response({"reason": "NotFound", "message": "gone"}, status=404)
        if request.method == "POST":
            return web.json_response({"reason": "AlreadyExists", "message": "exists"}, status=409)
        return web.json_response({"ok": True})

    # A fake apiserver on loopback (plain HTTP): this tests the client's own logic only.
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("https://127.0.0.1:6443", f"http://127.0.0.1:{port}"))
    server, tls, token = _load_credentials(str(path))
    assert server == f"http://127.0.0.1:{port}"
    kube = KubeClient(server, tls, token)
    try:
        assert await kube.get("/api/v1/namespaces/default") == {"ok": True}
        assert await kube.get("/api/v1/missing") is None
        with pytest.raises(Conflict) as conflict:
            await kube.create("/api/v1/namespaces/default/pods", {})
        assert conflict.value.reason == "AlreadyExists"
        with pytest.raises(NotFound):
            await kube.request("GET", "/api/v1/missing")
    finally:
        await kube.aclose()
        await runner.cleanup()
    assert seen and all(h == "Bearer secret-token" for h in seen)


def test_json_pointer_escaping() -> None:
    assert escape_pointer(names.ANN_SLURM_NODE) == "slinky.slurm.net~1slurm-node"
    assert escape_pointer("a~b/c") == "a~0b~1c"


def test_object_paths() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "k"}}
    phj = {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": {"name": "j", "namespace": "n"}}
    assert object_path(pod) == "/api/v1/namespaces/n/pods/p"
    assert object_path(node) == "/api/v1/nodes/k"
    assert object_path(phj) == f"/apis/{names.API_VERSION}/namespaces/n/placeholderjobs/j"
