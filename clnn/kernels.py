"""Kernel loader and launch helpers: build ``kernels_cl/*.cl`` per device, specialized by ``#define``
parameters, and launch them with checked geometry and packed arguments.

A program is built once per (context, file, defines) in this process; across processes PyOpenCL's own
on-disk cache (keyed on source, includes, options and device) serves the binary.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import ml_dtypes
import numpy as np
import pyopencl as cl

from . import pocl_target, profiler, tuning
from .device import Device, devices

__all__ = [
    "KernelBuildError",
    "kernel_dir",
    "program",
    "kernel",
    "build_options",
    "build_binary",
    "defines",
    "launch",
    "launch_1d",
    "group_size",
    "round_up",
    "real_scalar",
    "descriptor",
    "contiguous_strides",
    "broadcast_strides",
    "op_codes",
]


def _find_kernel_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels_cl", here.parent / "kernels_cl"):  # installed wheel, source checkout
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"kernels_cl/ not found beside {here}: the clnn installation is incomplete")


kernel_dir = _find_kernel_dir()

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_CL_TYPES = {
    np.dtype(np.float16): "half",
    BFLOAT16: "ushort",  # the raw word; kernels built with defines() see it as clnn_dtype.h's bf16
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long",
    np.dtype(np.uint8): "uchar",
    np.dtype(np.bool_): "uchar",
}


class KernelBuildError(RuntimeError):
    """An OpenCL program failed to build; the message carries the file, defines, device and log."""


_programs: dict[tuple, cl.Program] = {}
_kernels: dict[tuple, cl.Kernel] = {}  # (context, file, name, defines as given) -> its cl.Kernel
tuning.on_change(_kernels.clear)  # the storage row's defines are not in that key
_of_program: dict[tuple[int, str], cl.Kernel] = {}  # (program, name) -> the one cl.Kernel made from it
_untyped: set[cl.Kernel] = set()  # made by kernel(), not launched yet: launch() declares their scalar types
_group_cap: dict[cl.Kernel, int] = {}  # kernel -> the RED_WG its local arrays were sized for: launch() checks it
_lock = threading.Lock()
_building: dict[tuple, threading.Lock] = {}  # program key -> the lock its one build holds


@functools.cache
def op_codes(file: str, prefix: str) -> dict[str, int]:
    """The integer codes ``#define PREFIX<NAME> <n>`` in ``kernels_cl/<file>``, as ``{"name": n}``.

    The kernel files are the one source of the numbers that select an op at run time (``U_RELU``,
    ``OPT_ADAM``, ...); the host's tables are read from them, so the two cannot drift apart.
    ``op_codes("unary.h", "U_")["relu"]`` is ``U_RELU``.

    Raises:
        KeyError: ``file`` defines no integer code starting with ``prefix``.
    """
    source = (kernel_dir / file).read_text()
    found = re.findall(rf"^[ \t]*#define[ \t]+{re.escape(prefix)}(\w+)[ \t]+(\d+)\b", source, re.M)
    if not found:
        raise KeyError(f"kernels_cl/{file} defines no integer codes {prefix}*")
    return {name.lower(): int(value) for name, value in found}


def cl_type(dtype: np.dtype) -> str:
    """The OpenCL C name of a NumPy dtype's storage type."""
    return _CL_TYPES[np.dtype(dtype)]


def defines(dtype: np.dtype, half_math: bool = False, **extra: object) -> dict[str, object]:
    """``#define``s selecting the element type in ``clnn_dtype.h``, plus the kernel's own ``extra`` ones.

    float16 is stored as half and computed in float32, except with ``half_math`` (for devices with
    ``cl_khr_fp16``), where the arithmetic itself is half precision. Kernels that accumulate (GEMM,
    reductions) keep float32 accumulation and never ask for it. bfloat16 is stored as 16-bit words and
    always computed in float32.
    """
    dt = np.dtype(dtype)
    if dt == BFLOAT16:
        return {"STORE_T": "bf16", "REAL_T": "float", "STORE_BF16": 1, "STORE_HALF": 0, "USE_FP64": 0, **extra}
    store = cl_type(dt)
    if half_math and dt == np.float16:
        return {"STORE_T": "half", "REAL_T": "half", "STORE_HALF": 0, "USE_FP64": 0, "USE_FP16": 1, **extra}
    return {
        "STORE_T": store,
        "REAL_T": "float" if dt == np.float16 else store,
        "STORE_HALF": int(dt == np.float16),
        "USE_FP64": int(dt == np.float64),
        **extra,
    }


@functools.cache
def _device_options(cl_device: cl.Device) -> tuple[str, ...]:
    """Options every program gets on ``cl_device``: float32 division and square root rounded correctly where the
    device offers it, as CUDA (and PyTorch on it) does by default. NVIDIA's OpenCL otherwise divides within 2 ulp
    and may fuse a quotient's multiply into the sum it is added to, so two kernels dividing the same numbers
    disagreed in the last bit (an H200: avg_pool2d's gradient by pixel and by row)."""
    exact = cl_device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
    return ("-cl-fp32-correctly-rounded-divide-sqrt",) if exact else ()


def _options(dev: Device, defines: dict[str, object]) -> list[str]:
    """Build options: ``defines`` as -D, the include path, :func:`_device_options`, and a tile's REGS (at most that
    many registers a work-item) as NVIDIA's ``-cl-nv-maxrregcount`` on its own runtime (elsewhere a define alone)."""
    regs = int(defines.get("REGS", 0) or 0)
    cap = (f"-cl-nv-maxrregcount={regs}",) if regs and runs_ptx(dev) else ()
    return [f"-D{k}={v}" for k, v in sorted(defines.items())] + [f"-I{kernel_dir}", *_device_options(dev.cl_device),
                                                                 *cap]


def _full_defines(dev: Device, defines: dict[str, object] | None) -> dict[str, object]:
    """``defines`` with the device's storage conversions (``tuning.TABLE["storage"]``, and HALF_CONVERT where it
    has cl_khr_fp16) under them; with gemm.h's MMA, whether its runtime takes NVIDIA's PTX (MMA_PTX), and with its
    ASYNC, whether that PTX has cp.async (ASYNC_PTX)."""
    out = {**tuning.params(dev, "storage"), "HALF_CONVERT": int(dev.fp16), **(defines or {})}
    if out.get("MMA"):
        out["MMA_PTX"] = int(runs_ptx(dev))
    if out.get("ASYNC"):
        out["ASYNC_PTX"] = int(runs_ptx(dev) and sm80(dev))
    return out


def runs_ptx(dev: Device) -> bool:
    """Whether ``dev``'s runtime is NVIDIA's own, whose compiler takes inline PTX (not a device posing as it)."""
    return "nvidia" in dev.platform_vendor.lower()


def sm80(dev: Device) -> bool:
    """Whether ``dev`` is an NVIDIA GPU of compute capability 8.0 or later (as its runtime reports it), whose PTX has
    mma.sync's 16x8x16 float16 and bfloat16 forms and cp.async."""
    try:
        return dev.cl_device.compute_capability_major_nv >= 8
    except (cl.Error, AttributeError):  # no cl_nv_device_attribute_query: capability unknown
        return False


def warp_products(dev: Device) -> bool:
    """Whether ``dev`` runs gemm.h's warp products (MMA): NVIDIA's runtime from compute capability 8.0 on
    (:func:`sm80`), and any other runtime in their OpenCL C form."""
    return not runs_ptx(dev) or sm80(dev)


def _compiler_output() -> bool:
    """PyOpenCL's own switch for showing successful builds' logs, read at each build as PyOpenCL reads it (with
    PYOPENCL_BUILD_OPTIONS=-cl-nv-verbose: NVIDIA's registers and spills per kernel)."""
    return os.environ.get("PYOPENCL_COMPILER_OUTPUT", "").lower() in ("1", "true", "yes", "on")


def _compile(context: cl.Context, cl_device: cl.Device, file: str, options: list[str], binary: bytes | None,
             where: str) -> cl.Program:
    """kernels_cl/<file> built with ``options`` for ``cl_device``: from its source, or from a ``binary`` a
    builder process made of it (:func:`build_binary`). Raises KernelBuildError naming ``where``."""
    try:
        with warnings.catch_warnings():
            if not _compiler_output():  # a successful build's log is the runtime's chatter (Intel's vectorizer
                warnings.simplefilter("ignore", cl.CompilerWarning)  # remarks) unless asked for; failures raise
            prg = (cl.Program(context, [cl_device], [binary]) if binary is not None
                   else cl.Program(context, (kernel_dir / file).read_text()))
            return prg.build(options=options, devices=[cl_device])
    except cl.RuntimeError as err:
        why = pocl_target.unrepaired.get(cl_device.int_ptr, "no repair was tried")
        hint = (f"\n  PoCL's LLVM does not know this processor and clnn could not name another target "
                f"(clnn/pocl_target.py: {why}); Intel's CPU runtime (`pip install 'clnn[intel]'`) runs here"
                if "unknown target CPU" in str(err) else "")
        raise KernelBuildError(f"building kernels_cl/{file} failed on {where}\n  options: {' '.join(options)}\n"
                               f"  compiler log:\n{err}{hint}") from None


def program(dev: Device, file: str, defines: dict[str, object] | None = None,
            binary: bytes | None = None) -> cl.Program:
    """The built program for ``kernels_cl/<file>`` on ``dev`` with ``defines`` and the device's storage
    conversions, built at most once: from source, or from the ``binary`` a builder process sent
    (:func:`build_binary`, ``clnn tune``'s)."""
    defines = _full_defines(dev, defines)
    key = (dev.context.int_ptr, dev.cl_device.int_ptr, file, tuple(sorted((k, str(v)) for k, v in defines.items())))
    prg = _programs.get(key)
    if prg is not None:
        return prg
    with _lock:
        building = _building.setdefault(key, threading.Lock())
    with building:  # each program built once; different ones at once
        prg = _programs.get(key)
        if prg is None:
            prg = _programs[key] = _compile(dev.context, dev.cl_device, file, _options(dev, defines), binary,
                                            f"{dev}\n  defines: {defines}")
    return prg


def _kernel_defines(file: str, name: str, defines: dict[str, object] | None) -> dict[str, object]:
    """``defines`` with ``KERNEL_<name>`` where ``file`` guards its kernels so (:func:`_built_alone`)."""
    return {**(defines or {}), f"KERNEL_{name}": 1} if _built_alone(file) else defines or {}


def build_options(dev: Device, file: str, name: str, defines: dict[str, object] | None = None) -> list[str]:
    """The build options of the program :func:`kernel` takes ``name`` from: what a builder process needs
    (:func:`build_binary`) to build it elsewhere."""
    return _options(dev, _full_defines(dev, _kernel_defines(file, name, defines)))


_builder_contexts: dict[int, cl.Context] = {}


def build_binary(index: int, file: str, options: list[str]) -> bytes:
    """Build kernels_cl/<file> with ``options`` for device ``index`` of :func:`clnn.devices` in this process and
    return the device's binary: run by ``clnn tune``'s builder processes, started with PyOpenCL's disk cache
    off (PYOPENCL_NO_CACHE), so that ending one mid-build leaves no lock or partial entry behind. Raises
    KernelBuildError."""
    cl_device = devices()[index].cl_device
    context = _builder_contexts.get(index) or _builder_contexts.setdefault(index, cl.Context([cl_device]))
    prg = _compile(context, cl_device, file, options, None, f"{cl_device.name} (a builder process)")
    return prg.get_info(cl.program_info.BINARIES)[0]


@functools.cache
def _built_alone(file: str) -> bool:
    """Whether ``kernels_cl/<file>`` holds each kernel inside ``#ifdef KERNEL_<name>``: each built by itself rather
    than beside ones its program never launches. Kernels with parameters of their own (tiles), and files whose
    programs launch a few of their kernels: on Intel's runtime, which compiles a whole program at once,
    elementwise.cl 0.92 s, a unary map and its gradient 0.31; norm.cl 2.1 s, layer norm's 0.3; optim.cl posing as
    an H100 1.1 s, optim_multi 0.2 (2026-11-29). PoCL generates a kernel's code at its first launch either way."""
    return re.search(r"^#ifdef KERNEL_\w+", (kernel_dir / file).read_text(), re.M) is not None


def kernel(dev: Device, file: str, name: str, defines: dict[str, object] | None = None,
           binary: bytes | None = None) -> cl.Kernel:
    """The cached ``cl.Kernel`` ``name`` from ``kernels_cl/<file>`` built with ``defines`` on ``dev`` (alone in
    its program, with ``KERNEL_<name>`` defined, where the file guards its kernels so); a first build takes
    ``binary`` (:func:`build_binary`) when given."""
    key = (dev.context.int_ptr, file, name, tuple(defines.items()) if defines else ())  # as given: no sorting
    k = _kernels.get(key)
    if k is None:
        prg = program(dev, file, _kernel_defines(file, name, defines), binary)  # the same for defines in any order
        with _lock:  # one cl.Kernel per program and name, even when threads miss at once
            k = _of_program.get((prg.int_ptr, name))
            if k is None:
                k = _of_program[(prg.int_ptr, name)] = getattr(prg, name)
                _untyped.add(k)
                if defines and "RED_WG" in defines:
                    _group_cap[k] = int(defines["RED_WG"])
            _kernels[key] = k
    return k


def _declare_scalar_types(k: cl.Kernel, args: Sequence[object]) -> None:
    """Tell PyOpenCL the types of ``k``'s by-value arguments, read from its first launch's NumPy scalars and
    structs: it then packs them in ~1 µs instead of probing each argument's type (~6 µs per scalar)."""
    with _lock:
        if k in _untyped:
            k.set_scalar_arg_dtypes(
                [a.dtype if isinstance(a, np.generic) or (isinstance(a, np.ndarray) and a.dtype.char == "V")
                 else None for a in args]
            )
            _untyped.discard(k)


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``."""
    return (n + multiple - 1) // multiple * multiple


def launch(
    dev: Device,
    k: cl.Kernel,
    global_size: tuple[int, ...],
    local_size: tuple[int, ...] | None,
    *args: object,
) -> cl.Event | None:
    """Enqueue ``k(*args)`` on ``dev``'s queue; ``global_size`` is rounded up to ``local_size``.

    A grid with more work-groups along y or z than the device runs (``Device.max_groups``: CUDA's 65,535 on
    NVIDIA) goes as several launches at global offsets; kernels take their group ids there from clnn_shape.h's
    GROUP_ID. The first launch of a kernel from :func:`kernel` fixes the types of its by-value arguments to
    those of this call's NumPy scalars and structs (later calls' values are converted to them). Returns the
    last launch's event.
    """
    if local_size is not None:
        wg = math.prod(local_size)
        if wg > dev.max_work_group_size:
            raise ValueError(
                f"work-group of {wg} work-items exceeds {dev}'s max_work_group_size {dev.max_work_group_size}"
            )
        if wg > _group_cap.get(k, wg):  # a kernel kept from before a limit changed would overrun them
            raise RuntimeError(f"{k.function_name}: a work-group of {wg} work-items overruns its local arrays, "
                               f"sized for RED_WG={_group_cap[k]}")
        global_size = tuple([round_up(g, ls) for g, ls in zip(global_size, local_size)])
    if 0 in global_size:
        return None
    if k in _untyped:
        _declare_scalar_types(k, args)
    one_d = len(global_size) == 1  # x takes 2**31 - 1 work-groups everywhere: never cut
    for offset, size in ((None, global_size),) if one_d else _pieces(global_size, local_size, dev.max_groups):
        event = dev.enqueue(k, size, local_size, args, offset)
        if profiler._active is not None:
            profiler._active._launched(dev, k, size, local_size, event)
    return event


def _pieces(
    global_size: tuple[int, ...], local_size: tuple[int, ...] | None, max_groups: int
) -> Iterator[tuple[tuple[int, ...] | None, tuple[int, ...]]]:
    """(offset, size) of the launches that cover ``global_size`` with at most ``max_groups`` work-groups along
    y and z each (a driver-chosen work-group counts as one work-item there); ``(None, global_size)`` if one
    launch does."""
    step = [g if d == 0 else max_groups * (local_size[d] if local_size else 1) for d, g in enumerate(global_size)]
    if all(g <= s for g, s in zip(global_size, step)):
        yield None, global_size
        return
    for offset in itertools.product(*(range(0, g, s) for g, s in zip(global_size, step))):
        yield offset, tuple(min(s, g - o) for g, s, o in zip(global_size, step, offset))


def group_size(dev: Device, preferred: int = 256) -> int:
    """A power-of-two work-group size no larger than ``preferred`` and the device's limit."""
    return 1 << (max(min(preferred, dev.max_work_group_size), 1).bit_length() - 1)


def launch_1d(dev: Device, k: cl.Kernel, n: int, *args: object) -> None:
    """Launch ``k`` over ``n`` work-items (rounded up; kernels guard their range)."""
    if n > 0:
        launch(dev, k, (n,), (group_size(dev),), *args)


def launch_by_rows(dev: Device, k: cl.Kernel, geometry: tuple[int, int, int], *args: object) -> None:
    """Launch ``k(outer, G, inner, *args)`` over a tensor viewed as ``geometry`` = (outer, G, inner) by rows
    (clnn_shape.h's FOR_GROUP_ELEMS): the inner elements of each (o, c), or the G groups of each o when inner is 1;
    work-groups of a power-of-two run of a row (up to 256) times as many rows as make up about 256 work-items, or
    where the device walks rows (tuning's storage GROUP_WALK), a work-item per run of GROUP_WALK of a row."""
    outer, groups, inner = geometry
    cols, rows = (inner, outer * groups) if inner > 1 else (groups, outer)
    walk = tuning.memoized(dev, ("group walk", id(dev)), lambda: int(tuning.params(dev, "storage")["GROUP_WALK"]))
    if walk and cols > 0:
        launch_1d(dev, k, rows * -(-cols // walk), *(np.int32(v) for v in geometry), *args)
    elif cols > 0 and rows > 0:
        wg = group_size(dev)
        across = min(wg, 1 << (cols - 1).bit_length())
        launch(dev, k, (cols, rows), (across, min(wg // across, 1 << (rows - 1).bit_length())),
               *(np.int32(v) for v in geometry), *args)


ROW_CHUNK = 4096  # launch_runs: the most elements one work-item walks on a CPU
RUN_GROUPS = 4  # launch_runs: work-groups per compute unit that a CPU's runs aim for
RUN_MIN = 256  # launch_runs: the fewest elements a CPU's work-item walks (smaller tensors take fewer work-groups)


def launch_runs(dev: Device, k: cl.Kernel, d: np.ndarray, n: int, *args: object) -> None:
    """Launch ``k(rows, cols, chunk, d, *args)`` over the ``n`` elements of descriptor ``d``'s shape by its rows (the
    innermost dimension, ``cols`` long; clnn_shape.h's FOR_RUNS): one element per work-item on GPUs (neighbours take
    neighbours); on CPUs runs of up to ROW_CHUNK elements a work-item (``chunk``: a row's run, or chunk / cols whole
    rows where rows are shorter), as many as make RUN_GROUPS work-groups per compute unit (runs of RUN_MIN at least:
    (4, 64, 8, 16) permuted 26-38 -> 13-16 us on PoCL, a (256, 1000) + (1000,) 53-82 -> 31-42), walked in loops the
    compiler vectorizes where both strides along a row are 0 or 1 (the offsets found once a run: 9-25x faster than
    an element per work-item on PoCL and Intel's runtime; several short rows a work-item, their offsets stepped
    without a division: (16, 256, 8, 32) permuted to (16, 8, 256, 32), PoCL 2.8 -> 0.22-0.35 ms, Intel's runtime 2.8
    -> 0.4-1.1, PyTorch 0.08-0.2)."""
    if n == 0:
        return
    last = max(int(d["ndim"]) - 1, 0)
    cols = int(d["shape"][last]) if d["ndim"] else 1
    rows = n // cols
    chunk = 1
    if dev.type == "cpu":
        chunk = min(ROW_CHUNK, max(n // (RUN_GROUPS * dev.compute_units * group_size(dev)), RUN_MIN))
    items = -(-rows // (chunk // cols)) if chunk >= cols else rows * -(-cols // chunk)
    launch_1d(dev, k, items, np.int32(rows), np.int32(cols), np.int32(chunk), d, *args)


def cl_vector(cltype: np.dtype, *values: int) -> np.generic:
    """An OpenCL vector argument (``pyopencl.cltypes.int8``, ``uint2``, ...) of ``values``: a view of one array,
    ten times cheaper than ``cltypes.make_int8`` (8 us per call, on every multi-tensor launch)."""
    return np.array(values, cltype.fields["s0"][0]).view(cltype)[0]


_REAL = {np.dtype(t): np.dtype(np.float64 if t == np.float64 else np.float32)
         for t in (np.float16, BFLOAT16, np.float32, np.float64)}


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The arithmetic type (clnn_dtype.h's ``real``) of ``dtype``'s kernels: float64's own, float32 for the
    others (partial sums and planes of half data are kept in it)."""
    real = _REAL.get(dtype)  # asked on every launch with a scalar
    if real is None:
        real = np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)
    return real


def real_scalar(dtype: np.dtype, value: float) -> np.generic:
    """A scalar kernel argument of the kernel's ``real`` type."""
    return real_dtype(dtype).type(value)


MAXD = op_codes("clnn_shape.h", "")["maxd"]  # most dimensions a kernel's shape descriptor holds
DESCRIPTOR = np.dtype([("ndim", np.int32), ("shape", np.int32, MAXD), ("s0", np.int32, MAXD), ("s1", np.int32, MAXD)])


def descriptor(shape: Sequence[int], s0: Sequence[int], s1: Sequence[int]) -> np.ndarray:
    """A kernel shape descriptor: ``shape`` with two stride lists, adjacent dims merged where possible."""
    dims = [(n, a, b) for n, a, b in zip(shape, s0, s1) if n != 1]
    merged: list[list[int]] = []
    for n, a, b in dims:
        if merged and merged[-1][1] == a * n and merged[-1][2] == b * n:
            merged[-1] = [merged[-1][0] * n, a, b]
        else:
            merged.append([n, a, b])
    if len(merged) > MAXD:
        raise ValueError(f"shape {tuple(shape)}: more than {MAXD} dimensions that cannot be merged")
    d = np.zeros((), DESCRIPTOR)
    d["ndim"] = len(merged)
    for k, (n, a, b) in enumerate(merged):
        d["shape"][k], d["s0"][k], d["s1"][k] = n, a, b
    return d


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a contiguous (row-major) ``shape``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def broadcast_strides(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a contiguous ``shape`` read as ``out_shape`` (0 along broadcast dims)."""
    pad = len(out_shape) - len(shape)
    full = (1,) * pad + shape
    strides = [0] * pad + contiguous_strides(shape)
    return [0 if n == 1 and m != 1 else s for n, m, s in zip(full, out_shape, strides)]
