"""The node calls of the Slurm REST client: list (or "unchanged since"), update, create and
delete dynamic nodes. A part of :class:`.client.SlurmClient`."""

from __future__ import annotations

from typing import Any

from .models import NodeInfo
from .session import SlurmSession


class NodeCalls(SlurmSession):
    """List Slurm's nodes, change their state, and make or remove dynamic ones."""

    async def list_nodes(self) -> list[NodeInfo]:
        """Every node, in one request."""
        return (await self.list_nodes_since(None))[0] or []

    async def list_nodes_since(self, since: int | None) -> tuple[list[NodeInfo] | None, int | None]:
        """Every node, or None when no node changed after ``since`` (a ``last_update`` this method
        returned; Slurm's clock), and the ``last_update`` to pass next time.

        An unchanged table is answered with no body (slurmrestd's 304), so a poll of 1,000 idle
        nodes costs a few bytes instead of about 2.5 MB to send and decode. slurmctld answers
        "unchanged" only when nothing changed from the second of ``since`` on, so a change made
        in the same second as the last list is not missed (checked on Slurm 26.05).
        """
        codec = await self._get_codec()
        params = {"update_time": str(int(since))} if since is not None else None

        def decode(status: int, body: Any) -> tuple[list[NodeInfo] | None, int | None]:
            if since is not None and codec.unchanged_since(status, body, "nodes"):
                return None, since
            return codec.decode_nodes(body), codec.last_update(body)

        reply = await self._request("GET", codec.path("nodes"), params=params, decode=decode)
        nodes: tuple[list[NodeInfo] | None, int | None] = reply.value
        return nodes

    async def update_node(
        self, name: str, *, state: str | None = None, reason: str | None = None, comment: str | None = None
    ) -> None:
        """Set a node's state and/or reason, or its comment.

        ``state`` is one of the state verbs of ``scontrol update node`` as the REST API names them:
        DRAIN (Slurm requires a ``reason``), RESUME (ends DRAIN and DOWN), UNDRAIN (ends only DRAIN),
        DOWN, FAIL, FUTURE, POWER_DOWN, POWER_UP, ... (``Codec.node_update_states``).
        """
        if state is None and reason is None and comment is None:
            raise ValueError("update_node needs a state, a reason or a comment")
        codec = await self._get_codec()
        body = codec.node_update_body(state, reason, comment)
        await self._request("POST", codec.path(f"node/{name}"), json_body=body)

    async def create_node(self, node_conf: str) -> None:
        """Create a dynamic node from one slurm.conf node line (``NodeName=... State=EXTERNAL``).

        Never sent twice: a second copy would fail with "Node already exists", so the caller
        looks at the node list first. slurmctld needs ``MaxNodeCount`` for dynamic nodes.
        """
        codec = await self._get_codec()
        await self._request(
            "POST", codec.path("new/node/"), json_body=codec.create_node_body(node_conf), idempotent=False
        )

    async def delete_node(self, name: str) -> bool:
        """Delete a dynamic node; False when Slurm has no such node. Slurm refuses a node that still
        runs jobs ("Requested nodes are busy"): drain it and wait until it is idle."""
        codec = await self._get_codec()
        reply = await self._request("DELETE", codec.path(f"node/{name}"), not_found_ok=True)
        return reply.status != 404
