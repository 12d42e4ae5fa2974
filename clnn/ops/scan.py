"""Ops along one dim of rows: cumsum (a blocked parallel scan) and topk (``kernels_cl/index.cl``).

Both see ``x`` as rows along ``dim`` without moving data: row r starts at ``(r // I) * L * I + r % I``
and steps by ``I``, the product of the dims after ``dim``.
"""

from __future__ import annotations

import math

import numpy as np

from ..profiler import profiled
from ..tensor import Tensor
from ..validation import normalize_axis, require_int, require_tensor
from ._core import empty, record
from .index import _scatter
from .shape import astype
from .sort import SC_REVERSE, launch_groups, scan_rows


def _rows(x: Tensor, dim: int) -> tuple[int, int, int]:
    """(rows, L, I): the rows along ``dim``, their length and their stride."""
    length, inner = x.shape[dim], math.prod(x.shape[dim + 1:])
    return (x.size // length if length else 0), length, inner


@profiled
def cumsum(x: Tensor, dim: int) -> Tensor:
    """Inclusive cumulative sum along ``dim`` (``torch.cumsum``); integer and bool inputs sum in int64.

    Long rows are split across work-groups (a three-pass scan), so one long row still fills the device.
    """
    require_tensor("cumsum: x", x)
    d = normalize_axis(dim, x.ndim, "cumsum: dim")
    if x.dtype.kind in "iub":
        x = astype(x, np.int64)
    if x.ndim == 0:
        return astype(x, x.dtype, copy=True)
    rows, length, inner = _rows(x, d)
    out = scan_rows(x, rows, length, inner, 0)
    return record(out, (x,), lambda g: (scan_rows(g, rows, length, inner, SC_REVERSE),), "cumsum")


@profiled
def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
    """The ``k`` largest (or smallest) entries along ``dim`` and their int64 indices (``torch.topk``).

    Values come in order (largest first, or smallest first), NaN ranking as the largest value, and equal
    values by lower index, whatever ``sorted`` says: with ``sorted=False`` torch promises no order, so the
    sorted one is a valid answer too.

    Raises:
        ValueError: ``k`` is negative or larger than ``x.shape[dim]``.
    """
    require_tensor("topk: x", x)
    if x.dtype == np.bool_:
        raise TypeError("topk: x expects a numeric tensor; got dtype bool")
    d = normalize_axis(dim, x.ndim, "topk: dim")
    shape = x.shape or (1,)
    k = require_int("topk: k", k, 0)
    if k > shape[d]:
        raise ValueError(f"topk: k expects a value in [0, {shape[d]}] (the size of dim {d}); got {k}")
    out_shape = x.shape[:d] + (k,) + x.shape[d + 1:] if x.ndim else ()
    vals, idx = empty(out_shape, x.dtype, x.device), empty(out_shape, np.int64, x.device)
    rows, length, inner = _rows(Tensor(x.data, shape, x.dtype, x.device), d)
    if k and rows:
        launch_groups(x, "topk", rows, np.int32(length), np.int32(inner), np.int32(k), np.int32(bool(largest)),
                x.data, vals.data, idx.data)
    outer = rows // inner if inner else 0
    strides = (k * inner, inner, 1)

    def backward(g: Tensor) -> tuple[Tensor]:
        return (_scatter(g, idx, x.shape, (outer, length, inner), k, strides),)

    return record(vals, (x,), backward, "topk"), idx
