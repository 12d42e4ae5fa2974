"""``einsum`` for products of tensors over named dims, reduced to batched GEMM.

Two operands at a time (left to right): each is permuted to (batch, free, contracted), reshaped to one
3-D matrix stack, multiplied with ``matmul``, and the result reshaped and permuted back. Dims that
appear in one operand only and nowhere later are summed first. Autograd comes from those ops.
"""

from __future__ import annotations

import math
import string

from ..profiler import profiled
from ..tensor import Tensor
from ..validation import require_tensor
from .matmul import matmul
from .reduce import sum as _sum
from .shape import permute, reshape


def _parse(spec: str, operands: tuple[Tensor, ...]) -> tuple[list[str], str]:
    if not isinstance(spec, str):
        raise TypeError(f"einsum: equation expects a str; got {type(spec).__name__}")
    eq = spec.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if "." in eq:
        raise ValueError(f"einsum: '...' is not supported; name every dim (got {spec!r})")
    if any(c not in string.ascii_letters for c in "".join(terms) + out):
        raise ValueError(f"einsum: equation expects letters, ',' and '->'; got {spec!r}")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: equation {spec!r} names {len(terms)} operands; got {len(operands)}")
    for i, (t, x) in enumerate(zip(terms, operands)):
        require_tensor(f"einsum: operands[{i}]", x)
        if len(t) != x.ndim:
            raise ValueError(f"einsum: term {t!r} names {len(t)} dims but operands[{i}] has shape {x.shape}")
        if len(set(t)) != len(t):
            raise ValueError(f"einsum: repeated index in term {t!r} (diagonals) is not supported")
    if not arrow:  # implicit output: the letters seen once, sorted
        joined = "".join(terms)
        out = "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
        raise ValueError(f"einsum: output {out!r} must name distinct dims of the inputs")
    sizes: dict[str, int] = {}
    for t, x in zip(terms, operands):
        for c, n in zip(t, x.shape):
            if sizes.setdefault(c, n) != n:
                raise ValueError(f"einsum: dim {c!r} has size {sizes[c]} in one operand and {n} in another")
    return terms, out


def _reduce_to(x: Tensor, term: str, keep: set[str]) -> tuple[Tensor, str]:
    """``x`` summed over the dims of ``term`` not in ``keep``."""
    drop = tuple(i for i, c in enumerate(term) if c not in keep)
    if not drop:
        return x, term
    return _sum(x, drop), "".join(c for c in term if c in keep)


def _pair(a: Tensor, ta: str, b: Tensor, tb: str, keep: set[str]) -> tuple[Tensor, str]:
    """The product of ``a`` and ``b`` summed over their shared dims not in ``keep``, as one batched GEMM."""
    batch = [c for c in ta if c in tb and c in keep]
    contract = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    size = dict(zip(ta, a.shape)) | dict(zip(tb, b.shape))
    nb, nm, nk, nn = (math.prod([size[c] for c in g]) for g in (batch, left, contract, right))
    a3 = reshape(permute(a, [ta.index(c) for c in batch + left + contract]), (nb, nm, nk))
    b3 = reshape(permute(b, [tb.index(c) for c in batch + contract + right]), (nb, nk, nn))
    term = batch + left + right
    return reshape(matmul(a3, b3), tuple(size[c] for c in term)), "".join(term)


@profiled
def einsum(equation: str, *operands: Tensor) -> Tensor:
    """Sum of products over named dims (``torch.einsum``), e.g. ``"bhqd,bhkd->bhqk"`` (attention scores),
    ``"bi,oij,bj->bo"`` (bilinear), ``"ij->ji"``. Explicit letters only: no ``...`` and no repeated
    index within one term (diagonals).

    Raises:
        ValueError: an unsupported or malformed equation, or dims of one letter with different sizes.
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, out = _parse(equation, operands)
    later = [set(out).union(*terms[i + 1:]) for i in range(len(terms))]
    x, tx = _reduce_to(operands[0], terms[0], later[0])
    for i in range(1, len(terms)):
        y, ty = _reduce_to(operands[i], terms[i], later[i] | set(tx))
        x, tx = _pair(x, tx, y, ty, later[i])
        x, tx = _reduce_to(x, tx, later[i])
    return permute(x, [tx.index(c) for c in out]) if tx != out else x
