"""The ground floor every other stands on: the configuration, logs, metrics, the process's
lifetime (signals, shutdown, tasks), and Kubernetes' value formats and objects. It imports only
``slurm_bridge.names`` (docs/architecture.md, "Layout")."""
