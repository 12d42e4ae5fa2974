"""Autograd engine vs torch autograd (float64): every foundation Tensor op's backward, accumulation, shared
subexpressions, broadcasting, detach/no_grad/retain_graph, a composite MLP, and bit-identical reruns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import assert_close
from torch_ref import check_against_torch

import clnn
import clnn.functional as F

POS = "pos"  # input drawn from [0.5, 2.5): for log, sqrt, pow bases, divisors, and sums

# (name, function of clnn or torch tensors (the same code serves both), input shapes, positive inputs).
# Sums and means take positive inputs: a signed sum of 21 values can cancel past what float32 can meet at 1e-5
# relative (seen once in 20 Intel runs), while positive terms keep it well-conditioned.
OPS = [
    ("getitem-steps", lambda x: x[1:5:2, ::3], [(6, 7)], False),
    ("getitem-negative-step", lambda x: x.flip(0)[::2, 1:] if isinstance(x, torch.Tensor) else x[::-2, 1:],
     [(5, 4)], False),  # torch has no negative steps
    ("getitem-int-none-ellipsis", lambda x: x[..., None, 2], [(3, 4, 5)], False),
    ("getitem-last", lambda x: x[-1], [(4, 3)], False),
    ("permute", lambda x: x.permute(2, 0, 1), [(2, 3, 4)], False),
    ("transpose", lambda x: x.transpose(0, 1), [(3, 5)], False),
    ("T", lambda x: x.T, [(3, 5)], False),
    ("reshape", lambda x: x.reshape(4, -1), [(2, 3, 4)], False),
    ("flatten", lambda x: x.flatten(1), [(2, 3, 4)], False),
    ("broadcast_to", lambda x: x.broadcast_to((2, 3, 5)), [(3, 1)], False),
    ("sum-all", lambda x: x.sum(), [(3, 7)], POS),
    ("sum-axis0", lambda x: x.sum(0), [(3, 7)], POS),
    ("sum-axes02-keepdims", lambda x: x.sum((0, 2), keepdims=True), [(3, 4, 5)], POS),
    ("sum-long-axis", lambda x: x.sum(-1), [(3, 1031)], POS),
    ("mean-all", lambda x: x.mean(), [(5, 3)], POS),
    ("mean-axis-1", lambda x: x.mean(-1), [(2, 3, 7)], POS),
    ("max-axis1", lambda x: x.amax(1) if isinstance(x, torch.Tensor) else x.max(1), [(4, 9)], False),
    ("max-all", lambda x: x.amax() if isinstance(x, torch.Tensor) else x.max(), [(4, 9)], False),
    ("min-axes", lambda x: x.amin((0, 2)) if isinstance(x, torch.Tensor) else x.min((0, 2)), [(3, 4, 5)], False),
    ("min-long-axis", lambda x: x.amin(0) if isinstance(x, torch.Tensor) else x.min(0), [(300, 3)], False),
    ("logsumexp-axis1", lambda x: x.logsumexp(1), [(4, 9)], False),
    ("logsumexp-axes", lambda x: x.logsumexp((0, 2)), [(3, 4, 70)], False),
    ("add-broadcast", lambda a, b: a + b, [(3, 1, 5), (4, 1)], False),
    ("sub-broadcast", lambda a, b: a - b, [(3, 4), (4,)], False),
    ("mul-broadcast", lambda a, b: a * b, [(2, 1, 3), (1, 5, 1)], False),
    ("div-broadcast", lambda a, b: a / b, [(3, 4), (3, 1)], POS),
    ("pow-broadcast", lambda a, b: a**b, [(3, 4), (4,)], POS),
    ("add-scalar", lambda x: 2.5 + x + 1, [(7,)], False),
    ("sub-scalar", lambda x: 2.0 - x - 3, [(7,)], False),
    ("mul-scalar", lambda x: 3 * x * -0.5, [(7,)], False),
    ("div-scalar", lambda x: 3.0 / x / 4, [(7,)], POS),
    ("pow-scalar", lambda x: x**2.5, [(7,)], POS),
    ("rpow-scalar", lambda x: 1.7**x, [(7,)], False),
    ("neg", lambda x: -x, [(5,)], False),
    ("exp", lambda x: x.exp(), [(3, 5)], False),
    ("log", lambda x: x.log(), [(3, 5)], POS),
    ("sqrt", lambda x: x.sqrt(), [(3, 5)], POS),
    ("abs", lambda x: x.abs(), [(3, 5)], False),
    ("abs-operator", lambda x: abs(x), [(4,)], False),
    ("clip", lambda x: x.clip(-0.5, 0.7), [(4, 9)], False),
    ("maximum", lambda a, b: torch.maximum(a, b) if isinstance(a, torch.Tensor) else clnn.maximum(a, b),
     [(3, 4), (4,)], False),
    ("minimum", lambda a, b: torch.minimum(a, b) if isinstance(a, torch.Tensor) else clnn.minimum(a, b),
     [(3, 1), (1, 4)], False),
    ("matmul", lambda a, b: a @ b, [(3, 4), (4, 5)], False),
]


# gradients that are sums over a broadcast of the upstream's terms where an input wins: checked against the terms'
# magnitudes, since a draw in which the few winning terms cancel fails a check relative to the result (about one run
# in 1e5 each)
SUM_TERMS = {
    "maximum": {1: lambda g, a, b: (g.abs() * (b > a)).sum(0)},
    "minimum": {0: lambda g, a, b: (g.abs() * (a < b)).sum(1, keepdim=True),
                1: lambda g, a, b: (g.abs() * (b < a)).sum(0, keepdim=True)},
}


@pytest.mark.parametrize("name,fn,shapes,positive", OPS, ids=[o[0] for o in OPS])
def test_op_backward(name, fn, shapes, positive, rng):
    inputs = [rng.uniform(0.5, 2.5, s) if positive else rng.standard_normal(s) for s in shapes]
    check_against_torch(fn, fn, inputs, rng, sum_magnitudes=SUM_TERMS.get(name))


@pytest.mark.usefixtures("fp64")
def test_astype_backward(rng):
    check_against_torch(lambda x: (x.astype(np.float64) * 3).astype(np.float32),
                        lambda x: x.to(torch.float64) * 3, [rng.standard_normal((3, 5))], rng)


def _pair(rng, shape=(3, 4)):
    a = rng.standard_normal(shape).astype(np.float32)
    return clnn.tensor(a, requires_grad=True), torch.tensor(a.astype(np.float64), requires_grad=True)


def test_accumulation_across_backward_calls(rng):
    x, tx = _pair(rng)
    for lib_x, exp in ((x, clnn.Tensor.exp), (tx, torch.exp)):
        (lib_x * lib_x).sum().backward()
        exp(lib_x).sum().backward()
    assert_close(x.grad.numpy(), tx.grad.numpy())


def test_shared_subexpressions_and_reuse(rng):
    """x feeds several paths; a intermediate is used four times; x * x and x / x reuse one tensor twice."""
    def f(x):
        a = x * 2
        b = a * a + a.exp() - a / (a.abs() + 1)
        return (b + x * x + x / (x.abs() + 1) + (x - x)).sum(0)

    check_against_torch(f, f, [rng.standard_normal((4, 5))], rng)


def test_broadcasting_graph(rng):
    def f(a, b, c):
        return (a * b + c) / (b * b + 1) - (a - c).exp() * b

    check_against_torch(f, f, [rng.standard_normal((3, 1)), rng.standard_normal((1, 4)), rng.standard_normal(4)], rng)


def test_detach(rng):
    x, tx = _pair(rng)
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    (x * d).sum().backward()
    (tx * tx.detach()).sum().backward()
    assert_close(x.grad.numpy(), tx.grad.numpy())


def test_no_grad_and_enable_grad(rng):
    x, _ = _pair(rng)
    with clnn.no_grad():
        y = (x * 2).exp()
        assert not clnn.is_grad_enabled()
        with clnn.enable_grad():
            z = x * 3
    assert clnn.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_retain_graph(rng):
    x, tx = _pair(rng)
    for lib_x in (x, tx):
        y = (lib_x.exp() * lib_x).sum()
        y.backward(retain_graph=True)
        y.backward()
    assert_close(x.grad.numpy(), tx.grad.numpy())


def test_backward_needs_grad_for_non_scalar(rng):
    x, _ = _pair(rng)
    with pytest.raises(RuntimeError, match=r"needs a grad for a non-scalar output of shape \(3, 4\)"):
        (x * 2).backward()
    with pytest.raises(ValueError, match=r"grad must have shape \(3, 4\)"):
        (x * 2).backward(clnn.zeros(4))


def test_only_leaves_get_grad(rng):
    x, _ = _pair(rng)
    h = x * 2
    h.sum().backward()
    assert h.grad is None and x.grad is not None


def _mlp(lib, x, w1, b1, w2, b2, target, coef):
    """A small MLP: linear -> gelu -> layer_norm -> linear, cross-entropy plus a softmax term."""
    if lib is torch:
        h = TF.layer_norm(TF.gelu(x @ w1 + b1), (w1.shape[1],))
        logits = h @ w2 + b2
        return TF.cross_entropy(logits, torch.tensor(target)) + (torch.softmax(logits, 1) * coef).sum()
    h = F.layer_norm(F.gelu(x @ w1 + b1), w1.shape[1])
    logits = h @ w2 + b2
    return F.cross_entropy(logits, target) + (F.softmax(logits, axis=1) * coef).sum()


def test_composite_mlp_vs_torch(rng):
    shapes = [(8, 5), (5, 16), (16,), (16, 4), (4,)]
    params = [rng.standard_normal(s) * 0.5 for s in shapes]
    target = rng.integers(0, 4, 8)
    # Positive weights: the loss is then a sum of positive terms. Signed weights let the softmax term cancel
    # the cross-entropy (one draw summed to -0.0103 from terms of size ~1.4), and no float32 summation meets
    # a 1e-5 relative tolerance on a cancelled sum.
    coef = rng.uniform(0.5, 1.5, (8, 4)).astype(np.float32)
    check_against_torch(
        lambda *p: _mlp(clnn, *p, target, clnn.tensor(coef)),
        lambda *p: _mlp(torch, *p, target, torch.tensor(coef, dtype=torch.float64)),
        params, rng)


def test_deterministic_reruns(rng):
    """The same inputs give bit-identical outputs and gradients run after run."""
    shapes = [(64, 33), (33, 130), (130,), (130, 10), (10,)]
    params = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]
    target = rng.integers(0, 10, 64)
    coef = clnn.tensor(rng.standard_normal((64, 10)).astype(np.float32))
    runs = []
    for _ in range(2):
        ts = [clnn.tensor(p, requires_grad=True) for p in params]
        loss = _mlp(clnn, *ts, target, coef)
        loss.backward()
        runs.append([loss.numpy()] + [t.grad.numpy() for t in ts])
    assert all(np.array_equal(a, b) for a, b in zip(*runs))
