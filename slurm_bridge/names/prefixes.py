"""The key prefixes every other name is built from, shared with the Go slurm-bridge (Slinky), and
the bridge's own name."""

from typing import Final

SLINKY_PREFIX: Final = "slinky.slurm.net/"
SCHEDULER_PREFIX: Final = "scheduler." + SLINKY_PREFIX
SLURMJOB_PREFIX: Final = "slurmjob." + SLINKY_PREFIX
APP_NAME: Final = "slurm-bridge"
