"""The Slurm REST client's reads of the cluster itself: its controllers (ping), its partitions,
and the accounts and QOS of its accounting. A part of :class:`.client.SlurmClient`."""

from __future__ import annotations

from .errors import SlurmUnavailable
from .models import PartitionInfo, PartitionLimits, SlurmConf
from .session import SlurmSession
from .wire import ControllerPing


class ClusterCalls(SlurmSession):
    """Ping the controllers; list partitions, accounts and QOS; read slurm.conf and a partition."""

    async def ping(self) -> list[ControllerPing]:
        """Every slurmctld's ping result; raises SlurmUnavailable when none responds."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path("ping"))
        pings = codec.decode_ping(reply.body)
        if not any(p.responding for p in pings):
            hosts = ", ".join(p.hostname for p in pings) or "none listed"
            raise SlurmUnavailable(f"no slurmctld responds to slurmrestd's ping (controllers: {hosts})")
        return pings

    async def list_accounts(self) -> list[str] | None:
        """The names of every account in Slurm's accounting; None when slurmrestd serves no
        accounting endpoints (started without its slurmdbd plugin, or no slurmdbd)."""
        return await self._db_names("accounts")

    async def list_qos(self) -> list[str] | None:
        """The names of every QOS in Slurm's accounting; None as for :meth:`list_accounts`."""
        return await self._db_names("qos")

    async def _db_names(self, key: str) -> list[str] | None:
        codec = await self._get_codec()
        reply = await self._request("GET", codec.db_path(f"{key}/"), not_found_ok=True)
        if reply.status == 404:
            return None
        return codec.decode_db_names(reply.body, key)

    async def list_partitions(self) -> list[str]:
        """The names of every partition, in one request."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path("partitions/"))
        return codec.decode_partition_names(reply.body)

    async def slurm_conf(self) -> SlurmConf | None:
        """slurm.conf's settings, in one request; None when the REST API version has no such call
        (before v0.0.45, Slurm 26.05)."""
        codec = await self._get_codec()
        path = codec.conf_path()
        if path is None:
            return None
        reply = await self._request("GET", path)
        return codec.decode_conf(reply.body)

    async def partition(self, name: str) -> PartitionInfo | None:
        """One partition (None: Slurm has no partition of that name)."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path(f"partition/{name}"), not_found_ok=True)
        if reply.status == 404:
            return None
        return codec.decode_partition(reply.body)

    async def partition_limits(self) -> list[PartitionLimits]:
        """Every partition's time limits and the accounts and QOS it allows, in one request."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path("partitions/"))
        return codec.decode_partition_limits(reply.body)
