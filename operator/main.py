"""Entry point: slurm-bridge-operator (pods -> PlaceholderJobs -> Slurm jobs, and back)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os

from slurm_bridge.cli import add_common_args, config_or_exit, setup_logging

# Allocations (less deallocations) of tracked objects before the youngest generation is
# collected: Python's 700 is far below one Slurm answer. Decoding jobs/state for 10,000 jobs makes
# about 30,000 short-lived containers; collections in the middle of it moved them into the oldest
# generation, which then forced a full collection every few polls: 10 a minute, 0.4 s each with
# the operator's 430,000 tracked objects, about 7 % of a core idle (docs/performance.md, run 8).
# The answer is freed by reference counting before this many allocations; cycles wait a little
# longer.
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect the youngest generation after GC_YOUNG_THRESHOLD allocations (see above)."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="slurm-bridge-operator",
        description="Mirror managed pods to PlaceholderJobs and PlaceholderJobs to Slurm external jobs.",
    )
    add_common_args(parser)
    parser.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the leader-election Lease (default: $POD_NAMESPACE or default)",
    )
    args = parser.parse_args(argv)
    cfg = config_or_exit(args.config)
    setup_logging(args.log_level, args.log_format)
    tune_gc()
    from slurm_bridge.operator.app import run  # kopf is heavy: import after the arguments are valid

    asyncio.run(run(cfg, args.kubeconfig, args.lease_namespace))


if __name__ == "__main__":
    main()
