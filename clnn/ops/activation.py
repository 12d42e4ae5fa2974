"""Activations: pointwise maps over ``elementwise.unary`` and softmax / log_softmax (``kernels_cl/softmax.cl``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import kernels, tuning
from ..device import Device
from ..kernels import defines, group_size, launch_1d
from ..profiler import profiled
from ..tensor import Tensor
from ..validation import normalize_axis, require_choice, require_float, require_number
from ._core import autocast, empty, record
from .elementwise import unary
from .reduce import FOLD

SMALL_ROW = 64  # rows at most this long are walked by one work-item each
# with softmax.cl's *_vec forms for contiguous rows (tuning's softmax VW)
VEC_KERNELS = ("softmax", "softmax_bwd", "ce_fwd", "ce_bwd", "ce_soft_bwd")


def _x(op: str, x: Any) -> Tensor:
    return require_float(f"{op}: x", x)


@profiled
def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0, as PyTorch."""
    return unary("relu", _x("relu", x))


@profiled
def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """``x`` where positive, ``negative_slope * x`` elsewhere."""
    return unary("leaky_relu", _x("leaky_relu", x), require_number("leaky_relu: negative_slope", negative_slope))


@profiled
def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    return unary("elu", _x("elu", x), require_number("elu: alpha", alpha))


@profiled
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: ``x * Phi(x)`` (``approximate="none"``) or its tanh approximation.

    Raises:
        ValueError: ``approximate`` is not ``"none"`` or ``"tanh"``.
    """
    require_choice("gelu: approximate", approximate, ("none", "tanh"))
    return unary("gelu" if approximate == "none" else "gelu_tanh", _x("gelu", x))


@profiled
def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``, stable for large ``|x|``."""
    return unary("sigmoid", _x("sigmoid", x))


@profiled
def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    return unary("tanh", _x("tanh", x))


@profiled
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold`` (as PyTorch).

    Raises:
        ValueError: ``beta`` is 0.
    """
    beta = require_number("softplus: beta", beta)
    if beta == 0:
        raise ValueError("softplus: beta must be nonzero; got 0")
    return unary("softplus", _x("softplus", x), beta, require_number("softplus: threshold", threshold))


@profiled
def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (swish)."""
    return unary("silu", _x("silu", x))


@profiled
def hardswish(x: Tensor) -> Tensor:
    """``x * clamp(x + 3, 0, 6) / 6``."""
    return unary("hardswish", _x("hardswish", x))


def _geometry(x: Tensor, axis: int) -> tuple[int, int, int]:
    """(outer, R, inner) of ``x`` viewed around ``axis``."""
    shape = x.shape or (1,)
    return (
        math.prod(shape[:axis]),
        shape[axis],
        math.prod(shape[axis + 1 :]),
    )


def row_vec_kernel(dev: Device, dtype: np.dtype, name: str, inner: int) -> Any | None:
    """softmax.cl's ``<name>_vec`` (a work-item per contiguous row, in vectors) where the device's tuning takes it and
    the rows are contiguous (``inner`` 1) float32 or float64 ones; else ``None``."""
    vw = tuning.params(dev, "softmax")["VW"]
    if not (vw and inner == 1 and name in VEC_KERNELS and np.dtype(dtype) in (np.float32, np.float64)):
        return None
    return kernels.kernel(dev, "softmax.cl", f"{name}_vec", {**defines(dtype, RED_WG=group_size(dev)), "ROW_VW": vw})


def row_launch(
    dev: Device, dtype: np.dtype, name: str, geometry: tuple[int, int, int], *args: object, prefix: tuple = ()
) -> None:
    """Launch ``<name>_vec`` (:func:`row_vec_kernel`), ``<name>_small`` (one work-item per row) or ``<name>_wg`` (one
    work-group per row) of softmax.cl.

    The kernel's arguments are ``*prefix, outer, R, inner, *args`` with ``geometry = (outer, R, inner)``.
    """
    outer, length, inner = geometry
    rows = outer * inner
    if rows == 0 or length == 0:
        return
    wg_max = group_size(dev)
    d = defines(dtype, RED_WG=wg_max)
    sizes = (*prefix, np.int32(outer), np.int32(length), np.int32(inner))
    k = row_vec_kernel(dev, dtype, name, inner)
    if k is not None:
        launch_1d(dev, k, outer, *sizes, *args)
        return
    # strided rows (inner > 1): neighbouring work-items read neighbouring addresses, so one work-item
    # per row is coalesced and, with enough rows, fills the device better than a group per row
    if length <= SMALL_ROW or (inner > 1 and rows >= 4 * wg_max):
        k = kernels.kernel(dev, "softmax.cl", f"{name}_small", d)
        launch_1d(dev, k, rows, *sizes, *args)
        return
    wg = min(wg_max, 1 << (-(-length // FOLD) - 1).bit_length())  # each work-item folds >= FOLD of the row
    k = kernels.kernel(dev, "softmax.cl", f"{name}_wg", d)
    kernels.launch(dev, k, (rows * wg,), (wg,), *sizes, *args)


def _softmax(op: str, x: Tensor, axis: int) -> Tensor:
    (x,) = autocast("float32", x)
    _x(op, x)
    axis = normalize_axis(axis, x.ndim)
    geometry = _geometry(x, axis)
    log_out = (np.int32(op == "log_softmax"),)
    y = empty(x.shape, x.dtype, x.device)
    row_launch(x.device, x.dtype, "softmax", geometry, x.data, y.data, prefix=log_out)
    saved = y.detach()

    def backward(g: Tensor) -> tuple[Tensor]:
        gx = empty(x.shape, x.dtype, x.device)
        row_launch(x.device, x.dtype, "softmax_bwd", geometry, saved.data, g.data, gx.data, prefix=log_out)
        return (gx,)

    return record(y, (x,), backward, op)


@profiled
def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``, shifted by the row maximum (no overflow for any finite x).

    Example:
        >>> p = F.softmax(logits, axis=1)   # (N, C) -> rows sum to 1
    """
    return _softmax("softmax", x, axis)


@profiled
def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``, computed stably."""
    return _softmax("log_softmax", x, axis)
