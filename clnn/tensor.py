"""The device tensor and the reverse-mode autograd engine.

A :class:`Tensor` is a contiguous block of device memory (a pooled ``cl.Buffer``) with a shape and a
dtype. Ops live in :mod:`clnn.ops`; each one that is differentiable records a :class:`Node` holding its
inputs and a closure that maps the output's gradient to the inputs' gradients.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from . import profiler
from .device import Device
from .kernels import BFLOAT16

__all__ = [
    "Tensor", "Node", "no_grad", "enable_grad", "is_grad_enabled", "SUPPORTED_DTYPES",
    "float16", "bfloat16", "float32", "float64",
]

float16, bfloat16, float32, float64 = np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64)
SUPPORTED_DTYPES = (float32, float16, bfloat16, float64, np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_))
FLOAT_DTYPES = (float32, float16, bfloat16, float64)
HALF_DTYPES = (float16, bfloat16)  # stored in 16 bits, computed in float32

_state = threading.local()


def is_grad_enabled() -> bool:
    """Whether ops record the graph for ``backward`` in this thread."""
    return getattr(_state, "grad", True)


@contextlib.contextmanager
def _grad_mode(enabled: bool) -> Iterator[None]:
    previous = is_grad_enabled()
    _state.grad = enabled
    try:
        yield
    finally:
        _state.grad = previous


def autocast_dtype() -> np.dtype | None:
    """The half dtype ops on autocast's lists run in inside ``clnn.autocast`` in this thread; else None."""
    return getattr(_state, "autocast", None)


@contextlib.contextmanager
def autocast_mode(dtype: np.dtype | None) -> Iterator[None]:
    """Set :func:`autocast_dtype` for a ``with`` block (``clnn.autocast`` validates and calls it)."""
    previous = autocast_dtype()
    _state.autocast = dtype
    try:
        yield
    finally:
        _state.autocast = previous


def no_grad() -> contextlib.AbstractContextManager[None]:
    """``with clnn.no_grad():`` ops inside record nothing for autograd."""
    return _grad_mode(False)


def enable_grad() -> contextlib.AbstractContextManager[None]:
    """``with clnn.enable_grad():`` re-enable recording inside a ``no_grad`` block."""
    return _grad_mode(True)


Backward = Callable[["Tensor"], Sequence["Tensor | None"]]
Axes = int | Sequence[int] | None


# Called as hook(leaf) once backward() has set a leaf's grad, and hook(None) as backward() ends:
# DistributedDataParallel starts a bucket's all-reduce while the rest of the backward runs.
grad_hooks: list[Callable[[Tensor | None], None]] = []


class Node:
    """The op that made a tensor: its inputs and the map from output gradient to input gradients."""

    __slots__ = ("inputs", "backward", "name")

    def __init__(self, inputs: tuple[Tensor, ...], backward: Backward, name: str) -> None:
        self.inputs = inputs
        self.backward = backward
        self.name = name


class Tensor:
    """An n-dimensional array in an OpenCL device's memory, with autograd.

    Make one with :func:`clnn.tensor` or :func:`clnn.zeros` and friends. Arithmetic follows NumPy's
    broadcasting; ``requires_grad=True`` makes ops record what ``backward()`` needs.
    """

    __slots__ = ("data", "shape", "dtype", "device", "requires_grad", "grad", "_node", "__weakref__")
    __array_priority__ = 1000
    __array_ufunc__ = None  # NumPy defers to our reflected operators

    def __init__(self, data: cl.MemoryObjectHolder, shape: tuple[int, ...], dtype: np.dtype, device: Device):
        self.data = data
        self.shape = tuple([int(s) for s in shape])
        self.dtype = np.dtype(dtype)
        self.device = device
        self.requires_grad = False
        self.grad: Tensor | None = None
        self._node: Node | None = None

    @classmethod
    def _wrap(cls, data: cl.MemoryObjectHolder, shape: tuple[int, ...], dtype: np.dtype, device: Device) -> Tensor:
        """A tensor of facts already in ``__init__``'s form (``shape`` a tuple of ints, ``dtype`` a NumPy dtype):
        ops' outputs and views, without ``__init__``'s conversions (they are a good part of an op's host time)."""
        t = object.__new__(cls)
        t.data, t.shape, t.dtype, t.device = data, shape, dtype, device
        t.requires_grad, t.grad, t._node = False, None, None
        return t

    # ---- facts ------------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    def numel(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self) -> Node | None:
        return self._node

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self.dtype.name}, device='{self.device}'{grad})"

    # ---- host transfer ----------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """Copy to a new NumPy array (waits for pending work on the device)."""
        out = np.empty(self.shape, self.dtype)
        self.device.download(self.data, out)
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def item(self) -> float | int | bool:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor of one element; got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    # ---- autograd ---------------------------------------------------------------------------------
    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and self.dtype not in FLOAT_DTYPES:
            raise TypeError(f"only floating tensors can require grad; got dtype {self.dtype}")
        self.requires_grad = flag
        return self

    def detach(self) -> Tensor:
        """The same memory, cut from the graph."""
        return Tensor._wrap(self.data, self.shape, self.dtype, self.device)

    def backward(self, grad: Tensor | None = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

        Args:
            grad: gradient of some scalar with respect to ``self``; may be omitted for one element.
            retain_graph: keep the graph so ``backward`` can run through it again.
        """
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad and has no grad_fn")
        if grad is None:
            if self.size != 1:
                raise RuntimeError(f"backward() needs a grad for a non-scalar output of shape {self.shape}")
            grad = _ops.ones(self.shape, dtype=self.dtype, device=self.device)
        elif grad.shape != self.shape or grad.dtype != self.dtype:
            raise ValueError(
                f"backward(): grad must have shape {self.shape} and dtype {self.dtype}; "
                f"got shape {grad.shape} and dtype {grad.dtype}"
            )
        order = _topological_order(self)
        grads: dict[int, Tensor] = {id(self): grad}
        with no_grad(), autocast_mode(None):  # backward ops run in the dtypes their forward ops chose
            for t in order:
                g = grads.pop(id(t), None)
                if g is None:
                    continue
                node = t._node
                if node is None:
                    t.grad = g if t.grad is None else t.grad + g
                    for hook in grad_hooks:
                        hook(t)
                    continue
                with profiler.scope(f"{node.name}_backward"):
                    input_grads = node.backward(g)
                for inp, gi in zip(node.inputs, input_grads):
                    if gi is None or not inp.requires_grad:
                        continue
                    if gi.shape != inp.shape:
                        raise RuntimeError(f"{node.name} backward gave grad {gi.shape} for input {inp.shape}")
                    prev = grads.get(id(inp))
                    grads[id(inp)] = gi if prev is None else prev + gi
                if not retain_graph:
                    t._node = None
            for hook in list(grad_hooks):  # a hook may unregister itself here
                hook(None)

    # ---- operators (implemented in clnn.ops) ------------------------------------------------------
    def __add__(self, other: Any) -> Tensor:
        return _ops.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _ops.add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _ops.sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _ops.sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _ops.mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _ops.mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _ops.div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _ops.div(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _ops.pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _ops.pow(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return _ops.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _ops.matmul(other, self)

    def __neg__(self) -> Tensor:
        return _ops.neg(self)

    def __abs__(self) -> Tensor:
        return _ops.abs(self)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _ops.equal(self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _ops.not_equal(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return _ops.less(self, other)

    def __le__(self, other: Any) -> Tensor:
        return _ops.less_equal(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _ops.greater(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _ops.greater_equal(self, other)

    __hash__ = object.__hash__

    def __getitem__(self, index: Any) -> Tensor:
        return _ops.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        _ops.setitem(self, index, value)

    def copy_(self, src: Any) -> Tensor:
        """Copy ``src`` (a tensor or host data, broadcast to this shape, converted to this dtype) into this tensor
        in place; returns it."""
        return _ops.copy_(self, src)

    def neg(self) -> Tensor:
        return _ops.neg(self)

    def exp(self) -> Tensor:
        return _ops.exp(self)

    def log(self) -> Tensor:
        return _ops.log(self)

    def sqrt(self) -> Tensor:
        return _ops.sqrt(self)

    def abs(self) -> Tensor:
        return _ops.abs(self)

    def relu(self) -> Tensor:
        return _ops.relu(self)

    def sigmoid(self) -> Tensor:
        return _ops.sigmoid(self)

    def tanh(self) -> Tensor:
        return _ops.tanh(self)

    def clip(self, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
        return _ops.clip(self, min, max)

    # NumPy's axis/keepdims or PyTorch's dim/keepdim (keywords); max/min(dim=...) give (values, indices)
    def sum(self, axis: Axes = None, keepdims: bool | None = None, *, dim: Axes = None,
            keepdim: bool | None = None) -> Tensor:
        return _ops.sum(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def mean(self, axis: Axes = None, keepdims: bool | None = None, *, dim: Axes = None,
             keepdim: bool | None = None) -> Tensor:
        return _ops.mean(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def max(self, axis: Axes = None, keepdims: bool | None = None, *, dim: int | None = None,
            keepdim: bool | None = None) -> Tensor | tuple[Tensor, Tensor]:
        return _ops.max(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def min(self, axis: Axes = None, keepdims: bool | None = None, *, dim: int | None = None,
            keepdim: bool | None = None) -> Tensor | tuple[Tensor, Tensor]:
        return _ops.min(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def argmax(self, axis: int | None = None, keepdims: bool | None = None, *, dim: int | None = None,
               keepdim: bool | None = None) -> Tensor:
        return _ops.argmax(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def argmin(self, axis: int | None = None, keepdims: bool | None = None, *, dim: int | None = None,
               keepdim: bool | None = None) -> Tensor:
        return _ops.argmin(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def logsumexp(self, axis: Axes = None, keepdims: bool | None = None, *, dim: Axes = None,
                  keepdim: bool | None = None) -> Tensor:
        return _ops.logsumexp(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        return _ops.reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        return self.reshape(*shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        return _ops.flatten(self, start_dim, end_dim)

    def permute(self, *axes: int | Sequence[int]) -> Tensor:
        return _ops.permute(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes)

    def transpose(self, dim0: int = 0, dim1: int = 1) -> Tensor:
        return _ops.transpose(self, dim0, dim1)

    @property
    def T(self) -> Tensor:  # noqa: N802
        """All axes reversed, as NumPy's ``.T``."""
        return _ops.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return _ops.broadcast_to(self, shape)

    def contiguous(self) -> Tensor:
        return self

    def astype(self, dtype: Any) -> Tensor:
        return _ops.astype(self, dtype)

    def float(self) -> Tensor:
        return _ops.astype(self, np.float32)

    def to(self, device: Any = None, dtype: Any = None) -> Tensor:
        """Copy to another device and/or dtype (``t.to("cpu")``, ``t.to(np.float16)``)."""
        return _ops.to(self, device, dtype)

    def clone(self) -> Tensor:
        return _ops.astype(self, self.dtype, copy=True)

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        """``copy.deepcopy``: a leaf (a Parameter stays one) in new device memory, as torch copies modules."""
        if self._node is not None:
            raise RuntimeError("deepcopy: only leaf tensors can be copied (this one was computed by an op); "
                               "detach() it first")
        out = object.__new__(type(self))
        Tensor.__init__(out, self.detach().clone().data, self.shape, self.dtype, self.device)
        out.requires_grad = self.requires_grad
        memo[id(self)] = out
        return out

    def matmul(self, other: Tensor) -> Tensor:
        return _ops.matmul(self, other)

    def cpu(self) -> Tensor:
        """A copy on the CPU OpenCL device, as ``t.to("cpu")`` (``.numpy()`` gives a NumPy array)."""
        return _ops.to(self, "cpu")

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        return _ops.squeeze(self, dim)

    def unsqueeze(self, dim: int) -> Tensor:
        return _ops.unsqueeze(self, dim)

    def expand(self, *sizes: int | Sequence[int]) -> Tensor:
        return _ops.expand(self, *sizes)

    def repeat(self, *sizes: int | Sequence[int]) -> Tensor:
        return _ops.repeat(self, *sizes)

    def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        return _ops.split(self, split_size_or_sections, dim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        return _ops.chunk(self, chunks, dim)

    def where(self, condition: Tensor, other: Any) -> Tensor:
        """``self`` where ``condition`` holds, else ``other`` (``torch.Tensor.where``)."""
        return _ops.where(condition, self, other)

    def masked_fill(self, mask: Tensor, value: float) -> Tensor:
        return _ops.masked_fill(self, mask, value)

    def gather(self, dim: int, index: Tensor) -> Tensor:
        return _ops.gather(self, dim, index)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        return _ops.scatter_add(self, dim, index, src)

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        return _ops.index_select(self, dim, index)

    def var(self, dim: int | Sequence[int] | None = None, correction: float = 1, keepdim: bool = False) -> Tensor:
        return _ops.var(self, dim, correction, keepdim)

    def std(self, dim: int | Sequence[int] | None = None, correction: float = 1, keepdim: bool = False) -> Tensor:
        return _ops.std(self, dim, correction, keepdim)

    def cumsum(self, dim: int) -> Tensor:
        return _ops.cumsum(self, dim)

    def tril(self, diagonal: int = 0) -> Tensor:
        return _ops.tril(self, diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        return _ops.triu(self, diagonal)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
        return _ops.topk(self, k, dim, largest, sorted)


def _topological_order(root: Tensor) -> list[Tensor]:
    """Tensors reachable from ``root`` through recorded nodes, each after every tensor that uses it."""
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t._node is not None:
            stack.extend((i, False) for i in t._node.inputs if i.requires_grad and id(i) not in seen)
    order.reverse()
    return order


# The one late binding in clnn: ops import Tensor, so Tensor reaches ops (its operators, methods and
# backward's seed gradient) through this name at call time.
from . import ops as _ops  # noqa: E402
