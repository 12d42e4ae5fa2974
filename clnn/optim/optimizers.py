"""Optimizers with ``torch.optim``'s arguments and arithmetic; every update runs on the device.

Each parameter's update is one launch of ``optim_step`` in ``kernels_cl/optim.cl``: it reads the
gradient and the state buffers and writes the parameter and the state in place, so no value crosses to
the host. Hyperparameters are kernel arguments, so changing the learning rate never recompiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import kernels, profiler
from ..ops._core import defines, launch_1d, real_scalar
from ..ops.creation import zeros_like
from ..tensor import FLOAT_DTYPES, Tensor

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop"]

_OPS = {"sgd": 0, "adam": 1, "adamw": 2, "rmsprop": 3}
_OPTION, _FIRST, _MAXIMIZE = 1, 2, 4


class Optimizer:
    """Base class: parameter groups (dicts of hyperparameters), per-parameter state and ``zero_grad``.

    Args:
        params: an iterable of tensors, or of dicts ``{"params": [...], "lr": ...}`` (parameter groups).
        defaults: hyperparameters for groups that don't set them.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], defaults: dict[str, Any]) -> None:
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(f"{name}: params expects an iterable of tensors or dicts; got a single Tensor")
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: params is empty; expected at least one parameter")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[int, dict[str, Any]] = {}
        seen: set[int] = set()
        for group in groups:
            self.add_param_group(group, seen)

    def add_param_group(self, group: dict[str, Any], _seen: set[int] | None = None) -> None:
        """Add a group of parameters with its own hyperparameters (others from ``defaults``)."""
        name = type(self).__name__
        seen = _seen if _seen is not None else {id(p) for g in self.param_groups for p in g["params"]}
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: params[{i}] expects a clnn.Tensor; got {type(p).__name__}")
            if p.dtype not in FLOAT_DTYPES:
                raise TypeError(f"{name}: params[{i}] expects a floating tensor; got dtype {p.dtype.name}")
            if id(p) in seen:
                raise ValueError(f"{name}: params[{i}] (shape {p.shape}) appears in more than one group")
            seen.add(id(p))
        unknown = set(group) - set(self.defaults) - {"params"}
        if unknown:
            raise ValueError(f"{name}: unknown hyperparameters {sorted(unknown)}; expected {sorted(self.defaults)}")
        self.param_groups.append({**self.defaults, **group, "params": params})

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None, or to new zero tensors with ``set_to_none=False``."""
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None if set_to_none or p.grad is None else zeros_like(p.grad)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; ``closure`` re-evaluates the loss first if given."""
        loss = None
        if closure is not None:
            from ..tensor import enable_grad

            with enable_grad():
                loss = closure()
        with profiler.scope(f"{type(self).__name__}.step"):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.shape != p.shape or p.grad.dtype != p.dtype or p.grad.device is not p.device:
                        raise ValueError(
                            f"{type(self).__name__}: a gradient of shape {p.grad.shape}, {p.grad.dtype.name} on "
                            f"{p.grad.device} does not match its parameter ({p.shape}, {p.dtype.name} on {p.device})"
                        )
                    self._update(p, group, self.state.setdefault(id(p), {}))
        return loss

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        raise NotImplementedError

    def _launch(self, op: str, flags: int, p: Tensor, bufs: list[Tensor], lr: float, h: list[float]) -> None:
        s = [b.data for b in bufs] + [p.data] * (3 - len(bufs))
        h = h + [0.0] * (6 - len(h))
        k = kernels.kernel(p.device, "optim.cl", "optim_step", defines(p.dtype))
        launch_1d(
            p.device, k, p.size, np.int32(_OPS[op]), np.int32(p.size), np.int32(flags), p.data, p.grad.data,
            *s, real_scalar(p.dtype, lr), *(real_scalar(p.dtype, v) for v in h),
        )

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params"]
        return "\n".join(lines + [")"])


def _check(name: str, arg: str, value: float, low: float = 0.0, high: float | None = None) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name}: {arg} expects a number; got {type(value).__name__}")
    if value < low or (high is not None and value >= high):
        bound = f"in [{low:g}, {high:g})" if high is not None else f">= {low:g}"
        raise ValueError(f"{name}: {arg} expects a value {bound}; got {value}")


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov and weight decay.

    Matches ``torch.optim.SGD``: ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g`` on the first
    step), ``p -= lr * (g + momentum * buf if nesterov else buf)``.

    Example:
        >>> opt = clnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False) -> None:
        for arg, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            _check("SGD", arg, value)
        _check("SGD", "dampening", dampening, -math.inf)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(
                f"SGD: nesterov expects momentum > 0 and dampening = 0; got momentum={momentum}, dampening={dampening}"
            )
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        flags = _OPTION * bool(group["nesterov"]) | _MAXIMIZE * bool(group["maximize"])
        bufs = []
        if group["momentum"] != 0:
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = zeros_like(p)
                flags |= _FIRST
            bufs = [state["momentum_buffer"]]
        self._launch("sgd", flags, p, bufs, group["lr"], [group["momentum"], group["dampening"], group["weight_decay"]])


class Adam(Optimizer):
    """Adam (Kingma & Ba), optionally AMSGrad; weight decay is added to the gradient (L2), as torch does.

    Example:
        >>> opt = clnn.optim.Adam(model.parameters(), lr=1e-3)
    """

    _op = "adam"

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        name = type(self).__name__
        _check(name, "lr", lr)
        _check(name, "eps", eps)
        _check(name, "weight_decay", weight_decay)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{name}: betas expects a pair of floats; got {betas!r}")
        _check(name, "betas[0]", betas[0], 0.0, 1.0)
        _check(name, "betas[1]", betas[1], 0.0, 1.0)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        if not state:
            state["step"] = 0
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
        bufs = [state["exp_avg"], state["exp_avg_sq"]]
        if group["amsgrad"]:
            bufs.append(state.setdefault("max_exp_avg_sq", zeros_like(p)))
        state["step"] += 1
        beta1, beta2 = group["betas"]
        t = state["step"]
        lr = group["lr"]
        h = [beta1, beta2, group["eps"], group["weight_decay"], lr / (1 - beta1**t), math.sqrt(1 - beta2**t)]
        flags = _OPTION * bool(group["amsgrad"]) | _MAXIMIZE * bool(group["maximize"])
        self._launch(self._op, flags, p, bufs, lr, h)


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` before the Adam step.

    Example:
        >>> opt = clnn.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    """

    _op = "adamw"

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)


class RMSprop(Optimizer):
    """RMSprop with optional momentum and centering, as ``torch.optim.RMSprop``.

    Example:
        >>> opt = clnn.optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.99)
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, *,
                 maximize: bool = False) -> None:
        for arg, value in (("lr", lr), ("alpha", alpha), ("eps", eps), ("weight_decay", weight_decay),
                           ("momentum", momentum)):
            _check("RMSprop", arg, value)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        if not state:
            state["step"] = 0
            state["square_avg"] = zeros_like(p)
        bufs = [state["square_avg"]]
        bufs.append(state.setdefault("momentum_buffer", zeros_like(p)) if group["momentum"] > 0 else p)
        if group["centered"]:
            bufs.append(state.setdefault("grad_avg", zeros_like(p)))
        state["step"] += 1
        flags = _OPTION * bool(group["centered"]) | _MAXIMIZE * bool(group["maximize"])
        h = [group["alpha"], group["eps"], group["weight_decay"], group["momentum"]]
        self._launch("rmsprop", flags, p, bufs, group["lr"], h)
