"""Helpers every op module shares: allocation, argument checks, launch geometry, graph recording."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from .. import kernels, profiler
from ..device import Device
from ..tensor import FLOAT_DTYPES, SUPPORTED_DTYPES, Backward, Node, Tensor, is_grad_enabled

MAXD = 8  # most dimensions a kernel's shape descriptor holds (kernels_cl: MAXD)
DESCRIPTOR = np.dtype([("ndim", np.int32), ("shape", np.int32, MAXD), ("s0", np.int32, MAXD), ("s1", np.int32, MAXD)])
INT_MAX = 2**31 - 1
_poison = {"on": False}


def poison_new_tensors(on: bool = True) -> None:
    """Fill every newly allocated tensor with NaN (floats) or all-ones bytes (ints): a test aid that
    proves kernels write every output element."""
    _poison["on"] = on


def check_dtype_on(dtype: np.dtype, dev: Device) -> np.dtype:
    """``dtype`` as a NumPy dtype, if tensors of it can live on ``dev``; else a clear error."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: expected one of {[d.name for d in SUPPORTED_DTYPES]}; got {dtype!r}") from None
    if dt == np.uint8:
        dt = np.dtype(np.bool_)
    if dt not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype: expected one of {[d.name for d in SUPPORTED_DTYPES]}; got {dt.name}")
    if not dev.supports(dt):
        raise TypeError(f"float64 is not supported on {dev}: it lacks cl_khr_fp64; use float32")
    return dt


def empty(shape: Sequence[int], dtype: Any, dev: Device) -> Tensor:
    """An uninitialized tensor (memory from the device's pool)."""
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"shape: dimensions must be >= 0; got {shape}")
    dt = check_dtype_on(dtype, dev)
    n = int(np.prod(shape, dtype=np.int64))
    if n > INT_MAX:
        raise ValueError(f"shape: tensors hold at most 2**31 - 1 elements; got {shape} ({n} elements)")
    nbytes = n * dt.itemsize
    if nbytes > dev.max_alloc_size:
        raise MemoryError(
            f"cannot allocate {nbytes} bytes for a tensor of shape {shape}, {dt.name} on {dev}: "
            f"its largest single allocation is {dev.max_alloc_size} bytes"
        )
    try:
        buf = dev.pool.allocate(max(nbytes, 8))
    except Exception as err:  # pyopencl raises MemoryError or cl.Error, depending on where it failed
        raise MemoryError(
            f"cannot allocate {nbytes} bytes for a tensor of shape {shape} on {dev} "
            f"(global memory {dev.global_mem_size} bytes): {err}"
        ) from None
    if profiler._active is not None:
        profiler._active._allocated(dev, nbytes)
    if _poison["on"] and n:
        pattern = np.array(np.nan, dt) if dt.kind == "f" else np.array(-1, dt)
        with dev._lock:
            cl.enqueue_fill_buffer(dev.queue, buf, pattern, 0, nbytes)
    return Tensor(buf, shape, dt, dev)


def require_float(name: str, t: Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected a floating tensor (float16/32/64); got dtype {t.dtype.name}")


def require_tensor(name: str, t: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a clnn.Tensor; got {type(t).__name__}")
    return t


def same_device(op: str, **tensors: Tensor | None) -> Device:
    """The one device all ``tensors`` live on; a ValueError naming two that differ otherwise."""
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device is not first.device:
            raise ValueError(
                f"{op}: {first_name} is on {first.device} but {name} is on {t.device}; move one with .to(device)"
            )
    return first.device


def same_dtype(op: str, **tensors: Tensor | None) -> np.dtype:
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.dtype != first.dtype:
            raise TypeError(
                f"{op}: {first_name} has dtype {first.dtype.name} but {name} has dtype {t.dtype.name}; "
                "convert one with .astype()"
            )
    return first.dtype


def normalize_axis(axis: int, ndim: int, name: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{name}: expected an int; got {type(axis).__name__}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"{name}: expected a value in [{-max(ndim, 1)}, {max(ndim, 1) - 1}]; got {axis}")
    return int(axis) % max(ndim, 1)


def real_scalar(dtype: np.dtype, value: float) -> np.generic:
    """A scalar kernel argument of the kernel's ``real`` type."""
    return np.float64(value) if np.dtype(dtype) == np.float64 else np.float32(value)


def defines(dtype: np.dtype, **extra: object) -> dict[str, object]:
    return {**kernels.dtype_defines(dtype), **extra}


def group_size(dev: Device, preferred: int = 256) -> int:
    """A power-of-two work-group size no larger than ``preferred`` and the device's limit."""
    wg = 1
    while wg * 2 <= min(preferred, dev.max_work_group_size):
        wg *= 2
    return wg


def launch_1d(dev: Device, kernel: Any, n: int, *args: object) -> None:
    """Launch ``kernel`` over ``n`` work-items (rounded up; kernels guard their range)."""
    if n > 0:
        kernels.launch(dev, kernel, (n,), (group_size(dev),), *args)


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
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def record(out: Tensor, inputs: tuple[Tensor, ...], backward: Backward, name: str) -> Tensor:
    """Attach a graph node to ``out`` when recording is on and an input requires grad.

    ``backward(grad_out)`` returns one gradient (or None) per input, in order.
    """
    if is_grad_enabled() and any(t.requires_grad for t in inputs):
        out.requires_grad = True
        out._node = Node(inputs, backward, name)
    return out
