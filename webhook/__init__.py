"""slurm-bridge webhook component."""
