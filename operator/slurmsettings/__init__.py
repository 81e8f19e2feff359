"""Slurm's settings the bridge decides with (preemption, time limits), read in one place."""
