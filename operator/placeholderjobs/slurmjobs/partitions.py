"""The partitions' limits a job is checked against before the bridge sends it with its own token:
an update (decisions/specupdate.py) and a tenant's job queued by the bridge
(rules/partitionaccess.py). One read of every partition, again after PARTITIONS_TTL_SECONDS, and at
once for a partition not read yet (one made since)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Protocol

from slurm_bridge.slurm.models import PartitionLimits

# The partitions' limits are read again after this long.
PARTITIONS_TTL_SECONDS = 30.0


class PartitionReads(Protocol):
    async def partition_limits(self) -> list[PartitionLimits]: ...


class Partitions:
    """Every partition's limits, read when asked for and kept PARTITIONS_TTL_SECONDS."""

    def __init__(self, slurm: PartitionReads) -> None:
        self.slurm = slurm
        # The partitions' limits, and when they were read (monotonic).
        self._read: tuple[float, dict[str, PartitionLimits] | None] = (0.0, None)

    async def limits(self, wanted: Iterable[str] = ()) -> dict[str, PartitionLimits]:
        """Every partition by name; read again when stale or when one of ``wanted`` is missing."""
        stamp, partitions = self._read
        stale = partitions is None or time.monotonic() - stamp > PARTITIONS_TTL_SECONDS
        if partitions is None or stale or not set(wanted) <= partitions.keys():
            partitions = {p.name: p for p in await self.slurm.partition_limits()}
            self._read = (time.monotonic(), partitions)
        return partitions
