"""What every op does around its kernel launch: allocate the output, record the graph for autograd."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import profiler
from ..device import Device
from ..tensor import FLOAT_DTYPES, Backward, Node, Tensor, is_grad_enabled
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
    if shape and min(shape) < 0:
        raise ValueError(f"shape: dimensions must be >= 0; got {shape}")
    dt = check_dtype_on(dtype, dev)
    n = math.prod(shape)
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
    if _poison["on"]:
        dev.fill(buf, np.array(np.nan, dt) if dt in FLOAT_DTYPES else np.array(-1, dt), nbytes)
    return Tensor(buf, shape, dt, dev)












def record(out: Tensor, inputs: tuple[Tensor, ...], backward: Backward, name: str) -> Tensor:
    """Attach a graph node to ``out`` when recording is on and an input requires grad.

    ``backward(grad_out)`` returns one gradient (or None) per input, in order.
    """
    if is_grad_enabled() and any(t.requires_grad for t in inputs):
        out.requires_grad = True
        out._node = Node(inputs, backward, name)
    return out
