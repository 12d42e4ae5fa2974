"""Kernel loader: build ``kernels_cl/*.cl`` per device, specialized by ``#define`` parameters, and launch.

A program is built once per (context, file, defines) in this process; across processes PyOpenCL's own
on-disk cache (keyed on source, includes, options and device) serves the binary.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyopencl as cl

from . import profiler
from .device import Device

__all__ = ["KernelBuildError", "kernel_dir", "program", "kernel", "launch", "dtype_defines", "round_up"]


def _find_kernel_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels_cl", here.parent / "kernels_cl"):  # installed wheel, source checkout
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"kernels_cl/ not found beside {here}: the clnn installation is incomplete")


kernel_dir = _find_kernel_dir()

_CL_TYPES = {
    np.dtype(np.float16): "half",
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
_kernels: dict[tuple, cl.Kernel] = {}
_lock = threading.Lock()


def cl_type(dtype: np.dtype) -> str:
    """The OpenCL C name of a NumPy dtype's storage type."""
    return _CL_TYPES[np.dtype(dtype)]


def dtype_defines(dtype: np.dtype, half_math: bool = False) -> dict[str, object]:
    """``#define``s selecting the element type in ``clnn_dtype.h``.

    float16 is stored as half and computed in float32, except with ``half_math`` (for devices with
    ``cl_khr_fp16``), where the arithmetic itself is half precision. Kernels that accumulate (GEMM,
    reductions) keep float32 accumulation and never ask for it.
    """
    dt = np.dtype(dtype)
    store = cl_type(dt)
    if half_math and dt == np.float16:
        return {"STORE_T": "half", "REAL_T": "half", "STORE_HALF": 0, "USE_FP64": 0, "USE_FP16": 1}
    return {
        "STORE_T": store,
        "REAL_T": "float" if dt == np.float16 else store,
        "STORE_HALF": int(dt == np.float16),
        "USE_FP64": int(dt == np.float64),
    }


def _options(defines: dict[str, object]) -> list[str]:
    return [f"-D{k}={v}" for k, v in sorted(defines.items())] + [f"-I{kernel_dir}"]


def program(dev: Device, file: str, defines: dict[str, object] | None = None) -> cl.Program:
    """The built program for ``kernels_cl/<file>`` on ``dev`` with ``defines`` (built at most once)."""
    defines = dict(defines or {})
    key = (dev.context.int_ptr, dev.cl_device.int_ptr, file, tuple(sorted((k, str(v)) for k, v in defines.items())))
    prg = _programs.get(key)
    if prg is not None:
        return prg
    with _lock:
        prg = _programs.get(key)
        if prg is None:
            source = (kernel_dir / file).read_text()
            options = _options(defines)
            try:
                prg = cl.Program(dev.context, source).build(options=options, devices=[dev.cl_device])
            except cl.RuntimeError as err:
                raise KernelBuildError(
                    f"building kernels_cl/{file} failed on {dev}\n"
                    f"  defines: {defines}\n  options: {' '.join(options)}\n  compiler log:\n{err}"
                ) from None
            _programs[key] = prg
    return prg


def kernel(dev: Device, file: str, name: str, defines: dict[str, object] | None = None) -> cl.Kernel:
    """The cached ``cl.Kernel`` ``name`` from ``kernels_cl/<file>`` built with ``defines`` on ``dev``."""
    defines = defines or {}
    key = (dev.context.int_ptr, file, name, tuple(sorted((k, str(v)) for k, v in defines.items())))
    k = _kernels.get(key)
    if k is None:
        prg = program(dev, file, defines)
        with _lock:  # one cl.Kernel per key even when threads miss at once
            k = _kernels.get(key)
            if k is None:
                k = _kernels[key] = getattr(prg, name)
    return k


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``."""
    return (n + multiple - 1) // multiple * multiple


def launch(
    dev: Device,
    k: cl.Kernel,
    global_size: tuple[int, ...],
    local_size: tuple[int, ...] | None,
    *args: object,
) -> cl.Event:
    """Enqueue ``k(*args)`` on ``dev``'s queue; ``global_size`` is rounded up to ``local_size``.

    The kernel object is shared, so setting its arguments and enqueuing happen under the device's lock.
    """
    if local_size is not None:
        wg = int(np.prod(local_size))
        if wg > dev.max_work_group_size:
            raise ValueError(
                f"work-group of {wg} work-items exceeds {dev}'s max_work_group_size {dev.max_work_group_size}"
            )
        global_size = tuple(round_up(g, ls) for g, ls in zip(global_size, local_size))
    if any(g == 0 for g in global_size):
        return None
    with dev._lock:
        k.set_args(*args)
        event = cl.enqueue_nd_range_kernel(dev.queue, k, global_size, local_size)
        if profiler._active is not None:
            profiler._active._launched(dev, k, global_size, local_size, event)
    return event
