"""Losses: cross-entropy (fused log_softmax + nll in ``kernels_cl/softmax.cl``), nll, mse, l1, BCE with logits,
smooth L1 and Huber (fused with their reduction in ``kernels_cl/huber.cl``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import graphs, kernels
from ..kernels import defines, group_size, launch_1d, real_scalar
from ..profiler import profiled
from ..tensor import FLOAT_DTYPES, Tensor
from ..validation import (
    require_choice,
    require_float,
    require_int,
    require_number,
    require_tensor,
    same_device,
    same_dtype,
)
from ._core import autocast, empty, record
from .activation import row_launch, row_vec_kernel
from .creation import tensor
from .elementwise import unary
from .reduce import FOLD, split_chunk

REDUCTIONS = ("mean", "sum", "none")
IGNORE_INDEX = -100  # PyTorch's default: targets equal to it add nothing to the loss or its mean


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


def _class_weight(op: str, weight: Tensor | None, x: Tensor, classes: int) -> tuple[np.int32, Any]:
    """(weighted flag, buffer) for the kernels; without weights the input's buffer stands in, unread."""
    if weight is None:
        return np.int32(0), x.data
    require_tensor(f"{op}: weight", weight)
    same_device(op, input=x, weight=weight)
    same_dtype(op, input=x, weight=weight)
    if weight.shape != (classes,):
        raise ValueError(f"{op}: weight expects one value per class, shape ({classes},); got shape {weight.shape}")
    return np.int32(1), weight.data


def _targets(op: str, target: Any, x: Tensor, classes: int, expected: tuple[int, ...], ignore_index: int,
             alternative: str = "") -> tuple[Tensor, int | Tensor]:
    """``target`` as an int64 tensor beside ``x`` and how many of its values are not ``ignore_index``
    (``alternative`` names what else the op would accept, for the type error).

    Shape and range (``[0, C)``, ``ignore_index`` excepted) are checked before any loss kernel runs: NumPy
    targets on the host; device targets by one work-group's min/max/count (``target_range``) whose three
    values are read back. That read waits for the queue, the price of an error raised at the call rather
    than a NaN or an out-of-bounds read later; the count it brings makes the unweighted mean a scale on
    the host instead of a second reduction on the device. While a graph is captured, the values are read at
    each replay and the count stays on the device (a 0-d tensor of ``x``'s ``real`` type) to divide by.
    """
    if isinstance(target, Tensor):
        if target.dtype not in (np.int32, np.int64):
            raise TypeError(f"{op}: target must hold integer class indices (int32/int64){alternative}; "
                            f"got dtype {target.dtype} of shape {target.shape}")
        same_device(op, input=x, target=target)
    else:
        arr = np.asarray(target)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{op}: target must hold integer class indices{alternative}; got a "
                            f"{type(target).__name__} of dtype {arr.dtype} and shape {arr.shape}")
    shape = target.shape if isinstance(target, Tensor) else arr.shape
    if shape != expected:
        batch = f"batch {x.shape[0]}" if x.ndim > 1 else "no batch dim"
        raise ValueError(f"{op}: target has shape {shape} but input of shape {x.shape} has {batch}; "
                         f"expected target shape {expected}")
    if not isinstance(target, Tensor):
        kept = arr[arr != ignore_index]
        lo, hi, count = (int(kept.min()), int(kept.max()), kept.size) if kept.size else (0, 0, 0)
        _check_targets(op, lo, hi, count, classes, ignore_index)
        return tensor(arr.astype(np.int64), device=x.device), count
    t = target.astype(np.int64)
    if t.size == 0:
        return t, 0
    found = _device_range(t, ignore_index)

    def check() -> int:
        lo, hi, count = (int(v) for v in found.numpy())
        _check_targets(op, lo, hi, count, classes, ignore_index)
        return count

    if graphs.capturing(x.device) is None:
        return t, check()
    graphs.each_replay(x.device, check)
    return t, found[2].astype(kernels.real_dtype(x.dtype))


def _check_targets(op: str, lo: int, hi: int, count: int, classes: int, ignore_index: int) -> None:
    if count and (lo < 0 or hi >= classes):
        bad = lo if lo < 0 else hi
        raise ValueError(f"{op}: target values must be class indices in [0, {classes - 1}]; got {bad} "
                         f"(ignore_index is {ignore_index})")


def _device_range(t: Tensor, ignore_index: int) -> Tensor:
    """(min, max, count) of ``t``'s values other than ``ignore_index``, in an int64 tensor of 3."""
    dev = t.device
    wg = group_size(dev)
    out = empty((3,), np.int64, dev)
    k = kernels.kernel(dev, "softmax.cl", "target_range", defines(np.float32, RED_WG=wg))
    kernels.launch(dev, k, (wg,), (wg,), np.int32(t.size), np.int64(ignore_index), t.data, out.data)
    return out


def _softmax_kernel(x: Tensor, name: str) -> Any:
    return kernels.kernel(x.device, "softmax.cl", name, defines(x.dtype, RED_WG=group_size(x.device)))


def _launch_class_rows(x: Tensor, name: str, geometry: tuple[int, int, int], *args: object) -> None:
    """softmax.cl's elementwise ``name(outer, C, inner, *args)`` over ``x``'s class rows: ``<name>_vec``, a work-item
    per contiguous row, where :func:`row_vec_kernel` gives one (CPUs), else by rows (``kernels.launch_by_rows``)."""
    vec = row_vec_kernel(x.device, x.dtype, name, geometry[2])
    if vec is None:
        kernels.launch_by_rows(x.device, _softmax_kernel(x, name), geometry, *args)
    else:
        launch_1d(x.device, vec, geometry[0], *(np.int32(v) for v in geometry), *args)


def _class_loss(op: str, x: Tensor, loss: Tensor, rowweight: Tensor, count: int | Tensor, weighted: bool,
                reduction: str, grad: Callable[[Tensor, float, int], Tensor]) -> Tensor:
    """A class-index loss's per-row ``loss`` (not recorded) reduced with PyTorch's rules, recorded as one node of
    ``x``: the mean divides by the summed weights of the targets that are not ignored (their count without
    weights; NaN when every target is ignored). ``grad(g, scale, stride)`` is the backward's one launch; it
    reads a reduced loss's gradient for every row (stride 0), scaled by an unweighted mean's 1/count, where a
    chain of nodes would broadcast it and multiply it first."""
    if reduction == "none":
        return record(loss, (x,), lambda g: (grad(g, 1.0, 1),), op)
    total, wsum, scale = loss.sum(), None, 1.0
    if reduction == "mean" and weighted:
        wsum = rowweight.sum()
        total = total / wsum
    elif reduction == "mean" and isinstance(count, Tensor):  # captured: the count lives on the device
        recip = 1.0 / count  # float32(1 / count), as the host's scale below: the same bits
        if recip.dtype == total.dtype:
            return record(total * recip, (x,), lambda g: (grad(g * recip, 1.0, 0),), op)
        # a half loss times 1 / count as the host's scale multiplies it (the same bits): in half arithmetic where the
        # device's float16 maps run in it (elementwise's half_math), else in float32, rounded once. The gradient's
        # scale is rounded to the half type before the backward's launch (the host's is not)
        half = recip.astype(total.dtype)
        if total.dtype == np.float16 and x.device.fp16:
            scaled = total * half
        else:
            scaled = (total.astype(recip.dtype) * recip).astype(total.dtype)
        return record(scaled, (x,), lambda g: (grad(g * half, 1.0, 0),), op)
    elif reduction == "mean":
        scale = 1.0 / count if count else math.nan
        total = total * scale
    return record(total, (x,), lambda g: (grad(g if wsum is None else g / wsum, scale, 0),), op)


@profiled
def cross_entropy(
    input: Tensor,  # noqa: A002  (PyTorch's name)
    target: Any,
    weight: Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy between logits and class targets, as ``torch.nn.functional.cross_entropy``.

    One fused pass per row computes its logsumexp, the smoothed and weighted loss and what the backward
    needs; the backward is ``S * softmax - coef`` (see ``kernels_cl/softmax.cl``), one elementwise kernel.

    Args:
        input: logits (C,), (N, C) or (N, C, d1, ...).
        target: class indices () / (N,) / (N, d1, ...) (an int32/int64 tensor or a NumPy array), or class
            probabilities of the input's shape (a floating tensor or array; a tensor that requires grad gets
            ``-(1 - label_smoothing) * weight * log_softmax(input)`` times the upstream gradient, as PyTorch).
        weight: (C,) per-class weights, the input's dtype and device.
        ignore_index: class-index targets equal to it add no loss, no gradient and no weight to the mean
            (probability targets take only the default).
        reduction: "mean", "sum" or "none". With class indices the mean divides by the summed weights of
            the targets not ignored (NaN when all are); with probabilities by the number of rows.
        label_smoothing: in [0, 1]; mixes the target with the uniform distribution.

    Raises:
        ValueError: shapes that don't match, targets outside [0, C - 1] (other than ``ignore_index``),
            a weight not of shape (C,), bad reduction/smoothing, ``ignore_index`` with probabilities.
        TypeError: targets neither integer nor floating probabilities of the input's shape.

    Example:
        >>> loss = F.cross_entropy(model(x), np.array([3, 0, 7]), label_smoothing=0.1)
    """
    (input,) = autocast("float32", input)
    op = "cross_entropy"
    geometry, expected = _class_geometry(op, input)
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    require_number(f"{op}: label_smoothing", label_smoothing, 0, 1)
    ignore_index = require_int(f"{op}: ignore_index", ignore_index)
    outer, classes, inner = geometry
    weighted, w = _class_weight(op, weight, input, classes)
    if classes == 0 and outer * inner:
        raise ValueError(f"{op}: input has 0 classes (shape {input.shape})")
    if _is_probabilities(target, input):
        if ignore_index != IGNORE_INDEX:
            raise ValueError(f"{op}: ignore_index applies to class-index targets only; got ignore_index "
                             f"{ignore_index} with probability targets of shape {input.shape}")
        return _reduce(_soft_cross_entropy(input, target, geometry, weighted, w, label_smoothing), reduction)
    t, count = _targets(op, target, input, classes, expected, ignore_index,
                        f" or class probabilities of the input's shape {input.shape}")
    args = (real_scalar(input.dtype, label_smoothing), weighted, np.int64(ignore_index))
    loss = empty(expected, input.dtype, input.device)
    rowweight = empty(expected, input.dtype, input.device)
    stats = empty((loss.size, 3), input.dtype, input.device)  # per row: max, log(sum(exp(x - max))), S
    row_launch(input.device, input.dtype, "ce_fwd", geometry, *args, input.data, t.data, w, loss.data,
               rowweight.data, stats.data)

    def grad(g: Tensor, scale: float, stride: int) -> Tensor:
        gx = empty(input.shape, input.dtype, input.device)
        _launch_class_rows(input, "ce_bwd", geometry, *args, real_scalar(input.dtype, scale), np.int32(stride),
                           input.data, t.data, w, stats.data, g.data, gx.data)
        return gx

    return _class_loss(op, input, loss, rowweight, count, bool(weighted), reduction, grad)


def _is_probabilities(target: Any, x: Tensor) -> bool:
    """Whether ``target`` holds class probabilities: floating values of the input's shape."""
    if isinstance(target, Tensor):
        floating, shape = target.dtype in FLOAT_DTYPES, target.shape
    else:
        arr = np.asarray(target)
        floating, shape = arr.dtype in FLOAT_DTYPES, arr.shape
    return floating and shape == x.shape


def _soft_cross_entropy(x: Tensor, target: Any, geometry: tuple[int, int, int], weighted: np.int32, w: Any,
                        label_smoothing: float) -> Tensor:
    """Per-row cross-entropy against probabilities ``target`` (already known to have ``x``'s shape)."""
    op = "cross_entropy"
    _, y = _pair(op, x, target)
    args = (real_scalar(x.dtype, label_smoothing), weighted)
    loss = empty(x.shape[:1] + x.shape[2:] if x.ndim > 1 else (), x.dtype, x.device)
    stats = empty((loss.size, 3), x.dtype, x.device)  # per row: max, log(sum(exp(x - max))), sum(w y')
    row_launch(x.device, x.dtype, "ce_soft_fwd", geometry, *args, x.data, y.data, w, loss.data, stats.data)

    def backward(g: Tensor) -> tuple[Tensor, Tensor | None]:
        gx = empty(x.shape, x.dtype, x.device)
        gy = empty(x.shape, x.dtype, x.device) if y.requires_grad else None
        # without a target gradient gx's buffer stands in for gy's, unwritten
        _launch_class_rows(x, "ce_soft_bwd", geometry, *args, np.int32(gy is not None), x.data, y.data, w, stats.data,
                           g.data, gx.data, (gx if gy is None else gy).data)
        return gx, gy

    return record(loss, (x, y), backward, op)


@profiled
def nll_loss(
    input: Tensor,  # noqa: A002
    target: Any,
    weight: Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood ``-weight[t] * input[n, t]`` for log-probabilities, as ``torch.nn.functional.nll_loss``.

    Shapes, ``weight``, ``ignore_index`` and the weighted mean as :func:`cross_entropy` with class indices.
    """
    (input,) = autocast("float32", input)
    op = "nll_loss"
    (outer, classes, inner), expected = _class_geometry(op, input)
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    ignore_index = require_int(f"{op}: ignore_index", ignore_index)
    weighted, w = _class_weight(op, weight, input, classes)
    t, count = _targets(op, target, input, classes, expected, ignore_index)
    args = (np.int32(outer), np.int32(classes), np.int32(inner), weighted, np.int64(ignore_index))
    loss = empty(expected, input.dtype, input.device)
    rowweight = empty(expected, input.dtype, input.device)
    launch_1d(input.device, _softmax_kernel(input, "nll_fwd"), loss.size, *args, input.data, t.data, w, loss.data,
              rowweight.data)

    def grad(g: Tensor, scale: float, stride: int) -> Tensor:
        gx = empty(input.shape, input.dtype, input.device)
        launch_1d(input.device, _softmax_kernel(input, "nll_bwd"), input.size, *args, real_scalar(input.dtype, scale),
                  np.int32(stride), t.data, w, g.data, gx.data)
        return gx

    return _class_loss(op, input, loss, rowweight, count, bool(weighted), reduction, grad)


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
def smooth_l1_loss(input: Tensor, target: Any, reduction: str = "mean", beta: float = 1.0) -> Tensor:  # noqa: A002
    """Huber-like error: ``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``d = input - target``),
    as ``torch.nn.functional.smooth_l1_loss``; ``beta = 0`` is :func:`l1_loss`. One fused pass (``kernels_cl/huber.cl``)
    computes the loss and its reduction, one more its gradients.
    """
    op = "smooth_l1_loss"
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    beta = require_number(f"{op}: beta", beta, 0)
    return _huber(op, input, target, reduction, beta, 1.0)


@profiled
def huber_loss(input: Tensor, target: Any, reduction: str = "mean", delta: float = 1.0) -> Tensor:  # noqa: A002
    """Huber loss: ``0.5 d**2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)`` (``d = input - target``),
    as ``torch.nn.functional.huber_loss``: ``delta`` times :func:`smooth_l1_loss` with ``beta = delta``.

    Raises:
        ValueError: ``delta`` not > 0, shapes that differ, a bad reduction.
    """
    op = "huber_loss"
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    delta = require_number(f"{op}: delta", delta)
    if delta <= 0:
        raise ValueError(f"{op}: delta expects a number > 0; got {delta}")
    return _huber(op, input, target, reduction, delta, delta)


def _huber(op: str, input: Any, target: Any, reduction: str, b: float, w: float) -> Tensor:  # noqa: A002
    """``w * (|d| < b ? d**2 / (2 b) : |d| - b / 2)`` reduced, and its backward, each one launch of huber.cl
    (a long sum splits into chunks that ``sum`` then adds)."""
    x, y = _pair(op, input, target)
    dev, n = x.device, x.size
    if reduction == "mean":
        w = w / n if n else math.nan  # PyTorch's mean of nothing is NaN
    args = (np.int32(n), real_scalar(x.dtype, b), real_scalar(x.dtype, w))
    d = defines(x.dtype, RED_WG=group_size(dev))
    if reduction == "none":
        loss = empty(x.shape, x.dtype, dev)
        launch_1d(dev, kernels.kernel(dev, "huber.cl", "huber_none", d), n, *args, x.data, y.data, loss.data)
    else:
        local = min(group_size(dev), 1 << (-(-max(n, 1) // FOLD) - 1).bit_length())
        chunk = split_chunk(dev, 1, n, local)
        groups = max(-(-n // chunk), 1)
        part = empty((groups,), kernels.real_dtype(x.dtype), dev)
        kernels.launch(dev, kernels.kernel(dev, "huber.cl", "huber_sum", d), (groups * local,), (local,), args[0],
                       np.int32(chunk), *args[1:], x.data, y.data, part.data)
        loss = (part.sum() if groups > 1 else part.reshape(())).astype(x.dtype)

    def backward(g: Tensor) -> tuple[Tensor, Tensor | None]:
        gx = empty(x.shape, x.dtype, dev)
        gy = empty(x.shape, x.dtype, dev) if y.requires_grad else None
        launch_1d(dev, kernels.kernel(dev, "huber.cl", "huber_bwd", d), n, *args, np.int32(reduction == "none"),
                  np.int32(gy is not None), x.data, y.data, g.data, gx.data,
                  (gx if gy is None else gy).data)  # without a target gradient gx's buffer stands in, unwritten
        return gx, gy

    return record(loss, (x, y), backward, op)


def _broadcastable(op: str, name: str, t: Tensor, x: Tensor) -> Tensor:
    require_tensor(f"{op}: {name}", t)
    same_device(op, input=x, **{name: t})
    same_dtype(op, input=x, **{name: t})
    if t.ndim > x.ndim or any(p not in (1, n) for p, n in zip(t.shape[::-1], x.shape[::-1])):
        raise ValueError(f"{op}: {name} of shape {t.shape} does not broadcast to input {x.shape}")
    return t


@profiled
def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002
    target: Any,
    weight: Tensor | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression, as PyTorch's function of that name.

    ``loss = weight * ((1 - y) * x + (1 + (pos_weight - 1) * y) * softplus(-x))``; softplus never overflows.

    Args:
        input: logits of any shape; target: probabilities of the same shape.
        weight: rescales each element's loss, broadcast against input (the mean still divides by its size).
        pos_weight: weights of positive examples, broadcast against input (e.g. (C,) for (N, C)).
    """
    op = "binary_cross_entropy_with_logits"
    reduction = require_choice(f"{op}: reduction", reduction, REDUCTIONS)
    x, y = _pair(op, input, target)
    # PyTorch's form: (1 - y) * x keeps a confident logit's loss exact (softplus(x) - x * y cancelled: x = 10, y = 1
    # lost 2 % of its 4.5e-5 to 10's rounding)
    softplus = unary("softplus", -x, 1.0, np.inf)
    if pos_weight is None:
        loss = (1 - y) * x + softplus
    else:
        pw = _broadcastable(op, "pos_weight", pos_weight, x)
        loss = (1 - y) * x + ((pw - 1) * y + 1) * softplus
    if weight is not None:
        loss = loss * _broadcastable(op, "weight", weight, x)
    return _reduce(loss, reduction)
