"""Give PoCL a target CPU its compiler accepts, with the vectors the processor has, on processors newer than its LLVM.

PoCL asks its LLVM for the host CPU's name and passes it to the kernel compiler as ``-target-cpu``. An LLVM
older than the processor (PyPI's PoCL 3.0 carries LLVM 14) names it as best it can, and both ways break builds:

* AMD Zen 5 is ``generic``, which LLVM 14's OpenCL front end rejects: every kernel build fails with "unknown
  target CPU 'generic'" (pocl/pocl issue #1049).
* AMD Zen 4 is ``znver3``, without AVX-512, while PoCL takes its vector widths and features from the processor
  (native float width 16). A program with 512-bit vectors (float16: softmax.cl's rows, the CPU GEMM tiles)
  builds, but PoCL's kernel cache gives it back with no kernels (``clCreateKernel``: INVALID_KERNEL_NAME) in the
  next process: its first build sees "AVX vector return ... without 'avx512f' enabled changes the ABI" (2026-12-06).

PoCL has no setting to name another CPU. A device reports its target in its version string (``... HSTR:
pthread-x86_64-unknown-linux-gnu-generic``). :func:`repair` points the device's target-CPU string at the x86-64
micro-architecture level the processor has (``x86-64-v4`` with AVX-512, ``x86-64-v3`` with AVX2 and FMA, ...), a
name every LLVM since 12 knows, where the target is ``generic`` or lacks the AVX-512 the processor has.
The string lives in PoCL's device record, which no API reaches: it is found as the first pointer in that
record to the target's name and rewritten through ``/proc/self/mem``, which reads unmapped addresses as errors
instead of crashing. The span searched runs past the record's end into whatever the heap holds next, which may
point at such a string too (a test process had one at offset 1288 besides the target's at 640: the repair
gave up on "several", and every PoCL build failed). Anything unexpected (not Linux on x86-64, no such
pointer) leaves the device as it was, and the kernel build's error says why.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

import pyopencl as cl

__all__ = ["repair", "repaired", "unrepaired"]

_RECORD_BYTES = 2048  # the span searched: PoCL 3.0 keeps its target string's pointer at 640 of its device record
# micro-architecture levels (x86-64 psABI), highest first, with the /proc/cpuinfo flags each needs
_LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"}),
    ("x86-64-v2", {"cx16", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
    ("x86-64", set()),
)
# the x86 CPU names LLVM gives processors with AVX-512 (14's, and later ones' for a newer PoCL): any other, on a
# processor with it, is given x86-64-v4
_AVX512_CPUS = frozenset({"knl", "knm", "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                          "icelake-server", "rocketlake", "tigerlake", "sapphirerapids", "x86-64-v4", "znver4",
                          "znver5", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"})
_names: list[ctypes.Array] = []  # the new target strings: PoCL keeps pointing at them for the process' life
repaired: dict[int, str] = {}  # cl_device_id -> the target CPU it was given
unrepaired: dict[int, str] = {}  # cl_device_id -> why a device that needed a target could not be given one


def _target(p: cl.Platform, d: cl.Device) -> str | None:
    """The CPU PoCL device ``d`` of platform ``p`` compiles for, from its version string (``HSTR:
    pthread-<4-part triple>-<cpu>``); ``None`` where clnn cannot change it (another platform, not Linux on x86-64)."""
    if not ("Portable Computing Language" in p.name and platform.system() == "Linux" and platform.machine() == "x86_64"
            and "HSTR:" in d.version):
        return None
    return d.version.split("HSTR:", 1)[1].strip().split("-", 5)[-1]


def _replacement(target: str, flags: set[str]) -> str | None:
    """The level to compile for instead of ``target`` on a processor with ``flags``; ``None`` to keep it."""
    level = _level(flags)
    return level if target == "generic" or (level == "x86-64-v4" and target not in _AVX512_CPUS) else None


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))


def _level(flags: set[str]) -> str:
    """The highest x86-64 micro-architecture level whose features are all in ``flags``."""
    return next(name for name, need in _LEVELS if need <= flags)


def _read(fd: int, address: int, n: int) -> bytes | None:
    if not 4096 <= address < 1 << 63:
        return None
    try:
        return os.pread(fd, n, address)
    except OSError:  # unmapped, or past a mapping's end
        return None


def repair(p: cl.Platform, d: cl.Device) -> str | None:
    """Give PoCL device ``d`` of platform ``p`` the processor's level as its target CPU where its own is ``generic``
    or lacks the processor's AVX-512; the name given, or ``None`` when the device needs nothing or could not be
    repaired."""
    if d.int_ptr in repaired:
        return repaired[d.int_ptr]
    target = _target(p, d)
    name = _replacement(target, _cpu_flags()) if target else None
    if name is None:
        return None
    try:
        fd = os.open("/proc/self/mem", os.O_RDWR)
    except OSError as err:
        unrepaired[d.int_ptr] = f"/proc/self/mem could not be opened ({err})"
        return None
    try:
        record = _read(fd, d.int_ptr, _RECORD_BYTES) or b""
        old = target.encode() + b"\0"
        slots = [off for off in range(0, len(record) - 7, 8)
                 if _read(fd, struct.unpack_from("<Q", record, off)[0], len(old)) == old]
        if not slots:
            unrepaired[d.int_ptr] = f"{len(record)} bytes of its device record read, no pointer to {target!r} in them"
            return None
        text = ctypes.create_string_buffer(name.encode())
        os.pwrite(fd, struct.pack("<Q", ctypes.addressof(text)), d.int_ptr + slots[0])
    except OSError as err:
        unrepaired[d.int_ptr] = f"its device record could not be rewritten ({err})"
        return None
    finally:
        os.close(fd)
    _names.append(text)
    repaired[d.int_ptr] = name
    return name
