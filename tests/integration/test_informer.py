"""The operator's list+watch (slurm_bridge/kubecache.py ``Informer``) against the local cluster's
API server: pages, the watch's events, and a resourceVersion the API server no longer keeps
(410 Gone: a list again, and DELETED made up for an object that vanished meanwhile).

ConfigMaps in a fresh namespace stand in for pods and PlaceholderJobs: the code path is the one
the operator's two hot watches take (operator/wiring/watches.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import kubernetes.client as k8s
from kubernetes.client.rest import ApiException

from slurm_bridge import kubeconfig
from slurm_bridge.kube import KubeClient, resource_path
from slurm_bridge.kubecache import Informer
from slurm_bridge.operator.runtime.store import ObjectStore
from tests.harness import wait_for

Obj = dict[str, Any]


class Seen:
    def __init__(self) -> None:
        self.store = ObjectStore()
        self.events: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    def handle(self, etype: str, obj: Obj) -> None:
        self.events.append((etype, obj["metadata"]["name"]))
        if etype == "DELETED":
            self.store.delete(obj)
        else:
            self.store.upsert(obj)
        self.changed.set()


def _compacted(core: k8s.CoreV1Api, namespace: str) -> bool:
    """Whether revision 1 is compacted: an exact list at it is answered 410 Gone."""
    try:
        core.list_namespaced_config_map(namespace, resource_version="1", resource_version_match="Exact", limit=1)
    except ApiException as e:
        if e.status == 410:
            return True
        raise
    return False


async def until(seen: Seen, check: Any, what: str, seconds: float = 30) -> None:
    try:
        async with asyncio.timeout(seconds):
            while not check():
                seen.changed.clear()
                await seen.changed.wait()
    except TimeoutError:
        raise AssertionError(f"not within {seconds}s: {what}; events {seen.events}") from None


def test_the_informer_lists_in_pages_follows_the_watch_and_relists_after_410(
    cluster: dict[str, str], core: k8s.CoreV1Api, namespace: str
) -> None:
    def make(name: str) -> None:
        core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name),
                                                                     data={"v": "1"}))  # fmt: skip

    for name in ("a", "b", "c"):
        make(name)
    path = resource_path("v1", "configmaps", namespace)

    async def go() -> None:
        creds = await asyncio.to_thread(kubeconfig.load, cluster["KUBECONFIG"])
        kube = KubeClient.from_credentials(creds)
        seen = Seen()
        inf = Informer(kube, path, "configmaps", seen.handle, seen.store, page=2)
        inf.start()
        try:
            await asyncio.wait_for(inf.synced.wait(), 30)
            names = {n for _, n in seen.events}
            assert {"a", "b", "c"} <= names, seen.events
            assert all(t == "ADDED" for t, _ in seen.events)
            assert seen.store.get((namespace, "a"))["kind"] == "ConfigMap"  # type: ignore[index]
            await asyncio.to_thread(core.patch_namespaced_config_map, "a", namespace, {"data": {"v": "2"}})
            await asyncio.to_thread(core.delete_namespaced_config_map, "b", namespace)
            await until(seen, lambda: ("DELETED", "b") in seen.events, "b's DELETED from the watch")
            assert ("MODIFIED", "a") in seen.events
            assert inf.lists == 1
        finally:
            await inf.stop()
        # A restart from a resourceVersion long compacted: the API server answers 410, the
        # informer lists again and makes up the delete of c it never saw. On a cluster younger
        # than two compaction periods (kube-apiserver compacts every 5 minutes, to the revision
        # of the period before) revision 1 is not compacted yet: wait until it is.
        await asyncio.to_thread(
            wait_for, lambda: _compacted(core, namespace), 700, "the API server to compact revision 1"
        )
        await asyncio.to_thread(core.delete_namespaced_config_map, "c", namespace)
        seen.events.clear()
        inf = Informer(kube, path, "configmaps", seen.handle, seen.store, page=2)
        inf.resource_version = "1"
        inf.start()
        try:
            await until(seen, lambda: ("DELETED", "c") in seen.events, "c's DELETED, made up after the 410")
            assert inf.lists == 1 and inf.watches >= 1
            kept = {o["metadata"]["name"] for o in seen.store.values()} - {"kube-root-ca.crt"}  # the CA's, made by KCM
            assert kept == {"a"}
        finally:
            await inf.stop()
            await kube.aclose()

    asyncio.run(go())
