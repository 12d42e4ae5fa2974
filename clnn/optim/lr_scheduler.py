"""Learning-rate schedulers with ``torch.optim.lr_scheduler``'s arguments and arithmetic.

They only change ``group["lr"]`` on the host; the update kernels read it as an argument at each step.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

from ..validation import require_instance, require_int
from .optimizers import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "CosineAnnealingLR", "ReduceLROnPlateau"]


def _require_optimizer(name: str, optimizer: Any) -> None:
    require_instance(f"{name}: optimizer", optimizer, Optimizer, "a clnn.optim.Optimizer")


class _Stateful:
    """``state_dict``/``load_state_dict`` as torch's schedulers: every attribute but the optimizer."""

    optimizer: Optimizer

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's attributes except ``optimizer``; torch's schedulers of the same kind load it too."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (from clnn or the same torch scheduler)."""
        self.__dict__.update(state)


class LRScheduler(_Stateful):
    """Base class: call :meth:`step` once per epoch, after ``optimizer.step()``."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        _require_optimizer(type(self).__name__, optimizer)
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rate of each group after the last :meth:`step`."""
        return list(self._last_lr)

    def step(self) -> None:
        """Advance one epoch and set each group's learning rate."""
        self._step_count += 1
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]


class LambdaLR(LRScheduler):
    """Set each group's learning rate to its initial value times ``lr_lambda(epoch)`` (one function, or one
    per group), e.g. a warm-up followed by a decay.

    Example:
        >>> sched = clnn.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 100))
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
                 last_epoch: int = -1) -> None:
        _require_optimizer("LambdaLR", optimizer)
        groups = len(optimizer.param_groups)
        lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * groups
        if len(lambdas) != groups or not all(callable(f) for f in lambdas):
            raise ValueError(f"LambdaLR: lr_lambda expects a function or a list of {groups} functions (one per "
                             f"param group); got {lr_lambda!r}")
        self.lr_lambdas = lambdas
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * f(self.last_epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self) -> dict[str, Any]:
        """As torch's: a plain function is code, not state (``None``); a callable object keeps its ``__dict__``."""
        state = super().state_dict()
        state["lr_lambdas"] = [None if isinstance(f, types.FunctionType) else dict(f.__dict__)
                               for f in self.lr_lambdas]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (clnn's or torch's LambdaLR's); the functions stay this scheduler's."""
        state = dict(state)
        for f, saved in zip(self.lr_lambdas, state.pop("lr_lambdas", [])):
            if saved is not None:
                f.__dict__.update(saved)
        super().load_state_dict(state)


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` epochs.

    Example:
        >>> sched = clnn.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size = require_int("StepLR: step_size", step_size, 1)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma for g in groups]


class CosineAnnealingLR(LRScheduler):
    """Anneal the learning rate from its initial value to ``eta_min`` along a cosine over ``T_max`` epochs.

    Example:
        >>> sched = clnn.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:  # noqa: N803
        self.T_max = require_int("CosineAnnealingLR: T_max", T_max, 1)
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups, e, t, lo = self.optimizer.param_groups, self.last_epoch, self.T_max, self.eta_min
        if e == 0:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and e > 0:
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / t)) / 2 for b in self.base_lrs]
        if (e - 1 - t) % (2 * t) == 0:
            return [g["lr"] + (b - lo) * (1 - math.cos(math.pi / t)) / 2 for g, b in zip(groups, self.base_lrs)]
        ratio = (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
        return [ratio * (g["lr"] - lo) + lo for g in groups]


class ReduceLROnPlateau(_Stateful):
    """Multiply the learning rate by ``factor`` when a metric stops improving for ``patience`` epochs.

    Call ``step(metric)`` once per epoch with the monitored value (e.g. the validation loss).

    Example:
        >>> sched = clnn.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=2)
        >>> sched.step(val_loss)
    """

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | list[float] = 0.0, eps: float = 1e-8) -> None:
        _require_optimizer("ReduceLROnPlateau", optimizer)
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode expects 'min' or 'max'; got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold_mode expects 'rel' or 'abs'; got {threshold_mode!r}")
        if not 0 <= factor < 1:
            raise ValueError(f"ReduceLROnPlateau: factor expects a value in [0, 1); got {factor}")
        n = len(optimizer.param_groups)
        min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * n
        if len(min_lrs) != n:
            raise ValueError(f"ReduceLROnPlateau: min_lr expects {n} values (one per group); got {len(min_lrs)}")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.min_lrs, self.eps = (
            threshold, threshold_mode, cooldown, min_lrs, eps)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _is_better(self, a: float) -> bool:
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (self.best * (1 - self.threshold) if rel else self.best - self.threshold)
        return a > (self.best * (1 + self.threshold) if rel else self.best + self.threshold)

    def step(self, metrics: float) -> None:
        """Record this epoch's ``metrics`` and lower the learning rate if it has plateaued."""
        current = float(metrics)
        self.last_epoch += 1
        if self._is_better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                new_lr = max(group["lr"] * self.factor, min_lr)
                if group["lr"] - new_lr > self.eps:
                    group["lr"] = new_lr
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)
