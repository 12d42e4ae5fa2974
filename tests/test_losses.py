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
from clnn import tuning

REDUCTIONS = ["mean", "sum", "none"]
# logits shapes: unbatched, (N, C) with 1s and primes, classes longer than a work-group, spatial (N, C, d1, d2)
CLASS_SHAPES = [(5,), (1, 1), (7, 13), (3, 1031), (3, 5, 4), (2, 4, 3, 5)]
# Unit-scale logits: when the target's logit dominates its row, the loss log(sum(exp(x - m))) + (m - x_t)
# is tiny and float32's log of a sum near 1 leaves ~eps / loss relative error: at scale 3, 0.6% of single
# 5-class rows miss 1e-5 even in NumPy float32; none did at scale 1 in 20,000 draws.
LOGIT_SCALE = 1.0


def _target_shape(shape):
    return () if len(shape) == 1 else (shape[0], *shape[2:])


def _classes(shape):
    return shape[0] if len(shape) == 1 else shape[1]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.25])
@pytest.mark.parametrize("shape", CLASS_SHAPES, ids=str)
def test_cross_entropy(shape, smoothing, reduction, rng):
    _check_cross_entropy(shape, smoothing, reduction, rng)


def _check_cross_entropy(shape, smoothing, reduction, rng):
    classes = _classes(shape)
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
    classes = _classes(shape)
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
    # bce_logits' logits at scale 1: (1 - y) x + softplus(-x) (PyTorch's form) cancels where x is very negative and y
    # near 0, and a lone element drawn at scale 3 missed 1e-5 about once in 5000 draws
    x = rng.standard_normal(shape) * (1 if name == "bce_logits" else 3)
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
    (lambda: F.huber_loss(_x(4), _x(4), delta=-1.0), ValueError, r"huber_loss: delta expects a number > 0; got -1"),
    (lambda: F.huber_loss(_x(4), _x(4), delta=0), ValueError, r"huber_loss: delta expects a number > 0; got 0"),
    (lambda: F.huber_loss(_x(4), _x(3)), ValueError, r"huber_loss: target must have the input's shape \(4,\)"),
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


# ---- class weights, ignore_index, probability targets, smooth L1, BCE weight ------------------------------
# (N, C, ...) shapes: N = 1, primes, C = 1, C longer than a work-group (1031 > 1024), K-dimensional
WEIGHTED_SHAPES = [(5,), (1, 7), (7, 13), (3, 1031), (3, 5, 4), (2, 4, 3, 5), (4, 1)]


# (shape, ignore_index) pairs that keep some target: one class that is ignored leaves none to keep, the case
# test_all_ignored covers
IGNORE_CASES = [(s, i) for s in WEIGHTED_SHAPES for i in (-100, 0) if _classes(s) > 1 or i != 0]


def _ignored_targets(shape, ignore_index, rng):
    """Class indices with about a third of them set to ``ignore_index`` (at least one kept)."""
    classes = _classes(shape)
    target = rng.integers(0, classes, _target_shape(shape))
    flat = target.reshape(-1)
    flat[rng.random(flat.size) < 0.35] = ignore_index
    flat[0] = rng.choice([c for c in range(min(classes, 3)) if c != ignore_index])
    return target


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("shape,ignore_index", IGNORE_CASES, ids=str)
def test_cross_entropy_weight_ignore(shape, ignore_index, weighted, smoothing, reduction, rng):
    classes = _classes(shape)
    target = _ignored_targets(shape, ignore_index, rng)
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)
    w = rng.random(classes) + 0.1
    check_against_torch(
        lambda x, w: F.cross_entropy(x, clnn.tensor(target), w if weighted else None, **kw),
        lambda x, w: TF.cross_entropy(x, torch.tensor(target), w if weighted else None, **kw),
        [rng.standard_normal(shape) * LOGIT_SCALE, w], rng, grads=[True, False])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ignore_index", [-100, 2])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("shape", [(5,), (1, 7), (7, 13), (3, 1031), (3, 5, 4), (4, 1)], ids=str)
def test_nll_loss_weight_ignore(shape, weighted, ignore_index, reduction, rng):
    classes = _classes(shape)
    target = _ignored_targets(shape, ignore_index, rng)
    kw = dict(ignore_index=ignore_index, reduction=reduction)
    # log-probabilities (<= 0): the picked terms share a sign, so their (weighted) sum cannot cancel
    check_against_torch(
        lambda x, w: F.nll_loss(x, target, w if weighted else None, **kw),
        lambda x, w: TF.nll_loss(x, torch.tensor(target), w if weighted else None, **kw),
        [-np.abs(rng.standard_normal(shape)), rng.random(classes) + 0.1], rng, grads=[True, False])


@pytest.mark.parametrize("fn,ref", [(F.cross_entropy, TF.cross_entropy), (F.nll_loss, TF.nll_loss)],
                         ids=["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("shape,ignore_index", [((4, 3, 2), -100), ((4, 1), 0), ((5,), 2)], ids=str)
def test_all_ignored(fn, ref, weighted, shape, ignore_index, rng):
    """Every target ignored (as when the one class is): the mean is 0 / 0 = NaN and the gradient 0, the sum 0,
    as PyTorch."""
    x = rng.standard_normal(shape).astype(np.float32)
    target = np.full(_target_shape(shape), ignore_index)
    w = rng.random(_classes(shape)).astype(np.float32) if weighted else None
    for reduction in REDUCTIONS:
        t = clnn.tensor(x, requires_grad=True)
        kw = dict(ignore_index=ignore_index, reduction=reduction)
        out = fn(t, clnn.tensor(target), None if w is None else clnn.tensor(w), **kw)
        want = ref(torch.tensor(x), torch.tensor(target), None if w is None else torch.tensor(w), **kw)
        np.testing.assert_array_equal(out.numpy(), want.numpy())
        out.backward(clnn.ones(*out.shape))
        np.testing.assert_array_equal(t.grad.numpy(), np.zeros_like(x))


def test_weighted_mean_divides_by_kept_weights(rng):
    """The weighted mean is sum(w[t] l) / sum(w[t]) over kept targets, not over N (PyTorch's definition)."""
    x = rng.standard_normal((6, 4)).astype(np.float32)
    target, w = np.array([0, 1, 3, -100, 2, 3]), np.array([0.5, 1.0, 2.0, 4.0], np.float32)
    per_row = F.cross_entropy(clnn.tensor(x), target, clnn.tensor(w), reduction="none").numpy()
    mean = F.cross_entropy(clnn.tensor(x), target, clnn.tensor(w)).item()
    kept = target != -100
    assert per_row[~kept] == 0
    assert abs(mean - per_row.sum() / w[target[kept]].sum()) <= 1e-6 * abs(mean)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("shape", [(5,), (1, 7), (7, 13), (3, 1031), (3, 5, 4), (2, 4, 3, 5)], ids=str)
def test_cross_entropy_probabilities(shape, weighted, smoothing, reduction, rng):
    classes = _classes(shape)
    axis = 0 if len(shape) == 1 else 1
    p = rng.random(shape) + 0.05
    p /= p.sum(axis=axis, keepdims=True)
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    check_against_torch(
        lambda x, y, w: F.cross_entropy(x, y, w if weighted else None, **kw),
        lambda x, y, w: TF.cross_entropy(x, y, w if weighted else None, **kw),
        [rng.standard_normal(shape) * LOGIT_SCALE, p, rng.random(classes) + 0.1], rng, grads=[True, True, False])


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_cross_entropy_rows_walked(weighted, rng):
    """The backward kernels with rows walked in runs of 4 (tuning's GROUP_WALK, PoCL's form, here on every device):
    class indices with ignored rows over classes (inner 1) and over a spatial axis, and probability targets."""
    with tuning.override("storage", GROUP_WALK=4):
        for shape in ((7, 13), (3, 5, 6)):
            test_cross_entropy_weight_ignore(shape, -100, weighted, 0.3, "mean", rng)
            test_cross_entropy_probabilities(shape, weighted, 0.2, "sum", rng)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probability_target_gradient_alone(smoothing, rng):
    """Only the target requires grad: d loss / d y = -(1 - eps) w log_softmax(x), through a spatial shape."""
    shape = (3, 7, 5)
    p = rng.dirichlet(np.ones(7), (3, 5)).transpose(0, 2, 1)
    kw = dict(reduction="mean", label_smoothing=smoothing)
    check_against_torch(lambda x, y, w: F.cross_entropy(x, y, w, **kw), lambda x, y, w: TF.cross_entropy(x, y, w, **kw),
                        [rng.standard_normal(shape), p, rng.random(7) + 0.1], rng, grads=[False, True, False])


def test_cross_entropy_numpy_probabilities(rng):
    p = rng.dirichlet(np.ones(6), 5).astype(np.float32)
    check_against_torch(lambda x: F.cross_entropy(x, p), lambda x: TF.cross_entropy(x, torch.tensor(p).double()),
                        [rng.standard_normal((5, 6))], rng)


# (name, clnn, torch, keyword, its values): beta = 0 is L1; small beta/delta make the quadratic zone tiny
HUBER = [("smooth_l1", F.smooth_l1_loss, TF.smooth_l1_loss, "beta", [1.0, 0.3, 1e-3, 0.0]),
         ("huber", F.huber_loss, TF.huber_loss, "delta", [1.0, 2.5, 1e-3])]
# 1, primes, and 257 * 263 > reduce.SPLIT_MIN elements, whose sum splits into chunks on every device
HUBER_SHAPES = [(1,), (7,), (3, 37), (2, 3, 5), (257, 263)]


def _huber_pair(shape, b, rng):
    """(x, y) whose differences fall about evenly inside and outside the quadratic zone |d| < b."""
    x = rng.standard_normal(shape)
    d = rng.standard_normal(shape) * (b or 1) * rng.choice([0.5, 3.0], shape)
    return x, x + d


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", HUBER_SHAPES, ids=str)
@pytest.mark.parametrize("name,fn,ref,key,b", [(*h[:4], b) for h in HUBER for b in h[4]],
                         ids=[f"{h[0]}-{h[3]}-{b}" for h in HUBER for b in h[4]])
def test_huber_family(name, fn, ref, key, b, shape, reduction, rng):
    """Loss, input and target gradients; each gradient element is one term (no sum that could cancel)."""
    check_against_torch(lambda a, t: fn(a, t, reduction=reduction, **{key: b}),
                        lambda a, t: ref(a, t, reduction=reduction, **{key: b}), _huber_pair(shape, b, rng), rng)


# float64 computes in double over a split sum; float16 storage computes and sums in float32 (its tolerance is
# half's rounding of the result), over fewer elements: a mean over 67,591 has gradients below half's normal range
@pytest.mark.parametrize("dtype,tol,shape", [(np.float64, 1e-13, (257, 263)), (np.float16, 2e-3, (29, 37))],
                         ids=["float64", "float16"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_huber_dtypes(dtype, tol, shape, reduction, rng, dev):
    if not dev.supports(dtype):
        pytest.skip(f"{dev} has no {np.dtype(dtype).name}")
    check_against_torch(lambda a, t: F.huber_loss(a, t, reduction=reduction, delta=0.7),
                        lambda a, t: TF.huber_loss(a, t, reduction=reduction, delta=0.7),
                        _huber_pair(shape, 0.7, rng), rng, tol=tol, dtype=dtype)


def test_huber_sum_deterministic(rng):
    x, y = (clnn.tensor(a.astype(np.float32)) for a in _huber_pair((511, 263), 1.0, rng))
    runs = [F.smooth_l1_loss(x, y, reduction="sum").numpy() for _ in range(2)]
    assert np.array_equal(*runs)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("w_shape,pw_shape", [((5,), None), ((4, 5), (5,)), ((1,), (1,)), ((4, 1), (4, 5))],
                         ids=str)
def test_bce_with_logits_weight(w_shape, pw_shape, reduction, rng):
    x, y = rng.standard_normal((4, 5)) * 3, rng.random((4, 5))
    w = rng.random(w_shape) + 0.1
    pw = rng.random(pw_shape or (1,)) * 3
    pos = (lambda p: p) if pw_shape else (lambda p: None)

    def terms(g, x, p):  # the gradients are differences of two terms each, scaled by w g / n
        return g.abs() / (x.numel() if reduction == "mean" else 1), p if pw_shape else torch.ones(1, dtype=p.dtype)

    def of_input(g, x, y, w, p):  # w (sigmoid(x) (1 + (p - 1) y) - p y)
        scale, p = terms(g, x, p)
        return (torch.sigmoid(x) * (1 + (p - 1) * y).abs() + (p * y).abs()) * w.abs() * scale

    def of_target(g, x, y, w, p):  # w ((p - 1) softplus(-x) - x)
        scale, p = terms(g, x, p)
        return ((p - 1).abs() * TF.softplus(-x) + x.abs()) * w.abs() * scale

    check_against_torch(
        lambda a, b, c, p: F.binary_cross_entropy_with_logits(a, b, c, reduction=reduction, pos_weight=pos(p)),
        lambda a, b, c, p: TF.binary_cross_entropy_with_logits(a, b, c, reduction=reduction, pos_weight=pos(p)),
        [x, y, w, pw], rng, grads=[True, True, False, False], sum_magnitudes={0: of_input, 1: of_target})


def test_bce_with_logits_single_class(rng):
    """C = 1 (a column of logits), the usual binary classifier's output."""
    x, y = rng.standard_normal((9, 1)), rng.integers(0, 2, (9, 1)).astype(np.float64)
    check_against_torch(lambda a: F.binary_cross_entropy_with_logits(a, y.astype(np.float32)),
                        lambda a: TF.binary_cross_entropy_with_logits(a, torch.tensor(y)), [x], rng,
                        sum_magnitudes={0: lambda g, a: (torch.sigmoid(a) + torch.tensor(y)) * g.abs() / 9})
