"""3x3 stride-1 convolutions by Winograd's F(MxM, 3x3), M 2 or 4 (``kernels_cl/winograd.cl``): 2.25x or 4x
fewer multiply-adds.

The forward transforms each (M+2)x(M+2) input window and each filter into (M+2)^2 planes, multiplies them as
one batched GEMM (``gemm_raw``, the positions on its batch axis) and transforms the products back into MxM
outputs with the bias and activation in the store. The input gradient is the same with the filters transposed
and reversed; the weight gradient is F(3x3, MxM): gy's MxM tiles and the same input windows, their products
summed over the tiles by the GEMM. The batch's rows of tiles are processed in chunks whose planes fit two
buffers of :func:`plane_bytes`, so a layer's extra memory does not grow with the batch. Planes are float32 (float64 for
float64): half storage is read and rounded as the implicit GEMM's loads round it (float32 operands under autocast)
and the result rounded once, in the store. ``conv.py`` decides when (:func:`suits` and tuning's ``winograd`` row).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import kernels, tuning
from ..device import Device
from ..kernels import defines
from ..tensor import Tensor
from ._core import empty
from .matmul import act_defines, epilogue, gemm_config, gemm_raw, plan, rounding

LIMIT = 64 << 20  # most bytes a layer holds beside its inputs, outputs and gradients, at any batch
FILTER_BYTES = 36 << 20  # most bytes of transformed filters (or of the weight gradient's planes): 512 x 512 channels
PARTIAL_BYTES = 8 << 20  # most bytes of a batched GEMM's k-split partial products
WORKSPACE = 32 << 20  # most bytes of the two plane buffers a chunk of tiles goes through (LIMIT leaves less)


def positions(m: int) -> int:
    """Positions of F(mxm, 3x3)'s transformed window: the batched GEMM's batch."""
    return (m + 2) ** 2


def tile_size(oh: int, ow: int, dev: Device) -> int:
    """M for an output of ``oh`` x ``ow`` on ``dev``: tuning's ``winograd`` M, but 2 where F(2x2)'s planes hold
    fewer elements (outputs whose rounding up to a multiple of 4 wastes more than F(4x4) saves: 1x1, 2x2)."""
    m = int(tuning.params(dev, "winograd")["M"])
    if m == 4:
        cost = {k: positions(k) * -(-oh // k) * -(-ow // k) for k in (2, 4)}
        m = 4 if cost[4] < cost[2] else 2
    return m


def suits(c: int, o: int, width: int, pad: tuple[int, int], dtype: np.dtype) -> bool:
    """Whether these kernels compute a 3x3, stride-1, ungrouped convolution of ``c`` to ``o`` channels with
    images (input and output) at most ``width`` wide and padding ``pad`` in ``dtype`` (any float type): padding at
    most 2 (the input gradient's is 2 - padding), transformed filters within FILTER_BYTES (F(4x4)'s 36 planes) and
    the planes of one row of tiles (the least a chunk takes) within a plane buffer. Then a layer's extra memory
    stays under LIMIT (64 MiB) at any batch: at most FILTER_BYTES of filters or weight-gradient planes, the plane
    buffers LIMIT leaves beside them and PARTIAL_BYTES."""
    item = kernels.real_dtype(dtype).itemsize
    row = max(positions(m) * -(-width // m) for m in (2, 4)) * item
    return max(pad) <= 2 and positions(4) * item * o * c <= FILTER_BYTES and row * max(c, o) <= plane_bytes(c, o, dtype)


def plane_bytes(c: int, o: int, dtype: np.dtype) -> int:
    """Bytes of each of the two plane buffers of a layer of ``c`` to ``o`` channels: the largest power of two within
    what LIMIT leaves beside F(4x4)'s filters and PARTIAL_BYTES, at most half of WORKSPACE (float32: 16 MiB up to
    about 418 x 418 channels, 8 MiB for 512 x 512). Larger chunks fill a GPU: an H200 ran the 256 -> 256 28^2 layer
    at batch 64 in 1.06 ms in 7 chunks of 448 columns, 1.53 in 14 of 224 (forward; forward and gradients 3.31 /
    4.25), AlexNet's step at batch 128 in 32.8 ms against 35.1."""
    item = kernels.real_dtype(dtype).itemsize
    left = (LIMIT - PARTIAL_BYTES - positions(4) * c * o * item) // 2
    return min(WORKSPACE // 2, 1 << (max(left, 1).bit_length() - 1))


def _workspace(dev: Device, dtype: np.dtype, elements: int, c: int, o: int) -> tuple[Tensor, Tensor]:
    """Two plane buffers of at least ``elements`` each: a power of two of them, at most :func:`plane_bytes`, so
    layers share a few sizes that the memory pool reuses (per-layer sizes left it holding 128 MiB more after an
    AlexNet step) and small layers take small buffers."""
    pt = kernels.real_dtype(dtype)
    n = min(plane_bytes(c, o, dtype) // pt.itemsize, 1 << (elements - 1).bit_length())
    return empty((n,), pt, dev), empty((n,), pt, dev)


def _planes(buf: Tensor, shape: tuple[int, int, int]) -> Tensor:
    """``buf``'s leading elements as planes of ``shape``."""
    return Tensor(buf.data, shape, buf.dtype, buf.device)


def _chunk(dev: Device, tile_rows: int, tw: int, c: int, o: int, m: int, dtype: np.dtype) -> int:
    """Tile rows (of ``tw`` tiles) per chunk: planes of F(mxm)'s positions of ``c`` and ``o`` channels in a plane
    buffer (:func:`plane_bytes`), in chunks alike (a short last chunk's GEMM would be inefficient). Where it takes
    several, the most tile rows above half that whose tiles fill whole column tiles of ``dev``'s Winograd GEMM tile,
    if they divide the tile rows: the forward's and input gradient's products then have no ragged column tile
    (384 -> 384 channels at 13x13, batch 64, forward and gradients: PoCL 914-969 -> 650-667 ms in 8 chunks of 128
    columns against 7 of 148, 8 MiB buffers); else the tile rows shared out evenly."""
    most = max(1, plane_bytes(c, o, dtype) // (positions(m) * max(c, o) * tw * kernels.real_dtype(dtype).itemsize))
    if tile_rows > most:
        tn = gemm_config(dev, dtype, "winograd")["TN"]
        unit = tn // math.gcd(tn, tw)  # tile rows of whole column tiles
        for step in range(most // unit * unit, most // 2, -unit):
            if tile_rows % step == 0:
                return step
    return -(-tile_rows // -(-tile_rows // most))


def _transform(dev: Device, k: Any, vt: int, tw: int, rc: int, rows: int, *args: object) -> None:
    """Launch a tile transform built for ``vt`` tiles per work-item over ``rc`` tile rows of ``tw`` tiles and
    ``rows`` plane rows (channels): work-groups along the tiles (GPUs: neighbours store neighbours), then the
    channels."""
    groups = -(-tw // vt)
    across = min(kernels.group_size(dev, 64), 1 << (groups - 1).bit_length())
    kernels.launch(dev, k, (groups, rc, rows), (across, 1, max(1, kernels.group_size(dev, 64) // across)), *args)


def _data(dev: Device, k: Any, vt: int, x: Tensor, pad: tuple[int, int], th: int, tw: int, r0: int, rc: int,
          v: Tensor) -> None:
    """wino_data's V planes ``v`` of x's windows for tile rows r0 .. r0 + rc - 1."""
    c, h, w = x.shape[1:]
    _transform(dev, k, vt, tw, rc, c, *(np.int32(a) for a in (c, h, w, *pad, th, tw, r0, rc)), x.data, v.data)


def _vt(dev: Device, tw: int, store: bool = False) -> int:
    """Tiles per work-item on ``dev`` of the transforms (or with ``store``, of wino_store) of rows of ``tw`` tiles:
    tuning's ``winograd`` VT (VT_STORE), halved down to 4 while half of it holds the row (AlexNet's 13^2 images, 4
    tiles: 4, not 16); no other widths, each being one more build of the kernels."""
    vt = int(tuning.params(dev, "winograd")["VT_STORE" if store else "VT"])
    while vt > 4 and tw <= vt // 2:
        vt //= 2
    return vt


def _product(a: Tensor, a_strides: tuple[int, int, int], b: Tensor, b_strides: tuple[int, int, int], m: int, n: int,
             k: int, into: Tensor, add: bool = False) -> None:
    """``into`` (+)= the products a[xi] (m x k) @ b[xi] (k x n) over a's first axis (``into``'s), as one batched
    GEMM in ``winograd``'s tile with k-splits whose partials fit PARTIAL_BYTES."""
    dev, dt, batch = a.device, a.dtype, into.shape[0]
    most = max(1, PARTIAL_BYTES // (batch * m * n * max(dt.itemsize, 4)))  # partials are `real`
    how = plan(dev, dt, batch, m, n, k, max_splits=most, big="winograd")
    gemm_raw(a, a_strides, b, b_strides, batch, m, n, k, beta=1.0 if add else 0.0, c=into, how=how, into=into)


def _filters(w: Tensor, o: int, c: int, m: int, dtype: np.dtype, flip: bool) -> Tensor:
    """F(mxm)'s transformed filters (positions, O, C) of w (O, C, 3, 3) in ``dtype``, or with ``flip``
    (positions, C, O) of w transposed and reversed (the input gradient's)."""
    dev, p = w.device, positions(m)
    u = empty((p, c, o) if flip else (p, o, c), kernels.real_dtype(dtype), dev)
    k = kernels.kernel(dev, "winograd.cl", "wino_filter", defines(dtype, WINO_M=m, **rounding(dtype, A=w)))
    kernels.launch_1d(dev, k, o * c, np.int32(o), np.int32(c), np.int32(flip), w.data, u.data)
    return u


def _convolve(x: Tensor, w: Tensor, bias: Tensor | None, pad: tuple[int, int], flip: bool, dtype: np.dtype,
              store: np.dtype, act: str = "none", pre: Tensor | None = None) -> Tensor:
    """act(x (N, C, H, W) * the 3x3 filters w (O, C, 3, 3), or with ``flip`` w (C, O, 3, 3) transposed and
    reversed, + bias) with ``pad``, computed in ``dtype``, stored as ``store``: (N, O, OH, OW); ``pre`` receives
    the value before ``act``."""
    dev, (n, c, h, w_), o = x.device, x.shape, w.shape[0 if not flip else 1]
    oh, ow = h + 2 * pad[0] - 2, w_ + 2 * pad[1] - 2
    m = tile_size(oh, ow, dev)
    u = _filters(w, c if flip else o, o if flip else c, m, dtype, flip)
    th, tw, p = -(-oh // m), -(-ow // m), positions(m)
    y = empty((n, o, oh, ow), store, dev)
    vt, vt_store = _vt(dev, tw), _vt(dev, tw, store=True)
    data = kernels.kernel(dev, "winograd.cl", "wino_data", defines(dtype, WINO_M=m, VT=vt, **rounding(dtype, B=x)))
    put = kernels.kernel(dev, "winograd.cl", "wino_store",
                         defines(dtype, WINO_M=m, VT=vt_store, **rounding(dtype, C=y), **act_defines(dev, act, pre)))
    step = _chunk(dev, n * th, tw, c, o, m, dtype)
    vbuf, pbuf = _workspace(dev, dtype, p * max(c, o) * step * tw, c, o)
    for r0 in range(0, n * th, step):
        rc = min(step, n * th - r0)
        tc = rc * tw
        v, prod = _planes(vbuf, (p, c, tc)), _planes(pbuf, (p, o, tc))
        _data(dev, data, vt, x, pad, th, tw, r0, rc, v)
        _product(u, (o * c, c, 1), v, (c * tc, tc, 1), o, tc, c, prod)
        _transform(dev, put, vt_store, tw, rc, o, *(np.int32(a) for a in (o, oh, ow, th, tw, r0, rc)), prod.data,
                   (bias if bias is not None else y).data, np.int32(bias is not None), *epilogue(act, y, pre), y.data)
    return y


def forward(x: Tensor, w: Tensor, bias: Tensor | None, pad: tuple[int, int], dtype: np.dtype,
            store: np.dtype | None = None, act: str = "none", pre: Tensor | None = None) -> Tensor:
    """y = act(conv2d(x, w, padding=pad) + bias) for x (N, C, H, W), w (O, C, 3, 3): (N, O, OH, OW), computed in
    ``dtype`` and stored as ``store`` (``dtype`` by default); ``pre`` receives the value before ``act``."""
    return _convolve(x, w, bias, pad, False, dtype, store or dtype, act, pre)


def input_grad(gy: Tensor, w: Tensor, bias: Tensor | None, pad: tuple[int, int], dtype: np.dtype,
               store: np.dtype | None = None) -> Tensor:
    """gx (N, C, H, W) of y = conv2d(x, w, padding=pad) given gy (N, O, OH, OW), plus ``bias`` per channel
    (conv_transpose2d's forward), in ``dtype`` stored as ``store``: gy convolved with w transposed and
    reversed, padding 2 - pad."""
    return _convolve(gy, w, bias, (2 - pad[0], 2 - pad[1]), True, dtype, store or dtype)


def weight_grad(x: Tensor, gy: Tensor, pad: tuple[int, int], dtype: np.dtype, store: np.dtype | None = None) -> Tensor:
    """gw (O, C, 3, 3) of y = conv2d(x, w, padding=pad) given x (N, C, H, W) and gy (N, O, OH, OW), in ``dtype``
    stored as ``store``: per chunk of tiles, the transformed gy tiles (positions, O, T) times the transformed
    input windows (positions, C, T) transposed, summed over the chunks in order."""
    (n, c), (o, oh, ow) = x.shape[:2], gy.shape[1:]
    dev, pt, m = x.device, kernels.real_dtype(dtype), tile_size(oh, ow, x.device)
    th, tw, p = -(-oh // m), -(-ow // m), positions(m)
    vt = _vt(dev, tw)
    data = kernels.kernel(dev, "winograd.cl", "wino_data", defines(dtype, WINO_M=m, VT=vt, **rounding(dtype, B=x)))
    grad = kernels.kernel(dev, "winograd.cl", "wino_grad_tiles",
                          defines(dtype, WINO_M=m, VT=vt, **rounding(dtype, A=gy)))
    step = _chunk(dev, n * th, tw, c, o, m, dtype)
    acc = empty((p, o, c), pt, dev)
    vbuf, zbuf = _workspace(dev, dtype, p * max(c, o) * step * tw, c, o)
    for r0 in range(0, n * th, step):
        rc = min(step, n * th - r0)
        tc = rc * tw
        v, z = _planes(vbuf, (p, c, tc)), _planes(zbuf, (p, o, tc))
        _data(dev, data, vt, x, pad, th, tw, r0, rc, v)
        _transform(dev, grad, vt, tw, rc, o, *(np.int32(a) for a in (o, oh, ow, th, tw, r0, rc)), gy.data, z.data)
        _product(z, (o * tc, tc, 1), v, (c * tc, 1, tc), o, c, tc, acc, add=r0 > 0)
    gw = empty((o, c, 3, 3), store or dtype, dev)
    k = kernels.kernel(dev, "winograd.cl", "wino_filter_grad", defines(dtype, WINO_M=m, **rounding(dtype, C=gw)))
    kernels.launch_1d(dev, k, o * c, np.int32(o), np.int32(c), acc.data, gw.data)
    return gw
