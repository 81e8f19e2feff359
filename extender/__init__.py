"""slurm-bridge extender component."""
