"""1-D and 2-D cross-correlation and convolution with ``scipy.signal``'s semantics (public as ``clnn.signal``).

``correlate(in1, in2, mode)`` and ``convolve(in1, in2, mode)`` match ``scipy.signal.correlate`` and
``scipy.signal.convolve`` in output shape, ``"same"`` centering, argument order and ``"valid"`` mode
with a larger ``in2``; both are differentiable in both inputs. All run one kernel
(``kernels_cl/signal.cl``): a direct correlation with an offset, whose gradients are correlations too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import kernels
from ..kernels import defines, group_size, launch_1d
from ..profiler import profiled
from ..tensor import FLOAT_DTYPES, Tensor
from ..validation import require_choice, require_float, require_int, same_device, same_dtype
from ._core import empty, record
from .creation import tensor

MODES = ("full", "same", "valid")
FLIP_W, FLIP_OUT = (kernels.op_codes("signal.cl", "SIG_FLIP_")[k] for k in ("w", "out"))
# an output with at least SPLIT_TAPS taps is summed by a work-group when there are fewer than
# SPLIT_OUTPUTS outputs (too few to fill a device one work-item each)
SPLIT_TAPS, SPLIT_OUTPUTS = 1024, 16384
GEOM = np.dtype([(f, np.int32) for f in "N0 N1 K0 K1 L0 L1 o0 o1 flags".split()])


HOST_TYPES = (np.ndarray, np.generic, list, tuple, int, float)


def _operands(op: str, in1: Any, in2: Any) -> tuple[Tensor, Tensor]:
    """Both inputs as tensors of one float dtype on one device.

    Host arrays are uploaded in the other operand's dtype and device when it is a Tensor; two host
    arrays keep NumPy's promoted dtype (integers become float64, float16 becomes float32)."""
    for name, v in (("in1", in1), ("in2", in2)):
        if not isinstance(v, (Tensor, *HOST_TYPES)):
            raise TypeError(f"{op}: {name} expects a clnn.Tensor or a NumPy array; got {type(v).__name__}")
        if not isinstance(v, Tensor) and np.asarray(v).dtype.kind not in "biuf":
            raise TypeError(f"{op}: {name} expects real numbers; got dtype {np.asarray(v).dtype}")
    like = in1 if isinstance(in1, Tensor) else in2 if isinstance(in2, Tensor) else None
    if like is None:
        dtype = np.result_type(np.asarray(in1), np.asarray(in2), np.float32)
        dtype = dtype if dtype in FLOAT_DTYPES else np.dtype(np.float64)
        a = tensor(np.asarray(in1), dtype=dtype)
        b = tensor(np.asarray(in2), dtype=dtype, device=a.device)
    else:
        a = in1 if isinstance(in1, Tensor) else tensor(np.asarray(in1), dtype=like.dtype, device=like.device)
        b = in2 if isinstance(in2, Tensor) else tensor(np.asarray(in2), dtype=like.dtype, device=like.device)
    require_float(f"{op}: in1", a)
    require_float(f"{op}: in2", b)
    same_device(op, in1=a, in2=b)
    same_dtype(op, in1=a, in2=b)
    return a, b


def _check(op: str, a: Tensor, b: Tensor, mode: Any) -> None:
    if a.ndim not in (1, 2) or b.ndim != a.ndim:
        raise ValueError(
            f"{op}: in1 and in2 must both be 1-D or both 2-D; got in1 of shape {a.shape} and in2 of shape {b.shape}"
        )
    if a.size == 0 or b.size == 0:
        raise ValueError(f"{op}: in1 and in2 must be non-empty; got shapes {a.shape} and {b.shape}")
    require_choice(f"{op}: mode", mode, MODES)
    if mode == "valid":
        ge = all(n >= k for n, k in zip(a.shape, b.shape))
        le = all(n <= k for n, k in zip(a.shape, b.shape))
        if not (ge or le):
            raise ValueError(
                f"{op}: for 'valid' mode one input must be at least as large as the other in every dimension; "
                f"got in1 of shape {a.shape} and in2 of shape {b.shape}"
            )


def _plane(shape: tuple[int, ...]) -> tuple[int, int]:
    return (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])


def _corr(x: Tensor, w: Tensor, out_shape: tuple[int, ...], off: tuple[int, int], flags: int) -> Tensor:
    """``out[m] = sum_j x[m + off + j] * w[j or K-1-j]`` over 1-D or 2-D operands (zero outside ``x``)."""
    out = empty(out_shape, x.dtype, x.device)
    g = np.zeros((), GEOM)
    values = (*_plane(x.shape), *_plane(w.shape), *_plane(out_shape), *off, flags)
    for name, v in zip(GEOM.names, values):
        g[name] = v
    dev = x.device
    if w.size >= SPLIT_TAPS and out.size < SPLIT_OUTPUTS:
        wg = group_size(dev)  # few outputs, long sums: a work-group shares each output's taps
        k = kernels.kernel(dev, "signal.cl", "correlate2d_wg", defines(x.dtype, RED_WG=wg))
        kernels.launch(dev, k, (out.size * wg,), (wg,), g, x.data, w.data, out.data)
    else:
        k = kernels.kernel(dev, "signal.cl", "correlate2d", defines(x.dtype))
        launch_1d(dev, k, out.size, g, x.data, w.data, out.data)
    return out


def _signal(op: str, in1: Any, in2: Any, mode: str) -> Tensor:
    a, b = _operands(op, in1, in2)
    _check(op, a, b, mode)
    n1, n2 = _plane(a.shape), _plane(b.shape)
    # out[m] = full[m + start] along each axis, where full[k] = sum_i in1[k - (n2 - 1) + i] * in2'[i]
    if mode == "full":
        start, out_plane = (0, 0), tuple(p + q - 1 for p, q in zip(n1, n2))
    elif mode == "same":
        start, out_plane = tuple((q - 1) // 2 for q in n2), n1
    else:  # "valid": the larger input is the volume (scipy swaps them), so the smaller length sets the start
        start, out_plane = tuple(min(p, q) - 1 for p, q in zip(n1, n2)), tuple(abs(p - q) + 1 for p, q in zip(n1, n2))
    off = (start[0] - (n2[0] - 1), start[1] - (n2[1] - 1))
    flip = FLIP_W if op == "convolve" else 0
    out_shape = out_plane[1:] if a.ndim == 1 else out_plane
    out = _corr(a, b, out_shape, off, flip)

    def backward(g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        # d in1[i] = sum_m g[m] in2'[i - off - m]: g correlated with in2' reversed
        ga = (
            _corr(g, b, a.shape, (-off[0] - (n2[0] - 1), -off[1] - (n2[1] - 1)), flip ^ FLIP_W)
            if a.requires_grad
            else None
        )
        # d in2'[j] = sum_m in1[j + off + m] g[m]; convolve's in2 is in2' reversed
        gb = _corr(a, g, b.shape, off, FLIP_OUT if flip else 0) if b.requires_grad else None
        return ga, gb

    return record(out, (a, b), backward, op)


@profiled
def correlate(in1: Tensor | np.ndarray, in2: Tensor | np.ndarray, mode: str = "full") -> Tensor:
    """Cross-correlate two 1-D or two 2-D arrays, as ``scipy.signal.correlate``.

    ``z[k] = sum_l in1[l] * in2[l - k + n2 - 1]`` in ``"full"`` mode (lags from ``-(n2 - 1)`` to ``n1 - 1``,
    see :func:`correlation_lags`).

    Args:
        in1, in2: Tensors (or NumPy arrays, uploaded in the other operand's dtype and device) of equal rank.
        mode: ``"full"`` (shape ``n1 + n2 - 1``), ``"same"`` (shape of ``in1``, centered on the full
            output) or ``"valid"`` (shape ``|n1 - n2| + 1``; one input must be at least as large as the
            other in every dimension).

    Returns:
        A Tensor of the inputs' dtype, differentiable in both inputs.

    Raises:
        ValueError: ranks other than 1-D/2-D or unequal, empty inputs, a bad mode or 'valid' sizes.
        TypeError: non-float inputs, or two tensors of different dtypes.

    Example:
        >>> clnn.signal.correlate(clnn.tensor([1.0, 2.0, 3.0]), clnn.tensor([0.0, 1.0, 0.5]))
    """
    return _signal("correlate", in1, in2, mode)


@profiled
def convolve(in1: Tensor | np.ndarray, in2: Tensor | np.ndarray, mode: str = "full") -> Tensor:
    """Convolve two 1-D or two 2-D arrays, as ``scipy.signal.convolve``.

    ``z[k] = sum_l in1[l] * in2[k - l]`` in ``"full"`` mode; modes, arguments, returns and errors are as
    in :func:`correlate`.

    Example:
        >>> clnn.signal.convolve(clnn.tensor([1.0, 2.0, 3.0]), clnn.tensor([0.0, 1.0, 0.5]), mode="same")
    """
    return _signal("convolve", in1, in2, mode)


def correlation_lags(in1_len: int, in2_len: int, mode: str = "full") -> np.ndarray:
    """The lag of each output index of a 1-D :func:`correlate`, as ``scipy.signal.correlation_lags``.

    Args:
        in1_len, in2_len: lengths of the two inputs (> 0).
        mode: ``"full"``, ``"same"`` or ``"valid"``.

    Returns:
        A NumPy int array of lags.

    Example:
        >>> lags = clnn.signal.correlation_lags(5, 3)  # array([-2, -1, 0, 1, 2, 3, 4])
    """
    require_int("correlation_lags: in1_len", in1_len, 1)
    require_int("correlation_lags: in2_len", in2_len, 1)
    require_choice("correlation_lags: mode", mode, MODES)
    lags = np.arange(-in2_len + 1, in1_len)
    if mode == "same":  # the in1_len lags centered on the full range, as scipy picks them
        mid, bound = lags.size // 2, in1_len // 2
        lags = lags[mid - bound : mid + bound + in1_len % 2]
    elif mode == "valid":
        bound = in1_len - in2_len
        lags = np.arange(bound + 1) if bound >= 0 else np.arange(bound, 1)
    return lags
