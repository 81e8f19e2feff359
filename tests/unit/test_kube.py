"""Credential loading and small helpers of the async Kubernetes client."""

from __future__ import annotations

from pathlib import Path

import httpx

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
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    server, verify, auth = _load_credentials(str(path))
    assert server == "https://127.0.0.1:6443"
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.url.path.endswith("/missing"):
            return httpx.Response(404, json={"reason": "NotFound", "message": "gone"})
        if request.method == "POST":
            return httpx.Response(409, json={"reason": "AlreadyExists", "message": "exists"})
        return httpx.Response(200, json={"ok": True})

    kube = KubeClient(server, verify, auth)
    kube._http._transport = httpx.MockTransport(handler)  # unit test: no apiserver
    assert await kube.get("/api/v1/namespaces/default") == {"ok": True}
    assert await kube.get("/api/v1/missing") is None
    try:
        await kube.create("/api/v1/namespaces/default/pods", {})
        raise AssertionError("409 must raise")
    except Conflict as e:
        assert e.reason == "AlreadyExists"
    try:
        await kube.request("GET", "/api/v1/missing")
        raise AssertionError("404 must raise")
    except NotFound:
        pass
    await kube.aclose()
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
