"""What every op does around its kernel launch: allocate the output, record the graph for autograd."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import profiler
from ..device import Device
from ..tensor import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    Backward,
    Node,
    Tensor,
    autocast_dtype,
    float32,
    float64,
    is_grad_enabled,
)
from ..validation import check_dtype_on

INT_MAX = 2**31 - 1
_poison = {"on": False}


def poison_new_tensors(on: bool = True) -> None:
    """Fill every newly allocated tensor with NaN (floats) or all-ones bytes (ints): a test aid that
    proves kernels write every output element."""
    _poison["on"] = on


def empty(shape: Sequence[int], dtype: Any, dev: Device) -> Tensor:
    """An uninitialized tensor (memory from the device's pool)."""
    shape = tuple([int(s) for s in shape])
    dt = check_dtype_on(dtype, dev)
    n = math.prod(shape)
    nbytes = n * dt.itemsize
    if nbytes > dev.max_alloc_size or n > INT_MAX or (shape and min(shape) < 0):
        _refuse(shape, dt, dev, n, nbytes)
    try:
        buf = dev.pool.allocate(max(nbytes, 8))
    except Exception as err:  # pyopencl raises MemoryError or cl.Error, depending on where it failed
        raise MemoryError(
            f"cannot allocate {nbytes} bytes for a tensor of shape {shape} on {dev} "
            f"(global memory {dev.global_mem_size} bytes): {err}"
        ) from None
    if profiler._active is not None:
        profiler._active._allocated(dev, nbytes)
    if dev._graph is not None:
        dev._graph._allocated(buf)
    if _poison["on"]:
        dev.fill(buf, np.array(np.nan, dt) if dt in FLOAT_DTYPES else np.array(-1, dt), nbytes)
    return Tensor._wrap(buf, shape, dt, dev)


def _refuse(shape: tuple[int, ...], dt: np.dtype, dev: Device, n: int, nbytes: int) -> None:
    """:func:`empty`'s error for a shape it cannot allocate."""
    if min(shape) < 0:
        raise ValueError(f"shape: dimensions must be >= 0; got {shape}")
    if n > INT_MAX:
        raise ValueError(f"shape: tensors hold at most 2**31 - 1 elements; got {shape} ({n} elements)")
    raise MemoryError(
        f"cannot allocate {nbytes} bytes for a tensor of shape {shape}, {dt.name} on {dev}: "
        f"its largest single allocation is {dev.max_alloc_size} bytes"
    )


def view_as(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``t``'s memory as ``shape`` (the same number of elements), recorded nowhere: an op's view of its own
    operands and results, where ``reshape`` would add a graph node."""
    return t if t.shape == shape else Tensor._wrap(t.data, shape, t.dtype, t.device)


def autocast(policy: str, *xs: Any) -> tuple[Any, ...]:
    """An op's tensor inputs cast for ``clnn.autocast``'s lists (unchanged outside it): ``"half"`` ops
    (matmul, linear, conv) take float32/float16/bfloat16 inputs in the autocast dtype, ``"float32"`` ops
    (softmax, losses, norms, reductions) in float32. float64 and integer tensors pass as they are, as in
    ``torch.autocast``; the casts are recorded, so float32 leaves get float32 gradients."""
    half = autocast_dtype()
    if half is None:
        return xs
    target = half if policy == "half" else float32
    return tuple(x.astype(target) if isinstance(x, Tensor) and x.dtype in FLOAT_DTYPES and x.dtype != float64
                 and x.dtype != target else x for x in xs)


def autocast_loads(*xs: Any) -> tuple[np.dtype | None, tuple[Any, ...]]:
    """For ``"half"`` ops whose kernels round float32 operands to the half type as they load them (gemm,
    matmul): inside ``clnn.autocast``, its half dtype and ``xs`` with only a tensor of the other half type
    cast (no cast launch for float32); outside it, or with an operand autocast never casts (float64,
    integers), None and :func:`autocast`'s ``"half"`` inputs."""
    half = autocast_dtype()
    tensors = [x for x in xs if isinstance(x, Tensor)]
    if half is None or any(x.dtype not in (float32, *HALF_DTYPES) for x in tensors):
        return None, autocast("half", *xs)
    return half, tuple(x.astype(half) if isinstance(x, Tensor) and x.dtype not in (float32, half) else x
                       for x in xs)


def promote(a: Any, b: Any) -> tuple[Any, Any]:
    """Inside ``clnn.autocast``, two floating tensors of different dtypes cast to the wider one (torch's type
    promotion: float32 with a half gives float32, float16 with bfloat16 gives float32); else unchanged."""
    if (autocast_dtype() is None or not isinstance(a, Tensor) or not isinstance(b, Tensor) or a.dtype == b.dtype
            or a.dtype not in FLOAT_DTYPES or b.dtype not in FLOAT_DTYPES):
        return a, b
    wide = np.result_type(a.dtype, b.dtype)
    return a.astype(wide), b.astype(wide)


def record(out: Tensor, inputs: tuple[Tensor, ...], backward: Backward, name: str) -> Tensor:
    """Attach a graph node to ``out`` when recording is on and an input requires grad.

    ``backward(grad_out)`` returns one gradient (or None) per input, in order.
    """
    if is_grad_enabled():
        for t in inputs:
            if t.requires_grad:
                out.requires_grad = True
                out._node = Node(inputs, backward, name)
                break
    return out
