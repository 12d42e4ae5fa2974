"""Normalization and regularization: batch_norm, layer_norm (``kernels_cl/norm.cl``) and dropout."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import kernels, tuning
from ..kernels import defines, group_size, launch_1d, real_scalar
from ..profiler import profiled
from ..tensor import HALF_DTYPES, Tensor, autocast_dtype, float16, float32, float64
from ..validation import require_float, require_number, require_tensor, same_device, same_dtype
from ._core import autocast, empty, record
from .random import dropout_mask
from .reduce import FOLD, split_chunk, sum_to_shape
from .shape import astype, reshape

AFF_W, AFF_B, AFF_INNER = (kernels.op_codes("norm.cl", "AFF_")[k] for k in ("w", "b", "inner"))  # affine bits
LN_ROWS = 64  # layer norm's backward: rows per work-group (each adds its column sums of the weight's gradients)
NS_STATS, NS_GRAD, NS_SUM = (kernels.op_codes("norm.cl", "NS_")[k] for k in ("stats", "grad", "sum"))  # modes


class _Groups:
    """``x`` viewed as (outer, G, inner) with statistics per group; launches the norm.cl kernels. Everything but
    ``x`` and its gradient is in ``dtype`` (x's by default; float32 for a half ``x`` under autocast), except the
    per-group results (mean, variance, gradient sums), which are in the kernels' ``real`` type (``self.real``).
    With ``y_as_x`` the output and its gradient are in x's dtype too (batch norm under autocast)."""

    def __init__(self, x: Tensor, outer: int, groups: int, inner: int, affine: int, eps: float,
                 dtype: np.dtype | None = None, y_as_x: bool = False) -> None:
        self.dt = x.dtype if dtype is None else np.dtype(dtype)
        self.y_dt = x.dtype if y_as_x else self.dt
        self.real = kernels.real_dtype(self.dt)
        self.x, self.affine, self.eps = x, affine, real_scalar(self.dt, eps)
        self.geometry = (outer, groups, inner)
        self.sizes = tuple(np.int32(v) for v in self.geometry)
        self.groups, self.count = groups, outer * inner
        wg = group_size(x.device)
        x_type = {} if x.dtype == self.dt else {"X_HALF" if x.dtype == float16 else "X_BF16": 1, "Y_AS_X": int(y_as_x)}
        # layer norm's *_rows kernels (CPUs): tuning's norm_rows VW, for float32 or float64 throughout
        self.row_vw = tuning.params(x.device, "norm_rows")["VW"] if x.dtype == self.dt in (float32, float64) else 0
        cpu = x.device.type == "cpu"  # a work-item per chunk (~5x faster on Intel's runtime), walking it row by row
        self.cols = int(tuning.params(x.device, "norm_cols")["COLS_N"])  # norm_partial_cols' groups a work-item
        self.defines = defines(self.dt, RED_WG=wg, LN_ROWS=LN_ROWS, WALK_ROWS=int(cpu), COLS_N=self.cols, **x_type,
                               **({"ROW_VW": self.row_vw} if self.row_vw else {}))
        m = max(self.count, 1)
        # each work-item folds >= FOLD; a work-item per (group, chunk) on CPUs and where inner is 1 (norm_partial_cols)
        self.local = 1 if cpu or inner == 1 else min(wg, 1 << (-(-m // FOLD) - 1).bit_length())
        self.chunk = split_chunk(x.device, groups, m, self.local)

    def _kernel(self, name: str) -> Any:
        return kernels.kernel(self.x.device, "norm.cl", name, self.defines)

    def _buf(self, t: Tensor | None) -> Any:
        """``t``'s buffer, or any valid buffer for an absent parameter (the kernel won't read it)."""
        return (self.x if t is None else t).data

    def _per_group(self, mode: int, *args: object) -> tuple[Tensor, Tensor]:
        """Per-group results of norm.cl's two stages in ``mode`` (NS_*): partials per chunk, then a finish."""
        dev = self.x.device
        a, b = (empty((self.groups,), self.real, dev) for _ in range(2))
        chunks = -(-self.count // self.chunk)
        parts = self.groups * chunks
        if self.groups:
            part = empty((max(parts, 1), 2), self.real, dev)
            if parts and self.geometry[2] == 1:
                n = -(-self.groups // self.cols)
                across = min(group_size(dev), 1 << (n - 1).bit_length())
                kernels.launch(dev, self._kernel("norm_partial_cols"), (n, chunks), (across, 1), np.int32(mode),
                               *self.sizes[:2], np.int32(self.chunk), *args, part.data)
            elif parts:
                kernels.launch(dev, self._kernel("norm_partial"), (parts * self.local,), (self.local,),
                               np.int32(mode), *self.sizes, np.int32(self.chunk), *args, part.data)
            launch_1d(dev, self._kernel("norm_finish"), self.groups, np.int32(mode), np.int32(self.groups),
                      np.int32(self.count), np.int32(self.chunk), part.data, a.data, b.data)
        return a, b

    def stats(self) -> tuple[Tensor, Tensor]:
        """Per-group mean and biased variance."""
        x = self.x.data
        return self._per_group(NS_STATS, np.int32(0), self.eps, x, x, x, x, x)

    def apply(self, mean: Tensor, var: Tensor, w: Tensor | None, b: Tensor | None, affine: int) -> Tensor:
        y = empty(self.x.shape, self.y_dt, self.x.device)
        kernels.launch_by_rows(self.x.device, self._kernel("norm_apply"), self.geometry, np.int32(affine), self.eps,
                              self.x.data, mean.data, var.data, self._buf(w), self._buf(b), y.data)
        return y

    def update_running(self, mean: Tensor, var: Tensor, running_mean: Tensor, running_var: Tensor,
                       momentum: float) -> None:
        """``running = (1 - momentum) * running + momentum * batch``, in place; the variance made unbiased."""
        m = self.count
        launch_1d(self.x.device, self._kernel("bn_update"), self.groups, np.int32(self.groups),
                  real_scalar(self.dt, momentum), real_scalar(self.dt, m / (m - 1)), mean.data, var.data,
                  running_mean.data, running_var.data)

    def grad_sums(self, g: Tensor, mean: Tensor, var: Tensor, w: Tensor | None) -> tuple[Tensor, Tensor]:
        """Per group ``sum(g * w')`` and ``sum(g * w' * xhat)`` (w' per element under AFF_INNER, else 1)."""
        return self._per_group(NS_GRAD, np.int32(self.affine), self.eps, self.x.data, g.data, mean.data, var.data,
                               self._buf(w))

    def grad_input(self, g: Tensor, mean: Tensor, var: Tensor, w: Tensor | None, sums: tuple[Tensor, Tensor] | None
                   ) -> Tensor:
        """dL/dx (in x's dtype); ``sums`` from :meth:`grad_sums` when the statistics came from ``x`` itself, else
        None."""
        gx = empty(self.x.shape, self.x.dtype, self.x.device)
        s1, s2 = sums or (g, g)
        kernels.launch_by_rows(self.x.device, self._kernel("norm_bwd_input"), self.geometry, np.int32(self.affine),
                              np.int32(sums is not None), self.eps, self.x.data, g.data, mean.data, var.data,
                              self._buf(w), s1.data, s2.data, gx.data)
        return gx

    def layer_forward(self, w: Tensor | None, b: Tensor | None, affine: int) -> tuple[Tensor, Tensor, Tensor]:
        """Layer norm's (outer = 1) mean, variance and output in one launch: on CPUs (``row_vw``) a work-item per
        row (``ln_fwd_rows``), else a run of work-items across each row, about four elements each (``ln_fwd``)."""
        dev, (_, rows, d) = self.x.device, self.geometry
        mean, var = (empty((rows,), self.real, dev) for _ in range(2))
        y = empty(self.x.shape, self.y_dt, dev)
        args = (np.int32(rows), np.int32(d), np.int32(affine), self.eps, self.x.data, self._buf(w), self._buf(b),
                y.data, mean.data, var.data)
        if self.row_vw:
            launch_1d(dev, self._kernel("ln_fwd_rows"), rows, *args)
        elif rows and d:
            wg = group_size(dev)
            across = min(wg, 1 << (-(-d // 4) - 1).bit_length())
            per_group = min(wg // across, 1 << (rows - 1).bit_length())
            kernels.launch(dev, self._kernel("ln_fwd"), (across, -(-rows // per_group) * per_group),
                           (across, per_group), *args)
        return mean, var, y

    def layer_grads(self, g: Tensor, mean: Tensor, var: Tensor, w: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Layer norm's (outer = 1) dL/dx and the column sums of ``g * xhat`` and ``g`` (the weight's and bias's
        gradients, (D,)): blocks of rows in one launch, then one deterministic reduction over the blocks."""
        dev, (_, rows, d) = self.x.device, (int(v) for v in self.sizes)
        gx = empty(self.x.shape, self.x.dtype, dev)
        gw, gb = (empty((d,), self.dt, dev) for _ in range(2))
        blocks = -(-rows // LN_ROWS)
        part = empty((max(blocks, 1), 2, d), self.real, dev)
        if blocks and self.row_vw:
            launch_1d(dev, self._kernel("ln_bwd_rows"), blocks, np.int32(rows), np.int32(d), np.int32(self.affine),
                      self.eps, self.x.data, g.data, mean.data, var.data, self._buf(w), gx.data, part.data)
        elif blocks:
            wg = min(group_size(dev), 128)
            cols = min(32, wg, 1 << (d - 1).bit_length())
            kernels.launch(dev, self._kernel("ln_bwd"), (blocks * cols, wg // cols), (cols, wg // cols),
                           np.int32(rows), np.int32(d), np.int32(self.affine), self.eps, self.x.data, g.data,
                           mean.data, var.data, self._buf(w), gx.data, part.data)
        launch_1d(dev, self._kernel("ln_bwd_finish"), d, np.int32(d), np.int32(blocks), part.data, gw.data, gb.data)
        return gx, gw, gb


def channel_sum(x: Tensor, outer: int, groups: int, inner: int) -> Tensor:
    """Per-group sums of ``x`` viewed as (outer, groups, inner), e.g. the conv bias gradient: (groups,).

    With inner 1, the sums of the columns of rows are reduce.cl's: (2048, 1024) took 4.9 / 3.5 ms on PoCL / Intel's
    runtime by norm_partial, 0.58 / 0.59 by norm_partial_cols (batch norm's, which needs the statistics too), 0.19-0.30
    / 0.14-0.15 so."""
    if inner == 1:
        return sum_to_shape(reshape(x, (outer, groups)), (groups,))
    grp = _Groups(x, outer, groups, inner, 0, 0.0)
    buf = x.data
    return astype(grp._per_group(NS_SUM, np.int32(0), grp.eps, buf, buf, buf, buf, buf)[0], x.dtype)


def _half_under_autocast(x: Any) -> bool:
    return autocast_dtype() is not None and isinstance(x, Tensor) and x.dtype in HALF_DTYPES


def _autocast(x: Any, weight: Any, bias: Any) -> tuple[Any, Any, Any]:
    """A norm's inputs under autocast: a half ``x`` stays as it is (the kernels read it and write its gradient in
    its type: no float32 copy of it is made or kept), the parameters cast to float32."""
    if _half_under_autocast(x):
        return (x, *autocast("float32", weight, bias))
    return autocast("float32", x, weight, bias)


def _dtype(x: Tensor) -> np.dtype:
    """The dtype of a norm's parameters and arithmetic: float32 for a half ``x`` under autocast, else x's."""
    return float32 if _half_under_autocast(x) else x.dtype


def _check_param(op: str, name: str, t: Any, x: Tensor, shape: tuple[int, ...], dtype: np.dtype) -> Tensor | None:
    if t is None:
        return None
    require_tensor(f"{op}: {name}", t)
    same_device(op, x=x, **{name: t})
    if dtype == x.dtype:
        same_dtype(op, x=x, **{name: t})
    elif t.dtype != dtype:
        raise TypeError(f"{op}: {name} has dtype {t.dtype.name}, not float32 as under autocast for x of dtype "
                        f"{x.dtype.name}; convert it with .astype()")
    if t.shape != shape:
        raise ValueError(f"{op}: {name} must have shape {shape} for x of shape {x.shape}; got {t.shape}")
    return t


def _record_affine(out: Tensor, x: Tensor, w: Tensor | None, b: Tensor | None, grads: Any, name: str) -> Tensor:
    """Record ``out`` over the inputs that exist; ``grads(g)`` returns (gx, gw, gb)."""
    present = [t is not None for t in (x, w, b)]
    inputs = tuple(t for t in (x, w, b) if t is not None)
    return record(out, inputs, lambda g: tuple(v for v, p in zip(grads(g), present) if p), name)


@profiled
def batch_norm(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalization over every dim but the channel dim 1 of x (N, C, *), as ``torch.nn.functional``.

    In training, normalizes with the batch statistics and, when given, updates ``running_mean`` and
    ``running_var`` in place on the device (``(1 - momentum) * running + momentum * batch``, with the
    unbiased batch variance). Otherwise normalizes with the running statistics. Under ``clnn.autocast`` a half x
    is normalized with float32 parameters and statistics into x's dtype (torch.autocast has batch_norm on neither
    of its lists, and cuDNN's batch norm takes half data with float32 parameters).

    Args:
        x: (N, C) or (N, C, L) or (N, C, H, W) ...
        running_mean, running_var: (C,); may be None in training (batch statistics, nothing updated).
        weight, bias: optional (C,) affine parameters.

    Raises:
        ValueError: wrong shapes, one value per channel in training, no running stats in eval.
    """
    x, weight, bias = _autocast(x, weight, bias)
    op = "batch_norm"
    require_tensor(f"{op}: x", x)
    require_float(f"{op}: x", x)
    dt = _dtype(x)
    if x.ndim < 2:
        raise ValueError(f"{op}: x must have shape (N, C, *) with at least 2 dims; got {x.shape}")
    n, c = x.shape[:2]
    inner = math.prod(x.shape[2:])
    rm = _check_param(op, "running_mean", running_mean, x, (c,), dt)
    rv = _check_param(op, "running_var", running_var, x, (c,), dt)
    w = _check_param(op, "weight", weight, x, (c,), dt)
    b = _check_param(op, "bias", bias, x, (c,), dt)
    if (rm is None) != (rv is None):
        raise ValueError(f"{op}: give both running_mean and running_var or neither")
    require_number(f"{op}: momentum", momentum)
    eps = require_number(f"{op}: eps", eps, 0)
    if not training and rm is None:
        raise ValueError(f"{op}: running_mean and running_var must be given when training=False (as PyTorch)")
    training = bool(training)
    if training and n * inner <= 1:
        raise ValueError(f"{op}: expected more than 1 value per channel when training; got x of shape {x.shape}")
    affine = (AFF_W if w is not None else 0) | (AFF_B if b is not None else 0)
    grp = _Groups(x, n, c, inner, affine & AFF_W, eps, dt, y_as_x=True)  # torch.autocast: y in x's dtype
    if training:
        mean, var = grp.stats()
        if rm is not None and rv is not None:
            grp.update_running(mean, var, rm, rv, float(momentum))
    else:
        # copies: the backward must see these statistics even if the running buffers change later
        mean, var = (astype(t.detach(), grp.real, copy=True) for t in (rm, rv))  # type: ignore[union-attr]
    y = grp.apply(mean, var, w, b, affine)

    def grads(g: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        need_wb = (w is not None and w.requires_grad) or (b is not None and b.requires_grad)
        sums = grp.grad_sums(g, mean, var, None) if training or need_wb else None
        gx = grp.grad_input(g, mean, var, w, sums if training else None) if x.requires_grad else None
        return gx, (astype(sums[1], dt) if sums else None), (astype(sums[0], dt) if sums else None)

    return _record_affine(y, x, w, b, grads, op)


@profiled
def layer_norm(
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims of ``x``, as ``torch.nn.functional.layer_norm``.

    Args:
        x: (*, *normalized_shape).
        weight, bias: optional, of shape ``normalized_shape``.

    Raises:
        ValueError: ``normalized_shape`` is not the end of ``x.shape``, or a parameter's shape differs.
    """
    x, weight, bias = _autocast(x, weight, bias)
    op = "layer_norm"
    require_tensor(f"{op}: x", x)
    require_float(f"{op}: x", x)
    dt = _dtype(x)
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if not shape or any(not isinstance(s, (int, np.integer)) for s in shape):
        raise TypeError(f"{op}: normalized_shape must be an int or a non-empty tuple of ints; got {normalized_shape}")
    shape = tuple(int(s) for s in shape)
    if x.shape[x.ndim - len(shape) :] != shape or len(shape) > x.ndim:
        raise ValueError(f"{op}: normalized_shape {shape} must match the last dims of x; got x of shape {x.shape}")
    w = _check_param(op, "weight", weight, x, shape, dt)
    b = _check_param(op, "bias", bias, x, shape, dt)
    eps = require_number(f"{op}: eps", eps, 0)
    d = math.prod(shape)
    rows = x.size // d if d else 0
    affine = AFF_INNER | (AFF_W if w is not None else 0) | (AFF_B if b is not None else 0)
    grp = _Groups(x, 1, rows, d, affine & (AFF_W | AFF_INNER), eps, dt)
    if grp.row_vw or x.device.type != "cpu":
        mean, var, y = grp.layer_forward(w, b, affine)
    else:  # CPUs, for half types: the row kernels' vectors are of float32 or float64
        mean, var = grp.stats()
        y = grp.apply(mean, var, w, b, affine)

    def grads(g: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        gx, gw, gb = grp.layer_grads(g, mean, var, w)
        return (gx if x.requires_grad else None, gw.reshape(shape) if w is not None and w.requires_grad else None,
                gb.reshape(shape) if b is not None and b.requires_grad else None)

    return _record_affine(y, x, w, b, grads, op)


@profiled
def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` (when ``training``).

    The mask comes from the on-device counter-based generator: ``clnn.manual_seed(s)`` makes it repeat.

    Raises:
        ValueError: ``p`` outside [0, 1].
    """
    require_tensor("dropout: x", x)
    require_float("dropout: x", x)
    require_number("dropout: p", p, 0, 1)
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    y = empty(x.shape, x.dtype, x.device)
    mask = empty(x.shape, x.dtype, x.device)
    dropout_mask(x, float(p), y, mask)
    scale = 1.0 / (1.0 - float(p))
    return record(y, (x,), lambda g: (g * mask * scale,), "dropout")

