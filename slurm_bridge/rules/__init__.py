"""The rules between Kubernetes and Slurm, pure: pods and workloads -> one Slurm job request,
node placement and sharing, DRA devices, tenancy, the handoff's scopes. No I/O; they read
Slurm's data models (``slurm_bridge.slurm.models``) and the configuration, never the
Kubernetes access above them (docs/architecture.md, "Layout")."""
