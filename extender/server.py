"""HTTP server for the kube-scheduler extender: /filter, /bind, /healthz."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from slurm_bridge import names
from slurm_bridge.core import logs, metrics, objects
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.extender.filter import filter_nodes
from slurm_bridge.extender.protocol import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
)
from slurm_bridge.kube.cache import WatchCache
from slurm_bridge.kube.client import FAILED
from slurm_bridge.kube.seams import ExtenderKube
from slurm_bridge.rules.namespaces import ManagedNamespaces

log = logging.getLogger(__name__)
KUBE_KEY = web.AppKey("kube", ExtenderKube)


class JobIds:
    """The Slurm job id of each pod the scheduler filtered, by pod uid, for its bind's log line.

    The bind request names only the pod, and the scheduler binds right after it filters, so a
    few thousand recent entries suffice; losing them (a restart) only leaves a log line without
    ``jobId``.
    """

    LIMIT = 4096

    def __init__(self) -> None:
        self._ids: OrderedDict[str, int] = OrderedDict()

    def put(self, uid: str, job_id: int) -> None:
        self._ids[uid] = job_id
        self._ids.move_to_end(uid)
        if len(self._ids) > self.LIMIT:
            self._ids.popitem(last=False)

    def pop(self, uid: str) -> int | None:
        return self._ids.pop(uid, None)


JOB_IDS_KEY = web.AppKey("job_ids", JobIds)
NAMESPACES_KEY = web.AppKey("namespaces", ManagedNamespaces)


async def _json(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError as e:
        raise web.HTTPBadRequest(text=f"request body is not JSON: {e}") from None


async def handle_filter(request: web.Request) -> web.Response:
    started = time.monotonic()
    try:
        args = ExtenderArgs.model_validate(await _json(request))
    except (ValidationError, web.HTTPBadRequest) as e:
        metrics.extender_call("filter", "bad_request", time.monotonic() - started)
        if isinstance(e, web.HTTPBadRequest):
            raise
        raise web.HTTPBadRequest(text=f"not ExtenderArgs: {e}") from None
    meta = objects.meta(args.Pod)
    label = str((meta.get("labels") or {}).get(names.LABEL_SLURM_JOB_ID, ""))
    job_id = int(label) if label.isdigit() else None
    logs.bind(namespace=meta.get("namespace"), name=meta.get("name"), jobId=job_id)
    if job_id is not None and meta.get("uid"):
        request.app[JOB_IDS_KEY].put(str(meta["uid"]), job_id)
    namespace = str(meta.get("namespace") or "")
    managed = await request.app[NAMESPACES_KEY].judge(namespace)
    if managed is None:  # the namespaces' labels are not read yet: the scheduler tries again
        metrics.extender_call("filter", "error", time.monotonic() - started)
        error = f"namespace {namespace}: its labels are not read yet (managedNamespaceSelector); try again"
        return web.json_response(ExtenderFilterResult(Error=error).model_dump(exclude_none=True))
    result = filter_nodes(args, managed=managed, why=request.app[NAMESPACES_KEY].message(namespace))
    log.debug("filter %s/%s -> %s", meta.get("namespace"), meta.get("name"), result.NodeNames or result.Nodes)
    response = web.json_response(result.model_dump(exclude_none=True))
    passed = bool(result.NodeNames) or bool(result.Nodes and result.Nodes.items)
    metrics.extender_call("filter", "passed" if passed else "no_node", time.monotonic() - started)
    return response


async def handle_bind(request: web.Request) -> web.Response:
    started = time.monotonic()
    try:
        args = ExtenderBindingArgs.model_validate(await _json(request))
    except (ValidationError, web.HTTPBadRequest) as e:
        metrics.extender_call("bind", "bad_request", time.monotonic() - started)
        if isinstance(e, web.HTTPBadRequest):
            raise
        raise web.HTTPBadRequest(text=f"not ExtenderBindingArgs: {e}") from None
    logs.bind(namespace=args.PodNamespace, name=args.PodName, jobId=request.app[JOB_IDS_KEY].pop(args.PodUID))
    kube = request.app[KUBE_KEY]
    if await request.app[NAMESPACES_KEY].judge(args.PodNamespace) is not True:
        # Never reached through the filter; a bind the filter did not pass is refused all the same.
        metrics.extender_call("bind", "error", time.monotonic() - started)
        error = request.app[NAMESPACES_KEY].message(args.PodNamespace)
        return web.json_response(ExtenderBindingResult(Error=error).model_dump())
    try:
        # The uid precondition binds only the pod incarnation the scheduler filtered.
        await kube.bind_pod(args.PodNamespace, args.PodName, args.PodUID, args.Node)
    except FAILED as e:
        log.warning("bind %s/%s to %s failed: %s", args.PodNamespace, args.PodName, args.Node, e)
        metrics.extender_call("bind", "error", time.monotonic() - started)
        return web.json_response(ExtenderBindingResult(Error=str(e)).model_dump())
    log.info("bound %s/%s to %s", args.PodNamespace, args.PodName, args.Node)
    metrics.extender_call("bind", "bound", time.monotonic() - started)
    return web.json_response(ExtenderBindingResult().model_dump())


async def handle_health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_health_app() -> web.Application:
    """/healthz, /readyz and /metrics, for a listener the kubelet and Prometheus can reach
    (extenderHealthListen) while /filter and /bind stay on loopback."""
    app = web.Application()
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/readyz", handle_health)
    app.router.add_get("/metrics", metrics.handler(metrics.EXTENDER))
    return app


def make_app(kube: ExtenderKube, namespaces: ManagedNamespaces, cache: WatchCache | None = None) -> web.Application:
    """``namespaces``: which pods the extender may place (slurm_bridge/rules/namespaces.py); ``cache``:
    the namespaces' labels it reads them from (managedNamespaceSelector), run with the app."""
    # Nodes lists can be large; each request's log lines name its own pod only.
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[logs.request_scope])
    app[KUBE_KEY] = kube
    app[NAMESPACES_KEY] = namespaces
    if cache is not None:

        async def _watch(app: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(cache.run(), name="watch-namespaces")
            yield
            await cancel_and_wait([task])

        app.cleanup_ctx.append(_watch)
    app[JOB_IDS_KEY] = JobIds()
    app.router.add_post("/filter", handle_filter)
    app.router.add_post("/bind", handle_bind)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/readyz", handle_health)

    async def _close(app: web.Application) -> None:
        await app[KUBE_KEY].aclose()

    app.on_cleanup.append(_close)
    return app
