"""The node controller: Kubernetes cordons and Slurm DRAIN state kept in step; dynamic nodes."""
