"""The ``clnn`` command line: ``clnn devices`` lists every OpenCL device, ``clnn doctor`` diagnoses the
set-up, ``clnn tune`` tunes kernels for a device."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import tune
from .device import DeviceError, device_table
from .doctor import doctor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="clnn", description="clnn: portable OpenCL neural-network toolkit")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("devices", help="list every OpenCL device on every platform")
    doc = sub.add_parser("doctor", help="check every device with a kernel, find OpenCL runtimes OpenCL cannot see",
                         description="List each OpenCL platform and device and run a small kernel on each; look "
                         "for vendor OpenCL libraries that are installed but not registered, and say how to fix them.")
    doc.add_argument("--register", action="store_true",
                     help="write an .icd entry for each vendor library found but not registered (no root needed)")
    doc.add_argument("--icd-dir", type=Path, help="the folder --register writes (default: pyopencl/.libs)")
    doc.add_argument("--search", type=Path, action="append", default=[], metavar="DIR",
                     help="also look for vendor libraries under DIR (repeatable)")
    tune.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor(args.register, args.icd_dir, args.search)
    if args.command == "tune":
        return tune.main(args)
    try:
        print(device_table())
    except DeviceError as err:
        print(f"clnn: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
