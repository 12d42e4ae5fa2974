"""Reductions over axes: sum, mean, max, min, argmax, argmin, logsumexp (``kernels_cl/reduce.cl``).

``broadcast_to`` lives here too: it and ``sum`` are each other's gradient.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence

import numpy as np

from .. import kernels, tuning
from ..device import Device
from ..kernels import broadcast_strides, contiguous_strides, defines, group_size, launch_1d
from ..profiler import profiled
from ..tensor import Tensor, float32, float64
from ..validation import (
    broadcast_shapes,
    normalize_axis,
    require_float,
    require_ints,
    require_number,
    require_tensor,
)
from ._core import autocast, empty, record, view_as
from .shape import permute, reshape, strided_copy

OPS = kernels.op_codes("reduce.cl", "R_")
ARG = ("argmax", "argmin")
RF_IN_PART, RF_OUT_PART = (kernels.op_codes("reduce.cl", "RF_")[k] for k in ("in_part", "out_part"))  # flags
SMALL_AXIS = 64  # contiguous axes at most this long are walked by one work-item per output
FILL = 4  # work-groups per compute unit that a split reduction aims for
FOLD = 8  # fewest elements each work-item of a split reduction folds
SPLIT_MIN = 1 << 16  # inputs with fewer elements are reduced in one stage


def _axes(x: Tensor, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sorted({normalize_axis(a, x.ndim) for a in items}))
    if len(axes) != len(items):
        raise ValueError(f"axis: repeated axis in {axis}")
    return axes


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def split_chunk(dev: Device, n_out: int, length: int, per_out: int, outs_per_item: int = 1) -> int:
    """Chunk length for reducing ``n_out`` axes of ``length``, each chunk taken by ``per_out`` work-items, or one
    work-item taking the chunks of ``outs_per_item`` outputs (reduce_sum_cols' columns).

    The whole axis when the outputs alone fill the device or the input is small (under SPLIT_MIN elements:
    a second launch would cost more than it saves); else the axis split so that about FILL work-groups
    per compute unit run, each work-item still folding at least FOLD elements.
    """
    if n_out * length < SPLIT_MIN:
        return builtins.max(length, 1)
    want = FILL * dev.compute_units * group_size(dev)  # work-items that keep every compute unit busy
    items = -(-n_out // outs_per_item) * per_out
    parts = builtins.min(-(-want // builtins.max(items, 1)), length // (FOLD * per_out))
    return builtins.max(length, 1) if parts <= 1 else -(-length // parts)


def _stage(op: str, src: Tensor, part: tuple[Tensor, Tensor] | None, outer: int, length: int, inner: int,
           final: Tensor, idx: Tensor) -> None:
    """Reduce ``src`` (or an earlier stage's ``part``: values, indices) viewed as (outer, length, inner)
    into ``final`` and ``idx``, through as many partial stages as the plan asks for."""
    dev = src.device
    rows = inner == 1
    vw, col_vecs = (tuning.memoized(dev, ("reduce vw", id(dev), rows), lambda: (
        int(tuning.params(dev, "reduce")["VW" if rows else "VW_COLS"]), int(tuning.params(dev, "reduce")["COL_VECS"])))
        if op == "sum" and src.dtype in (float32, float64) else (0, 1))
    if vw:  # sums (CPUs): a work-item per output, chunk and (inner > 1) vector of columns, in vectors
        name, local = ("reduce_sum_rows" if inner == 1 else "reduce_sum_cols"), 1
    # CPUs walk contiguous chunks serially ~2-3x faster than a work-group shares them (Intel, PoCL)
    elif inner > 1 or length <= SMALL_AXIS or dev.type == "cpu":  # one work-item per output and chunk
        name, local = "reduce_item", 1
    else:  # contiguous long rows: one work-group per output and chunk
        name, local = "reduce_group", builtins.min(group_size(dev), 1 << (-(-length // FOLD) - 1).bit_length())
    width = vw * col_vecs if name == "reduce_sum_cols" else 1  # the columns a work-item takes
    chunk = split_chunk(dev, outer * inner, length, local, width)
    s = -(-length // chunk) if length else 1
    out_part = s > 1
    flags = (RF_IN_PART if part else 0) | (RF_OUT_PART if out_part else 0)
    if out_part:
        acc = kernels.real_dtype(src.dtype)  # float16 partials stay float32
        nxt = (empty((outer * s * inner,), acc, dev), empty((outer * s * inner,), np.int64, dev) if op in ARG
               else final)
    xp, xi = part or (src, idx)  # buffers the kernel won't read stand in for absent ones
    out_vals, out_idx = nxt if out_part else (final, idx)
    vec = {"ROW_VW": vw, "COL_VECS": col_vecs} if vw else {}
    k = tuning.memoized(dev, ("reduce", id(dev), name, src.dtype, vw), lambda: kernels.kernel(
        dev, "reduce.cl", name, defines(src.dtype, RED_WG=group_size(dev), **vec)))
    n = outer * s * -(-inner // width)
    args = (np.int32(OPS[op]), np.int32(flags), np.int32(outer), np.int32(length), np.int32(inner), np.int32(chunk),
            src.data, xp.data, xi.data, final.data, out_vals.data, out_idx.data)
    if local == 1:
        launch_1d(dev, k, n, *args)
    else:
        kernels.launch(dev, k, (n * local,), (local,), *args)
    if out_part:
        _stage(op, src, nxt, outer, s, inner, final, idx)


def _launch(op: str, x: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor | None]:
    """Reduce ``axes`` of ``x``; returns values and (for arg ops) int64 indices, shaped with kept dims."""
    kept = _kept_shape(x.shape, axes)  # the output's memory order is the same before and after a permute
    if axes and axes != tuple(range(axes[0], axes[-1] + 1)):  # not one block: move reduced axes last
        rest = tuple(i for i in range(x.ndim) if i not in axes)
        x = permute(x, rest + axes)
        axes = tuple(range(len(rest), x.ndim))
    outer = math.prod(x.shape[: axes[0]] if axes else x.shape)
    length = math.prod([x.shape[a] for a in axes])
    inner = math.prod(x.shape[axes[-1] + 1 :]) if axes else 1
    if length == 0 and op != "sum":
        raise ValueError(f"{op}: cannot reduce an empty axis of a tensor of shape {x.shape}")
    out = empty(kept, x.dtype, x.device)
    idx = empty(kept, np.int64, x.device) if op in ARG else out  # the kernel writes idx only for arg ops
    if out.size:
        _stage(op, x, None, outer, length, inner, out, idx)
    return out, (idx if op in ARG else None)


def _finish(t: Tensor, x_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Tensor:
    return t if keepdims else reshape(t, tuple(n for i, n in enumerate(x_shape) if i not in axes))


def _reduce(op: str, x: Tensor, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
    require_tensor(f"{op}: x", x)
    require_float(f"{op}: x", x)
    axes = _axes(x, axis)
    values, _ = _launch(op, x, axes)
    kept = values.detach()

    def backward(g: Tensor) -> tuple[Tensor]:
        g = reshape(g, kept.shape)
        if op == "sum":
            return (broadcast_to(g, x.shape),)
        if op == "logsumexp":
            return (g * (x - kept).exp(),)
        # max/min: ties share the gradient evenly (as torch.amax/amin)
        hit = (x == kept).astype(x.dtype)
        return (hit * (g / _reduce("sum", hit, axes, True)),)

    return _finish(record(values, (x,), backward, op), x.shape, axes, keepdims)


Axes = int | Sequence[int] | None


def _spelling(op: str, axis: Axes, keepdims: bool | None, dim: Axes, keepdim: bool | None) -> tuple[Axes, bool]:
    """(axis, keepdims) from NumPy's names or PyTorch's ``dim``/``keepdim``; naming both of a pair raises."""
    if dim is not None and axis is not None:
        raise TypeError(f"{op}: got both axis={axis!r} and dim={dim!r}; pass one")
    if keepdim is not None and keepdims is not None:
        raise TypeError(f"{op}: got both keepdims={keepdims!r} and keepdim={keepdim!r}; pass one")
    return (axis if dim is None else dim), bool(keepdims if keepdim is None else keepdim)


@profiled
def sum(x: Tensor, axis: Axes = None, keepdims: bool | None = None, *, dim: Axes = None,  # noqa: A001
        keepdim: bool | None = None) -> Tensor:
    """Sum over ``axis`` (all axes when None); ``dim``/``keepdim`` are PyTorch's names for the same."""
    axis, keepdims = _spelling("sum", axis, keepdims, dim, keepdim)
    (x,) = autocast("float32", x)
    return _reduce("sum", x, axis, keepdims)


@profiled
def mean(x: Tensor, axis: Axes = None, keepdims: bool | None = None, *, dim: Axes = None,
         keepdim: bool | None = None) -> Tensor:
    """Mean over ``axis`` (all axes when None); ``dim``/``keepdim`` are PyTorch's names for the same."""
    axis, keepdims = _spelling("mean", axis, keepdims, dim, keepdim)
    (x,) = autocast("float32", x)
    require_tensor("mean: x", x)
    count = math.prod([x.shape[a] for a in _axes(x, axis)])
    return _reduce("sum", x, axis, keepdims) * (1.0 / count if count else float("nan"))


def _extreme(op: str, x: Tensor, axis: Axes, keepdims: bool | None, dim: Axes,
             keepdim: bool | None) -> Tensor | tuple[Tensor, Tensor]:
    if dim is None:
        axis, keepdims = _spelling(op, axis, keepdims, dim, keepdim)
        return _reduce(op, x, axis, keepdims)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim expects an int (as torch.{op}(x, dim)); got {dim!r}")
    axis, keepdims = _spelling(op, axis, keepdims, dim, keepdim)
    return _reduce(op, x, axis, keepdims), _arg("arg" + op, x, axis, keepdims)


@profiled
def max(x: Tensor, axis: Axes = None, keepdims: bool | None = None, *, dim: int | None = None,  # noqa: A001
        keepdim: bool | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """Largest value over ``axis`` (NaN if any is NaN, as NumPy). With PyTorch's ``dim=`` keyword it
    returns ``(values, indices)`` as ``torch.max(x, dim)`` does (indices of the first largest value;
    a positional axis keeps returning the values alone)."""
    return _extreme("max", x, axis, keepdims, dim, keepdim)


@profiled
def min(x: Tensor, axis: Axes = None, keepdims: bool | None = None, *, dim: int | None = None,  # noqa: A001
        keepdim: bool | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """Smallest value over ``axis`` (NaN if any is NaN, as NumPy); ``dim=`` returns ``(values, indices)``
    as in :func:`max`."""
    return _extreme("min", x, axis, keepdims, dim, keepdim)


@profiled
def logsumexp(x: Tensor, axis: Axes = None, keepdims: bool | None = None, *, dim: Axes = None,
              keepdim: bool | None = None) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, computed stably (shifted by the maximum); ``dim``/``keepdim``
    are PyTorch's names for the same."""
    axis, keepdims = _spelling("logsumexp", axis, keepdims, dim, keepdim)
    (x,) = autocast("float32", x)
    return _reduce("logsumexp", x, axis, keepdims)


def _arg(op: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    require_tensor(f"{op}: x", x)
    require_float(f"{op}: x", x)
    if axis is None:
        flat = reshape(x, (x.size,))
        _, idx = _launch(op, flat, (0,))
        return reshape(idx, (1,) * x.ndim if keepdims else ())
    axes = (normalize_axis(axis, x.ndim),)
    _, idx = _launch(op, x, axes)
    return _finish(idx, x.shape, axes, keepdims)


@profiled
def argmax(x: Tensor, axis: int | None = None, keepdims: bool | None = None, *, dim: int | None = None,
           keepdim: bool | None = None) -> Tensor:
    """Index (int64) of the first largest value over ``axis`` (or ``dim``), or of the flattened tensor
    when None."""
    return _arg("argmax", x, *_spelling("argmax", axis, keepdims, dim, keepdim))


@profiled
def argmin(x: Tensor, axis: int | None = None, keepdims: bool | None = None, *, dim: int | None = None,
           keepdim: bool | None = None) -> Tensor:
    """Index (int64) of the first smallest value over ``axis`` (or ``dim``), or of the flattened tensor
    when None."""
    return _arg("argmin", x, *_spelling("argmin", axis, keepdims, dim, keepdim))


@profiled
def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """A copy of ``x`` repeated along broadcast dims to ``shape`` (NumPy's rules)."""
    shape = tuple(int(s) for s in shape)
    if broadcast_shapes("broadcast_to", x.shape, shape) != shape:
        raise ValueError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    if x.shape == shape:
        return x
    out = empty(shape, x.dtype, x.device)
    strided_copy(x, out, shape, broadcast_strides(x.shape, shape), contiguous_strides(shape))
    return record(out, (x,), lambda g: (sum_to_shape(g, x.shape),), "broadcast_to")


def sum_to_shape(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a broadcast gradient back down to ``shape``: for backward functions, which autograd runs unrecorded
    (the sums' own launch, without ``sum``'s checks and graph nodes)."""
    if g.shape == shape:
        return g
    pad = g.ndim - len(shape)
    axes = tuple(range(pad)) + tuple(pad + i for i, n in enumerate(shape) if n == 1 and g.shape[pad + i] != 1)
    return view_as(_launch("sum", g, axes)[0], shape)  # the kept dims' memory in ``shape``


def _var(op: str, x: Tensor, dim: int | Sequence[int] | None, correction: float, keepdim: bool) -> Tensor:
    require_tensor(f"{op}: x", x)
    require_float(f"{op}: x", x)
    axes = _axes(x, dim)
    dof = math.prod([x.shape[a] for a in axes]) - require_number(f"{op}: correction", correction)
    dev = x - mean(x, axes, True)
    return sum(dev * dev, axes, keepdim) * (1.0 / dof if dof > 0 else math.inf)


@profiled
def var(x: Tensor, dim: int | Sequence[int] | None = None, correction: float = 1, keepdim: bool = False) -> Tensor:
    """Variance over ``dim`` (all dims when None): ``sum((x - mean)**2) / (n - correction)`` (``torch.var``;
    ``correction=0`` is the population variance). Two passes: the mean, then the squared deviations."""
    return _var("var", x, dim, correction, keepdim)


@profiled
def std(x: Tensor, dim: int | Sequence[int] | None = None, correction: float = 1, keepdim: bool = False) -> Tensor:
    """Standard deviation over ``dim``: ``sqrt(var(x, dim, correction, keepdim))`` (``torch.std``)."""
    return _var("std", x, dim, correction, keepdim).sqrt()


@profiled
def expand(x: Tensor, *sizes: int | Sequence[int]) -> Tensor:
    """``x`` broadcast to ``sizes`` (``torch.Tensor.expand``): -1 keeps a dim's size, new dims go in front.
    Returns a copy (clnn tensors are contiguous)."""
    require_tensor("expand: x", x)
    shape = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], (int, np.integer)) else sizes
    shape = require_ints("expand: sizes", shape, len(shape), -1) if shape else ()
    pad = len(shape) - x.ndim
    if pad < 0 or -1 in shape[:pad]:
        raise ValueError(f"expand: sizes {shape} expect at least {x.ndim} dims and no -1 among new ones")
    target = tuple(x.shape[i - pad] if s == -1 else s for i, s in enumerate(shape))
    if any(n not in (1, t) for n, t in zip(x.shape, target[pad:])):
        raise ValueError(f"expand: cannot expand shape {x.shape} to {target}: only size-1 dims can grow")
    return broadcast_to(x, target)


@profiled
def repeat(x: Tensor, *sizes: int | Sequence[int]) -> Tensor:
    """``x`` tiled ``sizes[i]`` times along dim i (``torch.Tensor.repeat``; extra sizes add leading dims)."""
    require_tensor("repeat: x", x)
    reps = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], (int, np.integer)) else sizes
    reps = require_ints("repeat: sizes", reps, len(reps), 0) if reps else ()
    if len(reps) < x.ndim:
        raise ValueError(f"repeat: sizes expect at least {x.ndim} values (x's dims); got {reps}")
    full = (1,) * (len(reps) - x.ndim) + x.shape
    tiled = tuple(v for r, n in zip(reps, full) for v in (r, n))  # (r0, n0, r1, n1, ...)
    out = empty(tuple(r * n for r, n in zip(reps, full)), x.dtype, x.device)
    src = [v for s in contiguous_strides(full) for v in (0, s)]
    strided_copy(x, out, tiled, src, contiguous_strides(tiled))

    def backward(g: Tensor) -> tuple[Tensor]:
        return (reshape(sum(reshape(g, tiled), tuple(range(0, len(tiled), 2))), x.shape),)

    return record(out, (x,), backward, "repeat")
