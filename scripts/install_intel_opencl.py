"""Make Intel's CPU OpenCL runtime (PyPI's ``intel-opencl-rt``) visible to PyOpenCL in this environment.

The wheel ships ``libintelocl.so`` into ``<prefix>/lib`` and an ``.icd`` file whose path points nowhere
useful, and it needs ``intel-cmplr-lib-rt`` without declaring it. PyOpenCL's wheel bundles the ocl-icd
loader, which reads ``.icd`` files from ``pyopencl/.libs/`` (beside its bundled PoCL/Oclgrind ones) and
from the folder named by ``OCL_ICD_VENDORS``. This script writes a one-line ``intel.icd`` holding the
absolute path of ``libintelocl.so`` into one of those places, then checks that the platform shows up.

Usage:
    python scripts/install_intel_opencl.py [--install] [--vendors-dir DIR]

    --install        pip-install intel-opencl-rt and intel-cmplr-lib-rt first (``pip install 'clnn[intel]'``
                     does the same).
    --vendors-dir    write the .icd into DIR instead of pyopencl/.libs; then set OCL_ICD_VENDORS=DIR to use
                     it (a folder there adds to the bundled platforms, it does not replace them).

Afterwards ``CLNN_DEVICE=intel python -m pytest`` runs the suite on Intel's runtime.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

PACKAGES = ("intel-opencl-rt", "intel-cmplr-lib-rt")


def find_libintelocl() -> Path:
    """The absolute path of ``libintelocl.so`` installed by the ``intel-opencl-rt`` wheel."""
    try:
        files = importlib.metadata.files("intel-opencl-rt") or []
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(
            "intel-opencl-rt is not installed in this environment: run this script with --install, "
            "or `pip install intel-opencl-rt intel-cmplr-lib-rt`"
        ) from None
    for f in files:
        if f.name == "libintelocl.so":
            path = Path(f.locate()).resolve()
            if path.is_file():
                return path
    candidate = Path(sys.prefix) / "lib" / "libintelocl.so"
    if candidate.is_file():
        return candidate.resolve()
    raise SystemExit(f"intel-opencl-rt is installed but libintelocl.so is not in {candidate.parent}")


def pyopencl_libs() -> Path:
    """``pyopencl/.libs``: the folder the wheel's bundled ICD loader reads ``.icd`` files from."""
    spec = importlib.util.find_spec("pyopencl")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pyopencl is not installed in this environment")
    libs = Path(next(iter(spec.submodule_search_locations))) / ".libs"
    if not libs.is_dir():
        raise SystemExit(
            f"{libs} does not exist: this PyOpenCL is not a PyPI wheel with its own ICD loader; "
            "use --vendors-dir with a folder your system loader reads (e.g. /etc/OpenCL/vendors)"
        )
    return libs


def write_icd(lib: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    icd = folder / "intel.icd"
    icd.write_text(f"{lib}\n")
    return icd


def check_visible(vendors_dir: Path | None) -> str:
    """Names of the Intel devices a fresh interpreter sees; exits with the reason when there are none."""
    env = dict(os.environ)
    if vendors_dir is not None:
        env["OCL_ICD_VENDORS"] = str(vendors_dir)
    probe = (
        "import pyopencl as cl\n"
        "for p in cl.get_platforms():\n"
        "    if 'intel' in p.name.lower():\n"
        "        print(p.name, '|', ', '.join(d.name.strip() for d in p.get_devices()))\n"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    if res.returncode != 0 or not res.stdout.strip():
        raise SystemExit(
            "Intel's OpenCL platform did not appear after writing the .icd file.\n"
            f"stdout: {res.stdout.strip()}\nstderr: {res.stderr.strip()[-2000:]}"
        )
    return res.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--install", action="store_true", help=f"pip-install {' and '.join(PACKAGES)} first")
    parser.add_argument("--vendors-dir", type=Path, help="write intel.icd here instead of pyopencl/.libs")
    args = parser.parse_args(argv)
    if args.install:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    lib = find_libintelocl()
    folder = args.vendors_dir.resolve() if args.vendors_dir else pyopencl_libs()
    icd = write_icd(lib, folder)
    print(f"wrote {icd} -> {lib}")
    print(f"Intel OpenCL: {check_visible(folder if args.vendors_dir else None)}")
    if args.vendors_dir:
        print(f"use it with: OCL_ICD_VENDORS={folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
