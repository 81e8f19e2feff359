"""The operator's stop (operator/wiring/app.py): every part stops even when one before it fails,
and the Lease is released last, once nothing can write any more."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from slurm_bridge.operator.wiring.app import Operator

pytestmark = pytest.mark.unit


def _part(name: str, stopped: list[str], fails: bool = False) -> Any:
    async def stop() -> None:
        stopped.append(name)
        if fails:
            raise RuntimeError(f"{name}'s task had died")

    return SimpleNamespace(stop=stop, release=stop, aclose=stop)


async def test_every_part_stops_though_one_fails_and_the_lease_goes_last() -> None:
    stopped: list[str] = []

    async def lead() -> None:
        await asyncio.Event().wait()

    never_ends = asyncio.create_task(lead(), name="lead")
    op = Operator(
        kube=_part("kube", stopped),
        lease_kube=_part("lease kube", stopped),
        slurm=_part("slurm", stopped),
        tenants=_part("tenant cache", stopped),
        ctrl=_part("placeholderjobs", stopped),
        tenant_status=_part("tenant status", stopped, fails=True),
        nodes=_part("nodes", stopped),
        handoff=_part("handoff", stopped),
        guard=_part("node guard", stopped),
        settings=_part("settings", stopped),
        elector=_part("lease", stopped),
        standby=_part("standby", stopped),
        watches=_part("watches", stopped),
        tasks=[never_ends],
    )
    await asyncio.wait_for(op.stop(), 5)
    assert never_ends.cancelled()
    assert stopped == [
        "tenant status", "handoff", "node guard", "settings", "nodes", "placeholderjobs", "watches",
        "tenant cache", "lease",
    ]  # fmt: skip
    await op.close()
    assert stopped[-3:] == ["slurm", "kube", "lease kube"]
