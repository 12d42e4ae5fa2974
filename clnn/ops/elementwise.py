"""Elementwise ops: unary maps, tensor-scalar and tensor-tensor arithmetic with broadcasting, comparisons.

Launches kernels from ``kernels_cl/elementwise.cl``; op codes are its ``B_*``, ``C_*`` and ``unary.h``'s ``U_*``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import kernels, tuning
from ..kernels import broadcast_strides, defines, descriptor, launch_1d, real_scalar
from ..profiler import profiled
from ..tensor import BFLOAT16, FLOAT_DTYPES, Tensor
from ..validation import broadcast_shapes, require_float, same_device, same_dtype
from ._core import empty, promote, record
from .creation import tensor
from .reduce import sum_to_shape

UNARY = kernels.op_codes("unary.h", "U_")
BINARY = kernels.op_codes("elementwise.cl", "B_")
COMPARE = kernels.op_codes("elementwise.cl", "C_")
SCALAR_TYPES = (int, float, np.integer, np.floating, bool, np.bool_)


def _kernel(t: Tensor, name: str, n: int, op: int) -> tuple[Any, int]:
    """An elementwise.cl kernel for ``t`` and op code ``op`` and its work-items over ``n`` elements, ``EW_VEC``
    elements per item (the last one takes the tail); float16 arithmetic is native half where the device has fp16;
    the op built in as a constant where tuning's ``EW_STATIC`` says so."""
    dev, dtype = t.device, t.dtype

    def build() -> tuple[Any, int]:
        knobs = tuning.params(dev, "elementwise")
        if dtype == BFLOAT16:  # elementwise.cl's 8- and 16-wide groups take every storage but bfloat16's
            knobs["EW_VEC"] = min(knobs["EW_VEC"], 4)
        static = {"EW_OP": op} if knobs["EW_STATIC"] else {}
        return kernels.kernel(dev, "elementwise.cl", name, defines(dtype, half_math=dev.fp16, **knobs, **static)), \
            knobs["EW_VEC"]

    k, vec = tuning.memoized(dev, ("elementwise", id(dev), dtype, name, op), build)
    return k, n // vec + (n % vec > 0)


def unary(op: str, x: Tensor, a: float = 0.0, b: float = 0.0) -> Tensor:
    """``y = f(x; a, b)`` for the ``U_*`` op ``op``, differentiable."""
    require_float(f"{op}: x", x)
    y = empty(x.shape, x.dtype, x.device)
    n = x.size
    launch_1d(
        x.device, *_kernel(x, "unary", n, UNARY[op]),
        np.int32(UNARY[op]), np.int32(n), x.data, y.data, real_scalar(x.dtype, a), real_scalar(x.dtype, b),
    )
    saved_y = y.detach()
    return record(y, (x,), lambda g: (unary_grad(op, x, saved_y, g, a, b),), op)


def unary_grad(op: str, x: Tensor, y: Tensor, gy: Tensor, a: float = 0.0, b: float = 0.0) -> Tensor:
    """``gy * f'(x)`` for the ``U_*`` op ``op`` given ``y = f(x)``."""
    gx = empty(x.shape, x.dtype, x.device)
    launch_1d(
        x.device, *_kernel(x, "unary_grad", x.size, UNARY[op]),
        np.int32(UNARY[op]), np.int32(x.size), x.data, y.data, gy.data, gx.data,
        real_scalar(x.dtype, a), real_scalar(x.dtype, b),
    )
    return gx


def _as_operands(op: str, a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Both operands as tensors on one device and dtype (NumPy arrays are uploaded beside the tensor)."""
    for name, v in (("a", a), ("b", b)):
        if not isinstance(v, Tensor) and np.asarray(v).dtype.kind not in "biuf":
            raise TypeError(f"{op}: {name} expects a clnn.Tensor, a number or a numeric array; got {v!r}")
    like = a if isinstance(a, Tensor) else b
    if not isinstance(a, Tensor):
        a = tensor(np.asarray(a), dtype=like.dtype, device=like.device)
    if not isinstance(b, Tensor):
        b = tensor(np.asarray(b), dtype=like.dtype, device=like.device)
    same_device(op, a=a, b=b)
    same_dtype(op, a=a, b=b)
    return a, b


def _binary_launch(op: int, a: Tensor, b: Tensor, out_shape: tuple[int, ...], name: str, out_dtype: Any) -> Tensor:
    out = empty(out_shape, out_dtype, a.device)
    if name == "binary" and a.shape == b.shape:
        launch_1d(a.device, *_kernel(a, "binary_same", out.size, op), np.int32(op),
                  np.int32(out.size), a.data, b.data, out.data)
        return out
    d = descriptor(out_shape, broadcast_strides(a.shape, out_shape), broadcast_strides(b.shape, out_shape))
    kernels.launch_runs(a.device, _kernel(a, name, out.size, op)[0], d, out.size, np.int32(op), a.data, b.data,
                        out.data)
    return out


def _binary(op: str, a: Any, b: Any) -> Tensor:
    a, b = _as_operands(op, *promote(a, b))
    require_float(f"{op}: a", a)
    out_shape = broadcast_shapes(op, a.shape, b.shape)
    out = _binary_launch(BINARY[op], a, b, out_shape, "binary", a.dtype)
    saved = out.detach() if op in ("div", "pow") else None  # the gradients that read the result

    def backward(g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        ga = gb = None
        if op == "add":
            ga, gb = g, g
        elif op == "sub":
            ga, gb = g, (-g if b.requires_grad else None)
        elif op == "mul":
            ga = g * b if a.requires_grad else None
            gb = g * a if b.requires_grad else None
        elif op == "div":
            ga = g / b if a.requires_grad else None
            gb = -(g * saved / b) if b.requires_grad else None
        elif op == "pow":
            ga = g * b * a ** (b - 1) if a.requires_grad else None
            gb = g * saved * a.log() if b.requires_grad else None
        else:  # max, min: ties share the gradient evenly, as torch.maximum/minimum
            first = (a > b) if op == "max" else (a < b)
            tie = (a == b).astype(a.dtype) * 0.5
            wa = first.astype(a.dtype) + tie
            ga = g * wa if a.requires_grad else None
            gb = g * (1 - wa) if b.requires_grad else None
        return (
            None if ga is None else sum_to_shape(ga, a.shape),
            None if gb is None else sum_to_shape(gb, b.shape),
        )

    return record(out, (a, b), backward, op)


def _is_scalar(x: Any) -> bool:
    return isinstance(x, SCALAR_TYPES)


@profiled
def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with broadcasting."""
    if _is_scalar(b):
        return unary("add_s", a, float(b))
    if _is_scalar(a):
        return unary("add_s", b, float(a))
    return _binary("add", a, b)


@profiled
def sub(a: Any, b: Any) -> Tensor:
    """``a - b`` with broadcasting."""
    if _is_scalar(b):
        return unary("add_s", a, -float(b))
    if _is_scalar(a):
        return unary("rsub_s", b, float(a))
    return _binary("sub", a, b)


@profiled
def mul(a: Any, b: Any) -> Tensor:
    """``a * b`` with broadcasting."""
    if _is_scalar(b):
        return unary("mul_s", a, float(b))
    if _is_scalar(a):
        return unary("mul_s", b, float(a))
    return _binary("mul", a, b)


@profiled
def div(a: Any, b: Any) -> Tensor:
    """``a / b`` with broadcasting."""
    if _is_scalar(b):
        return unary("mul_s", a, 1.0 / float(b)) if float(b) != 0 else _binary("div", a, np.asarray(b))
    if _is_scalar(a):
        return unary("rdiv_s", b, float(a))
    return _binary("div", a, b)


@profiled
def pow(a: Any, b: Any) -> Tensor:  # noqa: A001
    """``a ** b`` with broadcasting."""
    if _is_scalar(b):
        return unary("pow_s", a, float(b))
    if _is_scalar(a):
        return unary("rpow_s", b, float(a))
    return _binary("pow", a, b)


@profiled
def maximum(a: Any, b: Any) -> Tensor:
    """Elementwise maximum with broadcasting; NaN propagates as in NumPy."""
    return _binary("max", a, b)


@profiled
def minimum(a: Any, b: Any) -> Tensor:
    """Elementwise minimum with broadcasting."""
    return _binary("min", a, b)


def _compare(op: str, a: Any, b: Any) -> Tensor:
    # integer and bool tensors compare as float32 (exact for magnitudes below 2**24)
    a, b = promote(a, b)
    floats = [x.dtype for x in (a, b) if isinstance(x, Tensor) and x.dtype in FLOAT_DTYPES]
    target = floats[0] if floats else np.dtype(np.float32)
    a, b = (x.astype(target) if isinstance(x, Tensor) and x.dtype not in FLOAT_DTYPES else x for x in (a, b))
    a, b = _as_operands(op, a, b)
    return _binary_launch(COMPARE[op], a, b, broadcast_shapes(op, a.shape, b.shape), "compare", np.bool_)


@profiled
def equal(a: Any, b: Any) -> Tensor:
    return _compare("eq", a, b)


@profiled
def not_equal(a: Any, b: Any) -> Tensor:
    return _compare("ne", a, b)


@profiled
def less(a: Any, b: Any) -> Tensor:
    return _compare("lt", a, b)


@profiled
def less_equal(a: Any, b: Any) -> Tensor:
    return _compare("le", a, b)


@profiled
def greater(a: Any, b: Any) -> Tensor:
    return _compare("gt", a, b)


@profiled
def greater_equal(a: Any, b: Any) -> Tensor:
    return _compare("ge", a, b)


@profiled
def neg(x: Tensor) -> Tensor:
    return unary("neg", x)


@profiled
def exp(x: Tensor) -> Tensor:
    return unary("exp", x)


@profiled
def log(x: Tensor) -> Tensor:
    return unary("log", x)


@profiled
def sqrt(x: Tensor) -> Tensor:
    return unary("sqrt", x)


@profiled
def abs(x: Tensor) -> Tensor:  # noqa: A001
    return unary("abs", x)


@profiled
def clip(x: Tensor, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
    """Clamp ``x`` to ``[min, max]`` (either bound may be None)."""
    lo = -np.inf if min is None else float(min)
    hi = np.inf if max is None else float(max)
    return unary("clamp", x, lo, hi)
