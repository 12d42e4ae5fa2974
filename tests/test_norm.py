"""batch_norm, layer_norm and dropout against torch.nn.functional in float64: outputs, gradients, running stats."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import assert_close, assert_sum_close
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_ref import check_against_torch

import clnn
import clnn.functional as F
from clnn import tuning

# (x shape, training, affine, momentum, eps): 2-D, 3-D and 4-D inputs, odd sizes, groups longer than a work-group
BN_CASES = [
    ((5, 3), True, True, 0.1, 1e-5),
    # 5 values per channel: with 3, the input gradient (g projected off span{1, x_hat}) lives in one
    # dimension and cancels; float32 alone then misses 1e-5 in ~1% of draws (NumPy float32 too)
    ((5, 1), True, False, 0.1, 1e-5),
    ((4, 3, 7), True, True, 0.3, 1e-3),
    ((2, 3, 5, 6), True, True, 0.1, 1e-5),
    ((3, 5, 11, 13), True, True, 0.01, 1e-5),
    ((300, 2), True, False, 0.1, 1e-5),
    ((37, 41), True, True, 0.1, 1e-5),     # (N, C): norm_partial_cols, two whole blocks of 16 groups and a tail
    ((2003, 37), True, True, 0.1, 1e-5),   # (N, C) past SPLIT_MIN: the rows in chunks
    ((67, 3, 17, 19), True, True, 0.1, 1e-5),  # 21641 values per channel: split across work-groups
    ((5, 3), False, True, 0.1, 1e-5),
    ((1, 1, 1), False, False, 0.1, 1e-5),
    ((4, 3, 7), False, True, 0.1, 1e-5),
    ((2, 7, 5, 3), False, True, 0.1, 1e-2),
]


def _bn_magnitudes(training: bool, eps: float, rm: torch.Tensor | None = None, rv: torch.Tensor | None = None,
                   weight: int | None = 1, bias: int | None = 2) -> dict:
    """Sums of absolute terms of batch norm's weight and bias gradients (inputs ``weight``/``bias``), per channel:
    ``sum |g * xhat|`` and ``sum |g|``. Both gradients are signed sums that cancel for some draws, most visibly
    with one channel (float32 then misses 1e-5 relative to the sum on Intel and PoCL alike, and so does NumPy)."""

    def xhat(x: torch.Tensor) -> torch.Tensor:
        dims = [d for d in range(x.ndim) if d != 1]
        at = (1, -1) + (1,) * (x.ndim - 2)
        mean, var = (x.mean(dims), x.var(dims, unbiased=False)) if training else (rm, rv)
        return (x - mean.reshape(at)) / torch.sqrt(var.reshape(at) + eps)

    def per_channel(t: torch.Tensor) -> torch.Tensor:
        return t.abs().sum([d for d in range(t.ndim) if d != 1])

    out = {}
    if weight is not None:
        out[weight] = lambda g, x, *_: per_channel(g * xhat(x))
    if bias is not None:
        out[bias] = lambda g, *_: per_channel(g)
    return out


@pytest.mark.parametrize("shape,training,affine,momentum,eps", BN_CASES, ids=[str(c) for c in BN_CASES])
def test_batch_norm(shape, training, affine, momentum, eps, rng):
    c = shape[1]
    x = rng.standard_normal(shape) * 3 + 1
    rm = rng.standard_normal(c).astype(np.float32)
    rv = (rng.random(c) + 0.5).astype(np.float32)
    crm, crv = clnn.tensor(rm), clnn.tensor(rv)
    trm, trv = torch.tensor(rm.astype(np.float64)), torch.tensor(rv.astype(np.float64))
    inputs = [x, rng.standard_normal(c), rng.standard_normal(c)] if affine else [x]

    def ours(x, w=None, b=None):
        return F.batch_norm(x, crm, crv, w, b, training=training, momentum=momentum, eps=eps)

    def ref(x, w=None, b=None):
        return TF.batch_norm(x, trm, trv, w, b, training=training, momentum=momentum, eps=eps)

    check_against_torch(ours, ref, inputs, rng, sum_magnitudes=_bn_magnitudes(training, eps, trm.clone(), trv.clone()))
    # (1 - momentum) * running + momentum * batch mean is a signed sum: checked against its terms' magnitudes
    axes = tuple(i for i in range(x.ndim) if i != 1)
    batch_mean = np.abs(x.astype(np.float32).astype(np.float64).mean(axis=axes)) if training else 0
    assert_sum_close(crm.numpy(), trm.numpy(), (1 - momentum) * np.abs(rm) + momentum * batch_mean, what="running_mean")
    assert_close(crv.numpy(), trv.numpy(), what="running_var")


WALKED = [c for c in BN_CASES if c[0] in ((5, 3), (4, 3, 7), (2, 3, 5, 6))]  # rows of channels, and of H*W


@pytest.mark.parametrize("shape,training,affine,momentum,eps", WALKED, ids=[str(c) for c in WALKED])
def test_batch_norm_rows_walked(shape, training, affine, momentum, eps, rng):
    """The apply and the input gradient with rows walked in runs of 4 (tuning's GROUP_WALK, PoCL's form, here on
    every device; runs shorter than a row, and a last one cut short)."""
    with tuning.override("storage", GROUP_WALK=4):
        test_batch_norm(shape, training, affine, momentum, eps, rng)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 17), min_size=2, max_size=4).filter(lambda s: np.prod(s) // s[1] >= 5),
       training=st.booleans())
def test_batch_norm_hypothesis(shape, training, rng):
    c = shape[1]
    crm, crv = clnn.zeros(c), clnn.ones(c)
    trm, trv = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    check_against_torch(lambda x, w, b: F.batch_norm(x, crm, crv, w, b, training=training),
                        lambda x, w, b: TF.batch_norm(x, trm, trv, w, b, training=training),
                        [rng.standard_normal(shape), rng.standard_normal(c), rng.standard_normal(c)], rng,
                        sum_magnitudes=_bn_magnitudes(training, 1e-5, trm.clone(), trv.clone()))
    assert_close(crv.numpy(), trv.numpy(), what="running_var")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=4), data=st.data())
def test_layer_norm_hypothesis(shape, data, rng):
    k = data.draw(st.integers(1, len(shape)), label="normalized dims")
    nshape = tuple(shape[-k:])
    if np.prod(nshape) < 3:  # a row of 1 or 2 values has a gradient of exactly 0: nothing to compare
        nshape = tuple(shape)
        if np.prod(nshape) < 3:
            return
    check_against_torch(lambda x, w, b: F.layer_norm(x, nshape, w, b), lambda x, w, b: TF.layer_norm(x, nshape, w, b),
                        [rng.standard_normal(shape), rng.standard_normal(nshape), rng.standard_normal(nshape)], rng,
                        sum_magnitudes=_ln_magnitudes(nshape, 1e-5, True))


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_batch_norm_one_affine_parameter(which, rng):
    x, p = rng.standard_normal((6, 4, 5)), rng.standard_normal(4)

    def call(f, x, p):
        return f(x, None, None, **{which: p}, training=True)

    magnitudes = _bn_magnitudes(True, 1e-5, weight=1, bias=None) if which == "weight" else \
        _bn_magnitudes(True, 1e-5, weight=None, bias=1)
    check_against_torch(lambda x, p: call(F.batch_norm, x, p), lambda x, p: call(TF.batch_norm, x, p), [x, p], rng,
                        sum_magnitudes=magnitudes)


def test_batch_norm_training_without_running_stats(rng):
    x = rng.standard_normal((7, 3, 4))
    check_against_torch(lambda t: F.batch_norm(t, None, None, training=True),
                        lambda t: TF.batch_norm(t, None, None, training=True), [x], rng)


def test_batch_norm_running_stats_over_steps(rng):
    """Three training steps then eval: running statistics follow PyTorch's update exactly."""
    crm, crv = clnn.zeros(5), clnn.ones(5)
    trm, trv = torch.zeros(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64)
    for _ in range(3):
        x = (rng.standard_normal((8, 5, 3)) * 2 + 3).astype(np.float32)
        F.batch_norm(clnn.tensor(x), crm, crv, training=True, momentum=0.2)
        TF.batch_norm(torch.tensor(x.astype(np.float64)), trm, trv, training=True, momentum=0.2)
    assert_close(crm.numpy(), trm.numpy())
    assert_close(crv.numpy(), trv.numpy())
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    y = F.batch_norm(clnn.tensor(x), crm, crv, training=False)
    assert_close(y.numpy(), TF.batch_norm(torch.tensor(x.astype(np.float64)), trm, trv).numpy())


# (x shape, normalized_shape, affine): rows shorter and longer than a work-group, int and tuple shapes
LN_CASES = [
    ((4, 7), 7, True),
    ((1, 3), (3,), True),  # one row (a row of 1 or 2 values has a gradient of exactly 0)
    ((3, 5, 6), (5, 6), True),
    ((2, 3, 300), 300, True),
    ((2, 1031), (1031,), True),
    ((3, 67, 40), 40, True),  # 201 rows: several blocks of the backward, the last one partial
    ((5, 4, 3), (4, 3), False),
    ((6, 13), 13, False),
]


def _ln_magnitudes(nshape: tuple[int, ...], eps: float, affine: bool) -> dict:
    """Sums of absolute terms of layer norm's gradients. The input's, (g*w - mean(g*w) - xhat * mean(g*w*xhat))
    / sigma per row, is a difference that cancels for short rows (a row of 3 missed 1e-5 once on Intel); the
    weight's and bias's, sum |g * xhat| and sum |g| over rows, are signed sums."""
    dims = tuple(range(-len(nshape), 0))

    def stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sigma = torch.sqrt(x.var(dims, unbiased=False, keepdim=True) + eps)
        return (x - x.mean(dims, keepdim=True)) / sigma, sigma

    def of_input(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None = None, *_) -> torch.Tensor:
        xhat, sigma = stats(x)
        gw = (g * w if w is not None else g).abs()
        return (gw + gw.mean(dims, keepdim=True) + xhat.abs() * (gw * xhat.abs()).mean(dims, keepdim=True)) / sigma

    def over_rows(t: torch.Tensor) -> torch.Tensor:
        return t.abs().reshape(-1, *nshape).sum(0)

    out = {0: of_input}
    if affine:
        out[1] = lambda g, x, *_: over_rows(g * stats(x)[0])
        out[2] = lambda g, *_: over_rows(g)
    return out


@pytest.mark.parametrize("shape,normalized,affine", LN_CASES, ids=[str(c) for c in LN_CASES])
def test_layer_norm(shape, normalized, affine, rng):
    nshape = (normalized,) if isinstance(normalized, int) else normalized
    x = rng.standard_normal(shape) * 2 + 0.5
    inputs = [x, rng.standard_normal(nshape), rng.standard_normal(nshape)] if affine else [x]
    check_against_torch(lambda x, *p: F.layer_norm(x, normalized, *p, eps=1e-5),
                        lambda x, *p: TF.layer_norm(x, nshape, *p, eps=1e-5), inputs, rng,
                        sum_magnitudes=_ln_magnitudes(tuple(nshape), 1e-5, affine))


def test_layer_norm_weight_only(rng):
    x, w = rng.standard_normal((3, 8)), rng.standard_normal(8)
    check_against_torch(lambda x, w: F.layer_norm(x, 8, weight=w), lambda x, w: TF.layer_norm(x, (8,), weight=w),
                        [x, w], rng)


def test_norm_deterministic(rng):
    x = rng.standard_normal((16, 6, 9, 7)).astype(np.float32)
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    runs = []
    for _ in range(2):
        ts = [clnn.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = F.layer_norm(F.batch_norm(ts[0], None, None, ts[1], ts[2], training=True), (9, 7))
        y.backward(clnn.tensor(g))
        runs.append([y.numpy()] + [t.grad.numpy() for t in ts])
    assert all(np.array_equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("shape", [(67, 3, 17, 19), (70001, 1), (20011, 37), (3, 1, 30011)])  # >= SPLIT_MIN: chunks
@pytest.mark.parametrize("plan", ["device", "gpu"])
def test_split_statistics_stay_accurate_and_bit_identical(dev, rng, monkeypatch, shape, plan):
    # chunks of a channel combine by Chan's formula: a mean far from 0 costs the variance no digits;
    # plan="gpu" poses as a GPU (a work-group per chunk) where the device is a CPU (a work-item per chunk)
    if plan == "gpu":
        monkeypatch.setattr(dev, "type", "gpu")
    x = (rng.standard_normal(shape) * 0.5 + 1000).astype(np.float32)
    rm, rv = clnn.zeros(shape[1]), clnn.ones(shape[1])
    t = clnn.tensor(x)
    y = F.batch_norm(t, rm, rv, training=True, momentum=1.0).numpy()
    axes = tuple(i for i in range(x.ndim) if i != 1)
    x64 = x.astype(np.float64)
    assert_close(rm.numpy(), x64.mean(axis=axes), what="mean")
    assert_close(rv.numpy(), x64.var(axis=axes, ddof=1), what="unbiased variance")
    assert np.array_equal(y, F.batch_norm(t, None, None, training=True).numpy())


def test_dropout_reproducible_and_scaled(rng):
    x = rng.standard_normal((64, 129)).astype(np.float32)
    clnn.manual_seed(1234)
    t = clnn.tensor(x, requires_grad=True)
    y = F.dropout(t, p=0.3)
    clnn.manual_seed(1234)
    y2 = F.dropout(clnn.tensor(x), p=0.3)
    assert np.array_equal(y.numpy(), y2.numpy())
    y3 = F.dropout(clnn.tensor(x), p=0.3)  # the generator moved on: a new mask
    assert not np.array_equal(y.numpy(), y3.numpy())
    out = y.numpy()
    kept = out != 0
    assert abs(1 - kept.mean() - 0.3) < 0.03
    np.testing.assert_allclose(out[kept], x[kept] / 0.7, rtol=1e-6)
    g = rng.standard_normal(x.shape).astype(np.float32)
    y.backward(clnn.tensor(g))
    np.testing.assert_allclose(t.grad.numpy(), np.where(kept, g / 0.7, 0), rtol=1e-6)


def test_dropout_identities(rng):
    t = clnn.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    assert F.dropout(t, 0.5, training=False) is t
    assert F.dropout(t, 0.0) is t
    z = F.dropout(t, 1.0)
    assert (z.numpy() == 0).all()
    z.sum().backward()
    assert (t.grad.numpy() == 0).all()


def _x(*shape):
    return clnn.zeros(*shape)


ERRORS = [
    (lambda: F.batch_norm(_x(4), None, None, training=True), ValueError,
     r"batch_norm: x must have shape \(N, C, \*\)"),
    (lambda: F.batch_norm(_x(4, 3), _x(4), _x(4)), ValueError,
     r"batch_norm: running_mean must have shape \(3,\) for x of shape \(4, 3\); got \(4,\)"),
    (lambda: F.batch_norm(_x(4, 3), None, None, weight=_x(2)), ValueError,
     r"batch_norm: weight must have shape \(3,\)"),
    (lambda: F.batch_norm(_x(4, 3), _x(3), None), ValueError, r"give both running_mean and running_var"),
    (lambda: F.batch_norm(_x(4, 3), None, None), ValueError, r"running_mean and running_var must be given when"),
    (lambda: F.batch_norm(_x(1, 3), _x(3), _x(3), training=True), ValueError, r"more than 1 value per channel"),
    (lambda: F.batch_norm(_x(4, 3), None, None, bias=np.zeros(3)), TypeError,
     r"batch_norm: bias expects a clnn.Tensor; got ndarray"),
    (lambda: F.batch_norm(_x(4, 3), None, None, weight=clnn.zeros(3, dtype=np.float16)), TypeError,
     r"batch_norm: x has dtype float32 but weight has dtype float16"),
    (lambda: F.batch_norm(_x(4, 3), None, None, eps=-1), ValueError, r"batch_norm: eps expects a number >= 0"),
    (lambda: F.layer_norm(_x(4, 3), 4), ValueError, r"layer_norm: normalized_shape \(4,\) must match the last dims"),
    (lambda: F.layer_norm(_x(4, 3), (2, 4, 3)), ValueError, r"normalized_shape \(2, 4, 3\) must match"),
    (lambda: F.layer_norm(_x(4, 3), 3, weight=_x(4)), ValueError, r"layer_norm: weight must have shape \(3,\)"),
    (lambda: F.layer_norm(_x(4, 3), "3"), TypeError, r"layer_norm: normalized_shape must be an int"),
    (lambda: F.layer_norm(clnn.zeros(4, 3, dtype=np.int32), 3), TypeError, r"layer_norm: x expects a floating"),
    (lambda: F.dropout(_x(3), p=1.5), ValueError, r"dropout: p expects a number in \[0, 1\]; got 1.5"),
    (lambda: F.dropout([1.0], p=0.5), TypeError, r"dropout: x expects a clnn.Tensor; got list"),
]


@pytest.mark.parametrize("call,exc,pattern", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()
