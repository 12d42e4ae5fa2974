"""``clnn doctor``: what OpenCL sees here, whether each device computes correctly, and how to fix the rest.

OpenCL programs reach a vendor's driver through an ICD loader, which reads one-line ``.icd`` files (each
holding a vendor library's path) from its folders. PyOpenCL's PyPI wheel bundles its own loader, which
reads ``pyopencl/.libs`` (beside its PoCL and Oclgrind entries) plus ``/etc/OpenCL/vendors``, or instead of
the latter the folder in ``OCL_ICD_VENDORS``. A runtime installed without an entry there is invisible:
an NVIDIA driver mounted into a container without ``nvidia.icd``, ROCm in a folder the loader does not
read, Intel's CPU runtime from PyPI. The doctor finds such libraries and :func:`register` writes their
entries into ``pyopencl/.libs`` (no root needed, and they last as long as this environment's PyOpenCL).

Unlike the rest of clnn, this module asks PyOpenCL for platforms directly: a platform that lists no
devices is exactly what the doctor must report, and :func:`clnn.devices` skips it.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyopencl as cl

from . import pocl_target
from .device import Device, DeviceError, devices
from .files import atomic_write
from .ops import tensor

__all__ = ["Vendor", "Library", "VENDORS", "default_roots", "find_libraries", "icd_folder", "loader_folders",
           "registered", "unregistered", "register", "pci_gpu_vendors", "check_device", "doctor"]


@dataclass(frozen=True)
class Vendor:
    """A vendor's OpenCL runtime: the library to look for and how to get it when it is missing."""

    key: str  # also the name of the .icd file the doctor writes
    title: str
    library: str
    pci_vendor: str  # PCI vendor id of the vendor's GPUs ("" for a CPU runtime)
    install: str


VENDORS = (
    Vendor("nvidia", "NVIDIA", "libnvidia-opencl.so.1", "0x10de",
           "install the NVIDIA driver's OpenCL library (Ubuntu: libnvidia-compute-<driver version>); in a "
           "container, start it with NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all) so the NVIDIA "
           "Container Toolkit mounts libnvidia-opencl.so.1"),
    Vendor("amdocl64", "AMD ROCm", "libamdocl64.so", "0x1002",
           "install ROCm's OpenCL runtime (rocm-opencl-runtime) and give the user access to /dev/kfd and "
           "/dev/dri (groups render and video); if ROCm lives outside /opt, run `clnn doctor --search DIR`"),
    Vendor("intel-gpu", "Intel GPU (compute-runtime)", "libigdrcl.so", "0x8086",
           "install Intel's compute runtime (Ubuntu: intel-opencl-icd) and give the user access to "
           "/dev/dri/renderD* (group render)"),
    Vendor("intel-cpu", "Intel CPU runtime", "libintelocl.so", "",
           "pip install 'clnn[intel]' (intel-opencl-rt and intel-cmplr-lib-rt), then `clnn doctor --register`"),
)

# Folders under a search root that never hold a vendor's OpenCL library but are large to walk.
_SKIP_DIRS = ("python", "site-packages", "dist-packages", "node_modules", "modules", "firmware", "__pycache__")


@dataclass(frozen=True)
class Library:
    """A vendor's OpenCL library found on disk."""

    vendor: Vendor
    path: Path


def default_roots() -> list[Path]:
    """Where vendors install their OpenCL libraries, this environment's ``lib`` and ``LD_LIBRARY_PATH``."""
    extra = [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return [Path("/usr/lib"), Path("/usr/lib64"), Path("/usr/local"), Path("/opt"), Path(sys.prefix) / "lib", *extra]


def find_libraries(roots: Iterable[Path], max_depth: int = 4) -> list[Library]:
    """Vendor OpenCL libraries under ``roots`` (searched ``max_depth`` folders deep), one per file.

    Roots are searched in order; a file reached twice (a symlinked folder, a root inside another) counts once.
    """
    names = {v.library: v for v in VENDORS}
    found: dict[Path, Library] = {}

    def walk(folder: Path, depth: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for e in sorted(entries, key=lambda e: e.name):
            if e.name in names and e.is_file():
                found.setdefault(Path(e.path).resolve(), Library(names[e.name], Path(e.path)))
            elif depth > 0 and e.is_dir(follow_symlinks=False) and not e.name.startswith(_SKIP_DIRS):
                walk(Path(e.path), depth - 1)

    for root in roots:
        walk(Path(root), max_depth)
    return list(found.values())


def _bundled_folder() -> Path | None:
    libs = Path(cl.__file__).resolve().parent / ".libs"
    return libs if any(libs.glob("libOpenCL*")) else None


def icd_folder() -> Path:
    """``pyopencl/.libs``: where the PyPI wheel's bundled ICD loader reads ``.icd`` files for this environment.

    Raises:
        DeviceError: this PyOpenCL has no bundled loader (a conda or source build uses the system's).
    """
    libs = _bundled_folder()
    if libs is None:
        raise DeviceError(
            f"{Path(cl.__file__).parent} has no bundled ICD loader (PyOpenCL was not installed from a PyPI "
            "wheel), so entries go where the system's loader reads them: --icd-dir /etc/OpenCL/vendors (as "
            "root), or --icd-dir DIR with OCL_ICD_VENDORS=DIR set wherever clnn runs"
        )
    return libs


def loader_folders() -> list[Path]:
    """The folders the ICD loader reads: ``OCL_ICD_VENDORS`` (else ``/etc/OpenCL/vendors``), then ``pyopencl/.libs``."""
    bundled = _bundled_folder()
    return [Path(os.environ.get("OCL_ICD_VENDORS") or "/etc/OpenCL/vendors")] + ([bundled] if bundled else [])


def registered(folders: Iterable[Path]) -> dict[Path, str]:
    """Every ``.icd`` file in ``folders`` (or a folder that is itself one file) and the library it names."""
    entries: dict[Path, str] = {}
    for folder in folders:
        files = sorted(folder.glob("*.icd")) if folder.is_dir() else [folder] if folder.is_file() else []
        for f in files:
            try:
                entries[f] = f.read_text().strip()
            except OSError:
                continue
    return entries


def _loads(entry: str, lib: Path) -> bool:
    """Whether an ``.icd`` entry loads ``lib``: the same file, or its bare name (found by the dynamic linker)."""
    if "/" not in entry:
        return entry == lib.name
    return Path(entry).resolve() == lib.resolve()


def unregistered(libs: Iterable[Library], entries: dict[Path, str]) -> list[Library]:
    """The libraries no entry names, at most one per vendor (the first found)."""
    missing: dict[str, Library] = {}
    covered = {lib.vendor.key for lib in libs if any(_loads(e, lib.path) for e in entries.values())}
    for lib in libs:
        if lib.vendor.key not in covered:
            missing.setdefault(lib.vendor.key, lib)
    return list(missing.values())


def register(libs: Iterable[Library], folder: Path) -> list[tuple[Path, bool]]:
    """Write ``<folder>/<vendor>.icd`` naming each library, atomically; returns (file, changed) per library.

    An entry that already holds the same path is left alone, so registering twice changes nothing.
    """
    written = []
    for lib in libs:
        icd = folder / f"{lib.vendor.key}.icd"
        text = f"{lib.path.absolute()}\n"
        if icd.is_file() and icd.read_text() == text:
            written.append((icd, False))
            continue
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(icd, text=True, chmod=0o644) as f:  # the temp name does not end in .icd: loaders skip it
            f.write(text)
        written.append((icd, True))
    return written


def pci_gpu_vendors(pci_root: Path = Path("/sys/bus/pci/devices")) -> set[str]:
    """PCI vendor ids (``"0x10de"``) of the display controllers (class 0x03) on the PCI bus."""
    found = set()
    for dev in pci_root.glob("*"):
        try:
            if (dev / "class").read_text().strip().startswith("0x03"):
                found.add((dev / "vendor").read_text().strip().lower())
        except OSError:
            continue
    return found


def check_device(dev: Device, n: int = 37) -> str | None:
    """Build and run clnn's add kernel on ``dev``; ``None`` if it matches NumPy exactly, else what went wrong."""
    rng = np.random.default_rng()
    a, b = rng.standard_normal((2, n), dtype=np.float32)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            got = (tensor(a, device=dev) + tensor(b, device=dev)).numpy()
    except Exception as err:  # the doctor reports any failure, whatever raised it
        return f"{type(err).__name__}: {err}"
    bad = np.flatnonzero(got != a + b)
    if bad.size:
        return f"wrong result: {bad.size} of {n} elements differ from NumPy (first at {bad[0]}: {got[bad[0]]})"
    return None


def _platforms(problems: list[str]) -> list[str]:
    lines = []
    try:
        platforms = cl.get_platforms()
    except cl.Error as err:
        platforms = []
        lines.append(f"  the ICD loader found no platform ({err})")
    try:
        devs = devices()
    except DeviceError:
        devs = []
    for p_index, p in enumerate(platforms):
        lines.append(f"  platform {p_index}: {p.name.strip()} ({p.version.strip()})")
        mine = [d for d in devs if d.platform_index == p_index]
        if not mine:
            try:
                reason = f"{len(p.get_devices())} devices"
            except cl.Error as err:
                reason = str(err)
            lines.append(f"    no usable device: {reason}")
            problems.append(f"platform {p.name.strip()!r} lists no device ({reason}): its driver is installed "
                            "but cannot reach the hardware (device files in /dev, permissions, kernel module)")
        for d in mine:
            start = time.perf_counter()
            error = check_device(d)
            verdict = "kernel ok" if error is None else "KERNEL FAILED"
            lines.append(f"    [{d.index}] {d.platform_index}:{d.device_index}  {d.name}  {d.type}  "
                         f"{d.compute_units} CUs  {verdict} ({time.perf_counter() - start:.1f} s)")
            target = pocl_target.repaired.get(d.cl_device.int_ptr)
            if target is not None:
                lines.append(f"        PoCL's LLVM does not know this processor: its kernels target {target}")
            if error is not None:
                problems.append(f"{d} failed the kernel check: {error}")
    if not platforms:
        problems.append("no OpenCL platform: pip install 'clnn[pocl]' gives a CPU device anywhere; for a GPU "
                        "see the fixes below and README.md's GPU section")
    return lines


def _libraries(libs: list[Library], icd_dir: Path | None, fix: bool, problems: list[str]) -> list[str]:
    folders = loader_folders()
    entries = registered(folders)
    lines = []
    for lib in libs:
        by = [f for f, e in entries.items() if _loads(e, lib.path)]
        lines.append(f"  {lib.vendor.title}: {lib.path}  ({f'registered by {by[0]}' if by else 'NOT registered'})")
    lines = lines or ["  none found"]
    missing = unregistered(libs, entries)
    if fix and missing and icd_dir is not None:
        try:
            for icd, changed in register(missing, icd_dir):
                lines.append(f"  {'wrote' if changed else 'kept'} {icd} -> {icd.read_text().strip()}")
            missing = []
        except OSError as err:
            problems.append(f"cannot write the entries: {err}; pass --icd-dir DIR and set OCL_ICD_VENDORS=DIR")
        if icd_dir not in folders:
            lines.append(f"  the loader reads {icd_dir} only where OCL_ICD_VENDORS={icd_dir} is set")
    where = icd_dir or "DIR"
    command = "clnn doctor --register" + ("" if icd_dir and icd_dir == _bundled_folder() else f" --icd-dir {where}")
    for lib in missing:
        problems.append(
            f"{lib.vendor.title} library {lib.path} is installed, but no .icd entry names it, so OpenCL does not "
            f"see it. Fix: `{command}` writes {where}/{lib.vendor.key}.icd for this environment (no root "
            f"needed); or system-wide: echo {lib.path} | sudo tee /etc/OpenCL/vendors/{lib.vendor.key}.icd")
    for f, e in entries.items():
        if "/" in e and not Path(e).exists():
            problems.append(f"{f} names {e}, which does not exist: delete that entry or reinstall the runtime")
    return lines


def _gpu_hints(pci_vendors: set[str], libs: list[Library], problems: list[str]) -> list[str]:
    try:  # the hardware as the driver reports it, not as a CLNN_LIMITS pose shows it
        gpus = [d for d in devices() if d.real.get("type", d.type) == "gpu"]
    except DeviceError:
        gpus = []
    lines = []
    for v in VENDORS:
        if not v.pci_vendor or v.pci_vendor not in pci_vendors:
            continue
        word = v.title.split()[0].lower()
        seen = [str(d) for d in gpus
                if word in f"{d.real.get('vendor', d.vendor)} {d.platform_name} {d.platform_vendor}".lower()]
        lines.append(f"  {v.title} GPU on the PCI bus; OpenCL device: {', '.join(seen) or 'none'}")
        if not seen and all(lib.vendor != v for lib in libs):
            problems.append(f"a {v.title} GPU is present but its OpenCL library {v.library} is not found: {v.install}")
    return lines or ["  none on the PCI bus (or /sys/bus/pci is not visible here)"]


def doctor(register_missing: bool = False, icd_dir: Path | None = None, search: Sequence[Path] = ()) -> int:
    """Print what OpenCL sees, check each device, find unregistered runtimes; 1 while a problem remains.

    Args:
        register_missing: write an ``.icd`` entry for each vendor library found but not registered.
        icd_dir: where to write them (default :func:`icd_folder`).
        search: more folders to look for vendor libraries in, before :func:`default_roots`.
    """
    problems: list[str] = []
    try:
        icd_dir = icd_dir.absolute() if icd_dir else icd_folder()
    except DeviceError as err:
        icd_dir = None
        problems.append(str(err))
    libs = find_libraries([*search, *default_roots()])
    print(f"clnn doctor: Python {sys.executable}, PyOpenCL {cl.VERSION_TEXT}")
    print("\nICD loader folders (each .icd file there names one vendor library):")
    print("\n".join(f"  {f}{'' if f.is_dir() else '  (absent)'}" for f in loader_folders()))
    # registering comes before the first platform query, so this process already sees the new entries
    print("\nVendor OpenCL libraries on this machine:")
    print("\n".join(_libraries(libs, icd_dir, register_missing, problems)))
    print("\nPlatforms and devices (each device adds two vectors with clnn; the sum must match NumPy):")
    print("\n".join(_platforms(problems)))
    print("\nGPUs:")
    print("\n".join(_gpu_hints(pci_gpu_vendors(), libs, problems)))
    if not problems:
        print("\nNo problems found.")
        return 0
    print(f"\n{len(problems)} problem{'s' if len(problems) > 1 else ''}:")
    print("\n".join(f"  {i}. {p}" for i, p in enumerate(problems, 1)))
    return 1
