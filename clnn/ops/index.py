"""Integer indexing and masked selection: gather, scatter_add, index_select, embedding, ``x[idx]``,
``x[key] = value``, where, masked_fill, tril, triu (``kernels_cl/index.cl``).

Index tensors are int64 on the device (int32 ones and NumPy/list indices are converted). Their range is
checked on the device before the op launches (``index.cl``'s ``index_check``), at the cost of reading
back one int: an out-of-range index is an ``IndexError`` naming its position, never a wild read.
Scatters (the gradients of gathers) add each output's contributions in increasing index position, without
atomics, so every result is bit-identical run after run: small ones by walking the whole index list per
output, larger ones by a stable radix sort of the index by destination first (``sort.py``), after which
each output reads only its own contributions (see ``_scatter`` and ``WALK_MAX``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import graphs, kernels, tuning
from ..device import Device
from ..kernels import broadcast_strides, contiguous_strides, defines, descriptor, group_size, launch_1d
from ..profiler import profiled
from ..tensor import FLOAT_DTYPES, Tensor, is_grad_enabled
from ..validation import (
    broadcast_shapes,
    normalize_axis,
    require_int,
    require_tensor,
    same_device,
    same_dtype,
)
from ._core import empty, record
from .creation import full, tensor
from .reduce import sum_to_shape
from .shape import _view_of_index, astype, reshape, strided_copy
from .shape import getitem as basic_getitem
from .sort import I32, radix_sort, scan_rows, segments
from .sort import kernel as _kernel

SX_ASSIGN, SX_BASE = (kernels.op_codes("index.cl", "SX_")[k] for k in ("assign", "base"))
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
REAL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # scatter_cols' types (rowvec.h's rows of `real`)
# A scatter walks the whole index list per output while that is cheaper than sorting it first: under
# WALK_MAX steps (outputs x index list length) in all. Measured on Intel's CPU runtime (BENCHMARKS.md,
# "Embedding backward"): the walk wins below ~2**18 steps, where the sort's dozen launches dominate.
WALK_MAX = 1 << 18


def as_index(label: str, index: Any, dev: Device) -> Tensor:
    """``index`` as an int64 tensor on ``dev``: an int32/int64 tensor, or a NumPy array or list of ints."""
    if isinstance(index, Tensor):
        if index.dtype not in INT_DTYPES:
            raise TypeError(f"{label} expects an int32 or int64 tensor; got dtype {index.dtype.name}")
        if index.device is not dev:
            raise ValueError(f"{label} is on {index.device} but the data is on {dev}; move one with .to(device)")
        return astype(index, np.int64)
    arr = np.asarray(index)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{label} expects integer indices; got {arr.dtype.name} {index!r:.60}")
    return tensor(arr.astype(np.int64), device=dev)


def check_range(op: str, label: str, idx: Tensor, lo: int, hi: int) -> None:
    """IndexError unless every element of ``idx`` lies in ``[lo, hi)`` (one int read back; while a graph is
    captured, at each of its replays)."""
    if idx.size == 0:
        return
    dev = idx.device
    first = full((1,), idx.size, np.int32, dev)  # a fill: unlike an upload, it does not wait for the queue
    launch_1d(dev, _kernel(dev, np.dtype(np.int64), "index_check"), idx.size,
              np.int32(idx.size), idx.data, np.int64(lo), np.int64(hi), first.data)

    def check() -> None:
        p = int(first.numpy()[0])
        if p < idx.size:
            at = tuple(int(i) for i in np.unravel_index(p, idx.shape))
            bad = basic_getitem(reshape(idx, (idx.size,)), p).item()
            raise IndexError(f"{op}: {label}[{at}] is {bad}, out of range for a dimension of size {hi}")

    graphs.each_replay(dev, check)


def _around(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """(O, V, I): ``shape`` seen as the dims before ``dim``, ``dim`` itself, and the dims after."""
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])


def _gather(x: Tensor, idx: Tensor, out_shape: tuple[int, ...], ovi: tuple[int, int, int], j: int,
            strides: tuple[int, int, int]) -> Tensor:
    """index.cl's gather of x (O, V, I) by ``idx`` (O, J, I) through ``strides``; on CPUs, with an index per row,
    gather_rows."""
    out = empty(out_shape, x.dtype, x.device)
    o, v, i = ovi
    dims = (np.int32(v), np.int32(j), np.int32(i))
    if x.device.type == "cpu" and strides[2] == 0:
        launch_1d(x.device, _kernel(x.device, x.dtype, "gather_rows"), o * j, np.int32(o * j), *dims,
                  *(np.int32(s) for s in strides[:2]), idx.data, x.data, out.data)
    else:
        launch_1d(x.device, _kernel(x.device, x.dtype, "gather"), out.size, np.int32(out.size), *dims,
                  *(np.int32(s) for s in strides), idx.data, x.data, out.data)
    return out


def _scatter(src: Tensor, idx: Tensor, shape: tuple[int, ...], ovi: tuple[int, int, int], j: int,
             strides: tuple[int, int, int], base: Tensor | None = None, flags: int = 0, skip: int = -1,
             out: Tensor | None = None) -> Tensor:
    """``out`` (O, V, I) = base (or 0) plus src (O, J, I) scattered by ``idx``: either one index list
    (strides (0, 1, 0)) or one index per src element (``idx`` shaped as src). Where tuning's ``scatter`` COLS_VW
    is set (CPUs), one index list of float32/64 into zeros or in place (``out`` is the base) is walked once per
    chunk of columns (``scatter_cols``). Otherwise short index lists are walked by every output (``index.cl``'s
    scatter); longer ones are sorted by destination first, so each output reads only its own contributions
    (scatter_sorted). All add in increasing index position: the same bits."""
    out = empty(shape, src.dtype, src.device) if out is None else out
    o, v, i = ovi
    flags |= SX_BASE if base is not None else 0
    base_data = (base if base is not None else src).data
    dev = src.device
    vw = tuning.memoized(dev, ("scatter cols", id(dev)), lambda: int(tuning.params(dev, "scatter")["COLS_VW"]))
    if vw and strides == (0, 1, 0) and src.dtype in REAL_DTYPES and (base is None or base.data is out.data):
        chunks = o * -(-i // vw)
        k = kernels.kernel(dev, "index.cl", "scatter_cols", defines(src.dtype, IDX_WG=group_size(dev), ROW_VW=vw))
        launch_1d(dev, k, chunks, np.int32(chunks), np.int32(flags), np.int32(v), np.int32(j),
                  np.int32(i), np.int32(skip), idx.data, src.data, out.data)
        return out
    if out.size * j <= WALK_MAX:
        launch_1d(dev, _kernel(dev, src.dtype, "scatter"), out.size, np.int32(out.size), np.int32(flags),
                  np.int32(v), np.int32(j), np.int32(i), *(np.int32(s) for s in strides), np.int32(skip),
                  idx.data, base_data, src.data, out.data)
        return out
    per_element = strides != (0, 1, 0)
    bound = out.size if per_element else v  # segments: one per output, or one per row of the list
    keys, order = empty((idx.size,), I32, dev), empty((idx.size,), I32, dev)
    launch_1d(dev, _kernel(dev, I32, "segment_keys"), idx.size, np.int32(idx.size), np.int32(v), np.int32(j),
              np.int32(i), np.int32(per_element), idx.data, keys.data, order.data)
    keys, order = radix_sort(keys, order, bound)
    lo, hi = segments(keys, bound)
    launch_1d(dev, _kernel(dev, src.dtype, "scatter_sorted"), out.size, np.int32(out.size), np.int32(flags),
              np.int32(v), np.int32(j), np.int32(i), np.int32(per_element), np.int32(skip), lo.data, hi.data,
              order.data, base_data, src.data, out.data)
    return out


def _per_element_index(op: str, x: Tensor, dim: int, index: Any) -> tuple[int, Tensor]:
    """``dim`` normalized and ``index`` as int64, checked as torch does: x's rank, no larger than x on
    every dim but ``dim``, entries in range."""
    d = normalize_axis(dim, x.ndim, f"{op}: dim")
    idx = as_index(f"{op}: index", index, x.device)
    if idx.size and idx.ndim != x.ndim:  # torch checks nothing about an empty index
        raise ValueError(f"{op}: index expects {x.ndim} dimensions (as x); got shape {idx.shape}")
    if idx.size and any(a > b for k, (a, b) in enumerate(zip(idx.shape, x.shape)) if k != d):
        raise ValueError(f"{op}: index of shape {idx.shape} expects sizes at most x's {x.shape} on every dim "
                         f"but dim {d}")
    check_range(op, "index", idx, 0, x.shape[d] if x.ndim else 1)
    return d, idx


def _region(shape: tuple[int, ...], d: int) -> tuple[slice, ...]:
    """The leading block of ``shape`` on every dim but ``d`` (where it is whole)."""
    return tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(shape))


@profiled
def gather(x: Tensor, dim: int, index: Any) -> Tensor:
    """``out[..., j, ...] = x[..., index[..., j, ...], ...]`` along ``dim`` (``torch.gather``).

    ``index`` (int64) has x's rank and at most x's size on every dim but ``dim``; the output has
    ``index``'s shape.

    Raises:
        TypeError: x is not a tensor or index not an integer tensor/array.
        ValueError: index's rank differs from x's, or it is larger than x off ``dim``.
        IndexError: an index lies outside ``[0, x.shape[dim])``.
    """
    require_tensor("gather: x", x)
    d, idx = _per_element_index("gather", x, dim, index)
    if idx.size == 0:
        return record(empty(idx.shape, x.dtype, x.device), (x,), lambda g: (full(x.shape, 0, x.dtype, x.device),),
                      "gather")
    if x.ndim and idx.shape[:d] + idx.shape[d + 1:] != x.shape[:d] + x.shape[d + 1:]:
        x = basic_getitem(x, _region(idx.shape, d))
    ovi = _around(x.shape, d) if x.ndim else (1, 1, 1)
    j = idx.shape[d] if x.ndim else 1
    strides = (j * ovi[2], ovi[2], 1)
    out = _gather(x, idx, idx.shape, ovi, j, strides)
    return record(out, (x,), lambda g: (_scatter(g, idx, x.shape, ovi, j, strides),), "gather")


@profiled
def scatter_add(x: Tensor, dim: int, index: Any, src: Tensor) -> Tensor:
    """``x`` plus ``src`` added at ``index`` along ``dim`` (``torch.scatter_add``, out of place).

    ``index`` has x's rank, at most x's size on every dim but ``dim``, and at most src's size on every
    dim; ``src[...]`` over index's shape is what is added. Duplicate indices add up, in the order of
    their positions (deterministic).
    """
    require_tensor("scatter_add: x", x)
    require_tensor("scatter_add: src", src)
    same_device("scatter_add", x=x, src=src)
    same_dtype("scatter_add", x=x, src=src)
    d, idx = _per_element_index("scatter_add", x, dim, index)
    if idx.size and (src.ndim != idx.ndim or any(a > b for a, b in zip(idx.shape, src.shape))):
        raise ValueError(f"scatter_add: src expects at least index's size {idx.shape} on every dim; "
                         f"got {src.shape}")
    if idx.size == 0:
        return astype(x, x.dtype, copy=True)
    if src.shape != idx.shape:
        src = basic_getitem(src, tuple(slice(0, n) for n in idx.shape))
    region = _region(idx.shape, d)
    if x.ndim and idx.shape[:d] + idx.shape[d + 1:] != x.shape[:d] + x.shape[d + 1:]:
        part = scatter_add(basic_getitem(x, region), d, idx, src)  # the block index reaches, then x around it
        out = astype(x, x.dtype, copy=True)
        offset, shape, strides, _ = _view_of_index(x.shape, region)
        strided_copy(part, out, shape, contiguous_strides(shape), strides, dst_offset=offset)

        def around(g: Tensor) -> tuple[Tensor, Tensor]:
            gx = astype(g, g.dtype, copy=True)
            setitem(gx, region, 0)
            return gx, basic_getitem(g, region)

        return record(out, (x, part), around, "scatter_add")
    ovi = _around(x.shape, d) if x.ndim else (1, 1, 1)
    j = idx.shape[d] if x.ndim else 1
    strides = (j * ovi[2], ovi[2], 1)
    out = _scatter(src, idx, x.shape, ovi, j, strides, base=x)
    return record(out, (x, src), lambda g: (g, _gather(g, idx, idx.shape, ovi, j, strides)), "scatter_add")


def _select(op: str, x: Tensor, d: int, idx: Tensor, skip: int = -1) -> Tensor:
    """Rows ``idx`` (any shape, range checked) of ``x`` along ``d``: x.shape with ``d`` replaced by idx.shape."""
    o, v, i = _around(x.shape, d)
    n = idx.size
    out = _gather(x, idx, (o, n, i), (o, v, i), n, (0, 1, 0))
    out = reshape(out, x.shape[:d] + idx.shape + x.shape[d + 1:])
    return record(out, (x,), lambda g: (_scatter(g, idx, x.shape, (o, v, i), n, (0, 1, 0), skip=skip),), op)


@profiled
def index_select(x: Tensor, dim: int, index: Any) -> Tensor:
    """The entries ``index`` (1-D, int64) of ``x`` along ``dim`` (``torch.index_select``)."""
    require_tensor("index_select: x", x)
    if x.ndim == 0:
        raise ValueError("index_select: x expects at least 1 dimension; got a 0-d tensor")
    d = normalize_axis(dim, x.ndim, "index_select: dim")
    idx = as_index("index_select: index", index, x.device)
    if idx.ndim != 1:
        raise ValueError(f"index_select: index expects 1 dimension; got shape {idx.shape}")
    check_range("index_select", "index", idx, 0, x.shape[d])
    return _select("index_select", x, d, idx)


@profiled
def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:  # noqa: A002
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by the integer tensor ``input``
    (``F.embedding``): output shape ``input.shape + (embedding_dim,)``. Row ``padding_idx`` receives no
    gradient.

    Raises:
        IndexError: an index lies outside ``[0, num_embeddings)`` (checked before the lookup).
    """
    require_tensor("embedding: weight", weight)
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight expects 2 dimensions (num_embeddings, embedding_dim); got {weight.shape}")
    idx = as_index("embedding: input", input, weight.device)
    n = weight.shape[0]
    skip = -1
    if padding_idx is not None:
        p = require_int("embedding: padding_idx", padding_idx)
        if not -n <= p < n:
            raise ValueError(f"embedding: padding_idx expects a value in [{-n}, {n - 1}]; got {p}")
        skip = p % n
    check_range("embedding", "input", idx, 0, n)
    return _select("embedding", weight, 0, idx, skip)


def _advanced(key: Any) -> bool:
    return isinstance(key, (Tensor, np.ndarray, list))


def _is_mask(key: Any) -> bool:
    return (key.dtype if isinstance(key, Tensor) else np.asarray(key).dtype) == np.bool_  # no download


def _mask_positions(x: Tensor, key: Any) -> tuple[Tensor, Tensor]:
    """(x with the mask's dims flattened into one, the int64 positions of the mask's true entries, in order):
    a prefix sum of the mask on the device, then one int read back (the count, as torch also syncs)."""
    mask = key if isinstance(key, Tensor) else tensor(np.asarray(key), device=x.device)
    same_device("indexing", x=x, mask=mask)
    if mask.ndim == 0 or mask.shape != x.shape[:mask.ndim]:
        raise IndexError(f"indexing: a boolean mask expects the shape of x {x.shape} or of its leading dims; "
                         f"got {mask.shape}")
    n = mask.size
    inc = scan_rows(astype(reshape(mask, (n,)), np.int32), 1, n, 1, 0)
    count = int(basic_getitem(inc, n - 1).item()) if n else 0
    idx = empty((count,), np.int64, x.device)
    launch_1d(x.device, _kernel(x.device, I32, "mask_positions"), n, np.int32(n), mask.data, inc.data, idx.data)
    return reshape(x, (n,) + x.shape[mask.ndim:]), idx


@profiled
def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]``: basic indexing (ints, slices, None, ...); an integer index (clnn int tensor, NumPy
    array or list; negative entries count from the end) along dim 0, optionally followed by basic items
    for the other dims (``x[idx, 1:3]``); or a boolean mask of x's shape or its leading dims alone
    (``x[mask]``: the selected entries, or rows of the remaining dims, flattened into dim 0 in order).
    Returns a copy."""
    items = key if isinstance(key, tuple) else (key,)
    if not any(_advanced(k) for k in items):
        return basic_getitem(x, key)
    if not _advanced(items[0]) or any(_advanced(k) for k in items[1:]):
        raise TypeError("indexing: an integer index tensor/array is supported only as the first item (x[idx, ...])")
    if _is_mask(items[0]):
        if len(items) > 1:
            raise TypeError("indexing: a boolean mask is supported only alone (x[mask])")
        flat, idx = _mask_positions(x, items[0])
        return _select("getitem", flat, 0, idx)
    idx = _index_key(x, items[0])
    out = _select("getitem", x, 0, idx)
    return basic_getitem(out, (slice(None),) * idx.ndim + items[1:]) if len(items) > 1 else out


def _index_key(x: Tensor, key: Any) -> Tensor:
    if x.ndim == 0:
        raise IndexError("indexing: a 0-d tensor cannot take an integer index tensor")
    idx = as_index("indexing: index", key, x.device)
    check_range("indexing", "index", idx, -x.shape[0], x.shape[0])
    return idx


@profiled
def setitem(x: Tensor, key: Any, value: Any) -> None:
    """``x[key] = value`` in place, for a ``key`` that ``getitem`` takes (an integer index or a boolean mask
    alone, where duplicate indices keep the last value). ``value`` broadcasts to ``x[key]``'s shape.

    Raises:
        RuntimeError: ``x`` requires grad (as PyTorch's in-place error on a leaf) or ``value`` does,
            while autograd records: assignment is not recorded.
    """
    require_tensor("setitem: x", x)
    if is_grad_enabled() and (x.requires_grad or isinstance(value, Tensor) and value.requires_grad):
        which = "x" if x.requires_grad else "value"
        raise RuntimeError(
            f"setitem: {which} requires grad, and assignment into a tensor is not recorded by autograd; "
            "build the result with clnn.cat/clnn.where, or assign under clnn.no_grad()"
        )
    if isinstance(value, Tensor):
        same_device("setitem", x=x, value=value)
        if value.data is x.data:  # x[1:] = x[:-1] would read what it writes
            value = astype(value, value.dtype, copy=True)
        value = astype(value, x.dtype)
    else:
        value = tensor(np.asarray(value), dtype=x.dtype, device=x.device)
    if _advanced(key):
        x, idx = _mask_positions(x, key) if _is_mask(key) else (x, _index_key(x, key))  # x: a view
        shape = idx.shape + x.shape[1:]
        _require_fits(value, shape)
        src = value if value.shape == shape else _broadcast(value, shape)
        o, v, i = _around(x.shape, 0)
        _scatter(src, idx, x.shape, (o, v, i), idx.size, (0, 1, 0), base=x, flags=SX_ASSIGN, out=x)
        return
    offset, shape, strides, _ = _view_of_index(x.shape, key)
    _require_fits(value, shape)
    strided_copy(value, x, shape, broadcast_strides(value.shape, shape), strides, dst_offset=offset)


def copy_(x: Tensor, src: Any) -> Tensor:
    """Copy ``src`` (a tensor on ``x``'s device, or host data), broadcast to ``x``'s shape and converted to its
    dtype, into ``x`` in place, as ``torch.Tensor.copy_``; returns ``x``. Host data goes straight into ``x``'s
    memory: one upload (the way to feed new batches to a captured graph's input tensors)."""
    require_tensor("copy_: x", x)
    if isinstance(src, Tensor):
        same_device("copy_", x=x, src=src)
        setitem(x, Ellipsis, src)
        return x
    arr = np.asarray(src)
    try:
        host = np.ascontiguousarray(np.broadcast_to(arr, x.shape), dtype=x.dtype)
    except ValueError:
        raise ValueError(f"copy_: cannot broadcast src of shape {arr.shape} to x's shape {x.shape}") from None
    if is_grad_enabled() and x.requires_grad:
        raise RuntimeError("copy_: x requires grad, and a copy into a tensor is not recorded by autograd; copy under "
                           "clnn.no_grad()")
    x.device.upload(x.data, host)
    return x


def _require_fits(value: Tensor, shape: tuple[int, ...]) -> None:
    pad = len(shape) - value.ndim
    if pad < 0 or any(n not in (1, m) for n, m in zip(value.shape, shape[pad:])):
        raise ValueError(f"setitem: cannot broadcast value of shape {value.shape} to the indexed shape {shape}")


def _broadcast(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    out = empty(shape, t.dtype, t.device)
    strided_copy(t, out, shape, broadcast_strides(t.shape, shape), contiguous_strides(shape))
    return out


def _operand(op: str, name: str, v: Any, like: Tensor | None) -> Tensor | None:
    if isinstance(v, Tensor):
        return v
    if like is None:
        return None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {name} expects a clnn.Tensor or a number; got {type(v).__name__}")
    return full((), v, dtype=like.dtype, device=like.device)


@profiled
def where(condition: Tensor, a: Any, b: Any) -> Tensor:
    """``a`` where ``condition`` (a bool tensor) holds, else ``b``, broadcast together (``torch.where``).
    ``a`` or ``b`` may be a number, taken in the other's dtype."""
    require_tensor("where: condition", condition)
    if condition.dtype != np.bool_:
        raise TypeError(f"where: condition expects a bool tensor; got dtype {condition.dtype.name}")
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    if like is None:
        raise TypeError(f"where: a or b must be a clnn.Tensor; got {type(a).__name__} and {type(b).__name__}")
    ta, tb = _operand("where", "a", a, like), _operand("where", "b", b, like)
    same_device("where", condition=condition, a=ta, b=tb)
    same_dtype("where", a=ta, b=tb)
    shape = broadcast_shapes("where", broadcast_shapes("where", condition.shape, ta.shape), tb.shape)
    out = _broadcast(tb, shape)
    d = descriptor(shape, broadcast_strides(condition.shape, shape), broadcast_strides(ta.shape, shape))
    kernels.launch_runs(out.device, _kernel(out.device, out.dtype, "where_fill"), d, out.size, condition.data, ta.data,
                        out.data)
    if out.dtype not in FLOAT_DTYPES:
        return out

    def backward(g: Tensor) -> tuple[None, Tensor | None, Tensor | None]:
        ga = sum_to_shape(where(condition, g, 0), ta.shape) if ta.requires_grad else None
        gb = sum_to_shape(where(condition, 0, g), tb.shape) if tb.requires_grad else None
        return None, ga, gb

    return record(out, (condition, ta, tb), backward, "where")


@profiled
def masked_fill(x: Tensor, mask: Tensor, value: float) -> Tensor:
    """``x`` with ``value`` where the bool ``mask`` (broadcastable to x's shape) holds."""
    require_tensor("masked_fill: x", x)
    require_tensor("masked_fill: mask", mask)
    if broadcast_shapes("masked_fill", mask.shape, x.shape) != x.shape:
        raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to x's shape {x.shape}")
    if isinstance(value, Tensor) or isinstance(value, (bool, np.bool_)) and x.dtype != np.bool_:
        raise TypeError(f"masked_fill: value expects a number; got {type(value).__name__}")
    return where(mask, _operand("masked_fill", "value", value, x), x)


def _tri(op: str, x: Tensor, diagonal: int) -> Tensor:
    require_tensor(f"{op}: x", x)
    k = require_int(f"{op}: diagonal", diagonal)
    if x.ndim < 2:
        raise ValueError(f"{op}: x expects at least 2 dimensions; got shape {x.shape}")
    out = empty(x.shape, x.dtype, x.device)
    rows, cols = x.shape[-2:]
    k = max(min(k, cols), -rows)  # beyond the matrix every shift acts alike; keeps it an int32
    launch_1d(x.device, _kernel(x.device, x.dtype, "tri"), x.size, np.int32(x.size), np.int32(rows),
              np.int32(cols), np.int32(k), np.int32(op == "triu"), x.data, out.data)
    return record(out, (x,), lambda g: (_tri(op, g, k),), op)


@profiled
def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims: entries with ``col - row <= diagonal``, zeros elsewhere."""
    return _tri("tril", x, diagonal)


@profiled
def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims: entries with ``col - row >= diagonal``, zeros elsewhere."""
    return _tri("triu", x, diagonal)

