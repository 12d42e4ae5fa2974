"""Elementwise ops: unary maps, tensor-scalar and tensor-tensor arithmetic with broadcasting, comparisons.

Launches kernels from ``kernels_cl/elementwise.cl``; op codes mirror the ``U_*``, ``B_*``, ``C_*`` defines.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import kernels
from ..profiler import profiled
from ..tensor import Tensor
from ._core import (
    contiguous_strides,
    descriptor,
    empty,
    launch_1d,
    real_scalar,
    record,
    require_float,
    same_device,
    same_dtype,
)

UNARY = {
    name: code
    for code, name in enumerate(
        "neg exp log sqrt abs relu leaky_relu elu gelu gelu_tanh sigmoid tanh softplus silu hardswish "
        "add_s mul_s rsub_s rdiv_s pow_s rpow_s clamp square".split()
    )
}
BINARY = {name: code for code, name in enumerate("add sub mul div pow max min".split())}
COMPARE = {name: code for code, name in enumerate("eq ne lt le gt ge".split())}
SCALAR_TYPES = (int, float, np.integer, np.floating, bool, np.bool_)


def _kernel(t: Tensor, name: str) -> Any:
    """An elementwise.cl kernel for ``t``: float16 arithmetic is native half where the device has fp16."""
    return kernels.kernel(t.device, "elementwise.cl", name, kernels.dtype_defines(t.dtype, half_math=t.device.fp16))


def unary(op: str, x: Tensor, a: float = 0.0, b: float = 0.0) -> Tensor:
    """``y = f(x; a, b)`` for the ``U_*`` op ``op``, differentiable."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: x must be a clnn.Tensor; got {type(x).__name__}")
    require_float(f"{op}: x", x)
    y = empty(x.shape, x.dtype, x.device)
    launch_1d(
        x.device, _kernel(x, "unary"), x.size,
        np.int32(UNARY[op]), np.int32(x.size), x.data, y.data, real_scalar(x.dtype, a), real_scalar(x.dtype, b),
    )
    saved_y = y.detach()
    return record(y, (x,), lambda g: (unary_grad(op, x, saved_y, g, a, b),), op)


def unary_grad(op: str, x: Tensor, y: Tensor, gy: Tensor, a: float = 0.0, b: float = 0.0) -> Tensor:
    """``gy * f'(x)`` for the ``U_*`` op ``op`` given ``y = f(x)``."""
    gx = empty(x.shape, x.dtype, x.device)
    launch_1d(
        x.device, _kernel(x, "unary_grad"), x.size,
        np.int32(UNARY[op]), np.int32(x.size), x.data, y.data, gy.data, gx.data,
        real_scalar(x.dtype, a), real_scalar(x.dtype, b),
    )
    return gx


def broadcast_shapes(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of two shapes; a ValueError naming both if they don't broadcast."""
    n = max(len(sa), len(sb))
    pa, pb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ValueError(f"{op}: shapes {sa} and {sb} cannot be broadcast together")
        out.append(x if y == 1 else y)
    return tuple(out)


def broadcast_strides(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a contiguous ``shape`` read as ``out_shape`` (0 along broadcast dims)."""
    pad = len(out_shape) - len(shape)
    full = (1,) * pad + shape
    strides = [0] * pad + contiguous_strides(shape)
    return [0 if n == 1 and m != 1 else s for n, m, s in zip(full, out_shape, strides)]


def _as_operands(op: str, a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Both operands as tensors on one device and dtype (NumPy arrays are uploaded beside the tensor)."""
    from .creation import tensor

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
    d = descriptor(out_shape, broadcast_strides(a.shape, out_shape), broadcast_strides(b.shape, out_shape))
    launch_1d(a.device, _kernel(a, name), out.size, np.int32(op), np.int32(out.size), d, a.data, b.data, out.data)
    return out


def _binary(op: str, a: Any, b: Any) -> Tensor:
    a, b = _as_operands(op, a, b)
    require_float(f"{op}: a", a)
    out_shape = broadcast_shapes(op, a.shape, b.shape)
    out = _binary_launch(BINARY[op], a, b, out_shape, "binary", a.dtype)
    saved = out.detach()

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


def sum_to_shape(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a broadcast gradient back down to ``shape``."""
    from .reduce import sum as reduce_sum
    from .shape import reshape

    if g.shape == shape:
        return g
    pad = g.ndim - len(shape)
    axes = tuple(range(pad)) + tuple(pad + i for i, n in enumerate(shape) if n == 1 and g.shape[pad + i] != 1)
    return reshape(reduce_sum(g, axes), shape)


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
    floats = [x.dtype for x in (a, b) if isinstance(x, Tensor) and x.dtype.kind == "f"]
    target = floats[0] if floats else np.dtype(np.float32)
    a, b = (x.astype(target) if isinstance(x, Tensor) and x.dtype.kind != "f" else x for x in (a, b))
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
def relu(x: Tensor) -> Tensor:
    return unary("relu", x)


@profiled
def sigmoid(x: Tensor) -> Tensor:
    return unary("sigmoid", x)


@profiled
def tanh(x: Tensor) -> Tensor:
    return unary("tanh", x)


@profiled
def clip(x: Tensor, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
    """Clamp ``x`` to ``[min, max]`` (either bound may be None)."""
    lo = -np.inf if min is None else float(min)
    hi = np.inf if max is None else float(max)
    return unary("clamp", x, lo, hi)
