"""Which namespaces are the bridge's: the one rule the webhook's ``namespaceSelector``, the operator
and the extender share (docs/design/managed-pods-and-nodes.md, "Only the bridge's pods, and nodes
kube-scheduler can use").

The webhook sees only managed namespaces, so only their pods pass its checks (reserved keys,
annotations, the TenantPolicy). A pod elsewhere may still name the bridge's scheduler
(``schedulerName: slurm-bridge``, set by its author): the operator makes no PlaceholderJob and no
Slurm job for it (a Warning Event says why, once), and the extender never binds it, so it stays
Pending with that message rather than running unchecked.

With ``managedNamespaces`` the name decides; with ``managedNamespaceSelector`` the namespace's
labels do, read from a watch cache (:class:`slurm_bridge.kube.cache.WatchCache` of namespaces).
Until that cache is synced the answer is None: callers wait, they never guess.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from slurm_bridge.core.config import Config

# The labels of a namespace, None while not known (the cache not synced, the namespace not found).
Labels = Callable[[str], Awaitable[Mapping[str, str] | None]]


def uses_labels(config: Config) -> bool:
    """Whether the namespaces' labels decide (a non-empty ``managedNamespaceSelector``)."""
    selector = config.managedNamespaceSelector
    return selector is not None and not selector.is_empty()


def is_managed(config: Config, namespace: str, labels: Mapping[str, str] | None) -> bool | None:
    """Whether ``namespace`` is managed; None when its labels decide and are not known."""
    if uses_labels(config) and labels is None:
        return None
    return config.is_managed_namespace(namespace, dict(labels or {}))


def not_managed_message(config: Config, namespace: str, scheduler: str = "") -> str:
    """What a pod of an unmanaged namespace that names the bridge's scheduler is told."""
    if uses_labels(config):
        selector = config.managedNamespaceSelector
        assert selector is not None
        how = f"namespaces whose labels match {selector.to_kubernetes()}"
    else:
        how = f"the namespaces {config.managedNamespaces}" if config.managedNamespaces else "no namespace"
    return (
        f"namespace {namespace} is not managed by slurm-bridge (config managedNamespaces / "
        f"managedNamespaceSelector: {how}), so its admission checks never saw this pod: no Slurm job is made for "
        f"it and it is not scheduled. Create it in a managed namespace (or have an administrator label this one "
        f"and create the pod again), or give it another schedulerName than {scheduler or config.schedulerName!r}"
    )


class ManagedNamespaces:
    """``judge(namespace)``: the rule with the labels from ``labels`` (asked only when they decide)."""

    def __init__(self, config: Config, labels: Labels | None = None) -> None:
        self.config = config
        self._labels = labels

    async def judge(self, namespace: str) -> bool | None:
        if not uses_labels(self.config):
            return is_managed(self.config, namespace, None)
        found = None if self._labels is None else await self._labels(namespace)
        return is_managed(self.config, namespace, found)

    def message(self, namespace: str) -> str:
        return not_managed_message(self.config, namespace)
