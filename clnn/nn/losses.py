"""Loss modules with PyTorch's constructor arguments: each ``forward(input, target)`` is one call into
:mod:`clnn.functional`. Class weights and ``pos_weight`` are buffers (in ``state_dict``, moved by ``.to()``),
as in PyTorch.

Example:
    >>> criterion = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=0)
    >>> loss = criterion(model(x), y); loss.backward()
"""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..ops.loss import IGNORE_INDEX, REDUCTIONS
from ..tensor import Tensor
from ..validation import require_choice, require_int, require_number, require_tensor
from .module import Module

__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss"]


class _Loss(Module):
    """A loss with a ``reduction`` ("mean", "sum" or "none") and optional tensor buffers."""

    def __init__(self, reduction: str = "mean", **buffers: Tensor | None) -> None:
        super().__init__()
        name = type(self).__name__
        self.reduction = require_choice(f"{name}: reduction", reduction, REDUCTIONS)
        for key, t in buffers.items():
            self.register_buffer(key, None if t is None else require_tensor(f"{name}: {key}", t))

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """:func:`clnn.functional.cross_entropy` as a module: logits (N, C, ...) against class indices or
    probabilities, with class ``weight`` (C,), ``ignore_index``, ``reduction`` and ``label_smoothing``."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(reduction, weight=weight)
        self.ignore_index = require_int("CrossEntropyLoss: ignore_index", ignore_index)
        self.label_smoothing = require_number("CrossEntropyLoss: label_smoothing", label_smoothing, 0, 1)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing)


class NLLLoss(_Loss):
    """:func:`clnn.functional.nll_loss` as a module: log-probabilities (N, C, ...) against class indices."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX,
                 reduction: str = "mean") -> None:
        super().__init__(reduction, weight=weight)
        self.ignore_index = require_int("NLLLoss: ignore_index", ignore_index)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class MSELoss(_Loss):
    """:func:`clnn.functional.mse_loss` as a module: ``(input - target) ** 2``, reduced."""

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """:func:`clnn.functional.l1_loss` as a module: ``|input - target|``, reduced."""

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.l1_loss(input, target, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """:func:`clnn.functional.binary_cross_entropy_with_logits` as a module, with ``weight`` and ``pos_weight``
    (each broadcast against the input)."""

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None) -> None:
        super().__init__(reduction, weight=weight, pos_weight=pos_weight)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)


class SmoothL1Loss(_Loss):
    """:func:`clnn.functional.smooth_l1_loss` as a module: quadratic below ``beta``, linear above."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(reduction)
        self.beta = require_number("SmoothL1Loss: beta", beta, 0)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.smooth_l1_loss(input, target, self.reduction, self.beta)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}, beta={self.beta}"


class HuberLoss(_Loss):
    """:func:`clnn.functional.huber_loss` as a module: ``0.5 d**2`` below ``delta``, ``delta (|d| - delta / 2)``
    above."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        self.delta = require_number("HuberLoss: delta", delta)
        if self.delta <= 0:
            raise ValueError(f"HuberLoss: delta expects a number > 0; got {self.delta}")

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.huber_loss(input, target, self.reduction, self.delta)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}, delta={self.delta}"
