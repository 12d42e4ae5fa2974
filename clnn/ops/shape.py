"""Shape and layout ops: reshape, permute, transpose, slicing, dtype and device moves.

Tensors are always contiguous: ``reshape`` shares memory, the rest copy through ``kernels_cl/copy.cl``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import kernels, tuning
from ..device import Device, device
from ..kernels import contiguous_strides, descriptor
from ..profiler import profiled
from ..tensor import FLOAT_DTYPES, Tensor
from ..validation import check_dtype_on, normalize_axis, require_int, require_tensor, same_device, same_dtype
from ._core import empty, record
from .creation import tensor, zeros


def _copy_defines(src: np.dtype, dst: np.dtype) -> dict[str, object]:
    return {
        "SRC_T": kernels.cl_type(src),
        "DST_T": kernels.cl_type(dst),
        "SRC_HALF": int(src == np.float16),
        "DST_HALF": int(dst == np.float16),
        "SRC_BF16": int(src == kernels.BFLOAT16 and dst != src),
        "DST_BF16": int(dst == kernels.BFLOAT16 and dst != src),
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
    n = math.prod(shape)
    if n == 0:
        return
    d = descriptor(shape, src_strides, dst_strides)
    dev = src.device
    rect = _rect(d) if src.dtype == dst.dtype and src.data is not dst.data else None
    size = src.dtype.itemsize
    if rect is not None and _slices_fit(rect[0], rect[1], src_offset, src.data.size // size) \
            and _slices_fit(rect[0], rect[2], dst_offset, dst.data.size // size):
        region, src_pitches, dst_pitches = rect
        dev.copy_rect(dst.data, src.data, (region[0] * size, *region[1:]), dst_offset * size,
                      tuple(p * size for p in dst_pitches), src_offset * size, tuple(p * size for p in src_pitches))
        return
    swap = _swapped_last_axes(d)
    if swap is not None and src.dtype in FLOAT_DTYPES and dst.dtype in FLOAT_DTYPES \
            and _transposed(dev, *swap, src, dst, src_offset, dst_offset):
        return
    kernels.launch_runs(dev, kernels.kernel(dev, "copy.cl", "copy", _copy_defines(src.dtype, dst.dtype)), d, n,
                        src.data, np.int32(src_offset), dst.data, np.int32(dst_offset))


def _transposed(dev: Device, batch: int, p: int, q: int, src: Tensor, dst: Tensor, src_offset: int,
                dst_offset: int) -> bool:
    """Copy ``src`` (batch, q, p) into ``dst`` (batch, p, q) from the offsets by copy.cl's transpose kernels, as
    tuning's ``transpose`` row says: a work-item per TB x TB block (TB), tiles through local memory (planes of
    TILE_PLANE elements or more), or neither (False: the strided copy's runs)."""
    t = tuning.params(dev, "transpose")
    defs = _copy_defines(src.dtype, dst.dtype)
    tb = int(t["TB"])
    if tb:
        k = kernels.kernel(dev, "copy.cl", "transpose_blocks", {**defs, "TB": tb})
        kernels.launch_1d(dev, k, batch * -(-p // tb) * -(-q // tb), np.int32(batch), np.int32(p), np.int32(q),
                          src.data, np.int32(src_offset), dst.data, np.int32(dst_offset))
        return True
    if p * q < int(t["TILE_PLANE"]):
        return False
    tt, tr = (32, 8) if dev.max_work_group_size >= 256 else (16, 4)
    k = kernels.kernel(dev, "copy.cl", "transpose", {**defs, "TT": tt, "TR": tr})
    kernels.launch(dev, k, (-(-q // tt) * tt, -(-p // tt) * tr, batch), (tt, tr, 1), np.int32(p), np.int32(q),
                   src.data, np.int32(src_offset), dst.data, np.int32(dst_offset))
    return True


def _rect(d: np.ndarray) -> tuple[tuple[int, int, int], tuple[int, int], tuple[int, int]] | None:
    """(region, source pitches, destination pitches), all in elements, when a merged copy descriptor moves rows
    that are contiguous in both buffers and laid out as OpenCL's rectangular copy needs (a row no longer than
    its pitch, a slice's rows no longer than the slice pitch, which is a multiple of the row pitch): a copy the
    runtime does at memory speed, where the copy kernel's index arithmetic costs 10-40x more. Else None."""
    ndim = int(d["ndim"])
    shape, ss, sd = (list(map(int, d[k][:ndim])) for k in ("shape", "s0", "s1"))
    if not 1 <= ndim <= 3 or ss[-1] != 1 or sd[-1] != 1:
        return None
    region = (*shape[::-1], 1, 1)[:3]
    pitches = []
    for s in (ss, sd):
        row = s[-2] if ndim > 1 else region[0]
        plane = s[-3] if ndim > 2 else row * region[1]
        if row < region[0] or plane < row * region[1] or plane % row:
            return None
        pitches.append((row, plane))
    return region, pitches[0], pitches[1]


def _slices_fit(region: tuple[int, int, int], pitches: tuple[int, int], offset: int, elements: int) -> bool:
    """Whether a rectangle's whole slices, pitch included, lie within a buffer of ``elements`` from ``offset``:
    NVIDIA's runtime refuses (INVALID_VALUE) a rectangle whose last slice pitch reaches past the buffer, even
    where its last row ends within it (the copy kernel then moves it)."""
    return offset + region[2] * pitches[1] <= elements


def _swapped_last_axes(d: np.ndarray) -> tuple[int, int, int] | None:
    """(B, P, Q) when a merged copy descriptor writes a contiguous (B, P, Q) from a contiguous (B, Q, P): a
    batched transpose that ``copy.cl``'s tiled kernel does with coalesced reads and writes; else None."""
    ndim = int(d["ndim"])
    if ndim not in (2, 3):
        return None
    shape, ss, sd = (list(map(int, d[k][:ndim])) for k in ("shape", "s0", "s1"))
    batch, p, q = ([1] + shape)[-3:]
    if sd[-2:] != [q, 1] or ss[-2:] != [1, p]:
        return None
    if ndim == 3 and (sd[0] != p * q or ss[0] != p * q):
        return None
    return batch, p, q


def _resolve_shape(x: Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple([int(s) for s in shape])
    if min(shape, default=0) >= 0 and math.prod(shape) == x.size:  # the common case, checked at once
        return shape
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in shape):
        raise ValueError(f"reshape: shape may hold one -1 and no other negative size; got {shape}")
    known = math.prod([s for s in shape if s != -1])
    if unknown:
        if known == 0 or x.size % known:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {x.shape} into {shape}")
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    if math.prod(shape) != x.size:
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
    merged = math.prod(x.shape[s : e + 1])
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
                f"tensor indices must be ints, slices, None, ... or an integer index tensor/array; got "
                f"{type(item).__name__}"
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
def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """``tensors`` joined along ``axis`` (``torch.cat``/``np.concatenate``); every other dim must match.

    Raises:
        TypeError: ``tensors`` is not a non-empty sequence of tensors, or dtypes differ.
        ValueError: devices, ranks or the other dims differ, or ``axis`` is out of range.
    """
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence) or not tensors:
        raise TypeError(f"cat: tensors expects a non-empty sequence of clnn.Tensor; got {type(tensors).__name__}")
    parts = tuple(require_tensor(f"cat: tensors[{i}]", t) for i, t in enumerate(tensors))
    named = {f"tensors[{i}]": t for i, t in enumerate(parts)}
    dev, dt = same_device("cat", **named), same_dtype("cat", **named)
    first = parts[0]
    ax = normalize_axis(axis, first.ndim)
    for i, t in enumerate(parts):
        if t.ndim != first.ndim or t.shape[:ax] + t.shape[ax + 1:] != first.shape[:ax] + first.shape[ax + 1:]:
            raise ValueError(f"cat: tensors[{i}] expects shape {first.shape} except along axis {ax}; got {t.shape}")
    shape = first.shape[:ax] + (sum(t.shape[ax] for t in parts),) + first.shape[ax + 1:]
    out = empty(shape, dt, dev)
    strides = contiguous_strides(shape)
    offset = 0
    for t in parts:  # each part lands in its slab of the output: a strided copy
        strided_copy(t, out, t.shape, contiguous_strides(t.shape), strides, dst_offset=offset * strides[ax])
        offset += t.shape[ax]
    bounds = np.cumsum([0] + [t.shape[ax] for t in parts]).tolist()

    def backward(g: Tensor) -> tuple[Tensor, ...]:
        return tuple(getitem(g, (slice(None),) * ax + (slice(a, b),)) for a, b in zip(bounds, bounds[1:]))

    return record(out, parts, backward, "cat")


@profiled
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``tensors`` (all one shape) joined along a new dim ``dim`` (``torch.stack``)."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence) or not tensors:
        raise TypeError(f"stack: tensors expects a non-empty sequence of clnn.Tensor; got {type(tensors).__name__}")
    parts = tuple(require_tensor(f"stack: tensors[{i}]", t) for i, t in enumerate(tensors))
    for i, t in enumerate(parts):
        if t.shape != parts[0].shape:
            raise ValueError(f"stack: tensors[{i}] expects shape {parts[0].shape} (that of tensors[0]); got {t.shape}")
    d = normalize_axis(dim, parts[0].ndim + 1, "stack: dim")
    return cat([unsqueeze(t, d) for t in parts], d)


@profiled
def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """``x`` with a new dim of size 1 at ``dim`` (in ``[-x.ndim - 1, x.ndim]``); shares memory."""
    require_tensor("unsqueeze: x", x)
    d = normalize_axis(dim, x.ndim + 1, "unsqueeze: dim")
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


@profiled
def squeeze(x: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """``x`` without its size-1 dims (all of them, or those in ``dim`` that have size 1); shares memory."""
    require_tensor("squeeze: x", x)
    if dim is None:
        dims = {i for i, n in enumerate(x.shape) if n == 1}
    else:
        items = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
        dims = {i for i in (normalize_axis(a, x.ndim, "squeeze: dim") for a in items) if x.ndim and x.shape[i] == 1}
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in dims))


@profiled
def split(x: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """``x`` cut along ``dim`` into pieces of ``split_size_or_sections`` (the last may be shorter), or of
    the listed sizes, which must add up to ``x.shape[dim]`` (``torch.split``). Each piece is a copy."""
    require_tensor("split: x", x)
    d = normalize_axis(dim, x.ndim, "split: dim")
    n = x.shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)) and not isinstance(split_size_or_sections, bool):
        size = int(split_size_or_sections)
        if size <= 0 and not (size == 0 and n == 0):
            raise ValueError(f"split: split_size expects a positive int; got {size}")
        sizes = [min(size, n - a) for a in range(0, n, size)] if n else [0]
    elif isinstance(split_size_or_sections, Sequence) and all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in split_size_or_sections):
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise ValueError(f"split: sections expect to add up to {n} (x.shape[{d}]); got {sizes}")
    else:
        raise TypeError(f"split: split_size_or_sections expects an int or a list of ints >= 0; got "
                        f"{split_size_or_sections!r}")
    bounds = np.cumsum([0, *sizes]).tolist()
    return tuple(getitem(x, (slice(None),) * d + (slice(a, b),)) for a, b in zip(bounds, bounds[1:]))


@profiled
def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``x`` cut along ``dim`` into at most ``chunks`` pieces of ``ceil(n / chunks)`` (``torch.chunk``)."""
    require_tensor("chunk: x", x)
    chunks = require_int("chunk: chunks", chunks, 1)
    n = x.shape[normalize_axis(dim, x.ndim, "chunk: dim")]
    return split(x, max(-(-n // chunks), 1) if n else 0, dim)


@profiled
def getitem(x: Tensor, index: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), ``None`` and ``...``; returns a copy."""
    offset, out_shape, src_strides, _ = _view_of_index(x.shape, index)
    out = empty(out_shape, x.dtype, x.device)
    strided_copy(x, out, out_shape, src_strides, contiguous_strides(out_shape), src_offset=offset)

    def backward(g: Tensor) -> tuple[Tensor]:
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


def _is_dtype(spec: Any) -> bool:
    if isinstance(spec, (Device, int, np.integer)) or spec is None:
        return False
    try:
        np.dtype(spec)
    except TypeError:
        return False
    return True


@profiled
def to(x: Tensor, dev: Any = None, dtype: Any = None) -> Tensor:
    """``x`` on device ``dev`` and/or with ``dtype``; crossing devices copies through the host. As in
    PyTorch, a dtype may come first: ``x.to(np.float16)``."""
    if dtype is None and _is_dtype(dev):
        dev, dtype = None, dev
    target = x.device if dev is None else device(dev)
    out = x
    if target is not x.device:
        check_dtype_on(x.dtype, target)
        out = tensor(x.numpy(), device=target)
        out = record(out, (x,), lambda g: (to(g, x.device),), "to")
    return out if dtype is None else astype(out, dtype)
