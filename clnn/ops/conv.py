"""Convolution: ``conv1d``, ``conv2d``, ``conv_transpose2d`` with PyTorch layouts (``kernels_cl/conv.cl``).

Algorithm: implicit GEMM. The forward and the weight gradient are each one tiled launch (groups on the
grid's third axis) whose tile loads gather NCHW input, NCHW gradients and OIHW weights directly and whose
store writes NCHW (or OIHW) with the bias and an optional activation: no column matrix, no layout copies of
activations, no batch chunking. The input gradient runs as the forward kernel on gy, once per phase of the
stride, with the taps that land on that phase's pixels (transposed per group, reversed: copies of at most the
weights' size), so it does no multiply-add with a zero. Products with few rows per group (depthwise and other
small-channel convolutions) take conv.cl's direct kernels. The weight gradient splits its long N*OH*OW axis
into ordered partial sums (``gemm_sum``) of at most ``PARTIAL_BYTES``. ``conv_transpose2d``'s forward is
conv2d's input gradient and vice versa. 3x3 stride-1 products with enough channels for the device (tuning's
``winograd`` row) take Winograd's F(2x2, 3x3) instead, forward and both gradients (:mod:`.winograd`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import kernels, profiler, tuning
from ..device import Device
from ..kernels import contiguous_strides, defines, launch_1d
from ..profiler import profiled
from ..tensor import Tensor
from ..validation import require_float, require_ints, require_tensor, same_device, same_dtype
from . import winograd
from ._core import autocast, autocast_loads, empty, record
from .creation import zeros
from .matmul import act_backward, act_defines, check_act, epilogue, keeps_pre, partials, plan, rounding, sum_partials
from .norm import channel_sum
from .shape import strided_copy

PARTIAL_BYTES = 32 << 20  # most bytes the weight gradient's k-split partial sums may take
THIN = 8  # products with at most this many rows per group take the direct kernels
DIRECT_RO = 8  # most output channels one work-item of conv_direct_fwd computes
TUNED = ("conv_fwd", "conv_bwd_weight")  # tuning kinds: each kernel's tile (clnn.tune)
IntOrTuple = int | Sequence[int]


@dataclass(frozen=True)
class _Geom:
    """A 2-D convolution x (n, c, h, w) * weight (o, c/groups, kh, kw) -> y (n, o, oh, ow)."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    groups: int

    def args(self) -> tuple[np.int32, ...]:
        """conv.cl's GEOM: the geometry, then the products its kernels use (as arguments: no registers on GPUs)."""
        cg, og, p, kk = self.c // self.groups, self.o // self.groups, self.oh * self.ow, self.kh * self.kw
        vals = (self.n, self.c, self.h, self.w, self.o, self.kh, self.kw, self.oh, self.ow,
                self.sh, self.sw, self.ph, self.pw, self.dh, self.dw, self.groups,
                cg, og, p, kk, cg * kk, self.n * p, self.h * self.w)
        return tuple(np.int32(v) for v in vals)


def _tile(dev: Device, dt: np.dtype, rows: int, cols: int, k: int, g: _Geom, fusable: bool) -> dict[str, int] | None:
    """The tile for conv_fwd's per-group ``rows`` x ``cols`` x ``k`` product (its tuned tile or gemm's, against
    gemm_small's) with runs fitted to ``g``'s rows (:func:`_fit_runs`), or None for the direct kernel: thin or
    tiny products, and unless ``fusable`` (conv{1,2}d's own forward), unit-stride ones of at most the device's
    ``conv_direct`` MAX_K multiply-adds per output (input gradients, and so conv_transpose2d's forward)."""
    how = plan(dev, dt, g.groups, rows, cols, k, max_splits=1, big="conv_fwd")  # the store adds bias
    short = not fusable and g.sw == 1 and k <= tuning.params(dev, "conv_direct")["MAX_K"]
    return None if how.kernel == "direct" or rows <= THIN or short else _fit_runs(how.cfg, g)


def _fit_runs(cfg: dict[str, int], g: _Geom) -> dict[str, int]:
    """``cfg`` with its gather runs (VWG) halved until one fits in an image row: the gathers read a run as one
    vector only within a row, so wider runs would read every element alone (16-wide runs on LeNet's 14-pixel
    rows: its conv2 input gradient at 62 GFLOP/s against 74 with 8-wide ones, Intel's runtime)."""
    vwg = cfg["VWG"]
    while vwg > 1 and vwg > min(g.w, g.ow):
        vwg //= 2
    return cfg if vwg == cfg["VWG"] else {**cfg, "VWG": vwg}


def _winograd(g: _Geom, dev: Device, dtype: np.dtype) -> bool:
    """Whether ``g``'s products in ``dtype`` take Winograd's kernels (:mod:`.winograd`) on ``dev``: a shape they
    compute, with at least the device's ``winograd`` MIN_INTENSITY multiply-adds per element of the transformed
    planes (C*O / (C + O), the batched GEMM's arithmetic intensity: its operands and result are the planes)."""
    least = tuning.params(dev, "winograd")["MIN_INTENSITY"]
    return least > 0 and (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.groups) == (3, 3, 1, 1, 1, 1, 1) \
        and winograd.suits(g.c, g.o, max(g.w, g.ow), (g.ph, g.pw), dtype) and g.c * g.o >= least * (g.c + g.o)


def _direct_shape(dev: Device, g: _Geom) -> dict[str, int]:
    """conv.cl's direct kernels' OV (outputs a work-item computes along a row: tuning's conv_direct row) and UNIT_SW
    (a known unit stride, which lets Intel's runtime load neighbouring outputs' inputs as one vector, not a gather:
    ResNet's stem input gradient, 8x3->64 7x7 224^2 in stride-1 phases, 185 -> 20 ms)."""
    return {"OV": int(tuning.params(dev, "conv_direct")["OV"]), "UNIT_SW": int(g.sw == 1)}


def _forward(x: Tensor, w: Tensor, bias: Tensor | None, g: _Geom, act: str = "none",
             pre: Tensor | None = None, cfg: dict[str, int] | None = None, dtype: Any = None,
             store: Any = None, y: Tensor | None = None, layout: tuple[int, ...] | None = None,
             fusable: bool = False) -> Tensor:
    """y = act(conv(x, w) + bias), shape (N, O, OH, OW), and the value before ``act`` into ``pre`` when
    given, in ``dtype`` (x's by default; a half type rounds float32 ``x``, ``w`` in the loads), stored as
    ``store`` (``dtype``, or float32 holding the half result); records nothing. ``cfg`` forces conv_fwd's
    tile. With ``y`` and ``layout`` (YN, YO, YR, YC, Y0: conv.cl's YLAYOUT), the output is stored into ``y``
    at those element strides instead (one phase of an input gradient). ``fusable``: conv{1,2}d's own
    forward, whose kernel and tile must not depend on whether an activation is fused (:func:`_tile`; only its
    store does, gemm.h's FUSED_ACT). Without ``cfg`` and ``y``, products :func:`_winograd` picks run by Winograd's
    kernels."""
    dev, dt = x.device, x.dtype if dtype is None else np.dtype(dtype)
    if cfg is None and y is None and _winograd(g, dev, dt):
        return winograd.forward(x, w, bias, (g.ph, g.pw), dt, store, act, pre)
    if y is None:
        y = empty((g.n, g.o, g.oh, g.ow), dt if store is None else store, dev)
        layout = (g.o * g.oh * g.ow, g.oh * g.ow, g.ow, 1, 0)
    rows, cols, k = g.o // g.groups, g.n * g.oh * g.ow, g.c // g.groups * g.kh * g.kw
    cfg = cfg or _tile(dev, dt, rows, cols, k, g, fusable)
    flags = {**rounding(dt, A=w, B=x, C=y), **act_defines(dev, act, pre)}  # the program's, beside its tile
    args = (*g.args(), *(np.int32(v) for v in layout), x.data, w.data, (bias if bias is not None else y).data,
            np.int32(bias is not None), *epilogue(act, y, pre), y.data)
    if cfg is None:
        # output channels per work-item: all of a thin product's, none wasted (ResNet's stem input gradient, 3
        # channels, on PoCL: 31 ms in blocks of 4, 20 in blocks of 3)
        ro = min(DIRECT_RO, rows)
        shape = _direct_shape(dev, g)
        k_ = kernels.kernel(dev, "conv.cl", "conv_direct_fwd", defines(dt, **flags, RO=ro, **shape))
        items = -(-g.ow // shape["OV"])
        across = min(kernels.group_size(dev, 64), kernels.round_up(items, 16))  # a multiple of CPUs' vector width
        kernels.launch(dev, k_, (items, g.oh, g.n * g.groups * -(-rows // ro)), (across, 1, 1), *args)
    else:
        rtm, rtn = cfg["TM"] // cfg["WM"], cfg["TN"] // cfg["WN"]
        kernels.launch(dev, kernels.kernel(dev, "conv.cl", "conv_fwd", defines(dt, **cfg, **flags)),
                       (-(-cols // cfg["TN"]) * rtn, -(-rows // cfg["TM"]) * rtm, g.groups), (rtn, rtm, 1), *args)
    return y


@dataclass(frozen=True)
class _Phase:
    """One phase of an input axis under stride s: the pixels ``first``, ``first + s``, ... (``count`` of them),
    on which taps ``tap``, ``tap + step``, ... (``taps`` of them) land, as a stride-1 convolution of gy's axis
    with those taps reversed, ``padding`` and ``dilation``."""

    first: int
    count: int
    tap: int
    step: int
    taps: int
    padding: int
    dilation: int


def _phases(size: int, k: int, s: int, p: int, d: int) -> list[_Phase]:
    """The phases of an input axis of ``size`` pixels of a convolution with kernel ``k``, stride ``s``, padding
    ``p``, dilation ``d``: pixel h gets gy[oh] * w[i] where oh*s - p + i*d == h, so the taps landing on h depend on
    (h + p) % s only; phases without pixels are left out.

    For the phase rho, h = a*s + rho - p; tap i lands where i*d = rho (mod s), every ``step`` = s/gcd(s, d)-th
    tap from the first, on output oh = a - (i*d - rho)/s, which moves by d/gcd(s, d) from one landing tap to
    the next: a stride-1 correlation with that dilation."""
    step = s // math.gcd(s, d)
    phases = []
    for rho in range(s):
        a0 = -(-(p - rho) // s)  # the first pixel's a
        first = a0 * s + rho - p
        if first >= size:
            continue
        tap = next((i for i in range(min(k, step)) if (i * d - rho) % s == 0), k)
        taps = max(0, -(-(k - tap) // step))
        dilation = step * d // s
        padding = (taps - 1) * dilation + (tap * d - rho) // s - a0 if taps else 0
        phases.append(_Phase(first, (size - 1 - first) // s + 1, tap, step, taps, padding, dilation))
    return phases


def _phase_weight(w: Tensor, g: _Geom, ph: _Phase, pw: _Phase, dtype: np.dtype) -> Tensor:
    """The taps of w (O, C/groups, KH, KW) that land on the phase (ph, pw), transposed per group and reversed:
    (C, O/groups, ph.taps, pw.taps) in ``dtype``, one strided copy (negative strides along the taps). A float32
    ``w`` of a half product is rounded here once, not in every tile's loads: PoCL's input gradient of a 96->256
    5x5 layer in gemm_small's tiles, 1.3x float32's time with the rounding in its loads."""
    og, cg = g.o // g.groups, g.c // g.groups
    shape = (g.groups, cg, og, ph.taps, pw.taps)  # wt[gr][c][o][t][u] = w[gr*og + o][c][reversed tap t][u]
    src = (og * cg * g.kh * g.kw, g.kh * g.kw, cg * g.kh * g.kw, -ph.step * g.kw, -pw.step)
    last = (ph.tap + (ph.taps - 1) * ph.step) * g.kw + pw.tap + (pw.taps - 1) * pw.step
    wt = empty((g.c, og, ph.taps, pw.taps), dtype, w.device)
    strided_copy(w, wt, shape, src, contiguous_strides(shape), src_offset=last)
    return wt


def _input_grad(gy: Tensor, w: Tensor, bias: Tensor | None, g: _Geom, dtype: Any = None,
                store: Any = None) -> Tensor:
    """gx (N, C, H, W) of y = conv(x, w) given gy (N, O, OH, OW), plus bias per channel, in ``dtype`` (gy's by
    default; a half type rounds float32 ``gy``, ``w`` in the loads), stored as ``store`` (``dtype``, or float32
    holding the half result: a float32 input's gradient under autocast); records nothing.

    Runs as the forward kernel, once per phase of the stride (:func:`_phases`): a stride-1 convolution of gy
    with the landing taps of w, transposed and reversed (:func:`_phase_weight`), storing every stride-th pixel
    of gx. Every multiply-add is one a tap lands on: no zeros gathered, no division per element. A phase no
    tap lands on (a kernel smaller than the stride) gets the bias alone."""
    dev, dt = gy.device, gy.dtype if dtype is None else np.dtype(dtype)
    if _winograd(g, dev, dt):
        return winograd.input_grad(gy, w, bias, (g.ph, g.pw), dt, store)
    gx = empty((g.n, g.c, g.h, g.w), dt if store is None else store, dev)
    for ph in _phases(g.h, g.kh, g.sh, g.ph, g.dh):
        for pw in _phases(g.w, g.kw, g.sw, g.pw, g.dw):
            geom = _Geom(g.n, g.o, g.oh, g.ow, g.c, ph.taps, pw.taps, ph.count, pw.count, 1, 1, ph.padding,
                         pw.padding, ph.dilation, pw.dilation, g.groups)
            wt = _phase_weight(w, g, ph, pw, dt) if ph.taps * pw.taps else w  # no taps: w is not read
            layout = (g.c * g.h * g.w, g.h * g.w, g.sh * g.w, g.sw, ph.first * g.w + pw.first)
            _forward(gy, wt, bias, geom, dtype=dt, y=gx, layout=layout)
    return gx


def _splits(nq: int, step: int, want: int, partial: int, itemsize: int) -> tuple[int, int]:
    """(ranges, range length): about ``want`` ranges of a multiple of ``step`` over ``nq``, partials of
    ``partial`` elements each kept within ``PARTIAL_BYTES``."""
    s = max(1, min(want, PARTIAL_BYTES // max(1, partial * itemsize)))
    ks = max(step, kernels.round_up(-(-nq // s), step))
    return -(-nq // ks), ks


def _weight_grad(x: Tensor, gy: Tensor, g: _Geom, cfg: dict[str, int] | None = None, dtype: Any = None,
                 store: Any = None) -> Tensor:
    """gw (O, C/groups, KH, KW) of y = conv(x, w) given gy, summed over pixels in a fixed order, in ``dtype``
    (x's by default; a half type rounds float32 ``x``, ``gy`` in the loads) stored as ``store`` (``dtype``, or
    float32 for a float32 weight under autocast: the half result widened in the store); ``cfg`` forces the
    tiled kernel's tile."""
    dev, dt = x.device, np.dtype(x.dtype if dtype is None else dtype)
    shape = (g.o, g.c // g.groups, g.kh, g.kw)
    og, ncol, nq = g.o // g.groups, g.c // g.groups * g.kh * g.kw, g.n * g.oh * g.ow
    if nq == 0:  # empty batch
        return zeros(shape, dtype=dt if store is None else store, device=dev)
    if cfg is None and _winograd(g, dev, dt):
        return winograd.weight_grad(x, gy, (g.ph, g.pw), dt, store)
    gw = empty(shape, dt if store is None else store, dev)
    how = plan(dev, dt, g.groups, og, ncol, nq, big="conv_bwd_weight", cfgs=None if cfg is None else [cfg])
    real_size = max(dt.itemsize, 4)  # partials are `real` (matmul.partials)
    if cfg is None and (how.kernel == "direct" or og <= THIN):
        want = -(-(16 * dev.compute_units * 256) // gw.size)
        rows = g.n * g.oh  # ranges of whole output rows, of at least about 64 pixels
        splits, ks = _splits(rows, 1, min(want, -(-nq // 64)), gw.size, real_size)
        part, into = (gw, rounding(dt, C=gw)) if splits == 1 else partials(dt, (splits, gw.size), dev)
        defs = defines(dt, **rounding(dt, A=gy, B=x), **into, **_direct_shape(dev, g))
        k_ = kernels.kernel(dev, "conv.cl", "conv_direct_bwd_weight", defs)
        launch_1d(dev, k_, splits * gw.size, *g.args(), np.int32(ks), np.int32(splits), x.data, gy.data, part.data)
    else:
        cfg = how.cfg if cfg is not None else _fit_runs(how.cfg, g)
        splits, ks = _splits(nq, cfg["TK"], how.splits, gw.size, real_size)
        part, into = (gw, rounding(dt, C=gw)) if splits == 1 else partials(dt, (g.groups, splits, og, ncol), dev)
        rtm, rtn = cfg["TM"] // cfg["WM"], cfg["TN"] // cfg["WN"]
        defs = defines(dt, **cfg, **rounding(dt, A=gy, B=x), **into)
        kernels.launch(
            dev, kernels.kernel(dev, "conv.cl", "conv_bwd_weight", defs),
            (-(-ncol // cfg["TN"]) * rtn, -(-og // cfg["TM"]) * rtm, g.groups * splits), (rtn, rtm, 1), *g.args(),
            np.int32(ks), np.int32(splits), x.data, gy.data, part.data,
        )
    if splits > 1:
        rows = gw.size // (1 if part.ndim == 2 else g.groups)
        sum_partials(part, gw, splits, rows, 1, defines(dt, **rounding(dt, C=gw)))
    return gw


def run_tile(kind: str, x: Tensor, w: Tensor, gy: Tensor, padding: int, cfg: dict[str, int]) -> Tensor:
    """The kernel of ``kind`` (one of ``TUNED``) for conv2d(x, w, padding=padding) with tile ``cfg`` forced (a
    tuner's candidate): ``conv_fwd`` gives y and ``conv_bwd_weight`` the weight gradient for the output gradient
    ``gy``. No checks, no autograd."""
    g = _geometry("conv2d", x, w, 1, 2, 1, padding, 1)
    return _forward(x, w, None, g, cfg=cfg) if kind == "conv_fwd" else _weight_grad(x, gy, g, cfg)


def _bias_grad(gy: Tensor) -> Tensor:
    """Sum of gy (N, O, H, W) over N, H, W."""
    n, o, h, w = gy.shape
    return channel_sum(gy, n, o, h * w)


# ---- argument checks ------------------------------------------------------------------------------


def _check_operands(
    op: str, x: Any, weight: Any, bias: Any, groups: Any, nd: int, transposed: bool, half: np.dtype | None = None
) -> tuple[int, int]:
    """Validate tensors and channels (dtypes equal, or float32 and autocast's ``half``); returns (input channels,
    output channels)."""
    require_tensor(f"{op}: x", x)
    require_tensor(f"{op}: weight", weight)
    if bias is not None:
        require_tensor(f"{op}: bias", bias)
    same_device(op, x=x, weight=weight, bias=bias)
    if half is None:
        same_dtype(op, x=x, weight=weight, bias=bias)
    require_float(f"{op}: x", x)
    layout = "(N, C, L)" if nd == 1 else "(N, C, H, W)"
    if x.ndim != nd + 2:
        raise ValueError(f"{op}: x must be {nd + 2}-D {layout}; got shape {x.shape}")
    if weight.ndim != nd + 2:
        raise ValueError(f"{op}: weight must be {nd + 2}-D; got shape {weight.shape}")
    if isinstance(groups, (bool, np.bool_)) or not isinstance(groups, (int, np.integer)):
        raise TypeError(f"{op}: groups must be an int; got {groups!r}")
    if groups < 1:
        raise ValueError(f"{op}: groups must be >= 1; got {groups}")
    if any(s == 0 for s in weight.shape):
        raise ValueError(f"{op}: weight must have no zero-sized dimension; got shape {weight.shape}")
    c = x.shape[1]
    if c % groups:
        raise ValueError(f"{op}: groups={groups} must divide x's {c} input channels (x has shape {x.shape})")
    if transposed:
        if weight.shape[0] != c:
            raise ValueError(
                f"{op}: weight expects {c} input channels (x has {c}) in dim 0, got weight of shape {weight.shape}"
            )
        o = weight.shape[1] * groups
    else:
        o = weight.shape[0]
        if weight.shape[1] != c // groups:
            raise ValueError(
                f"{op}: weight expects {c // groups} input channels (x has {c}, groups={groups}), "
                f"got weight of shape {weight.shape}"
            )
        if o % groups:
            raise ValueError(f"{op}: groups={groups} must divide weight's {o} output channels ({weight.shape})")
    if bias is not None and bias.shape != (o,):
        raise ValueError(f"{op}: bias must have shape ({o},) for {o} output channels; got {bias.shape}")
    return c, o


def _geometry(
    op: str, x: Tensor, weight: Tensor, groups: int, nd: int, stride: Any, padding: Any, dilation: Any,
) -> _Geom:
    """The 2-D geometry of conv{nd}d, a 1-D problem seen as height 1; raises on bad hyperparameters."""
    s = require_ints(f"{op}: stride", stride, nd, 1)
    d = require_ints(f"{op}: dilation", dilation, nd, 1)
    ks, size = weight.shape[2:], x.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            lo = (0,) * nd
        elif padding == "same":
            if any(v != 1 for v in s):
                raise ValueError(f"{op}: padding='same' needs stride 1; got stride={stride!r}")
            lo = tuple(di * (k - 1) // 2 for di, k in zip(d, ks))  # any odd extra goes right/bottom
        else:
            raise ValueError(f"{op}: padding must be 'same', 'valid', an int or a tuple; got {padding!r}")
        out = size if padding == "same" else tuple((n - di * (k - 1) - 1) // si + 1 for n, k, si, di in
                                                   zip(size, ks, s, d))
    else:
        lo = require_ints(f"{op}: padding", padding, nd, 0)
        out = tuple((n + 2 * p - di * (k - 1) - 1) // si + 1 for n, k, si, di, p in zip(size, ks, s, d, lo))
    if any(v <= 0 for v in out):
        raise ValueError(
            f"{op}: output size would be {out}: input size {tuple(size)} with padding {padding!r} is smaller "
            f"than the dilated kernel (kernel {tuple(ks)}, dilation {d})"
        )
    return _lift(x.shape, weight.shape[0], ks, out, s, lo, d, groups)


def _lift(
    xs: Sequence[int], o: int, ks: Sequence[int], out: Sequence[int], s: Sequence[int], p: Sequence[int],
    d: Sequence[int], groups: int,
) -> _Geom:
    """A ``_Geom`` from 1-D or 2-D sizes (1-D gets a unit height)."""
    one = 2 - len(ks)
    h, w = (1,) * one + tuple(xs[2:])
    kh, kw = (1,) * one + tuple(ks)
    oh, ow = (1,) * one + tuple(out)
    sh, sw = (1,) * one + tuple(s)
    ph, pw = (0,) * one + tuple(p)
    dh, dw = (1,) * one + tuple(d)
    return _Geom(xs[0], xs[1], h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups)


# ---- public ops -----------------------------------------------------------------------------------


def _autocast(x: Any, weight: Any, bias: Any) -> tuple[np.dtype | None, Any, Any, Any]:
    """Under ``clnn.autocast``: its half type, x and weight as they are if float32 (the kernels round them in
    their loads; the other half type is cast), bias cast to the half type (the store reads it); else None
    and the operands unchanged."""
    half, (x, weight) = autocast_loads(x, weight)
    if half is not None:
        (bias,) = autocast("half", bias)
    return half, x, weight, bias


def _conv(op: str, nd: int, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
          dilation: Any, groups: int, activation: str = "none") -> Tensor:
    half, x, weight, bias = _autocast(x, weight, bias)
    _check_operands(op, x, weight, bias, groups, nd, transposed=False, half=half)
    g = _geometry(op, x, weight, groups, nd, stride, padding, dilation)
    x4 = Tensor(x.data, (g.n, g.c, g.h, g.w), x.dtype, x.device)
    w4 = Tensor(weight.data, (g.o, g.c // groups, g.kh, g.kw), weight.dtype, x.device)
    out_dt = x.dtype if half is None else half
    pre = empty((g.n, g.o, g.oh, g.ow), out_dt, x.device) if keeps_pre(activation, x, weight, bias) else None
    y = _forward(x4, w4, bias, g, activation, pre, dtype=half, fusable=True)

    def backward(gy: Tensor) -> tuple[Tensor | None, ...]:
        gy4 = Tensor(gy.data, y.shape, gy.dtype, gy.device)
        if activation != "none":  # through the activation, as unfused
            gy4 = act_backward(activation, y, pre, gy4)
        gx = _input_grad(gy4, w4, None, g, store=x.dtype) if x.requires_grad else None
        gw = _weight_grad(x4, gy4, g, dtype=gy4.dtype, store=weight.dtype) if weight.requires_grad else None
        grads = (
            None if gx is None else Tensor(gx.data, x.shape, gx.dtype, gx.device),
            None if gw is None else Tensor(gw.data, weight.shape, gw.dtype, gw.device),
        )
        return grads if bias is None else grads + (_bias_grad(gy4) if bias.requires_grad else None,)

    out = Tensor(y.data, (g.n, g.o) + ((g.ow,) if nd == 1 else (g.oh, g.ow)), y.dtype, y.device)
    return record(out, (x, weight) if bias is None else (x, weight, bias), backward, op)


def conv_act(
    x: Tensor, weight: Tensor, bias: Tensor | None, stride: IntOrTuple, padding: IntOrTuple | str,
    dilation: IntOrTuple, groups: int, activation: str,
) -> Tensor:
    """``activation(conv{1,2}d(x, weight, bias, ...))`` as one kernel (``nn.Sequential``'s fusion); the
    backward runs through the activation exactly as unfused. ``activation``: one of ``FUSED_ACTS``."""
    check_act("conv_act", activation)
    nd = 1 if isinstance(weight, Tensor) and weight.ndim == 3 else 2
    with profiler.scope(f"conv{nd}d"):  # profiled as the convolution it is
        return _conv(f"conv{nd}d", nd, x, weight, bias, stride, padding, dilation, groups, activation)


@profiled
def conv2d(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
    padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1,
) -> Tensor:
    """2-D cross-correlation as ``torch.nn.functional.conv2d``.

    Args:
        x: (N, C, H, W).
        weight: (O, C/groups, KH, KW).
        bias: (O,) or None.
        stride, dilation: an int or (height, width), each >= 1.
        padding: an int or (height, width) >= 0 of zeros on both sides, ``"valid"`` (none) or ``"same"``
            (output size = input size; stride must be 1; an odd total puts the extra on the bottom/right).
        groups: splits channels into groups convolved separately (``groups == C`` is depthwise).
    Returns:
        (N, O, OH, OW) with ``OH = (H + 2*pad - dilation*(KH-1) - 1) // stride + 1``.
    Raises:
        TypeError, ValueError: bad tensors, shapes, dtypes, devices or hyperparameters, before any launch.

    Example: ``F.conv2d(x, w, padding=1)`` for x (8, 3, 32, 32), w (16, 3, 3, 3) gives (8, 16, 32, 32).
    """
    return _conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


@profiled
def conv1d(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
    padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1,
) -> Tensor:
    """1-D cross-correlation as ``torch.nn.functional.conv1d``: x (N, C, L), weight (O, C/groups, K).

    Arguments as :func:`conv2d` with one spatial dimension; returns (N, O, L_out).
    Example: ``F.conv1d(x, w, padding="same")`` for x (4, 2, 100), w (6, 2, 5) gives (4, 6, 100).
    """
    return _conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


@profiled
def conv_transpose2d(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
    padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1, dilation: IntOrTuple = 1,
) -> Tensor:
    """2-D transposed convolution as ``torch.nn.functional.conv_transpose2d`` (the adjoint of conv2d).

    Args:
        x: (N, C_in, H, W).
        weight: (C_in, C_out/groups, KH, KW).
        bias: (C_out,) or None.
        stride, padding, dilation: as the conv2d whose input gradient this is.
        output_padding: extra rows/columns on the bottom/right, each smaller than stride or dilation.
    Returns:
        (N, C_out, H_out, W_out), ``H_out = (H-1)*stride - 2*padding + dilation*(KH-1) + output_padding + 1``.
    Raises:
        TypeError, ValueError: bad tensors, shapes, dtypes, devices or hyperparameters, before any launch.

    Example: ``F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)`` doubles H and W for 3x3 w.
    """
    op = "conv_transpose2d"
    half, x, weight, bias = _autocast(x, weight, bias)
    cin, cout = _check_operands(op, x, weight, bias, groups, 2, transposed=True, half=half)
    s = require_ints(f"{op}: stride", stride, 2, 1)
    p = require_ints(f"{op}: padding", padding, 2, 0)
    d = require_ints(f"{op}: dilation", dilation, 2, 1)
    op_ = require_ints(f"{op}: output_padding", output_padding, 2, 0)
    if any(v >= max(si, di) for v, si, di in zip(op_, s, d)):
        raise ValueError(
            f"{op}: output_padding must be smaller than stride or dilation; got output_padding={op_}, "
            f"stride={s}, dilation={d}"
        )
    ks = weight.shape[2:]
    out = tuple((n - 1) * si - 2 * pi + di * (k - 1) + oi + 1
                for n, si, pi, di, k, oi in zip(x.shape[2:], s, p, d, ks, op_))
    if any(v <= 0 for v in out):
        raise ValueError(f"{op}: output size would be {out} for input size {x.shape[2:]}; reduce padding={p}")
    # the conv2d whose input gradient this is: input (N, C_out, *out) -> output (N, C_in, H, W)
    g = _Geom(x.shape[0], cout, out[0], out[1], cin, ks[0], ks[1], x.shape[2], x.shape[3],
              s[0], s[1], p[0], p[1], d[0], d[1], groups)
    y = _input_grad(x, weight, bias, g, dtype=half)

    def backward(gy: Tensor) -> tuple[Tensor | None, ...]:
        gx = _forward(gy, weight, None, g, store=x.dtype) if x.requires_grad else None
        gw = _weight_grad(gy, x, g, dtype=gy.dtype, store=weight.dtype) if weight.requires_grad else None
        return (gx, gw) if bias is None else (gx, gw, _bias_grad(gy) if bias.requires_grad else None)

    return record(y, (x, weight) if bias is None else (x, weight, bias), backward, op)
