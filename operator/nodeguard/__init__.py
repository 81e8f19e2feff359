"""The node guard: nothing runs on a Slurm node but the bridge's pods holding an allocation there."""
