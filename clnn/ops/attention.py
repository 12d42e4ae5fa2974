"""Scaled dot-product attention as fused kernels (``kernels_cl/attention.cl``): the L x S scores never exist."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyopencl.cltypes as cltypes

from .. import kernels
from ..device import Device
from ..kernels import contiguous_strides, defines, descriptor, group_size, real_scalar
from ..profiler import profiled
from ..tensor import Tensor
from ..validation import require_float, require_number, require_tensor, same_device, same_dtype
from ._core import empty, record
from .random import next_key
from .reduce import broadcast_to

F_FLOAT_MASK, F_BOOL_MASK, F_CAUSAL, F_DROPOUT = (
    kernels.op_codes("attention.cl", "ATT_F_")[k] for k in ("float_mask", "bool_mask", "causal", "dropout"))
HEAD_MAX = 512  # the largest head dimension (E or Ev): each work-item holds its rows in private memory
ROWS = 64  # work-items (query or key rows) per work-group, at most


def _plan(dev: Device, dtype: np.dtype, e: int, ev: int) -> dict[str, object]:
    """The kernels' defines: ATT_D, the row capacity, and ATT_BK, the rows per local tile that fit in local memory."""
    d = max(16, 1 << (max(e, ev) - 1).bit_length())
    itemsize = 8 if np.dtype(dtype) == np.float64 else 4
    per_row = (2 * d + 2) * itemsize  # attn_bwd_kv: a q and a dO row, an lse and a D value per tile row
    bk = 1 << (max((dev.local_mem_size - 1024) // per_row, 1).bit_length() - 1)
    return defines(dtype, ATT_D=d, ATT_BK=min(bk, 64))


def _mask_geometry(mask: Tensor, batch: tuple[int, ...], lq: int, s: int) -> tuple[Tensor, tuple[np.int32, ...]]:
    """``mask`` (made mergeable if need be) and its (mnb, msb0, msb1, msl, mss) in attention.cl's terms."""
    target = (*batch, lq, s)
    full = (1,) * (len(target) - mask.ndim) + mask.shape
    strides = kernels.broadcast_strides(mask.shape, target)
    d = descriptor(batch, strides[: len(batch)], contiguous_strides(batch))
    if d["ndim"] > 2:  # three or more batch dims that broadcast differently: copy the batch dims out
        mask = broadcast_to(mask, (*batch, *full[-2:]))
        return _mask_geometry(mask, batch, lq, s)
    dims = [(int(d["shape"][k]), int(d["s0"][k])) for k in range(int(d["ndim"]))]
    dims = [(1, 0)] * (2 - len(dims)) + dims
    (_, sb0), (nb1, sb1) = dims
    return mask, tuple(np.int32(x) for x in (nb1, sb0, sb1, strides[-2], strides[-1]))


def _check(query: Any, key: Any, value: Any, attn_mask: Any, is_causal: bool) -> tuple[Tensor, Tensor, Tensor]:
    op = "scaled_dot_product_attention"
    q, k, v = (require_float(f"{op}: {n}", t) for n, t in (("query", query), ("key", key), ("value", value)))
    same_device(op, query=q, key=k, value=v)
    same_dtype(op, query=q, key=k, value=v)
    for n, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise ValueError(f"{op}: {n} expects shape (..., length, features); got {t.shape}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"{op}: query, key and value need the same batch dims; got {q.shape}, {k.shape}, {v.shape}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{op}: key expects {q.shape[-1]} features (query has {q.shape[-1]}); got key {k.shape}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"{op}: value expects {k.shape[-2]} rows (key has {k.shape[-2]}); got value {v.shape}")
    if max(q.shape[-1], v.shape[-1]) > HEAD_MAX:
        raise ValueError(f"{op}: head dims up to {HEAD_MAX} are supported; got query {q.shape}, value {v.shape}")
    if attn_mask is not None:
        m = require_tensor(f"{op}: attn_mask", attn_mask)
        same_device(op, query=q, attn_mask=m)
        if m.dtype not in (np.dtype(np.bool_), q.dtype):
            raise TypeError(f"{op}: attn_mask expects bool or {q.dtype} (query's dtype); got {m.dtype}")
        target = (*q.shape[:-1], k.shape[-2])
        pad = (1,) * (len(target) - m.ndim) + m.shape
        if m.ndim > len(target) or any(a not in (1, b) for a, b in zip(pad, target)):
            raise ValueError(f"{op}: attn_mask expects a shape that broadcasts to {target}; got {m.shape}")
        if is_causal:
            raise ValueError(f"{op}: attn_mask must be None when is_causal=True; got a mask of shape {m.shape}")
    return q, k, v


@profiled
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value``, fused: memory beyond the output is O(L).

    Args:
        query: (..., L, E); key: (..., S, E); value: (..., S, Ev), same batch dims, dtype and device.
        attn_mask: bool (True: the key takes part) or query's float dtype (added to the scores),
            broadcastable to (..., L, S). It gets no gradient.
        dropout_p: probability of dropping an attention weight (clnn's generator: ``manual_seed`` repeats it).
        is_causal: query i attends to keys j <= i only (top-left aligned, as torch); excludes ``attn_mask``.
        scale: factor of the scores; default ``1 / sqrt(E)``.

    Returns:
        (..., L, Ev). A row where no key takes part is 0, as torch's.

    Raises:
        ValueError: shapes that don't match, a mask that doesn't broadcast, a mask with ``is_causal``,
            ``dropout_p`` outside [0, 1), head dims over 512.
        TypeError: non-float inputs, or a mask neither bool nor query's dtype.

    Example:
        >>> out = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # (N, H, L, E) -> (N, H, L, Ev)
    """
    q, k, v = _check(query, key, value, attn_mask, is_causal)
    p = require_number("scaled_dot_product_attention: dropout_p", dropout_p, 0, 1, high_open=True)
    *batch_list, lq, e = q.shape
    batch, s, ev = tuple(batch_list), k.shape[-2], v.shape[-1]
    scale = 1 / math.sqrt(e) if scale is None else require_number("scaled_dot_product_attention: scale", scale)
    dev, nb = q.device, math.prod(batch)
    flags = (F_CAUSAL if is_causal else 0) | (F_DROPOUT if p > 0 else 0)
    fmask = bmask = q  # any valid buffer where the kernel reads none
    geometry = tuple(np.int32(x) for x in (1, 0, 0, 0, 0))
    if attn_mask is not None:
        mask, geometry = _mask_geometry(attn_mask, batch, lq, s)
        if mask.dtype == np.bool_:
            flags, bmask = flags | F_BOOL_MASK, mask
        else:
            flags, fmask = flags | F_FLOAT_MASK, mask
    seed, offset = next_key(None) if p > 0 else (cltypes.make_uint2(0, 0), cltypes.make_uint2(0, 0))
    args = (np.int32(flags), np.int32(lq), np.int32(s), np.int32(e), np.int32(ev), real_scalar(q.dtype, scale),
            real_scalar(q.dtype, p), seed, offset, *geometry, fmask.data, bmask.data)
    d = _plan(dev, q.dtype, e, ev)
    acc = np.float64 if q.dtype == np.float64 else np.float32

    def run(name: str, rows: int, *buffers: Any) -> None:
        wg = min(group_size(dev, ROWS), 1 << max(rows - 1, 0).bit_length())
        blocks = -(-rows // wg)
        kernels.launch(dev, kernels.kernel(dev, "attention.cl", name, d), (nb * blocks * wg,), (wg,), *args,
                       *[b.data for b in buffers])

    out = empty((*batch, lq, ev), q.dtype, dev)
    lse = empty((nb, lq), acc, dev)
    run("attn_fwd", lq, q, k, v, out, lse)
    saved = out.detach()

    def backward(g: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        gq, gk, gv = (empty(t.shape, t.dtype, dev) for t in (q, k, v))
        dsum = empty((nb, lq), acc, dev)
        kernels.launch_1d(dev, kernels.kernel(dev, "attention.cl", "attn_bwd_dot", d), nb * lq, np.int32(nb * lq),
                          np.int32(ev), saved.data, g.data, dsum.data)
        run("attn_bwd_q", lq, q, k, v, lse, dsum, g, gq)
        run("attn_bwd_kv", s, q, k, v, lse, dsum, g, gk, gv)
        return gq, gk, gv

    return record(out, (q, k, v), backward, "scaled_dot_product_attention")
