"""slurm-bridge: Kubernetes pods scheduled through Slurm."""
