"""Kubernetes access: the client and its credentials, list-then-watch caches, discovery of the
served APIs, and the objects the bridge writes (PlaceholderJobs, conditions, taints). It stands
on the rules: its tenancy cache indexes TenantPolicies by ``slurm_bridge.rules.tenancy``
(docs/architecture.md, "Layout")."""
