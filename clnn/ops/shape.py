"""Shape and layout ops: reshape, permute, transpose, broadcast_to, slicing, dtype and device moves.

Tensors are always contiguous: ``reshape`` shares memory, the rest copy through ``kernels_cl/copy.cl``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import kernels
from ..device import Device, device
from ..profiler import profiled
from ..tensor import FLOAT_DTYPES, Tensor
from ._core import (
    check_dtype_on,
    contiguous_strides,
    descriptor,
    empty,
    launch_1d,
    normalize_axis,
    record,
    require_tensor,
)


def _copy_defines(src: np.dtype, dst: np.dtype) -> dict[str, object]:
    return {
        "SRC_T": kernels.cl_type(src),
        "DST_T": kernels.cl_type(dst),
        "SRC_HALF": int(src == np.float16),
        "DST_HALF": int(dst == np.float16),
        "DST_BOOL": int(dst == np.bool_ and src != np.bool_),
        "USE_FP64": int(np.float64 in (src, dst)),
    }


def strided_copy(
    src: Tensor,
    dst: Tensor,
    shape: Sequence[int],
    src_strides: Sequence[int],
    dst_strides: Sequence[int],
    src_offset: int = 0,
    dst_offset: int = 0,
) -> None:
    """``dst[dst_offset + idx . dst_strides] = src[src_offset + idx . src_strides]`` over ``shape``."""
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return
    k = kernels.kernel(src.device, "copy.cl", "copy", _copy_defines(src.dtype, dst.dtype))
    d = descriptor(shape, src_strides, dst_strides)
    launch_1d(src.device, k, n, np.int32(n), d, src.data, np.int32(src_offset), dst.data, np.int32(dst_offset))


def _resolve_shape(x: Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in shape):
        raise ValueError(f"reshape: shape may hold one -1 and no other negative size; got {shape}")
    known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
    if unknown:
        if known == 0 or x.size % known:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {x.shape} into {shape}")
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise ValueError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.size} elements) into {shape}")
    return shape


@profiled
def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """The same memory with another shape (one size may be -1)."""
    require_tensor("reshape: x", x)
    new_shape = _resolve_shape(x, shape)
    out = Tensor(x.data, new_shape, x.dtype, x.device)
    return record(out, (x,), lambda g: (reshape(g, x.shape),), "reshape")


@profiled
def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims ``start_dim..end_dim`` into one."""
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = normalize_axis(start_dim, x.ndim, "start_dim"), normalize_axis(end_dim, x.ndim, "end_dim")
    if s > e:
        raise ValueError(f"flatten: start_dim ({start_dim}) comes after end_dim ({end_dim})")
    merged = int(np.prod(x.shape[s : e + 1], dtype=np.int64))
    return reshape(x, x.shape[:s] + (merged,) + x.shape[e + 1 :])


@profiled
def permute(x: Tensor, axes: Sequence[int]) -> Tensor:
    """Reorder dimensions: ``out.shape[i] == x.shape[axes[i]]``."""
    require_tensor("permute: x", x)
    axes = tuple(normalize_axis(a, x.ndim, "axes") for a in axes) if x.ndim else ()
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute: axes must be a permutation of 0..{x.ndim - 1}; got {axes}")
    if axes == tuple(range(x.ndim)):
        return x
    out_shape = tuple(x.shape[a] for a in axes)
    out = empty(out_shape, x.dtype, x.device)
    strides = contiguous_strides(x.shape)
    strided_copy(x, out, out_shape, [strides[a] for a in axes], contiguous_strides(out_shape))
    inverse = tuple(int(i) for i in np.argsort(axes))
    return record(out, (x,), lambda g: (permute(g, inverse),), "permute")


@profiled
def transpose(x: Tensor, dim0: int = 0, dim1: int = 1) -> Tensor:
    """Swap two dimensions."""
    axes = list(range(x.ndim))
    a, b = normalize_axis(dim0, x.ndim, "dim0"), normalize_axis(dim1, x.ndim, "dim1")
    axes[a], axes[b] = axes[b], axes[a]
    return permute(x, axes)


@profiled
def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """A copy of ``x`` repeated along broadcast dims to ``shape`` (NumPy's rules)."""
    from .elementwise import broadcast_shapes, broadcast_strides, sum_to_shape

    shape = tuple(int(s) for s in shape)
    if broadcast_shapes("broadcast_to", x.shape, shape) != shape:
        raise ValueError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    if x.shape == shape:
        return x
    out = empty(shape, x.dtype, x.device)
    strided_copy(x, out, shape, broadcast_strides(x.shape, shape), contiguous_strides(shape))
    return record(out, (x,), lambda g: (sum_to_shape(g, x.shape),), "broadcast_to")


def _view_of_index(shape: tuple[int, ...], index: Any) -> tuple[int, tuple[int, ...], list[int], list[int]]:
    """Offset, out shape, source strides and kept-dim map for basic indexing (ints, slices, None, ...)."""
    items = index if isinstance(index, tuple) else (index,)
    n_ellipsis = sum(i is Ellipsis for i in items)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"too many indices for a tensor of dimension {len(shape)}: got {used}")
    if n_ellipsis:
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        items = items[:at] + (slice(None),) * (len(shape) - used) + items[at + 1 :]
    else:
        items = items + (slice(None),) * (len(shape) - used)
    strides = contiguous_strides(shape)
    offset, out_shape, out_strides, dim = 0, [], [], 0
    for item in items:
        if item is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        n = shape[dim]
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer, slice)):
            raise TypeError(
                f"tensor indices must be ints, slices, None or ...; got {type(item).__name__} "
                "(integer and boolean array indexing is not supported)"
            )
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            count = len(range(start, stop, step))
            offset += start * strides[dim] if count else 0
            out_shape.append(count)
            out_strides.append(step * strides[dim])
        else:
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            offset += (i % n) * strides[dim]
        dim += 1
    return offset, tuple(out_shape), out_strides, strides


@profiled
def getitem(x: Tensor, index: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), ``None`` and ``...``; returns a copy."""
    offset, out_shape, src_strides, _ = _view_of_index(x.shape, index)
    out = empty(out_shape, x.dtype, x.device)
    strided_copy(x, out, out_shape, src_strides, contiguous_strides(out_shape), src_offset=offset)

    def backward(g: Tensor) -> tuple[Tensor]:
        from .creation import zeros

        gx = zeros(x.shape, dtype=x.dtype, device=x.device)
        strided_copy(g, gx, out_shape, contiguous_strides(out_shape), src_strides, dst_offset=offset)
        return (gx,)

    return record(out, (x,), backward, "getitem")


@profiled
def astype(x: Tensor, dtype: Any, copy: bool = False) -> Tensor:
    """``x`` converted to ``dtype`` (the same tensor if it already is, unless ``copy``)."""
    require_tensor("astype: x", x)
    dt = check_dtype_on(dtype, x.device)
    if dt == x.dtype and not copy:
        return x
    out = empty(x.shape, dt, x.device)
    strided_copy(x, out, x.shape, contiguous_strides(x.shape), contiguous_strides(x.shape))
    if dt not in FLOAT_DTYPES or x.dtype not in FLOAT_DTYPES:
        return out
    return record(out, (x,), lambda g: (astype(g, x.dtype),), "astype")


@profiled
def to(x: Tensor, dev: str | int | Device | None = None, dtype: Any = None) -> Tensor:
    """``x`` on device ``dev`` and/or with ``dtype``; crossing devices copies through the host."""
    from .creation import tensor

    target = x.device if dev is None else device(dev)
    out = x
    if target is not x.device:
        check_dtype_on(x.dtype, target)
        out = tensor(x.numpy(), device=target)
        out = record(out, (x,), lambda g: (to(g, x.device),), "to")
    return out if dtype is None else astype(out, dtype)
