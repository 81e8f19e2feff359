"""The operator's list+watch (slurm_bridge/kube/cache.py ``Informer``) against a scripted API server:
pages, resuming from the last resourceVersion, bookmarks, a 410 Gone and the DELETED events it
must make up for what vanished meanwhile (a missed delete leaks a Slurm job), backoff, stop.

The real path (aiohttp, the API server's watch) is what every e2e test runs through; the
integration test tests/integration/test_informer.py checks it against the local cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import aiohttp
import pytest

from slurm_bridge.kube.cache import Informer, key_of
from slurm_bridge.kube.client import METADATA_ONLY, Gone, KubeError, NotFound
from slurm_bridge.operator.runtime.store import ObjectStore
from tests.builders import make_pod

Obj = dict[str, Any]
PATH = "/api/v1/pods"
SELECTOR = {"fieldSelector": "spec.schedulerName=slurm-bridge"}


def pod(name: str, rv: int, uid: str = "", phase: str = "Pending") -> Obj:
    return make_pod(name).uid(uid or f"uid-{name}").rv(rv).scheduler().phase(phase).obj()


def listed(*items: Obj, rv: int, cont: str = "") -> Obj:
    """A list page as the API server sends it: the items without kind and apiVersion."""
    bare = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items]
    meta: Obj = {"resourceVersion": str(rv)} | ({"continue": cont} if cont else {})
    return {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": bare}


def ev(etype: str, obj: Obj) -> Obj:
    return {"type": etype, "object": obj}


def gone_event() -> Obj:
    return ev("ERROR", {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                        "code": 410, "message": "too old resource version: 5 (90)"})  # fmt: skip


class Api:
    """Answers lists from ``lists`` (one entry per whole list: its pages, or an exception) and
    watches from ``watches`` (one entry per watch request: its events, then an exception or a
    clean end); when a script runs out, the request waits until it is cancelled."""

    def __init__(
        self, lists: Sequence[Sequence[Obj] | Exception], watches: Sequence[Sequence[Obj | Exception]]
    ) -> None:
        self.lists, self.watches = list(lists), list(watches)
        self.list_calls: list[dict[str, str]] = []
        self.watch_calls: list[tuple[str, dict[str, str]]] = []
        self.accepts: list[tuple[str, str | None]] = []  # (list | watch, the Accept asked for)
        self.cancelled = asyncio.Event()
        self.called = asyncio.Event()  # set at every request: the tests' conditions are checked then
        self._pages: list[Obj] = []

    async def request(
        self, method: str, path: str, *, params: dict[str, str] | None = None, accept: str | None = None
    ) -> Obj:
        assert (method, path) == ("GET", PATH)
        params = params or {}
        self.list_calls.append(params)
        self.accepts.append(("list", accept))
        self.called.set()
        if "continue" not in params:
            if not self.lists:
                await asyncio.Event().wait()
            script = self.lists.pop(0)
            if isinstance(script, Exception):
                raise script
            self._pages = list(script)
        return self._pages.pop(0)

    async def watch(
        self, path: str, rv: str, *, timeout_seconds: int, params: dict[str, str], accept: str | None = None
    ) -> AsyncGenerator[Obj, None]:
        self.watch_calls.append((rv, params))
        self.accepts.append(("watch", accept))
        self.called.set()
        if not self.watches:
            try:
                await asyncio.Event().wait()
            finally:
                self.cancelled.set()
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


class Consumer:
    """The controller's side: a store and the events handed over, in order."""

    def __init__(self) -> None:
        self.store = ObjectStore()
        self.seen: list[tuple[str, str, str]] = []  # (type, name, uid)

    def handle(self, etype: str, obj: Obj) -> None:
        meta = obj["metadata"]
        self.seen.append((etype, meta["name"], meta["uid"]))
        if etype == "DELETED":
            self.store.delete(obj)
        else:
            assert obj.get("kind") == "Pod", "listed items get their kind back (the store projects by kind)"
            self.store.upsert(obj)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


async def until(api: Api, done: Any, what: str, seconds: float = 5) -> None:
    """Until ``done()`` holds, checked at each request the informer makes."""
    try:
        async with asyncio.timeout(seconds):
            while not done():
                api.called.clear()
                await api.called.wait()
    except TimeoutError:
        raise AssertionError(f"not within {seconds}s: {what}") from None


async def run_until(inf: Informer, api: Api, done: Any, what: str) -> None:
    """Run the informer until ``done()`` holds, then stop it."""
    inf.start()
    try:
        await until(api, done, what)
    finally:
        await inf.stop()


def informer(api: Api, consumer: Consumer, sleeps: Sleeps | None = None, **kw: Any) -> Informer:
    return Informer(api, PATH, "pods", consumer.handle, consumer.store, params=SELECTOR,
                    sleep=sleeps or Sleeps(), **kw)  # fmt: skip


async def test_lists_in_pages_then_watches_from_the_lists_resource_version() -> None:
    api = Api([[listed(pod("a", 3), rv=10, cont="next"), listed(pod("b", 4), rv=10)]], [])
    c = Consumer()
    inf = informer(api, c, page=1)
    await run_until(inf, api, lambda: api.watch_calls, "the watch")
    assert api.list_calls == [SELECTOR | {"limit": "1"}, SELECTOR | {"limit": "1", "continue": "next"}]
    assert c.seen == [("ADDED", "a", "uid-a"), ("ADDED", "b", "uid-b")]
    assert inf.synced.is_set() and inf.lists == 1
    assert api.watch_calls == [("10", SELECTOR)], "the field selector goes with the watch too"
    assert api.cancelled.is_set(), "stop cancels the watch that was waiting"


async def test_a_metadata_only_informer_lists_the_list_form_and_watches_the_object_form() -> None:
    """A watch's events are single objects: asking a watch for PartialObjectMetadataList makes the
    API server fail every event (found on Kubernetes 1.37: no workload annotation change arrived)."""
    api = Api([[listed(rv=10)]], [])
    inf = informer(api, Consumer(), accept=METADATA_ONLY)
    await run_until(inf, api, lambda: api.watch_calls, "the watch")
    (lst, list_accept), (wch, watch_accept) = api.accepts
    assert (lst, wch) == ("list", "watch")
    assert list_accept is not None and list_accept.startswith("application/json;as=PartialObjectMetadataList;")
    assert watch_accept is not None and watch_accept.startswith("application/json;as=PartialObjectMetadata;")
    assert "PartialObjectMetadataList" not in watch_accept


async def test_a_watch_that_ends_goes_on_from_the_last_resource_version_bookmarks_included() -> None:
    first = [ev("ADDED", pod("a", 11)), ev("MODIFIED", pod("a", 12, phase="Running")),
             ev("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "40"}})]  # fmt: skip
    second = [ev("DELETED", pod("a", 41))]
    api = Api([[listed(rv=10)]], [first, second])
    c = Consumer()
    inf = informer(api, c)
    await run_until(inf, api, lambda: len(api.watch_calls) == 3, "three watches")
    assert [rv for rv, _ in api.watch_calls] == ["10", "40", "41"]
    assert c.seen == [("ADDED", "a", "uid-a"), ("MODIFIED", "a", "uid-a"), ("DELETED", "a", "uid-a")]
    assert len(api.list_calls) == 1, "no list again after a clean end"
    assert inf.events == 4 and inf.watches == 3


async def test_410_gone_lists_again_and_makes_up_the_deletes_it_missed() -> None:
    """While the watch was away: b deleted, e deleted and made again (another uid), d created.
    c was written by the operator after both lists were taken (its answer in the store): kept."""
    c = Consumer()
    c.store.upsert(pod("c", 95))
    api = Api(
        [[listed(pod("a", 3), pod("b", 4), pod("e", 5, uid="e-old"), rv=10)],
         [listed(pod("a", 3), pod("e", 60, uid="e-new"), pod("d", 70), rv=90)]],
        [[ev("MODIFIED", pod("a", 20)), gone_event()]],
    )  # fmt: skip
    inf = informer(api, c)
    await run_until(inf, api, lambda: inf.lists == 2 and len(api.watch_calls) == 2, "the second watch")
    second = c.seen[4:]
    assert second[:4] == [("ADDED", "a", "uid-a"), ("DELETED", "e", "e-old"), ("ADDED", "e", "e-new"),
                          ("ADDED", "d", "uid-d")]  # fmt: skip
    assert sorted(second[4:]) == [("DELETED", "b", "uid-b")], "c is newer than the list: not made up"
    assert sorted(key_of(o)[1] for o in c.store.values()) == ["a", "c", "d", "e"]
    assert c.store.get(("ns", "e"))["metadata"]["uid"] == "e-new"  # type: ignore[index]
    assert [rv for rv, _ in api.watch_calls] == ["10", "90"]


async def test_a_410_answer_to_the_watch_request_lists_again_too() -> None:
    api = Api([[listed(pod("a", 3), rv=10)], [listed(rv=30)]], [[Gone(410, "Gone", "too old")]])
    c = Consumer()
    inf = informer(api, c)
    await run_until(inf, api, lambda: inf.lists == 2 and len(api.watch_calls) == 2, "the second list and watch")
    assert c.seen == [("ADDED", "a", "uid-a"), ("DELETED", "a", "uid-a")]
    assert [rv for rv, _ in api.watch_calls] == ["10", "30"]


async def test_errors_back_off_and_resume_from_the_same_resource_version() -> None:
    broken = aiohttp.ClientConnectionError("connection reset")
    api = Api([[listed(rv=10)]], [[broken], [broken], [KubeError(500, "InternalError", "etcd")],
                                  [ev("ADDED", pod("a", 11)), broken], [broken]])  # fmt: skip
    c, sleeps = Consumer(), Sleeps()
    inf = informer(api, c, sleeps)
    await run_until(inf, api, lambda: len(api.watch_calls) == 6, "six watches")
    assert sleeps.delays == [1.0, 2.0, 4.0, 1.0, 2.0], "doubling, and back to 1 s once events came through"
    assert [rv for rv, _ in api.watch_calls] == ["10", "10", "10", "10", "11", "11"]
    assert len(api.list_calls) == 1, "a broken connection resumes, it does not list again"
    assert "connection reset" in inf.last_error


async def test_a_watch_that_ends_at_once_with_nothing_waits_before_the_next() -> None:
    api = Api([[listed(rv=10)]], [[], [], []])
    sleeps = Sleeps()
    inf = informer(api, Consumer(), sleeps)
    await run_until(inf, api, lambda: len(api.watch_calls) == 4, "four watches")
    assert sleeps.delays == [1.0, 2.0, 4.0]


async def test_a_failing_list_retries_and_synced_waits_for_a_whole_list() -> None:
    api = Api([KubeError(403, "Forbidden", "pods is forbidden"), [listed(pod("a", 3), rv=10)]], [])
    c, sleeps = Consumer(), Sleeps()
    inf = informer(api, c, sleeps)
    await run_until(inf, api, lambda: api.watch_calls, "the watch")
    assert sleeps.delays == [1.0] and inf.synced.is_set() and inf.last_error == ""
    assert c.seen == [("ADDED", "a", "uid-a")]


async def test_a_second_410_in_a_row_waits() -> None:
    api = Api([[listed(rv=10)], [listed(rv=20)], [listed(rv=30)]], [[gone_event()], [gone_event()]])
    sleeps = Sleeps()
    inf = informer(api, Consumer(), sleeps)
    await run_until(inf, api, lambda: len(api.watch_calls) == 3, "three watches")
    assert sleeps.delays == [1.0], "the first 410 lists at once; one right after a fresh list waits"


async def test_a_handler_that_raises_loses_that_event_only() -> None:
    api = Api([[listed(rv=10)]], [[ev("ADDED", pod("bad", 11)), ev("ADDED", pod("a", 12))]])
    seen: list[str] = []

    def handle(etype: str, obj: Obj) -> None:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("a bug")
        seen.append(obj["metadata"]["name"])

    inf = Informer(api, PATH, "pods", handle, ObjectStore(), sleep=Sleeps())
    await run_until(inf, api, lambda: seen, "the next event")
    assert seen == ["a"] and inf.resource_version == "12"


async def test_a_missing_kind_is_an_empty_synced_collection_only_when_allowed() -> None:
    api = Api([NotFound(404, "NotFound", "the server could not find the requested resource")], [])
    sleeps = Sleeps()
    inf = informer(api, Consumer(), sleeps, missing_ok=True)
    await run_until(inf, api, lambda: sleeps.delays, "the retry")
    assert inf.synced.is_set() and sleeps.delays == [30.0]
    api = Api([NotFound(404, "NotFound", "no")], [])
    sleeps = Sleeps()
    inf = informer(api, Consumer(), sleeps)
    await run_until(inf, api, lambda: sleeps.delays, "the retry")
    assert not inf.synced.is_set() and "404" in inf.last_error


@pytest.mark.parametrize("code", [500, 403])
async def test_other_watch_errors_back_off_and_resume(code: int) -> None:
    status = {"kind": "Status", "code": code, "reason": "InternalError", "message": "boom"}
    api = Api([[listed(rv=10)]], [[ev("ERROR", status)]])
    sleeps = Sleeps()
    inf = informer(api, Consumer(), sleeps)
    await run_until(inf, api, lambda: len(api.watch_calls) == 2, "the second watch")
    assert sleeps.delays == [1.0] and len(api.list_calls) == 1
    assert [rv for rv, _ in api.watch_calls] == ["10", "10"]


async def test_an_answer_of_an_unexpected_shape_is_retried_not_fatal() -> None:
    api = Api([[{"kind": "PodList", "metadata": {"resourceVersion": "10"}, "items": [{"no": "metadata"}, 7]}],
               [listed(pod("a", 3), rv=20)]], [[gone_event()]])  # fmt: skip
    c, sleeps = Consumer(), Sleeps()
    inf = informer(api, c, sleeps)
    await run_until(inf, api, lambda: api.watch_calls, "the watch after the retry")
    assert sleeps.delays == [1.0] and ("ADDED", "a", "uid-a") in c.seen
