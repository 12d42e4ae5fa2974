"""Scaled dot-product attention: on GPUs fused kernels (``kernels_cl/attention.cl``) in which the L x S scores never
exist; on CPUs their computation by single work-items in explicit vectors (``kernels_cl/attention_rows.cl``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyopencl.cltypes as cltypes

from .. import kernels, tuning
from ..device import Device
from ..kernels import contiguous_strides, defines, descriptor, group_size, real_scalar
from ..profiler import profiled
from ..tensor import Tensor
from ..validation import require_float, require_number, require_tensor, same_device, same_dtype
from ._core import autocast, empty, record
from .random import next_key
from .reduce import broadcast_to

F_FLOAT_MASK, F_BOOL_MASK, F_CAUSAL, F_DROPOUT = (
    kernels.op_codes("attention.h", "ATT_F_")[k] for k in ("float_mask", "bool_mask", "causal", "dropout"))
HEAD_MAX = 512  # the largest head dimension (E or Ev)
TILE = 64  # rows per block and tile, at most
WG = 128  # work-items per work-group, at most
# the CPU path's work-items a work-group, at most: with the runtime's choice PoCL crashed on 4096 work-items (8 x 8
# heads, 512 queries; their private arrays take 5-12 KB each), out of stack
ROWS_GROUP = 8


def _plan(dev: Device, dtype: np.dtype, e: int, ev: int, rows: int) -> dict[str, object]:
    """The kernels' defines: ATT_D, the padded row width; ATT_T, the rows per block and tile that fit in local
    memory (and no more than ``rows`` needs); ATT_X x ATT_Y, the work-group's shape; ATT_COLS_BY_ROW on CPUs
    (transposed tiles written consecutively: 1.3x faster kernels on Intel's runtime; GPUs keep coalesced reads);
    ATT_UNROLL on GPUs (a work-item's scores and accumulators in registers)."""
    d = max(16, 1 << (max(e, ev) - 1).bit_length())
    itemsize = 8 if np.dtype(dtype) == np.float64 else 4
    t = min(TILE, 1 << max(rows - 1, 0).bit_length())
    while t > 1 and (5 * t * d + 2 * t * t + 3 * t) * itemsize > dev.local_mem_size - 1024:  # attn_bwd_q's tiles
        t //= 2
    wg = group_size(dev, WG)
    x = min(16, wg)
    return defines(dtype, ATT_D=d, ATT_T=t, ATT_X=x, ATT_Y=max(1, min(wg // x, t)),
                   ATT_COLS_BY_ROW=int(dev.type == "cpu"), ATT_UNROLL=int(dev.type != "cpu"))


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


def _check(query: Any, key: Any, value: Any, attn_mask: Any, is_causal: bool,
           shapes: tuple[tuple[int, ...], ...] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The inputs, checked as (..., L, E), (..., S, E), (..., S, Ev) tensors of ``shapes`` (default: their own)."""
    op = "scaled_dot_product_attention"
    q, k, v = (require_float(f"{op}: {n}", t) for n, t in (("query", query), ("key", key), ("value", value)))
    same_device(op, query=q, key=k, value=v)
    same_dtype(op, query=q, key=k, value=v)
    qs, ks, vs = shapes or (q.shape, k.shape, v.shape)
    for n, t in (("query", qs), ("key", ks), ("value", vs)):
        if len(t) < 2:
            raise ValueError(f"{op}: {n} expects shape (..., length, features); got {t}")
    if not qs[:-2] == ks[:-2] == vs[:-2]:
        raise ValueError(f"{op}: query, key and value need the same batch dims; got {qs}, {ks}, {vs}")
    if ks[-1] != qs[-1]:
        raise ValueError(f"{op}: key expects {qs[-1]} features (query has {qs[-1]}); got key {ks}")
    if vs[-2] != ks[-2]:
        raise ValueError(f"{op}: value expects {ks[-2]} rows (key has {ks[-2]}); got value {vs}")
    if max(qs[-1], vs[-1]) > HEAD_MAX:
        raise ValueError(f"{op}: head dims up to {HEAD_MAX} are supported; got query {qs}, value {vs}")
    if attn_mask is not None:
        m = require_tensor(f"{op}: attn_mask", attn_mask)
        same_device(op, query=q, attn_mask=m)
        if m.dtype not in (np.dtype(np.bool_), q.dtype):
            raise TypeError(f"{op}: attn_mask expects bool or {q.dtype} (query's dtype); got {m.dtype}")
        target = (*qs[:-1], ks[-2])
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
        (..., L, Ev) in the inputs' dtype. A row where no key takes part is 0, as torch's. float16 and bfloat16
        are computed in float32 and rounded once on store; inside ``clnn.autocast`` float32 and half inputs
        and a float mask run in its dtype (torch.autocast's lower-precision list has this op).

    Raises:
        ValueError: shapes that don't match, a mask that doesn't broadcast, a mask with ``is_causal``,
            ``dropout_p`` outside [0, 1), head dims over 512.
        TypeError: non-float inputs, or a mask neither bool nor query's dtype.

    Example:
        >>> out = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # (N, H, L, E) -> (N, H, L, Ev)
    """
    query, key, value, attn_mask = autocast("half", query, key, value, attn_mask)
    q, k, v = _check(query, key, value, attn_mask, is_causal)
    p = require_number("scaled_dot_product_attention: dropout_p", dropout_p, 0, 1, high_open=True)
    *batch_list, lq, e = q.shape
    batch, s, ev = tuple(batch_list), k.shape[-2], v.shape[-1]
    scale = 1 / math.sqrt(e) if scale is None else require_number("scaled_dot_product_attention: scale", scale)
    layouts = ((lq * e, 0, e, 0), (s * e, 0, e, 0), (s * ev, 0, ev, 0), (lq * ev, 0, ev, 0))
    return _attend((q, k, v), layouts, 1, batch, (lq, s, e, ev), (*batch, lq, ev), attn_mask, p, is_causal, scale)


@profiled
def multi_head_attention(q: Tensor, k: Tensor | None, v: Tensor | None, heads: int, seq_first: bool,
                         attn_mask: Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False) -> Tensor:
    """Attention of ``heads`` heads read from and written in the projections' layout (no head split copies).

    q (N, L, H E) ((L, N, H E) when ``seq_first``), k (N, S, H E), v (N, S, H Ev) in q's order, or k and v
    None and q the packed (..., 3 H E) ``[q | k | v]`` of a self-attention. ``attn_mask`` broadcasts to
    (N, H, L, S) as :func:`scaled_dot_product_attention`'s; the scale is ``1 / sqrt(E)``.
    Returns (N, L, H Ev) ((L, N, H Ev) when ``seq_first``): head h in columns h Ev .. (h + 1) Ev.
    """
    q, k, v, attn_mask = autocast("half", q, k, v, attn_mask)
    packed = k is None
    k, v = (q, q) if packed else (k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if require_tensor(f"multi_head_attention: {name}", t).ndim != 3:
            raise ValueError(f"multi_head_attention: {name} expects (N, length, heads * head_dim); got {t.shape}")
    seq = 0 if seq_first else 1
    n, lq, s = q.shape[1 - seq], q.shape[seq], k.shape[seq]
    e, ev = (q.shape[-1] // (3 * heads),) * 2 if packed else (q.shape[-1] // heads, v.shape[-1] // heads)
    width = (3 * heads * e,) * 3 if packed else (heads * e, heads * e, heads * ev)
    if (q.shape[-1], k.shape[-1], v.shape[-1]) != width or k.shape[1 - seq] != n:
        raise ValueError(f"multi_head_attention: q, k, v expect (N, length, heads * head_dim) with heads={heads}; "
                         f"got {q.shape}, {k.shape}, {v.shape} (packed={packed})")
    q, k, v = _check(q, k, v, attn_mask, is_causal, ((n, heads, lq, e), (n, heads, s, e), (n, heads, s, ev)))

    def layout(width: int, rows: int, hd: int, column: int) -> tuple[int, int, int, int]:
        return (width, hd, n * width, column) if seq_first else (rows * width, hd, width, column)

    layouts = (layout(q.shape[-1], lq, e, 0), layout(k.shape[-1], s, e, heads * e if packed else 0),
               layout(v.shape[-1], s, ev, 2 * heads * e if packed else 0), layout(heads * ev, lq, ev, 0))
    out_shape = (lq, n, heads * ev) if seq_first else (n, lq, heads * ev)
    return _attend((q, k, v), layouts, heads, (n, heads), (lq, s, e, ev), out_shape, attn_mask, dropout_p, is_causal,
                   1 / math.sqrt(e))


def _attend(qkv: tuple[Tensor, Tensor, Tensor], layouts: tuple[tuple[int, int, int, int], ...], nh: int,
            batch: tuple[int, ...], sizes: tuple[int, int, int, int], out_shape: tuple[int, ...],
            attn_mask: Tensor | None, p: float, is_causal: bool, scale: float) -> Tensor:
    """Attention on q, k, v (k and v may be q itself: a packed buffer) in attention.cl's layouts (q's, k's, v's,
    out's: (batch stride, head stride, row stride, offset)), batch index b = (b / nh, b % nh). GPUs (every device
    whose type is not ``"cpu"``) run the fused kernels; CPUs those of :func:`_attend_rows` where :func:`rows_path`
    says so."""
    q, k, v = qkv
    lq, s = sizes[:2]
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
    seed, offset = next_key(None) if p > 0 else (kernels.cl_vector(cltypes.uint2, 0, 0),) * 2
    common = (np.int32(flags), real_scalar(q.dtype, p), seed, offset, (*geometry, fmask.data, bmask.data))
    run = _attend_rows if rows_path(dev, s) else _attend_fused
    out, backward = run(qkv, layouts, nh, nb, sizes, out_shape, scale, *common)
    return record(out, (q, k, v), backward, "scaled_dot_product_attention")


def rows_path(dev: Device, keys: int) -> bool:
    """Whether attention over ``keys`` keys takes the CPU path of :func:`_attend_rows` (CPUs only): from tuning's
    ``attention_rows`` MIN_KEYS keys on (0: never)."""
    least = int(tuning.params(dev, "attention_rows")["MIN_KEYS"])
    return dev.type == "cpu" and least > 0 and keys >= least


def _attend_fused(qkv: tuple[Tensor, Tensor, Tensor], layouts: tuple[tuple[int, int, int, int], ...], nh: int,
                  nb: int, sizes: tuple[int, int, int, int], out_shape: tuple[int, ...], scale: float, flags: np.int32,
                  p: np.generic, seed: Any, offset: Any, mask_args: tuple[Any, ...]) -> tuple[Tensor, Any]:
    """The fused kernels (GPUs): the output and its backward."""
    q, k, v = qkv
    lq, s, e, ev = sizes
    dev = q.device
    lay = [kernels.cl_vector(cltypes.long4, *x) for x in layouts]
    args = (flags, np.int32(lq), np.int32(s), np.int32(e), np.int32(ev), real_scalar(q.dtype, scale), p, seed,
            offset, *mask_args, np.int32(nh), *lay)
    d = _plan(dev, q.dtype, e, ev, max(lq, s))
    acc = kernels.real_dtype(q.dtype)

    def run(name: str, rows: int, *buffers: Any) -> None:
        t, x, y = (int(d[n]) for n in ("ATT_T", "ATT_X", "ATT_Y"))
        kernels.launch(dev, kernels.kernel(dev, "attention.cl", name, d), (nb * -(-rows // t) * x, y), (x, y), *args,
                       *[b.data for b in buffers])

    out = empty(out_shape, q.dtype, dev)
    lse = empty((nb, lq), acc, dev)
    run("attn_fwd", lq, q, k, v, out, lse)
    saved = out.detach()
    packed = k is q

    def backward(g: Tensor) -> tuple[Tensor | None, ...]:
        gq = empty(q.shape, q.dtype, dev)
        gk, gv = (gq, gq) if packed else (empty(t.shape, t.dtype, dev) for t in (k, v))
        dsum = empty((nb, lq), acc, dev)
        kernels.launch_1d(dev, kernels.kernel(dev, "attention.cl", "attn_bwd_dot", d), nb * lq, np.int32(nb * lq),
                          np.int32(lq), np.int32(ev), np.int32(nh), lay[3], saved.data, g.data, dsum.data)
        run("attn_bwd_q", lq, q, k, v, lse, dsum, g, gq)
        run("attn_bwd_kv", s, q, k, v, lse, dsum, g, gk, gv)
        return (gq, None, None) if packed else (gq, gk, gv)

    return out, backward


def _rows_plan(dev: Device, dtype: np.dtype, e: int, ev: int) -> tuple[int, int, dict[str, object]]:
    """The CPU path's vector width, query rows a work-item and kernel defines for heads of width ``e`` and ``ev``."""
    knobs = tuning.params(dev, "attention_rows")
    vw = int(knobs["VW"])
    ne, nev = max(1, -(-e // vw)), max(1, -(-ev // vw))
    rb = max(2, min(int(knobs["RB"]), 1 << max(1, int(knobs["ACC"]) // max(ne, nev)).bit_length() - 1))
    return vw, rb, defines(dtype, ROW_VW=vw, ATT_RB=rb, ATT_NE=ne, ATT_NEV=nev)


def _attend_rows(qkv: tuple[Tensor, Tensor, Tensor], layouts: tuple[tuple[int, int, int, int], ...], nh: int,
                 nb: int, sizes: tuple[int, int, int, int], out_shape: tuple[int, ...], scale: float, flags: np.int32,
                 p: np.generic, seed: Any, offset: Any, mask_args: tuple[Any, ...]) -> tuple[Tensor, Any]:
    """The CPU path (``kernels_cl/attention_rows.cl``): the fused kernels' computation by single work-items in
    explicit vectors, ATT_RB query rows (tuning's RB, fewer where their accumulators would pass ACC vectors: a power
    of two, 2 at least) or ROW_VW keys a work-item, the scores ROW_VW keys at a time from k (and, in
    the backward, v) transposed into (nb, width, S rounded up) `real` buffers: memory O(input) beyond the result."""
    q, k, v = qkv
    lq, s, e, ev = sizes
    dev = q.device
    key = ("attention rows", id(dev), q.dtype, e, ev)
    vw, rb, d = tuning.memoized(dev, key, lambda: _rows_plan(dev, q.dtype, e, ev))
    sp = -(-s // vw) * vw
    lay = [kernels.cl_vector(cltypes.long4, *x) for x in layouts]
    common = (flags, np.int32(lq), np.int32(s), np.int32(e), np.int32(ev), real_scalar(q.dtype, scale), p, seed,
              offset, *mask_args, np.int32(nh), *lay, np.int32(sp))
    acc = kernels.real_dtype(q.dtype)

    def launch(name: str, items: int, *args: Any) -> None:  # a work-item each, exactly (the kernels have no guard)
        if items:
            kernels.launch(dev, kernels.kernel(dev, "attention_rows.cl", name, d), (items,),
                           (math.gcd(items, ROWS_GROUP),), *args)

    def run(name: str, items: int, *buffers: Tensor) -> None:
        launch(name, items, *common, *[b.data for b in buffers])

    def transposed(t: Tensor, which: int, width: int) -> Tensor:  # t's rows as (nb, width, sp) columns
        xt = empty((nb, width, sp), acc, dev)
        launch("attn_rows_t", nb * (sp // vw), np.int32(s), np.int32(sp), np.int32(width), np.int32(nh), lay[which],
               t.data, xt.data)
        return xt

    out = empty(out_shape, q.dtype, dev)
    lse = empty((nb, lq), acc, dev)
    query_blocks = nb * -(-lq // rb)
    run("attn_rows_fwd", query_blocks, q, transposed(k, 1, e), v, out, lse)
    saved = out.detach()
    packed = k is q

    def backward(g: Tensor) -> tuple[Tensor | None, ...]:
        gq = empty(q.shape, q.dtype, dev)
        gk, gv = (gq, gq) if packed else (empty(t.shape, t.dtype, dev) for t in (k, v))
        dsum = empty((nb, lq), acc, dev)
        launch("attn_rows_dot", nb * lq, np.int32(lq), np.int32(ev), np.int32(nh), lay[3], saved.data, g.data,
               dsum.data)
        kt, vt = transposed(k, 1, e), transposed(v, 2, ev)
        run("attn_rows_bwd_q", query_blocks, q, kt, vt, k, lse, dsum, g, gq)
        run("attn_rows_bwd_kv", nb * (sp // vw), q, kt, vt, lse, dsum, g, gk, gv)
        return (gq, None, None) if packed else (gq, gk, gv)

    return out, backward
