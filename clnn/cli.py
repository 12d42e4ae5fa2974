"""The ``clnn`` command line: ``clnn devices`` lists every OpenCL device; ``clnn tune`` tunes kernels."""

from __future__ import annotations

import argparse
import sys

from . import tune
from .device import DeviceError, device_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="clnn", description="clnn: portable OpenCL neural-network toolkit")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("devices", help="list every OpenCL device on every platform")
    tune.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "tune":
        return tune.main(args)
    if args.command == "devices":
        try:
            print(device_table())
        except DeviceError as err:
            print(f"clnn: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
