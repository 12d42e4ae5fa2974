"""2-D pooling over NCHW (or CHW) tensors: max, average and adaptive average (``kernels_cl/pool.cl``).

Semantics follow ``torch.nn.functional``: output sizes, ``ceil_mode``, padding limits, which input a
max-pool gradient goes to, and the averaging divisor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import kernels
from ..kernels import defines, launch_1d
from ..profiler import profiled
from ..tensor import Tensor
from ..validation import require_float, require_int, require_ints, require_tensor
from ._core import empty, record

OPS = kernels.op_codes("pool.cl", "P_")
GEOM = np.dtype([(f, np.int32) for f in "H W OH OW kH kW sH sW pH pW dH dW count_pad divisor".split()])

IntPair = int | Sequence[int]


def _check_input(op: str, x: Tensor) -> None:
    require_tensor(f"{op}: x", x)
    require_float(f"{op}: x", x)
    if x.ndim not in (3, 4):
        raise ValueError(f"{op}: x expects a 3-D (C, H, W) or 4-D (N, C, H, W) tensor; got shape {x.shape}")
    if 0 in x.shape[-3:]:
        raise ValueError(f"{op}: x expects non-zero C, H and W (only N may be 0); got shape {x.shape}")


def _out_size(i: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output length; with ``ceil_mode`` the last window must start inside the
    input or its left padding."""
    n = (i + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1  # floor division, as div_rtn
    if ceil_mode and (n - 1) * s >= i + p:
        n -= 1
    return n


Pair = tuple[int, int]


def _geom(
    x: Tensor,
    out_hw: Pair,
    k: Pair = (1, 1),
    s: Pair = (1, 1),
    p: Pair = (0, 0),
    d: Pair = (1, 1),
    count_pad: bool = False,
    divisor: int = 0,
) -> np.ndarray:
    """The kernel's ``pool_geom`` struct."""
    g = np.zeros((), GEOM)
    values = (*x.shape[-2:], *out_hw, *k, *s, *p, *d, int(count_pad), int(divisor))
    for name, v in zip(GEOM.names, values):
        g[name] = v
    return g


def _pool(op: str, x: Tensor, geom: np.ndarray, name: str) -> Tensor:
    """Launch ``pool_fwd`` and record a backward that launches ``pool_bwd``."""
    dev = x.device
    planes = math.prod(x.shape[:-2])
    out = empty((*x.shape[:-2], int(geom["OH"]), int(geom["OW"])), x.dtype, dev)
    idx = empty(out.shape, np.int32, dev) if op == "max" else None  # argmax (h * W + w) per output
    # GPUs: a work-item per pixel (coalesced, fills the device); CPUs: per row (measured 3-10x faster there)
    pixels = dev.type == "gpu"
    suffix = "" if pixels else "_rows"
    k = kernels.kernel(dev, "pool.cl", "pool_fwd" + suffix, defines(x.dtype))
    idx_arg = (idx if idx is not None else out).data  # only max pooling uses idx
    items = planes * int(geom["OH"]) * (int(geom["OW"]) if pixels else 1)
    launch_1d(dev, k, items, np.int32(OPS[op]), np.int32(planes), geom, x.data, out.data, idx_arg)

    def backward(g: Tensor) -> tuple[Tensor]:
        gx = empty(x.shape, x.dtype, dev)
        if not pixels and op == "max" and (geom["kH"] - 1) * geom["dH"] + 1 <= geom["sH"]:  # windows apart in rows
            kb = kernels.kernel(dev, "pool.cl", "pool_max_bwd_bands", defines(x.dtype))
            launch_1d(dev, kb, planes * int(geom["OH"]), np.int32(planes), geom, g.data, idx.data, gx.data)
            return (gx,)
        kb = kernels.kernel(dev, "pool.cl", "pool_bwd" + suffix, defines(x.dtype))
        idx_arg = (idx if idx is not None else g).data
        items = planes * int(geom["H"]) * (int(geom["W"]) if pixels else 1)
        launch_1d(dev, kb, items, np.int32(OPS[op]), np.int32(planes), geom, g.data, idx_arg, gx.data)
        return (gx,)

    return record(out, (x,), backward, name)


def _window_args(
    op: str,
    x: Tensor,
    kernel_size: IntPair,
    stride: IntPair | None,
    padding: IntPair,
    dilation: IntPair,
    ceil_mode: bool,
) -> dict[str, tuple[int, int]]:
    """Checked kernel/stride/padding/dilation pairs and the output size, as PyTorch checks them."""
    _check_input(op, x)
    k = require_ints(f"{op}: kernel_size", kernel_size, 2, 1)
    no_stride = stride is None or (isinstance(stride, Sequence) and len(stride) == 0)
    s = k if no_stride else require_ints(f"{op}: stride", stride, 2, 1)
    p = require_ints(f"{op}: padding", padding, 2, 0)
    d = require_ints(f"{op}: dilation", dilation, 2, 1)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{op}: padding must be at most half of kernel_size {k}; got padding {p}")
    out = tuple(_out_size(i, *a, ceil_mode) for i, a in zip(x.shape[-2:], zip(k, s, p, d)))
    if min(out) < 1:
        raise ValueError(
            f"{op}: input of spatial size {x.shape[-2:]} is too small for kernel_size {k}, stride {s}, "
            f"padding {p}, dilation {d}: the output would be {out}"
        )
    return {"k": k, "s": s, "p": p, "d": d, "out_hw": out}


@profiled
def max_pool2d(
    x: Tensor,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    dilation: IntPair = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """2-D max pooling, as ``torch.nn.functional.max_pool2d``.

    Args:
        x: (N, C, H, W) or (C, H, W) floating tensor.
        kernel_size, stride, padding, dilation: an int or a pair (H, W); ``stride`` defaults to
            ``kernel_size``; ``padding`` (implicit -inf) is at most half the kernel size.
        ceil_mode: round the output size up (the last window must start inside the input or its padding).

    Returns:
        (N, C, OH, OW) with ``OH = floor((H + 2*pH - dH*(kH-1) - 1) / sH) + 1`` (ceil in ``ceil_mode``).
        The gradient goes to the first largest element of each window (the last NaN, if any).

    Raises:
        TypeError/ValueError for a bad rank, dtype or argument, or an input smaller than the window.

    Example:
        >>> y = F.max_pool2d(x, 3, stride=2, padding=1)
    """
    a = _window_args("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    return _pool("max", x, _geom(x, a["out_hw"], a["k"], a["s"], a["p"], a["d"]), "max_pool2d")


@profiled
def avg_pool2d(
    x: Tensor,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``.

    Args:
        x: (N, C, H, W) or (C, H, W) floating tensor.
        kernel_size, stride, padding: an int or a pair; ``stride`` defaults to ``kernel_size``.
        ceil_mode: round the output size up.
        count_include_pad: zero padding counts in the divisor (windows past the padding never do).
        divisor_override: divide every window's sum by this instead.

    Returns:
        (N, C, OH, OW), sized as in :func:`max_pool2d` with dilation 1.

    Example:
        >>> y = F.avg_pool2d(x, 2)
    """
    a = _window_args("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None:
        require_int("avg_pool2d: divisor_override", divisor_override, 1)
    geom = _geom(x, a["out_hw"], a["k"], a["s"], a["p"], (1, 1), count_include_pad, divisor_override or 0)
    return _pool("avg", x, geom, "avg_pool2d")


@profiled
def adaptive_avg_pool2d(x: Tensor, output_size: int | None | Sequence[int | None]) -> Tensor:
    """2-D adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool2d``.

    Output cell ``(i, j)`` averages rows ``floor(i*H/OH) .. ceil((i+1)*H/OH)`` and likewise columns.

    Args:
        x: (N, C, H, W) or (C, H, W) floating tensor.
        output_size: ``OH`` for a square output, or ``(OH, OW)``; a None entry keeps the input's size.

    Returns:
        (N, C, OH, OW).

    Example:
        >>> F.adaptive_avg_pool2d(x, (1, None))  # average over H only
    """
    op = "adaptive_avg_pool2d"
    _check_input(op, x)
    items = (
        (output_size, output_size) if output_size is None or isinstance(output_size, (int, np.integer)) else output_size
    )
    ok = isinstance(items, Sequence) and len(items) == 2
    ok = ok and all(v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) for v in items)
    if not ok:
        raise TypeError(f"{op}: output_size expects an int, None or a pair of them; got {output_size!r}")
    out = tuple(int(i) if v is None else int(v) for v, i in zip(items, x.shape[-2:]))
    if min(out) < 0:
        raise ValueError(f"{op}: output_size entries must be >= 0; got {output_size!r}")
    return _pool("adaptive", x, _geom(x, out), op)
