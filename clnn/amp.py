"""Mixed precision: ``autocast`` (ops on torch.autocast's lists run in a half type) and ``GradScaler``
(dynamic loss scaling, so small float16 gradients do not flush to zero).

Inside ``with clnn.autocast(dtype):``

- matmul, gemm (``nn.Linear``), conv1d/conv2d/conv_transpose2d take float32/float16/bfloat16 inputs in
  ``dtype`` and return ``dtype``; they read float32 operands as they are and round them to ``dtype`` in the
  kernels' loads (no cast launch, the same bits as a cast; only a convolution's bias is cast), and float32
  leaves get float32 gradients; scaled_dot_product_attention (and so MultiheadAttention's fused path) casts
  float32 and half inputs and a float mask to ``dtype`` and returns ``dtype``;
- softmax, log_softmax, logsumexp, sum, mean, layer_norm and every loss cast half inputs to float32 and
  return float32;
- batch_norm normalizes a half input with float32 parameters and statistics and returns the input's dtype (as
  cuDNN's batch norm under torch.autocast);
- a binary elementwise op on two floating dtypes promotes to the wider one (float32 with a half gives
  float32, float16 with bfloat16 float32), as torch's type promotion; outside autocast clnn asks for
  equal dtypes;
- everything else (activations, pooling, dropout, max/min) runs in its input's dtype;
- float64 tensors are never cast; ``backward`` runs each op in the dtypes its forward chose.

Memory: an op keeps for backward the tensors it ran on, so what is stored in half follows from the lists.
A convolution or Linear returns half, and the ops after it on neither list (ReLU, pooling, dropout) keep
half tensors; products and convolutions keep float32 operands as they are (a weight is the parameter itself,
no half copies), and their kernels write a float32 operand's gradient in float32 (the half result, rounded as
a cast would round it, with no half gradient widened into a second tensor). batch_norm and layer_norm read a
half input as it is and keep it (their kernels also write its gradient in its type), and batch_norm's half
output keeps the layers after it (ReLU, pooling) in half; the other ops on the float32 list (softmax, losses,
reductions) keep a float32 copy of a half input. The ops after an op on the float32 list run and store in
float32 up to the next matmul, gemm or convolution.

Differences from ``torch.autocast``: the float32 list is CUDA's for both half types (PyTorch's CPU
bfloat16 path keeps softmax, log_softmax, layer_norm, sum, mean and logsumexp in bfloat16).
Pointwise transcendental functions on CUDA's float32 list (exp, log, pow, ...) stay in their input's dtype.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import graphs
from .device import Device
from .ops import empty, foreach, zeros
from .optim import Optimizer
from .tensor import HALF_DTYPES, Tensor, autocast_mode, float16
from .validation import require_instance, require_int, require_number

__all__ = ["autocast", "GradScaler"]


@contextlib.contextmanager
def autocast(dtype: Any = float16, enabled: bool = True) -> Iterator[None]:
    """Run the ops inside the ``with`` block with torch.autocast's precision rules (see the module doc).

    Args:
        dtype: ``clnn.float16`` or ``clnn.bfloat16``.
        enabled: False leaves precision as it is (blocks nest: the innermost one rules).

    Raises:
        TypeError: ``dtype`` is not a half floating type, or ``enabled`` not a bool.

    Example:
        >>> with clnn.autocast(clnn.bfloat16):
        ...     loss = F.cross_entropy(model(x), y)   # Linear/Conv in bfloat16, the loss in float32
        >>> loss.backward()                          # float32 grads for float32 parameters
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in HALF_DTYPES:
        raise TypeError(f"autocast: dtype expects clnn.float16 or clnn.bfloat16; got {dtype!r}")
    require_instance("autocast: enabled", enabled, bool, "a bool")
    with autocast_mode(dt if enabled else None):
        yield


class GradScaler:
    """Dynamic loss scaling with ``torch.amp.GradScaler``'s semantics and defaults.

    ``scale(loss)`` multiplies the loss by the scale; ``step(optimizer)`` updates with unscaled gradients and
    skips the update when any gradient is inf or NaN; ``update()`` halves the scale after a skipped step and
    doubles it after ``growth_interval`` steps in a row without one.

    ``unscale_`` (before clipping or reading gradients) is one in-place launch per ``foreach.per_launch``
    gradients (8 on GPUs, 1 on CPUs; ``optim.cl``'s ``scale_multi``) that also raises a device-side inf/NaN flag.
    Without it, ``step`` checks the gradients in a read-only pass (``check_multi``) and the optimizer's update
    unscales them as it reads them, leaving ``.grad`` scaled, as torch's fused optimizers do. Either way the flag
    is read back once per step.

    Example:
        >>> scaler = clnn.amp.GradScaler()
        >>> with clnn.autocast(clnn.float16):
        ...     loss = F.cross_entropy(model(x), y)
        >>> scaler.scale(loss).backward()
        >>> scaler.step(opt)
        >>> scaler.update()
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        require_number("GradScaler: init_scale", init_scale, 2.0**-126)
        require_number("GradScaler: growth_factor", growth_factor, 1)
        require_number("GradScaler: backoff_factor", backoff_factor, 0, 1)
        require_int("GradScaler: growth_interval", growth_interval, 1)
        require_instance("GradScaler: enabled", enabled, bool, "a bool")
        # float32 values and arithmetic, as torch's scale tensor
        self._scale = np.float32(init_scale)
        self._growth_factor, self._backoff_factor = np.float32(growth_factor), np.float32(backoff_factor)
        self._growth_interval, self._growth_tracker = growth_interval, 0
        self._enabled = enabled
        self._found_inf: dict[int, bool] = {}  # id(optimizer) -> inf/NaN seen, for optimizers unscaled this step
        self._stepped: set[int] = set()

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return float(self._scale) if self._enabled else 1.0

    def scale(self, outputs: Tensor) -> Tensor:
        """``outputs * scale``, in ``outputs``' dtype (as torch); unchanged when disabled. While a graph is
        captured, the product reads the scale from a device scalar that each replay sets to the current scale."""
        require_instance("GradScaler.scale: outputs", outputs, Tensor, "a clnn.Tensor")
        if not self._enabled:
            return outputs
        dev = outputs.device
        if graphs.capturing(dev) is None:
            return outputs * float(self._scale)
        factor = empty(dtype=np.float32, device=dev)
        graphs.each_replay(dev, lambda: dev.fill(factor.data, np.array(self._scale, np.float32), 4))
        scaled = outputs * factor  # float32 products, as the scalar's: the same bits
        return scaled if scaled.dtype == outputs.dtype else scaled.astype(outputs.dtype)

    def unscale_(self, optimizer: Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place and note whether any is inf or NaN. While a
        graph is captured, this (as :meth:`step` and :meth:`update`) runs at each replay, with its one read.

        Raises:
            RuntimeError: called twice for ``optimizer`` since the last ``update()``, or after its ``step``.
            ValueError: none of its parameters has a gradient, or a gradient is float16 (keep float32
                master weights: autocast's casts give float32 parameters float32 gradients).
        """
        require_instance("GradScaler.unscale_: optimizer", optimizer, Optimizer, "a clnn.optim.Optimizer")
        if self._enabled:
            graphs.each_replay(_device_of(optimizer), lambda: self._unscale(optimizer))

    def _unscale(self, optimizer: Optimizer) -> None:
        params = self._scaled_params(optimizer, "unscale_")
        seen = set()
        for p in params:  # gradients sharing memory (autograd hands one to several leaves) get their own copy
            if id(p.grad.data) in seen:
                p.grad = p.grad.clone()
            seen.add(id(p.grad.data))
        inv = float(np.float32(1.0 / np.float64(self._scale)))
        self._found_inf[id(optimizer)] = self._any_nonfinite(
            params, lambda grads, flag: foreach.scale_(grads, inv, found=flag))

    def step(self, optimizer: Optimizer, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step()`` on unscaled gradients, skipped if any is inf or NaN; returns None.

        Without ``unscale_`` first, the update reads each gradient times 1/scale and leaves ``.grad`` scaled.

        Raises:
            RuntimeError: called twice for ``optimizer`` since the last ``update()``, or given a ``closure`` (the
                closure's backward would come after the inf/NaN check; torch refuses it too).
        """
        require_instance("GradScaler.step: optimizer", optimizer, Optimizer, "a clnn.optim.Optimizer")
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if args or kwargs:
            raise RuntimeError("GradScaler.step: a closure is not supported (as torch.amp.GradScaler): run the "
                               "forward and scaler.scale(loss).backward() before step()")
        graphs.each_replay(_device_of(optimizer), lambda: self._step(optimizer))
        return None

    def _step(self, optimizer: Optimizer) -> None:
        key = id(optimizer)
        if key in self._stepped:
            raise RuntimeError("GradScaler.step: already called on this optimizer since the last update()")
        unscale = 1.0
        if key not in self._found_inf:
            params = self._scaled_params(optimizer, "step")
            self._found_inf[key] = self._any_nonfinite(params, foreach.check_finite)
            unscale = float(np.float32(1.0 / np.float64(self._scale)))
        self._stepped.add(key)
        if not self._found_inf[key]:
            optimizer._step(unscale)

    def _scaled_params(self, optimizer: Optimizer, caller: str) -> list[Tensor]:
        """``optimizer``'s parameters that have a gradient, checked for ``caller`` (unscale_ or step)."""
        key = id(optimizer)
        if key in self._found_inf:
            raise RuntimeError(f"GradScaler.{caller}: unscale_ was already called on this optimizer since the last "
                               "update()")
        if key in self._stepped:
            raise RuntimeError(f"GradScaler.{caller}: called after step(); unscale_ comes before step()")
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not params:
            raise ValueError(f"GradScaler.{caller}: no parameter of the optimizer has a gradient; call "
                             "scaler.scale(loss).backward() first")
        half = [p for p in params if p.grad.dtype == float16]
        if half:
            raise ValueError(f"GradScaler.{caller}: expects float32 gradients; got float16 for a parameter of shape "
                             f"{half[0].shape} (keep float32 master weights and run the forward under autocast)")
        return params

    @staticmethod
    def _any_nonfinite(params: list[Tensor], run: Callable[[list[Tensor], Tensor], None]) -> bool:
        """``run(gradients, flag)`` per device, with a zeroed int32 inf/NaN flag each; whether one was raised
        (the step's one read per device)."""
        found: dict[Any, Tensor] = {}
        for p in params:
            if p.grad.device not in found:
                found[p.grad.device] = zeros(1, dtype=np.int32, device=p.grad.device)  # a fill: no wait
        for dev, flag in found.items():
            run([p.grad for p in params if p.grad.device is dev], flag)
        return any(f.item() for f in found.values())

    def update(self, new_scale: float | None = None) -> None:
        """Back the scale off if this step saw inf/NaN, grow it after ``growth_interval`` clean steps, or set
        it to ``new_scale``.

        Raises:
            RuntimeError: no optimizer was unscaled or stepped since the last update.
        """
        if not self._enabled:
            return
        if new_scale is not None:
            require_number("GradScaler.update: new_scale", new_scale, 2.0**-126)
        graphs.each_replay(None, lambda: self._update(new_scale))

    def _update(self, new_scale: float | None) -> None:
        if new_scale is not None:
            self._scale = np.float32(new_scale)
        elif not self._found_inf:
            raise RuntimeError("GradScaler.update: no inf checks were recorded; call step(optimizer) first")
        elif any(self._found_inf.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                with np.errstate(over="ignore"):
                    grown = self._scale * self._growth_factor
                self._scale = grown if np.isfinite(grown) else self._scale
                self._growth_tracker = 0
        self._found_inf.clear()
        self._stepped.clear()

    def state_dict(self) -> dict[str, Any]:
        """torch.amp.GradScaler's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker."""
        if not self._enabled:
            return {}
        return {"scale": float(self._scale), "growth_factor": float(self._growth_factor),
                "backoff_factor": float(self._backoff_factor),
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (from clnn or torch).

        Raises:
            KeyError: a key is missing; ValueError: the state dict is empty (saved from a disabled scaler).
        """
        if not self._enabled:
            return
        if not state_dict:
            raise ValueError("GradScaler.load_state_dict: the state dict is empty (saved from a disabled scaler)")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} - set(state_dict)
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: missing {sorted(missing)}")
        self._scale = np.float32(state_dict["scale"])
        self._growth_factor = np.float32(state_dict["growth_factor"])
        self._backoff_factor = np.float32(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


def _device_of(optimizer: Optimizer) -> Device | None:
    """The device of ``optimizer``'s first parameter (where a capture would record its gradients' work)."""
    return next((p.device for g in optimizer.param_groups for p in g["params"]), None)
