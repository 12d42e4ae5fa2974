"""Losses against torch.nn.functional in float64: values for every reduction and the gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import assert_close
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_ref import check_against_torch

import clnn
import clnn.functional as F

REDUCTIONS = ["mean", "sum", "none"]
# logits shapes: unbatched, (N, C) with 1s and primes, classes longer than a work-group, spatial (N, C, d1, d2)
CLASS_SHAPES = [(5,), (1, 1), (7, 13), (3, 1031), (3, 5, 4), (2, 4, 3, 5)]
# Unit-scale logits: when the target's logit dominates its row, the loss log(sum(exp(x - m))) + (m - x_t)
# is tiny and float32's log of a sum near 1 leaves ~eps / loss relative error: at scale 3, 0.6% of single
# 5-class rows miss 1e-5 even in NumPy float32; none did at scale 1 in 20,000 draws.
LOGIT_SCALE = 1.0


def _target_shape(shape):
    return () if len(shape) == 1 else (shape[0], *shape[2:])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.25])
@pytest.mark.parametrize("shape", CLASS_SHAPES, ids=str)
def test_cross_entropy(shape, smoothing, reduction, rng):
    _check_cross_entropy(shape, smoothing, reduction, rng)


def _check_cross_entropy(shape, smoothing, reduction, rng):
    classes = shape[0] if len(shape) == 1 else shape[1]
    target = rng.integers(0, classes, _target_shape(shape))
    check_against_torch(
        lambda x: F.cross_entropy(x, target, reduction=reduction, label_smoothing=smoothing),
        lambda x: TF.cross_entropy(x, torch.tensor(target), reduction=reduction, label_smoothing=smoothing),
        [rng.standard_normal(shape) * LOGIT_SCALE], rng)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=4), smoothing=st.sampled_from([0.0, 0.1]),
       reduction=st.sampled_from(REDUCTIONS))
def test_cross_entropy_hypothesis(shape, smoothing, reduction, rng):
    _check_cross_entropy(shape, smoothing, reduction, rng)


@pytest.mark.parametrize("kind", ["numpy-int32", "tensor-int64", "tensor-int32", "list"])
def test_cross_entropy_target_kinds(kind, rng):
    target = rng.integers(0, 6, 9)
    given = {
        "numpy-int32": target.astype(np.int32),
        "tensor-int64": clnn.tensor(target),
        "tensor-int32": clnn.tensor(target.astype(np.int32)),
        "list": target.tolist(),
    }[kind]
    check_against_torch(lambda x: F.cross_entropy(x, given), lambda x: TF.cross_entropy(x, torch.tensor(target)),
                        [rng.standard_normal((9, 6))], rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5,), (7, 13), (3, 4, 5)], ids=str)
def test_nll_loss(shape, reduction, rng):
    classes = shape[0] if len(shape) == 1 else shape[1]
    target = rng.integers(0, classes, _target_shape(shape))
    # log-probabilities (<= 0, as nll_loss expects): the picked terms share a sign, so their sum cannot cancel
    check_against_torch(lambda x: F.nll_loss(x, clnn.tensor(target), reduction=reduction),
                        lambda x: TF.nll_loss(x, torch.tensor(target), reduction=reduction),
                        [-np.abs(rng.standard_normal(shape))], rng)


def test_log_softmax_nll_equals_cross_entropy(rng):
    x = rng.standard_normal((6, 11, 3)).astype(np.float32)
    target = rng.integers(0, 11, (6, 3))
    a = F.nll_loss(F.log_softmax(clnn.tensor(x), axis=1), target).item()
    b = F.cross_entropy(clnn.tensor(x), target).item()
    assert abs(a - b) <= 1e-6 * abs(b)


PAIR_LOSSES = [
    ("mse", F.mse_loss, TF.mse_loss),
    ("l1", F.l1_loss, TF.l1_loss),
    ("bce_logits", F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits),
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 37), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("name,fn,ref", PAIR_LOSSES, ids=[p[0] for p in PAIR_LOSSES])
def test_pair_loss(name, fn, ref, shape, reduction, rng):
    x = rng.standard_normal(shape) * 3
    y = rng.random(shape) if name == "bce_logits" else rng.standard_normal(shape)
    check_against_torch(lambda a, b: fn(a, b, reduction=reduction), lambda a, b: ref(a, b, reduction=reduction),
                        [x, y], rng, sum_magnitudes=_difference_magnitudes(name, reduction))


def _difference_magnitudes(name: str, reduction: str) -> dict:
    """mse's gradients 2 (x - y) g / n and bce-with-logits' (sigmoid(x) - y) g / n are differences that cancel
    when the two sides nearly agree (a one-element draw then misses 1e-5 relative to the result in ~1% of
    runs): they are checked against |each side| * |g| / n instead."""
    def sides(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.sigmoid(x), y) if name == "bce_logits" else (2 * x, 2 * y)

    def magnitude(g: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a, b = sides(x, y)
        return (a.abs() + b.abs()) * g.abs() / (x.numel() if reduction == "mean" else 1)

    return {"mse": {0: magnitude, 1: magnitude}, "bce_logits": {0: magnitude}}.get(name, {})


@pytest.mark.parametrize("pw_shape", [(5,), (1,), (4, 5)], ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits_pos_weight(pw_shape, reduction, rng):
    x, y, pw = rng.standard_normal((4, 5)) * 3, rng.random((4, 5)), rng.random(pw_shape) * 3
    check_against_torch(
        lambda a, b, p: F.binary_cross_entropy_with_logits(a, b, reduction=reduction, pos_weight=p),
        lambda a, b, p: TF.binary_cross_entropy_with_logits(a, b, reduction=reduction, pos_weight=p),
        [x, y, pw], rng, grads=[True, True, False])  # torch doesn't differentiate pos_weight


def test_mse_numpy_target(rng):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)).astype(np.float32)
    check_against_torch(lambda a: F.mse_loss(a, y), lambda a: TF.mse_loss(a, torch.tensor(y, dtype=torch.float64)),
                        [x], rng)


def test_cross_entropy_float64(rng, dev):
    if not dev.supports(np.float64):
        pytest.skip(f"{dev} has no float64")
    target = rng.integers(0, 300, 5)
    check_against_torch(lambda x: F.cross_entropy(x, target, label_smoothing=0.1),
                        lambda x: TF.cross_entropy(x, torch.tensor(target), label_smoothing=0.1),
                        [rng.standard_normal((5, 300))], rng, tol=1e-13, dtype=np.float64)


@pytest.mark.parametrize("classes", [9, 300])
def test_stable_for_large_logits(classes, rng):
    """Logits of +-1e4 give finite losses and gradients matching the float64 reference."""
    x = rng.choice([-1e4, 1e4], size=(6, classes)) + rng.standard_normal((6, classes))
    target = rng.integers(0, classes, 6)
    out, (t,) = check_against_torch(
        lambda a: F.cross_entropy(a, target, reduction="none", label_smoothing=0.1),
        lambda a: TF.cross_entropy(a, torch.tensor(target), reduction="none", label_smoothing=0.1), [x], rng)
    assert np.isfinite(out.numpy()).all() and np.isfinite(t.grad.numpy()).all()
    y = rng.random((6, classes))
    out, (t, _) = check_against_torch(
        lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="sum"),
        lambda a, b: TF.binary_cross_entropy_with_logits(a, b, reduction="sum"), [x, y], rng)
    assert np.isfinite(out.numpy()).all() and np.isfinite(t.grad.numpy()).all()


def test_deterministic(rng):
    x = rng.standard_normal((64, 1031)).astype(np.float32)
    target = rng.integers(0, 1031, 64)
    runs = []
    for _ in range(2):
        t = clnn.tensor(x, requires_grad=True)
        loss = F.cross_entropy(t, target, label_smoothing=0.1)
        loss.backward()
        runs.append((loss.numpy(), t.grad.numpy()))
    assert all(np.array_equal(a, b) for a, b in zip(*runs))


def _x(*shape):
    return clnn.zeros(*shape)


ERRORS = [
    (lambda: F.cross_entropy(_x(4, 3), np.zeros(5, int)), ValueError,
     r"cross_entropy: target has shape \(5,\) but input of shape \(4, 3\) has batch 4; expected target shape \(4,\)"),
    (lambda: F.cross_entropy(_x(4, 3, 2), np.zeros(4, int)), ValueError, r"expected target shape \(4, 2\)"),
    (lambda: F.cross_entropy(_x(4, 3), np.array([0, 1, 3, 2])), ValueError,
     r"cross_entropy: target values must be class indices in \[0, 2\]; got 3"),
    (lambda: F.cross_entropy(_x(4, 3), clnn.tensor(np.array([0, -1, 2, 2]))), ValueError,
     r"target values must be class indices in \[0, 2\]; got -1"),
    (lambda: F.cross_entropy(_x(4, 3), clnn.tensor(np.array([0, 1, 2, 7], np.int32))), ValueError,
     r"in \[0, 2\]; got 7"),
    (lambda: F.cross_entropy(_x(4, 3), np.zeros(4)), TypeError, r"cross_entropy: target must hold integer class"),
    (lambda: F.cross_entropy(_x(4, 3), _x(4)), TypeError, r"target must hold integer class indices \(int32/int64\)"),
    (lambda: F.cross_entropy(_x(4, 3), np.zeros(4, int), reduction="avg"), ValueError,
     r"cross_entropy: reduction expects one of \('mean', 'sum', 'none'\); got 'avg'"),
    (lambda: F.cross_entropy(_x(4, 3), np.zeros(4, int), label_smoothing=1.5), ValueError,
     r"label_smoothing expects a number in \[0, 1\]; got 1.5"),
    (lambda: F.cross_entropy(np.zeros((4, 3)), np.zeros(4, int)), TypeError,
     r"cross_entropy: input expects a clnn.Tensor; got ndarray"),
    (lambda: F.cross_entropy(_x(), np.zeros((), int)), ValueError, r"input must have shape \(C,\), \(N, C\)"),
    (lambda: F.nll_loss(_x(4, 3), np.array([0, 1, 2, 3])), ValueError, r"nll_loss: target values must be class"),
    (lambda: F.nll_loss(_x(4, 3), np.zeros((4, 1), int)), ValueError, r"nll_loss: target has shape \(4, 1\)"),
    (lambda: F.mse_loss(_x(4, 3), _x(4)), ValueError, r"mse_loss: target must have the input's shape \(4, 3\); got"),
    (lambda: F.l1_loss(_x(4), clnn.zeros(4, dtype=np.float16)), TypeError,
     r"l1_loss: input has dtype float32 but target has dtype float16"),
    (lambda: F.l1_loss(_x(4), _x(4), reduction=None), ValueError, r"l1_loss: reduction expects one of"),
    (lambda: F.binary_cross_entropy_with_logits(_x(4, 5), _x(4, 5), pos_weight=_x(3)), ValueError,
     r"pos_weight of shape \(3,\) does not broadcast to input \(4, 5\)"),
    (lambda: F.binary_cross_entropy_with_logits(_x(4, 5), _x(4, 5), pos_weight=[1.0]), TypeError,
     r"pos_weight expects a clnn.Tensor; got list"),
]


@pytest.mark.parametrize("call,exc,pattern", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_bad_device_target_raises_before_any_loss_kernel(rng):
    """The range check runs first: a bad target leaves no half-computed loss and raises every time."""
    x = clnn.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    bad = clnn.tensor(np.array([0, 4, 1]))
    for _ in range(2):
        with pytest.raises(ValueError, match=r"\[0, 3\]; got 4"):
            F.cross_entropy(x, bad)
    assert x.grad is None
    assert_close(F.cross_entropy(x, np.array([0, 3, 1])).numpy(),
                 TF.cross_entropy(torch.tensor(x.numpy().astype(np.float64)), torch.tensor([0, 3, 1])).numpy())
