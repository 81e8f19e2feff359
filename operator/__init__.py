"""slurm-bridge operator component."""
