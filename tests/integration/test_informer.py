"""The operator's list+watch (slurm_bridge/kube/cache.py ``Informer``) against the local cluster's
API server: pages, the watch's events, and a resourceVersion the API server no longer keeps
(410 Gone: a list again, and DELETED made up for an object that vanished meanwhile).

Objects of a CRD the test makes stand in for pods and PlaceholderJobs: the code path is the one
the operator's two hot watches take (operator/wiring/watches.py). A CRD, not ConfigMaps, for the
410: the API server's watch cache of a kind starts at the resourceVersion it was made at, and
answers a watch from before that with 410 at once. The ConfigMaps' cache was made with the
cluster, at about revision 1, and served a watch from revision 1 for as long as it kept every
event since, whatever etcd had compacted (the matrix saw no 410 there on Kubernetes 1.37)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes.client as k8s
import pytest
from kubernetes.client.rest import ApiException

from slurm_bridge.kube import kubeconfig
from slurm_bridge.kube.cache import Informer
from slurm_bridge.kube.client import KubeClient, resource_path
from slurm_bridge.operator.runtime.store import ObjectStore
from tests.harness import wait_for

Obj = dict[str, Any]
GROUP, VERSION = "informer-tests.slurm-bridge.local", "v1"


@pytest.fixture
def probes(api_client: k8s.ApiClient) -> Iterator[str]:
    """A namespaced CRD of this test's own (its plural), served; deleted after the test."""
    plural = f"probes{uuid.uuid4().hex[:8]}"
    ext = k8s.ApiextensionsV1Api(api_client)
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural, "kind": plural.capitalize()},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }],
        },
    }  # fmt: skip
    ext.create_custom_resource_definition(body)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{plural}.{GROUP}")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    try:
        wait_for(established, 60, f"the CRD {plural}.{GROUP} to be established")
        yield plural
    finally:
        try:
            ext.delete_custom_resource_definition(f"{plural}.{GROUP}")
        except ApiException as e:
            if e.status != 404:
                raise


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


async def until(seen: Seen, check: Any, what: str, seconds: float = 30) -> None:
    try:
        async with asyncio.timeout(seconds):
            while not check():
                seen.changed.clear()
                await seen.changed.wait()
    except TimeoutError:
        raise AssertionError(f"not within {seconds}s: {what}; events {seen.events}") from None


def test_the_informer_lists_in_pages_follows_the_watch_and_relists_after_410(
    cluster: dict[str, str], custom: k8s.CustomObjectsApi, namespace: str, probes: str
) -> None:
    kind = probes.capitalize()

    def make(name: str) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "data": {"v": "1"}}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, probes, body)

    for name in ("a", "b", "c"):
        make(name)
    path = resource_path(f"{GROUP}/{VERSION}", probes, namespace)

    async def go() -> None:
        creds = await asyncio.to_thread(kubeconfig.load, cluster["KUBECONFIG"])
        kube = KubeClient.from_credentials(creds)
        seen = Seen()
        inf = Informer(kube, path, probes, seen.handle, seen.store, page=2)
        inf.start()
        try:
            await asyncio.wait_for(inf.synced.wait(), 30)
            names = {n for _, n in seen.events}
            assert {"a", "b", "c"} <= names, seen.events
            assert all(t == "ADDED" for t, _ in seen.events)
            assert seen.store.get((namespace, "a"))["kind"] == kind  # type: ignore[index]
            patch = {"data": {"v": "2"}}
            await asyncio.to_thread(
                custom.patch_namespaced_custom_object, GROUP, VERSION, namespace, probes, "a", patch
            )
            await asyncio.to_thread(custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, probes, "b")
            await until(seen, lambda: ("DELETED", "b") in seen.events, "b's DELETED from the watch")
            assert ("MODIFIED", "a") in seen.events
            assert inf.lists == 1
        finally:
            await inf.stop()
        # A restart from a resourceVersion the API server no longer keeps (revision 1, before this
        # kind existed): it answers 410, the informer lists again and makes up the delete of c it
        # never saw.
        await asyncio.to_thread(custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, probes, "c")
        seen.events.clear()
        inf = Informer(kube, path, probes, seen.handle, seen.store, page=2)
        inf.resource_version = "1"
        inf.start()
        try:
            await until(seen, lambda: ("DELETED", "c") in seen.events, "c's DELETED, made up after the 410")
            assert inf.lists == 1 and inf.watches >= 1
            kept = {o["metadata"]["name"] for o in seen.store.values()}
            assert kept == {"a"}
        finally:
            await inf.stop()
            await kube.aclose()

    asyncio.run(go())
