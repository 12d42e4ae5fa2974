"""Argument checks shared by every public entry point (ops, layers, optimizers, loader, signal).

One exception type per kind of mistake, as NumPy and PyTorch do:

- ``TypeError``: the argument has the wrong type: not a tensor, not an int, not a number, or a tensor of
  the wrong dtype (an integer tensor where floats are needed, operands of two dtypes).
- ``ValueError``: the type is right, the value is not: out of range, NaN, an unknown option, a shape that
  does not fit, tensors on two devices.
- ``IndexError`` (indexing out of bounds), ``MemoryError`` (an allocation the device cannot hold) and
  ``clnn.DeviceError`` (no such device) keep their usual meaning.

Every check takes a ``label`` naming the call and the argument (``"conv2d: stride"``), and its message
says what was expected and what was received.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .device import Device
from .tensor import FLOAT_DTYPES, SUPPORTED_DTYPES, Tensor

__all__ = [
    "require_tensor",
    "require_float",
    "require_int",
    "require_ints",
    "require_number",
    "require_choice",
    "require_instance",
    "check_dtype_on",
    "same_device",
    "same_dtype",
    "normalize_axis",
    "broadcast_shapes",
]

_INTS = (int, np.integer)
_REALS = (int, float, np.integer, np.floating)


def _is_int(value: Any) -> bool:
    return isinstance(value, _INTS) and not isinstance(value, (bool, np.bool_))


def require_tensor(label: str, value: Any) -> Tensor:
    """``value`` if it is a :class:`Tensor`; else a TypeError."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{label} expects a clnn.Tensor; got {type(value).__name__}")
    return value


def require_float(label: str, value: Any) -> Tensor:
    """``value`` if it is a floating-point :class:`Tensor`; else a TypeError."""
    t = require_tensor(label, value)
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{label} expects a floating tensor (float16/32/64); got dtype {t.dtype.name}")
    return t


def require_int(label: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as an int (bools refused), at least ``minimum`` when given."""
    if not _is_int(value):
        raise TypeError(f"{label} expects an int; got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{label} expects an int >= {minimum}; got {value}")
    return int(value)


def require_ints(label: str, value: Any, n: int, minimum: int) -> tuple[int, ...]:
    """An int, or a tuple/list of 1 or ``n`` ints, as ``n`` ints each at least ``minimum`` (PyTorch's ``_pair``)."""
    items = (value,) if _is_int(value) else value
    if not isinstance(items, (tuple, list)) or len(items) not in (1, n) or not all(_is_int(v) for v in items):
        raise TypeError(f"{label} expects an int or a tuple of {n} ints; got {value!r}")
    out = tuple(int(v) for v in items) * (n if len(items) == 1 else 1)
    if min(out) < minimum:
        raise ValueError(f"{label} expects values >= {minimum}; got {value!r}")
    return out


def require_number(
    label: str, value: Any, low: float = -math.inf, high: float = math.inf, high_open: bool = False
) -> float:
    """``value`` as a float: a real number (not bool), not NaN, in ``[low, high]`` (``[low, high)`` with
    ``high_open``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _REALS):
        raise TypeError(f"{label} expects a real number; got {type(value).__name__} {value!r}")
    v = float(value)
    too_high = v >= high if high_open else v > high
    if math.isnan(v) or v < low or too_high:
        if (low, high) == (-math.inf, math.inf):
            raise ValueError(f"{label} expects a number that is not NaN; got {v}")
        bound = f"in [{low:g}, {high:g}{')' if high_open else ']'}" if high != math.inf else f">= {low:g}"
        raise ValueError(f"{label} expects a number {bound}; got {v}")
    return v


def require_choice(label: str, value: Any, options: Sequence[Any]) -> Any:
    """``value`` if it is one of ``options``; else a ValueError listing them."""
    if not isinstance(value, (str, type(None))) or value not in options:
        raise ValueError(f"{label} expects one of {tuple(options)}; got {value!r}")
    return value


def require_instance(label: str, value: Any, cls: type, what: str) -> Any:
    """``value`` if it is a ``cls`` (described to the user as ``what``); else a TypeError."""
    if not isinstance(value, cls):
        raise TypeError(f"{label} expects {what}; got {type(value).__name__}")
    return value


_SUPPORTED = frozenset(SUPPORTED_DTYPES)


def check_dtype_on(dtype: Any, dev: Device) -> np.dtype:
    """``dtype`` as a NumPy dtype, if tensors of it can live on ``dev``; else a TypeError."""
    if isinstance(dtype, np.dtype) and dtype in _SUPPORTED and (dev.fp64 or dtype != np.float64):
        return dtype  # every op's allocation asks: the common case without the conversions
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: expected one of {[d.name for d in SUPPORTED_DTYPES]}; got {dtype!r}") from None
    if dt == np.uint8:
        dt = np.dtype(np.bool_)
    if dt not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype: expected one of {[d.name for d in SUPPORTED_DTYPES]}; got {dt.name}")
    if not dev.supports(dt):
        raise TypeError(f"float64 is not supported on {dev}: it lacks cl_khr_fp64; use float32")
    return dt


def same_device(op: str, **tensors: Tensor | None) -> Device:
    """The one device all ``tensors`` live on; a ValueError naming two that differ otherwise."""
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device is not first.device:
            raise ValueError(
                f"{op}: {first_name} is on {first.device} but {name} is on {t.device}; move one with .to(device)"
            )
    return first.device


def same_dtype(op: str, **tensors: Tensor | None) -> np.dtype:
    """The one dtype all ``tensors`` share; a TypeError naming two that differ otherwise."""
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.dtype != first.dtype:
            raise TypeError(
                f"{op}: {first_name} has dtype {first.dtype.name} but {name} has dtype {t.dtype.name}; "
                "convert one with .astype()"
            )
    return first.dtype


def normalize_axis(axis: Any, ndim: int, name: str = "axis") -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative index (a 0-d tensor has one axis, as in PyTorch)."""
    if not _is_int(axis):
        raise TypeError(f"{name}: expected an int; got {type(axis).__name__}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"{name}: expected a value in [{-max(ndim, 1)}, {max(ndim, 1) - 1}]; got {axis}")
    return int(axis) % max(ndim, 1)


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
