"""Gradient utilities: ``clip_grad_norm_`` as ``torch.nn.utils.clip_grad_norm_``, computed on the device."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..ops import foreach
from ..ops.creation import zeros
from ..ops.elementwise import clip, maximum
from ..tensor import Tensor, no_grad
from ..validation import require_number

__all__ = ["clip_grad_norm_"]


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients so their joint ``norm_type``-norm is at most ``max_norm``.

    As PyTorch: ``coef = min(max_norm / (total_norm + 1e-6), 1)`` multiplies every gradient, in place. The norm
    and the scaling stay on the device (no synchronization) unless ``error_if_nonfinite`` asks to check it: a
    multi-tensor pass of partial norms, their sum and the coefficient, and a multi-tensor scale
    (:mod:`clnn.ops.foreach`), whatever the number of gradients.

    Args:
        parameters: tensors (or one tensor) whose ``.grad`` to clip; those without a gradient are skipped.
        max_norm: the largest norm allowed.
        norm_type: the p of the p-norm; ``math.inf`` for the largest absolute value.
        error_if_nonfinite: raise RuntimeError when the total norm is nan or inf.
    Returns:
        The total norm of the gradients before clipping, a 0-d tensor.

    Example:
        >>> clnn.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    """
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    require_number("clip_grad_norm_: max_norm", max_norm, 0)
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm_: norm_type expects a value > 0 or math.inf; got {norm_type}")
    grads = [p.grad for p in params if isinstance(p, Tensor) and p.grad is not None]
    if not grads:
        return zeros((), device=params[0].device if params else None)
    with no_grad():
        total: Tensor | None = None
        for partials in foreach.norm_partials(grads, norm_type):
            part = partials.max() if norm_type == math.inf else partials.sum()
            total = part if total is None else maximum(total, part) if norm_type == math.inf else total + part
        if norm_type != math.inf:
            total = total.sqrt() if norm_type == 2 else total ** (1.0 / norm_type)
        if len({g.dtype for g in grads}) == 1:
            total = total.astype(grads[0].dtype)  # torch's norm has its gradients' dtype
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise RuntimeError(
                f"clip_grad_norm_: the total {norm_type}-norm of the gradients is non-finite ({total.item()}); "
                "pass error_if_nonfinite=False to clip anyway"
            )
        coef = clip(max_norm / (total + 1e-6), None, 1.0)
        unique = list({id(g.data): g for g in grads}.values())  # autograd may hand one gradient to several leaves
        foreach.scale_(unique, 1.0, coef=coef)
    return total
