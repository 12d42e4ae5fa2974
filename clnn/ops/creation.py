"""Making tensors: from host data, filled, ranges and random draws."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device, device
from ..profiler import profiled
from ..tensor import FLOAT_DTYPES, Tensor
from ..validation import check_dtype_on, require_tensor
from ._core import empty as _empty
from .random import draw


def _shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        if not isinstance(shape[0], (tuple, list, np.ndarray)):
            raise TypeError(f"shape: expected ints or one sequence of ints; got {shape[0]!r}")
        shape = tuple(shape[0])
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
        raise TypeError(f"shape: expected ints; got {shape}")
    return tuple(int(s) for s in shape)


def _default_dtype(data: Any) -> np.dtype:
    if isinstance(data, np.ndarray | np.generic):
        return np.dtype(np.bool_) if data.dtype == np.uint8 else data.dtype
    arr = np.asarray(data)
    if arr.dtype.kind == "f":
        return np.dtype(np.float32)  # Python floats become float32, as in PyTorch
    if arr.dtype.kind in "iu":
        return np.dtype(np.int64)
    return arr.dtype


@profiled
def tensor(
    data: Any, dtype: Any = None, device: str | int | Device | None = None, requires_grad: bool = False
) -> Tensor:
    """A tensor holding a copy of ``data`` (array-like) on ``device``.

    ``dtype`` defaults to the NumPy array's own dtype, float32 for Python floats and int64 for ints.

    Example:
        >>> t = clnn.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    """
    if isinstance(data, Tensor):
        data = data.numpy()
    dev = _device_of(device)
    try:
        dt = check_dtype_on(_default_dtype(data) if dtype is None else dtype, dev)
        host = np.asarray(data, dtype=dt, order="C")
    except (TypeError, ValueError) as err:  # NumPy's own split: ragged or unparsable values are ValueErrors
        kind = ValueError if isinstance(err, ValueError) else TypeError
        raise kind(f"tensor: cannot convert data of type {type(data).__name__}: {err}") from None
    t = _empty(host.shape, dt, dev)
    dev.upload(t.data, host)
    return t.requires_grad_(True) if requires_grad else t


def _device_of(spec: str | int | Device | None) -> Device:
    return device(spec)


@profiled
def empty(*shape: Any, dtype: Any = np.float32, device: str | int | Device | None = None) -> Tensor:
    """An uninitialized tensor."""
    return _empty(_shape(shape), dtype, _device_of(device))


@profiled
def full(
    shape: Sequence[int] | int,
    fill_value: float,
    dtype: Any = np.float32,
    device: str | int | Device | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of ``shape`` with every element ``fill_value``."""
    t = _empty(_shape((shape,)), dtype, _device_of(device))
    t.device.fill(t.data, np.array(fill_value, dtype=t.dtype), t.nbytes)
    return t.requires_grad_(True) if requires_grad else t


@profiled
def zeros(*shape: Any, dtype: Any = np.float32, device: str | int | Device | None = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of zeros."""
    return full(_shape(shape), 0, dtype, device, requires_grad)


@profiled
def ones(*shape: Any, dtype: Any = np.float32, device: str | int | Device | None = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of ones."""
    return full(_shape(shape), 1, dtype, device, requires_grad)


@profiled
def zeros_like(t: Tensor, dtype: Any = None) -> Tensor:
    """Zeros shaped like ``t``, on its device, of its dtype unless ``dtype`` is given."""
    require_tensor("zeros_like: t", t)
    return full(t.shape, 0, dtype or t.dtype, t.device)


@profiled
def ones_like(t: Tensor, dtype: Any = None) -> Tensor:
    """Ones shaped like ``t``, on its device, of its dtype unless ``dtype`` is given."""
    require_tensor("ones_like: t", t)
    return full(t.shape, 1, dtype or t.dtype, t.device)


@profiled
def arange(
    start: float, stop: float | None = None, step: float = 1, dtype: Any = None,
    device: str | int | Device | None = None,
) -> Tensor:
    """Evenly spaced values in ``[start, stop)``, as ``numpy.arange``."""
    if step == 0:
        raise ValueError("arange: step expects a nonzero number; got 0")
    values = np.arange(start, stop, step) if stop is not None else np.arange(start)
    if dtype is None and values.dtype.kind == "f":
        dtype = np.float32
    return tensor(values, dtype=dtype, device=device)


def _random(kernel: str, shape: tuple[int, ...], seed: int | None, dtype: Any, device: Any, rg: bool) -> Tensor:
    t = _empty(shape, dtype, _device_of(device))
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{kernel}: dtype must be floating; got {t.dtype.name}")
    draw(kernel, t, seed)
    return t.requires_grad_(True) if rg else t


@profiled
def rand(*shape: Any, seed: int | None = None, dtype: Any = np.float32, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform random values in [0, 1), drawn on the device (``seed`` or the global generator)."""
    return _random("uniform", _shape(shape), seed, dtype, device, requires_grad)


@profiled
def randn(*shape: Any, seed: int | None = None, dtype: Any = np.float32, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal random values, drawn on the device (``seed`` or the global generator)."""
    return _random("normal", _shape(shape), seed, dtype, device, requires_grad)
