"""Losses: cross-entropy (fused log_softmax + nll in ``kernels_cl/softmax.cl``), nll, mse, l1, BCE with logits."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import kernels
from ..kernels import defines, group_size, launch_1d, real_scalar
from ..profiler import profiled
from ..tensor import Tensor
from ..validation import require_choice, require_float, require_number, require_tensor, same_device, same_dtype
from ._core import autocast, empty, record
from .activation import row_launch
from .creation import tensor
from .elementwise import unary

REDUCTIONS = ("mean", "sum", "none")




def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _class_geometry(op: str, x: Tensor) -> tuple[tuple[int, int, int], tuple[int, ...]]:
    """((outer, C, inner), expected target shape) for scores x of shape (C,), (N, C) or (N, C, d1, ...)."""
    require_tensor(f"{op}: input", x)
    require_float(f"{op}: input", x)
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have shape (C,), (N, C) or (N, C, d1, ...); got a 0-d tensor")
    if x.ndim == 1:
        return (1, x.shape[0], 1), ()
    inner = math.prod(x.shape[2:])
    return (x.shape[0], x.shape[1], inner), (x.shape[0], *x.shape[2:])


def _targets(op: str, target: Any, x: Tensor, classes: int, expected: tuple[int, ...]) -> Tensor:
    """``target`` as an int64 tensor beside ``x``, its shape and range checked before any loss kernel runs.

    NumPy targets are checked on the host; device targets by a one-work-group min/max reduction whose
    two values are read back.
    """
    if isinstance(target, Tensor):
        if target.dtype not in (np.int32, np.int64):
            raise TypeError(f"{op}: target must hold integer class indices (int32/int64); got dtype {target.dtype}")
        same_device(op, input=x, target=target)
    else:
        arr = np.asarray(target)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{op}: target must hold integer class indices; got a {type(target).__name__} "
                            f"of dtype {arr.dtype}")
    shape = target.shape if isinstance(target, Tensor) else arr.shape
    if shape != expected:
        batch = f"batch {x.shape[0]}" if x.ndim > 1 else "no batch dim"
        raise ValueError(f"{op}: target has shape {shape} but input of shape {x.shape} has {batch}; "
                         f"expected target shape {expected}")
    if isinstance(target, Tensor):
        t = target.astype(np.int64)
        lo, hi = _device_range(t)
    else:
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
        t = tensor(arr.astype(np.int64), device=x.device)
    if t.size and (lo < 0 or hi >= classes):
        bad = lo if lo < 0 else hi
        raise ValueError(f"{op}: target values must be class indices in [0, {classes - 1}]; got {bad}")
    return t


def _device_range(t: Tensor) -> tuple[int, int]:
    if t.size == 0:
        return 0, 0
    dev = t.device
    wg = group_size(dev)
    out = empty((2,), np.int64, dev)
    k = kernels.kernel(dev, "softmax.cl", "target_range", defines(np.float32, RED_WG=wg))
    kernels.launch(dev, k, (wg,), (wg,), np.int32(t.size), t.data, out.data)
    lo, hi = out.numpy()
    return int(lo), int(hi)


def _softmax_kernel(x: Tensor, name: str) -> Any:
    return kernels.kernel(x.device, "softmax.cl", name, defines(x.dtype, RED_WG=group_size(x.device)))


@profiled
def cross_entropy(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    target: Any,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy between logits and integer class targets, as ``torch.nn.functional.cross_entropy``.

    One fused pass computes each row's logsumexp and loss; the backward is ``softmax - onehot``
    (smoothed), one elementwise kernel.

    Args:
        input: logits (C,), (N, C) or (N, C, d1, ...).
        target: class indices () / (N,) / (N, d1, ...), an int32/int64 tensor or a NumPy array.
        reduction: "mean" (over all target elements), "sum" or "none".
        label_smoothing: in [0, 1]; mixes the one-hot target with the uniform distribution.

    Raises:
        ValueError: shapes that don't match, target values outside [0, C - 1], bad reduction/smoothing.
        TypeError: non-integer targets.

    Example:
        >>> loss = F.cross_entropy(model(x), np.array([3, 0, 7]))
    """
    (input,) = autocast("float32", input)
    op = "cross_entropy"
    geometry, expected = _class_geometry(op, input)
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    require_number(f"{op}: label_smoothing", label_smoothing, 0, 1)
    outer, classes, inner = geometry
    t = _targets(op, target, input, classes, expected)
    eps = real_scalar(input.dtype, label_smoothing)
    loss = empty(expected, input.dtype, input.device)
    stats = empty((loss.size, 2), input.dtype, input.device)  # per row: max, log(sum(exp(x - max)))
    if classes == 0 and loss.size:
        raise ValueError(f"{op}: input has 0 classes (shape {input.shape})")
    row_launch(input.device, input.dtype, "ce_fwd", geometry, eps, input.data, t.data, loss.data, stats.data)

    def backward(g: Tensor) -> tuple[Tensor]:
        gx = empty(input.shape, input.dtype, input.device)
        launch_1d(input.device, _softmax_kernel(input, "ce_bwd"), input.size, np.int32(outer), np.int32(classes),
                  np.int32(inner), eps, input.data, t.data, stats.data, g.data, gx.data)
        return (gx,)

    return _reduce(record(loss, (input,), backward, op), reduction)


@profiled
def nll_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Negative log-likelihood ``-input[n, target[n]]`` for log-probabilities, as ``torch.nn.functional.nll_loss``.

    Shapes and targets as :func:`cross_entropy`.
    """
    (input,) = autocast("float32", input)
    op = "nll_loss"
    (outer, classes, inner), expected = _class_geometry(op, input)
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    t = _targets(op, target, input, classes, expected)
    sizes = (np.int32(outer), np.int32(classes), np.int32(inner))
    loss = empty(expected, input.dtype, input.device)
    launch_1d(input.device, _softmax_kernel(input, "nll_fwd"), loss.size, *sizes, input.data, t.data, loss.data)

    def backward(g: Tensor) -> tuple[Tensor]:
        gx = empty(input.shape, input.dtype, input.device)
        launch_1d(input.device, _softmax_kernel(input, "nll_bwd"), input.size, *sizes, t.data, g.data, gx.data)
        return (gx,)

    return _reduce(record(loss, (input,), backward, op), reduction)


def _pair(op: str, x: Any, target: Any) -> tuple[Tensor, Tensor]:
    """``input`` and a same-shaped floating ``target`` (NumPy targets are uploaded beside the input)."""
    x, target = autocast("float32", x, target)
    require_tensor(f"{op}: input", x)
    require_float(f"{op}: input", x)
    if not isinstance(target, Tensor):
        target = tensor(np.asarray(target), dtype=x.dtype, device=x.device)
    require_float(f"{op}: target", target)
    same_device(op, input=x, target=target)
    same_dtype(op, input=x, target=target)
    if target.shape != x.shape:
        raise ValueError(f"{op}: target must have the input's shape {x.shape}; got {target.shape}")
    return x, target


@profiled
def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Squared error ``(input - target) ** 2``, reduced; input and target have one shape."""
    reduction = require_choice("mse_loss: reduction", reduction, REDUCTIONS)
    x, y = _pair("mse_loss", input, target)
    return _reduce(unary("square", x - y), reduction)


@profiled
def l1_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Absolute error ``|input - target|``, reduced; the gradient at 0 is 0, as PyTorch."""
    reduction = require_choice("l1_loss: reduction", reduction, REDUCTIONS)
    x, y = _pair("l1_loss", input, target)
    return _reduce((x - y).abs(), reduction)


@profiled
def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002
    target: Any,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression, as PyTorch's function of that name.

    ``loss = (1 - y) * x + (1 + (pos_weight - 1) * y) * softplus(-x)``; softplus never overflows.

    Args:
        input: logits of any shape; target: probabilities of the same shape.
        pos_weight: weights of positive examples, broadcast against input (e.g. (C,) for (N, C)).
    """
    op = "binary_cross_entropy_with_logits"
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    x, y = _pair(op, input, target)
    if pos_weight is None:
        loss = unary("softplus", x, 1.0, np.inf) - x * y
    else:
        require_tensor(f"{op}: pos_weight", pos_weight)
        same_device(op, input=x, pos_weight=pos_weight)
        same_dtype(op, input=x, pos_weight=pos_weight)
        if pos_weight.ndim > x.ndim or any(
            p not in (1, n) for p, n in zip(pos_weight.shape[::-1], x.shape[::-1])
        ):
            raise ValueError(f"{op}: pos_weight of shape {pos_weight.shape} does not broadcast to input {x.shape}")
        loss = (1 - y) * x + ((pos_weight - 1) * y + 1) * unary("softplus", -x, 1.0, np.inf)
    return _reduce(loss, reduction)
