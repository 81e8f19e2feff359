"""The machinery the controllers share: the operator process (kopf wiring, leader election, login),
watch caches and the work queue, the Slurm poll loop."""
