"""Entry point: slurm-bridge-operator (pods -> PlaceholderJobs -> Slurm jobs, and back)."""

from __future__ import annotations

from slurm_bridge.core.signals import exit_on_signal

# Before the second of imports below: from here on a SIGTERM ends the process with status 0.
exit_on_signal()

import argparse  # noqa: E402
import os  # noqa: E402

from slurm_bridge.core import shutdown  # noqa: E402
from slurm_bridge.core.cli import add_common_args, config_or_exit, setup_logging  # noqa: E402


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
    from slurm_bridge.operator.wiring.app import run  # kopf is heavy: import after the arguments are valid

    # Until run returns, SIGTERM cancels it wherever it is (slurm_bridge/core/shutdown.py).
    # The namespace the operator's pod runs in (the chart sets POD_NAMESPACE): its components' pods
    # may run on a Slurm node (docs/nodes.md); a bridge of local processes has none.
    own_namespace = os.environ.get("POD_NAMESPACE") or None
    shutdown.run(lambda stop: run(cfg, args.kubeconfig, args.lease_namespace, stop, own_namespace))


if __name__ == "__main__":
    main()
