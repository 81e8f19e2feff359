"""The CPU one Kubernetes request costs the bridge's client, against the real API server.

The operator, webhook and extender send their requests through KubeClient (slurm_bridge/kube/
client.py) over the bridge's HTTP/1.1 exchange (slurm_bridge/core/http1.py). This measures that
client's own CPU per request (``time.process_time`` of this process: the API server's work is in
another process) beside aiohttp's client as KubeClient used it before (one ClientSession, a
TCPConnector on the same TLS context, the same headers and JSON), in alternating blocks in one
run, for the two requests a pod's life repeats most: a GET of one object and a merge PATCH of it.

    .venv/bin/python bench/kube_requests.py --requests 2000 --reps 5

Needs the local cluster (``hack/cluster.sh up``); it makes, changes and deletes one ConfigMap in
``default``. Prints one line per client and request, the CPU µs per request as min - max (and
median) of the reps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pydantic_core

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clusterenv import cluster_env

from slurm_bridge.kube import kubeconfig
from slurm_bridge.kube.client import KubeClient

NAME = "slurm-bridge-bench-kube-requests"
PATH = f"/api/v1/namespaces/default/configmaps/{NAME}"
# About a pod's size, so the answer's decoding weighs as it does on the hot path.
DATA = {f"key-{i}": "v" * 100 for i in range(40)}

Call = Callable[[str, str, Any], Awaitable[dict[str, Any]]]


class AiohttpClient:
    """KubeClient's request path as it was on aiohttp: the baseline."""

    def __init__(self, creds: kubeconfig.Credentials) -> None:
        self.server = creds.server.rstrip("/")
        self.tls = creds.ssl_context()
        self.auth = creds.auth
        self.session: aiohttp.ClientSession | None = None

    async def request(self, method: str, path: str, body: Any) -> dict[str, Any]:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=64, ssl=self.tls),
                timeout=aiohttp.ClientTimeout(total=30),
                headers={"User-Agent": "bench/0.1"},
            )
        headers: dict[str, str] = {}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json"
            data = pydantic_core.to_json(body)
        if self.auth is not None and (token := await self.auth.token()):
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.request(method, self.server + path, data=data, headers=headers) as resp:
            raw = await resp.read()
        if resp.status >= 400:
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:200]!r}")
        result: dict[str, Any] = pydantic_core.from_json(raw)
        return result

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()


async def block(call: Call, method: str, n: int) -> float:
    """CPU µs per request over ``n`` sequential requests."""
    start = time.process_time()
    for i in range(n):
        await call(method, PATH, {"data": {"n": str(i)}} if method == "PATCH" else None)
    return (time.process_time() - start) / n * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000, help="requests per block")
    ap.add_argument("--reps", type=int, default=5, help="blocks per client and request, alternating")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    creds = kubeconfig.load(cluster_env()["KUBECONFIG"])
    lean = KubeClient.from_credentials(creds, component="bench")
    old = AiohttpClient(creds)

    async def lean_call(method: str, path: str, body: Any) -> dict[str, Any]:
        if method == "PATCH":
            return await lean.patch(path, body)
        got = await lean.get(path)
        assert got is not None
        return got

    clients: dict[str, Call] = {"KubeClient (http1)": lean_call, "aiohttp (before)": old.request}
    results: dict[str, dict[str, list[float]]] = {c: {"GET": [], "PATCH": []} for c in clients}
    await lean.delete(PATH)
    await lean.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": NAME}, "data": DATA})
    try:
        for call in clients.values():  # warm: connections made, TLS done, code paths loaded
            await block(call, "GET", 50)
        for _ in range(args.reps):
            for method in ("GET", "PATCH"):
                for name, call in clients.items():
                    results[name][method].append(await block(call, method, args.requests))
    finally:
        await lean.delete(PATH)
        await lean.aclose()
        await old.aclose()
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"client CPU per request, µs ({args.reps} blocks of {args.requests} requests each, alternating)")
    for name, by in results.items():
        for method, xs in by.items():
            print(f"  {name:<20} {method:<5} {min(xs):7.1f} - {max(xs):7.1f} (median {statistics.median(xs):.1f})")


if __name__ == "__main__":
    asyncio.run(main())
