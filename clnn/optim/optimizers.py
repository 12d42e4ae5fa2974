"""Optimizers with ``torch.optim``'s arguments and arithmetic; every update runs on the device.

Updates run as ``optim_multi`` in ``kernels_cl/optim.cl``, one launch per group of up to
``foreach.per_launch`` parameters (8 on GPUs; 1 on CPUs, 8 small ones) that share their dtype, device and update
(hyperparameters, step count, flags): it reads the gradients and the state buffers and writes the parameters
and the state in place, so no value crosses to the host. Hyperparameters are kernel arguments, so changing the
learning rate never recompiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from .. import graphs, kernels, profiler
from ..device import Device
from ..io import to_numpy
from ..kernels import real_scalar
from ..ops import foreach
from ..ops.creation import tensor, zeros_like
from ..tensor import FLOAT_DTYPES, Tensor, enable_grad
from ..validation import require_number

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop"]

_OPS = kernels.op_codes("optim.cl", "OPT_")
_OPTION, _FIRST, _MAXIMIZE = (kernels.op_codes("optim.cl", "F_")[k] for k in ("option", "first", "maximize"))
# torch.optim group keys that choose an implementation, not the arithmetic: ignored when loading its state
_TORCH_IMPLEMENTATION = frozenset({"foreach", "fused", "capturable", "differentiable"})


class Optimizer:
    """Base class: parameter groups (dicts of hyperparameters), per-parameter state and ``zero_grad``.

    Args:
        params: an iterable of tensors, or of dicts ``{"params": [...], "lr": ...}`` (parameter groups).
        defaults: hyperparameters for groups that don't set them.
    """

    _STATE_KEYS: frozenset[str] = frozenset()  # the per-parameter state entries, named as in torch.optim

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
            with enable_grad():
                loss = closure()
        self._step(1.0)
        return loss

    def _step(self, unscale: float) -> None:
        """The update of every parameter that has a gradient, reading each gradient times ``unscale``
        (``GradScaler.step``'s 1/scale, which so needs no pass of its own over the gradients). While a graph is
        captured, the update runs at each replay, on the gradient tensors the parameters have at capture."""
        grads = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.shape != p.shape or p.grad.dtype != p.dtype or p.grad.device is not p.device:
                    raise ValueError(
                        f"{type(self).__name__}: a gradient of shape {p.grad.shape}, {p.grad.dtype.name} on "
                        f"{p.grad.device} does not match its parameter ({p.shape}, {p.dtype.name} on {p.device})"
                    )
                grads.append((p, p.grad, group))
        graphs.each_replay(grads[0][0].device if grads else None, lambda: self._apply(grads, unscale))

    def _apply(self, grads: list[tuple[Tensor, Tensor, dict[str, Any]]], unscale: float) -> None:
        """Advance the state of each (parameter, gradient, group) of ``grads`` and launch their updates."""
        with profiler.scope(f"{type(self).__name__}.step"):
            updates = [(p, g, self._update(p, group, self.state.setdefault(id(p), {}))) for p, g, group in grads]
            for dev, (dtype, _), run in foreach.groups(updates, lambda u: (u[0].device, (u[0].dtype, u[2].key)),
                                                     lambda u: u[0].size):
                _launch(dev, dtype, run, unscale)

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> _Update:
        """Advance ``p``'s state (creating it on the first step) and return the launch that updates ``p``."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state with ``torch.optim``'s structure and key names.

        ``{"state": {index: {"step": int, "exp_avg": Tensor, ...}}, "param_groups": [{"lr": ..., "params":
        [index, ...]}, ...]}``, parameters numbered in group order. Tensors are the live state (not copies).

        Example:
            >>> torch_opt.load_state_dict({**sd, "state": {i: {k: torch.as_tensor(clnn.io.to_numpy(v))
            ...                            for k, v in s.items()} for i, s in sd["state"].items()}})
        """
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups, n = [], 0
        for group in self.param_groups:
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": list(range(n, n + len(group["params"])))})
            n += len(group["params"])
        state = {index[pid]: dict(s) for pid, s in self.state.items() if pid in index and s}
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore hyperparameters and state from :meth:`state_dict`, this class's or ``torch.optim``'s.

        State tensors may be clnn, NumPy or torch tensors; they are copied to each parameter's device and
        dtype. Everything is checked before anything changes.

        Raises:
            ValueError: the groups or their sizes differ, a hyperparameter or state entry is unknown to this
                optimizer, or a state tensor's shape differs from its parameter's.
        """
        name = type(self).__name__
        if not isinstance(state_dict, Mapping) or set(state_dict) != {"state", "param_groups"}:
            raise ValueError(f"{name}.load_state_dict: state_dict expects the keys ['param_groups', 'state']; "
                             f"got {sorted(state_dict) if isinstance(state_dict, Mapping) else type(state_dict)}")
        saved = list(state_dict["param_groups"])
        sizes, own = [len(g["params"]) for g in saved], [len(g["params"]) for g in self.param_groups]
        if sizes != own:
            raise ValueError(f"{name}.load_state_dict: param_groups expect sizes {own}; got {sizes}")
        known = set(self.defaults) | {"params", "initial_lr"}
        for i, g in enumerate(saved):
            unknown = set(g) - known - _TORCH_IMPLEMENTATION
            if unknown:
                raise ValueError(f"{name}.load_state_dict: param_groups[{i}] has hyperparameters {sorted(unknown)} "
                                 f"that {name} does not use; expected {sorted(known - {'params'})}")
        params = {i: p for g_saved, g in zip(saved, self.param_groups) for i, p in zip(g_saved["params"], g["params"])}
        state: dict[int, dict[str, Any]] = {}
        for i, entries in state_dict["state"].items():
            if int(i) not in params:
                raise ValueError(f"{name}.load_state_dict: state has parameter index {i}; the groups hold indices "
                                 f"{sorted(params)}")
            state[id(params[int(i)])] = self._load_entries(params[int(i)], i, entries)
        for group, g in zip(self.param_groups, saved):
            for k, v in g.items():
                if k in known and k != "params":
                    group[k] = tuple(v) if isinstance(self.defaults.get(k), tuple) else v
        self.state = state

    def _load_entries(self, p: Tensor, index: Any, entries: Mapping[str, Any]) -> dict[str, Any]:
        """One parameter's saved state, checked and copied to ``p``'s device and dtype."""
        name = type(self).__name__
        out: dict[str, Any] = {}
        for k, v in entries.items():
            if k not in self._STATE_KEYS:
                raise ValueError(f"{name}.load_state_dict: state[{index}] has {k!r}; expected keys among "
                                 f"{sorted(self._STATE_KEYS)}")
            if v is None:  # torch's SGD keeps momentum_buffer=None before its first step
                continue
            arr = to_numpy(v)
            if k == "step":
                out[k] = int(arr)
                continue
            if arr.shape != p.shape:
                raise ValueError(f"{name}.load_state_dict: state[{index}][{k!r}] expects shape {p.shape} (its "
                                 f"parameter's); got {arr.shape}")
            out[k] = tensor(arr.astype(p.dtype, copy=False), device=p.device)
        return out

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params"]
        return "\n".join(lines + [")"])


class _Update(NamedTuple):
    """One parameter's ``optim_multi`` update: the optimizer code, flags, learning rate and scalars h0..h5 (its
    launch's key: parameters with equal keys share a launch), and its state buffers s0..s2."""

    op: str
    flags: int
    lr: float
    h: tuple[float, ...]
    state: tuple[Tensor, ...]

    @property
    def key(self) -> tuple:
        return self.op, self.flags, self.lr, self.h, len(self.state)


def _launch(dev: Device, dtype: np.dtype, run: list[tuple[Tensor, Tensor, _Update]], unscale: float) -> None:
    """One ``optim_multi`` launch updating the (parameter, gradient, update) of ``run`` (equal keys;
    ``foreach.groups``), reading the gradients times ``unscale``."""
    params, u = [p for p, _, _ in run], run[0][2]
    states = [[u.state[j] if j < len(u.state) else p for p, _, u in run] for j in range(3)]  # unused: p, untouched
    static = foreach.one_tensor(dev, len(run)) and foreach.static(dev)  # the op built in (PoCL's vectorizer)
    built_in = {"STATIC_OP": _OPS[u.op], "STATIC_FLAGS": u.flags} if static else {}
    k = foreach.kernel(dev, "optim_multi", dtype, len(run), **built_in)
    foreach.launch(dev, k, [params, [g for _, g, _ in run], *states],
                   *(real_scalar(dtype, v) for v in (unscale, u.lr, *u.h) + (0.0,) * (6 - len(u.h))),
                   before=(np.int32(_OPS[u.op]), np.int32(u.flags)))


def _check(name: str, arg: str, value: float, low: float = 0.0, high: float = math.inf) -> None:
    require_number(f"{name}: {arg}", value, low, high, high_open=high != math.inf)


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

    _STATE_KEYS = frozenset({"momentum_buffer"})

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> _Update:
        flags = _OPTION * bool(group["nesterov"]) | _MAXIMIZE * bool(group["maximize"])
        bufs = []
        if group["momentum"] != 0:
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = zeros_like(p)
                flags |= _FIRST
            bufs = [state["momentum_buffer"]]
        return _Update("sgd", flags, group["lr"], (group["momentum"], group["dampening"], group["weight_decay"]),
                       tuple(bufs))


class Adam(Optimizer):
    """Adam (Kingma & Ba), optionally AMSGrad; weight decay is added to the gradient (L2), as torch does,
    or applied to the weights with ``decoupled_weight_decay`` (then it is :class:`AdamW`).

    Example:
        >>> opt = clnn.optim.Adam(model.parameters(), lr=1e-3)
    """

    _STATE_KEYS = frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"})

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False, decoupled_weight_decay: bool = False) -> None:
        name = type(self).__name__
        _check(name, "lr", lr)
        _check(name, "eps", eps)
        _check(name, "weight_decay", weight_decay)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{name}: betas expects a pair of floats; got {betas!r}")
        _check(name, "betas[0]", betas[0], 0.0, 1.0)
        _check(name, "betas[1]", betas[1], 0.0, 1.0)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> _Update:
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
        h = (beta1, beta2, group["eps"], group["weight_decay"], lr / (1 - beta1**t), math.sqrt(1 - beta2**t))
        flags = _OPTION * bool(group["amsgrad"]) | _MAXIMIZE * bool(group["maximize"])
        return _Update("adamw" if group["decoupled_weight_decay"] else "adam", flags, lr, h, tuple(bufs))


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` before the Adam step.

    Example:
        >>> opt = clnn.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)


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

    _STATE_KEYS = frozenset({"step", "square_avg", "momentum_buffer", "grad_avg"})

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> _Update:
        if not state:
            state["step"] = 0
            state["square_avg"] = zeros_like(p)
        bufs = [state["square_avg"]]
        bufs.append(state.setdefault("momentum_buffer", zeros_like(p)) if group["momentum"] > 0 else p)
        if group["centered"]:
            bufs.append(state.setdefault("grad_avg", zeros_like(p)))
        state["step"] += 1
        flags = _OPTION * bool(group["centered"]) | _MAXIMIZE * bool(group["maximize"])
        h = (group["alpha"], group["eps"], group["weight_decay"], group["momentum"])
        return _Update("rmsprop", flags, group["lr"], h, tuple(bufs))
