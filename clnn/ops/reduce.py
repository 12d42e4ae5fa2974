"""Reductions over axes: sum, mean, max, min, argmax, argmin, logsumexp (``kernels_cl/reduce.cl``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import kernels
from ..profiler import profiled
from ..tensor import Tensor
from ._core import defines, empty, group_size, launch_1d, normalize_axis, record, require_float, require_tensor

OPS = {name: code for code, name in enumerate("sum max min logsumexp argmax argmin sumsq".split())}
SMALL_AXIS = 64  # axes at most this long are walked by one work-item per output


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


def _launch(op: str, x: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor | None]:
    """Reduce ``axes`` of ``x``; returns values and (for arg ops) int64 indices, shaped with kept dims."""
    from .shape import permute

    kept = _kept_shape(x.shape, axes)  # the output's memory order is the same before and after a permute
    if axes and axes != tuple(range(axes[0], axes[-1] + 1)):  # not one block: move reduced axes last
        rest = tuple(i for i in range(x.ndim) if i not in axes)
        x = permute(x, rest + axes)
        axes = tuple(range(len(rest), x.ndim))
    outer = int(np.prod(x.shape[: axes[0]] if axes else x.shape, dtype=np.int64))
    length = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    inner = int(np.prod(x.shape[axes[-1] + 1 :], dtype=np.int64)) if axes else 1
    if length == 0 and op not in ("sum", "sumsq"):
        raise ValueError(f"{op}: cannot reduce an empty axis of a tensor of shape {x.shape}")
    dev = x.device
    out = empty(kept, x.dtype, dev)
    is_arg = op in ("argmax", "argmin")
    idx = empty(kept, np.int64, dev) if is_arg else out  # the kernel writes idx only for arg ops
    args = (np.int32(OPS[op]), np.int32(outer), np.int32(length), np.int32(inner), x.data, out.data, idx.data)
    n_out = outer * inner
    if length <= SMALL_AXIS:
        launch_1d(dev, kernels.kernel(dev, "reduce.cl", "reduce_small", defines(x.dtype)), n_out, *args)
    else:
        wg = group_size(dev)
        k = kernels.kernel(dev, "reduce.cl", "reduce_wg", defines(x.dtype, RED_WG=wg))
        kernels.launch(dev, k, (n_out * wg,), (wg,), *args)
    return out, (idx if is_arg else None)


def _finish(t: Tensor, x_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Tensor:
    from .shape import reshape

    return t if keepdims else reshape(t, tuple(n for i, n in enumerate(x_shape) if i not in axes))


def _reduce(op: str, x: Tensor, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
    require_tensor(f"{op}: x", x)
    require_float(f"{op}: x", x)
    axes = _axes(x, axis)
    values, _ = _launch(op, x, axes)
    kept = values.detach()

    def backward(g: Tensor) -> tuple[Tensor]:
        from .shape import broadcast_to, reshape

        g = reshape(g, kept.shape)
        if op == "sum":
            return (broadcast_to(g, x.shape),)
        if op == "logsumexp":
            return (g * (x - kept).exp(),)
        # max/min: ties share the gradient evenly (as torch.amax/amin)
        hit = (x == kept).astype(x.dtype)
        return (hit * (g / _reduce("sum", hit, axes, True)),)

    return _finish(record(values, (x,), backward, op), x.shape, axes, keepdims)


@profiled
def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (all axes when None)."""
    return _reduce("sum", x, axis, keepdims)


@profiled
def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (all axes when None)."""
    require_tensor("mean: x", x)
    count = int(np.prod([x.shape[a] for a in _axes(x, axis)], dtype=np.int64))
    return _reduce("sum", x, axis, keepdims) * (1.0 / count if count else float("nan"))


@profiled
def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Largest value over ``axis`` (NaN if any is NaN, as NumPy)."""
    return _reduce("max", x, axis, keepdims)


@profiled
def min(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Smallest value over ``axis`` (NaN if any is NaN, as NumPy)."""
    return _reduce("min", x, axis, keepdims)


@profiled
def logsumexp(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, computed stably (shifted by the maximum)."""
    return _reduce("logsumexp", x, axis, keepdims)


def _arg(op: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    from .shape import reshape

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
def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the first largest value over ``axis``, or of the flattened tensor when None."""
    return _arg("argmax", x, axis, keepdims)


@profiled
def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the first smallest value over ``axis``, or of the flattened tensor when None."""
    return _arg("argmin", x, axis, keepdims)
