"""The training ops in float16 and bfloat16 against PyTorch (float64) on the same half inputs.

clnn loads half values, computes (and accumulates) in float32 and rounds each stored result once, so an
op's output is the exact result plus one rounding: relative error <= 2**-9 for bfloat16 (8 significand
bits) and 2**-12 for float16 per element, plus float32's error, far below either. The norm-wise bound used
is ``ROUNDINGS`` half-ulps (one ulp = ``EPS``): forward outputs are one rounding; a gradient built from
a few half ops (the upstream gradient times a stored half activation, then the op's own rounding) is
a few. Intel's native fp16 path computes elementwise maps in half itself (a rounding per operation),
which the same bound covers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import assert_close
from torch_ref import check_against_torch

import clnn
from clnn import functional as F

HALVES = [clnn.float16, clnn.bfloat16]
EPS = {clnn.float16: 2.0**-10, clnn.bfloat16: 2.0**-7}  # one ulp at 1
ROUNDINGS = 4


def _tol(dtype) -> float:
    return ROUNDINGS * EPS[np.dtype(dtype)]


def _pos(rng, *shape):
    return rng.random(shape) + 0.5


def _distinct_columns(rng):
    """(37, 11) values whose columns hold no ties in either half type: a permutation of -18..18 plus [0, 0.5)."""
    return rng.random((37, 11)).argsort(0) - 18 + rng.random((37, 11)) * 0.5


# (name, clnn fn, torch fn, input makers): inputs drawn from rng; gradients checked for every input
OPS = [
    ("relu", F.relu, torch.relu, [lambda r: r.standard_normal((7, 93))]),
    ("sigmoid", F.sigmoid, torch.sigmoid, [lambda r: r.standard_normal((7, 93))]),
    ("tanh", F.tanh, torch.tanh, [lambda r: r.standard_normal(4097)]),
    ("gelu", F.gelu, TF.gelu, [lambda r: r.standard_normal((3, 33))]),
    ("exp", lambda x: x.exp(), torch.exp, [lambda r: r.standard_normal(1023)]),
    ("log", lambda x: x.log(), torch.log, [lambda r: _pos(r, 1023)]),
    ("mul_bcast", lambda a, b: a * b, torch.mul, [lambda r: r.standard_normal((5, 31)), lambda r: _pos(r, 31)]),
    ("div", lambda a, b: a / b, torch.div, [lambda r: r.standard_normal(97), lambda r: _pos(r, 97)]),
    ("sum_axis", lambda x: x.sum(axis=1), lambda x: x.sum(1), [lambda r: _pos(r, 7, 300)]),
    # scaled back by the count: the gradient of a bare mean, g / 5000, falls into float16's subnormals (spacing
    # 6e-8) for |g| < 0.3, where one rounding alone can exceed the tolerance (1.5e-2 once in 9 Intel runs)
    ("mean", lambda x: x.mean() * 5000, lambda x: torch.mean(x) * 5000, [lambda r: _pos(r, 1, 5000)]),
    ("max_axis", lambda x: x.max(axis=0), lambda x: x.max(0).values, [_distinct_columns]),
    ("matmul", clnn.matmul, torch.matmul,
     [lambda r: _pos(r, 37, 65), lambda r: _pos(r, 65, 19)]),
    ("linear", lambda x, w, b: clnn.matmul(x, w.T) + b, TF.linear,
     [lambda r: _pos(r, 9, 70), lambda r: _pos(r, 13, 70), lambda r: _pos(r, 13)]),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda x, w, b: TF.conv2d(x, w, b, padding=1),
     [lambda r: _pos(r, 2, 3, 9, 7), lambda r: _pos(r, 5, 3, 3, 3), lambda r: _pos(r, 5)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2),
     [lambda r: r.standard_normal((2, 3, 9, 8))]),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3), lambda x: TF.avg_pool2d(x, 3),
     [lambda r: _pos(r, 2, 3, 9, 7)]),
    ("softmax", lambda x: F.softmax(x, axis=1), lambda x: torch.softmax(x, 1), [lambda r: r.standard_normal((5, 37))]),
    ("log_softmax", lambda x: F.log_softmax(x, axis=1), lambda x: torch.log_softmax(x, 1),
     [lambda r: r.standard_normal((5, 37)) * 3]),
    ("mse_loss", F.mse_loss, TF.mse_loss, [lambda r: r.standard_normal((7, 13)), lambda r: r.standard_normal((7, 13))]),
    ("bce_logits", F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits,
     [lambda r: r.standard_normal((7, 13)), lambda r: r.random((7, 13))]),
]


def _same_bits_or_both_nan(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Equal bits, except that a NaN need only be a NaN of the same sign (payloads are the runtime's), or any NaN
    on NVIDIA's runtime: its conversions return the canonical NaN, positive (an H200, 2026-11-27), as CUDA's do."""
    nan = np.isnan(theirs)
    np.testing.assert_array_equal(np.isnan(ours), nan)
    dev = clnn.device()
    if "nvidia" not in dev.real.get("vendor", dev.vendor).lower():  # the runtime's, not a CLNN_LIMITS pose's
        np.testing.assert_array_equal(np.signbit(ours[nan]), np.signbit(theirs[nan]))
    np.testing.assert_array_equal(ours[~nan].view(np.uint16 if ours.itemsize == 2 else np.uint32),
                                  theirs[~nan].view(np.uint16 if theirs.itemsize == 2 else np.uint32))


def test_every_float16_converts_as_numpy_does(dev, rng):
    """All 65,536 float16 bit patterns widen to float32 exactly, and float32 values round to float16 to nearest
    even as NumPy does: every half, the ties between neighbours, points just off them, values past the largest
    half (65504) and under the smallest subnormal (2^-24), infinities and NaN. On PoCL this is the soft
    conversion (clnn_dtype.h's HALF_SOFT); elsewhere the runtime's vload_half / vstore_half."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    with clnn.use_device(dev):
        _same_bits_or_both_nan(clnn.tensor(halves).astype(clnn.float32).numpy(), halves.astype(np.float32))
        finite = halves[np.isfinite(halves)].astype(np.float64)
        finite.sort()
        mids = (finite[1:] + finite[:-1]) / 2  # ties, exact in float32
        near = np.concatenate([mids * (1 + 2.0**-20), mids * (1 - 2.0**-20)])
        wide = rng.standard_normal(20000) * np.exp2(rng.uniform(-30, 20, 20000))
        values = np.concatenate([mids, near, wide, [65504, 65519.99, 65520, 1e6, 3e38, 2.0**-25, 2.0**-26, 1e-30,
                                                    0.0, np.inf, np.nan]])
        values = np.concatenate([values, -values]).astype(np.float32)
        with np.errstate(over="ignore"):
            expected = values.astype(np.float16)
        _same_bits_or_both_nan(clnn.tensor(values).astype(clnn.float16).numpy(), expected)


def test_float16_vector_conversions_are_exact(dev, rng):
    """The conversions of whole vectors (an elementwise map's lanes; a product's rounding loads and stores: on x86
    PoCL, F16C's instructions) as exact as the scalar ones above: every float16 through ``h * 1``, and float32
    values through a product with 1 under autocast (each rounded to float16 as it is loaded, then added to 0)."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(np.float64))
    mids = (finite[1:] + finite[:-1]) / 2
    wide = rng.standard_normal(20000) * np.exp2(rng.uniform(-30, 20, 20000))
    values = np.concatenate([mids, mids * (1 + 2.0**-20), mids * (1 - 2.0**-20), wide,
                             [65504, 65519.99, 65520, 3e38, 2.0**-25, 2.0**-26, np.inf, np.nan]])
    values = np.concatenate([values, -values]).astype(np.float32)
    with np.errstate(over="ignore"):
        expected = (np.float32(0) + values.astype(np.float16).astype(np.float32)).astype(np.float16)
    with clnn.use_device(dev):
        _same_bits_or_both_nan((clnn.tensor(halves) * 1).numpy(), halves)
        with clnn.autocast(dtype=clnn.float16):
            product = clnn.tensor(np.ones((1, 1), np.float32)) @ clnn.tensor(values[None, :])
        assert product.dtype == clnn.float16
        _same_bits_or_both_nan(product.numpy()[0], expected)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name, fn, ref, makers", OPS, ids=[o[0] for o in OPS])
def test_op_matches_torch_on_half_inputs(dev, rng, dtype, name, fn, ref, makers):
    with clnn.use_device(dev):
        check_against_torch(fn, ref, [m(rng) for m in makers], rng, tol=_tol(dtype), dtype=dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_norms_and_cross_entropy_match_torch(dev, rng, dtype):
    """Forward only for the normalizations (their backward's differences cancel far below a half ulp of
    the inputs: the float32 tests cover them), within the output's own rounding: one row's values lie an ulp or
    two apart, which a mean or variance kept in the half type loses (its variance is subnormal in float16);
    cross_entropy forward and backward."""
    tol, ulp = _tol(dtype), EPS[dtype]
    with clnn.use_device(dev):
        x = rng.standard_normal((6, 4, 5, 3)).astype(dtype)
        x[0, 0, 0] = [1, 1 + ulp, 1 + 3 * ulp]
        w, b = _pos(rng, 4).astype(dtype), rng.standard_normal(4).astype(dtype)
        xt, wt, bt = (torch.tensor(v.astype(np.float64)) for v in (x, w, b))
        y = F.batch_norm(clnn.tensor(x), None, None, clnn.tensor(w), clnn.tensor(b), training=True)
        assert y.dtype == dtype
        assert_close(y.numpy(), TF.batch_norm(xt, None, None, wt, bt, training=True).numpy(), ulp, "batch_norm")
        y = F.layer_norm(clnn.tensor(x), (3,))
        assert_close(y.numpy(), TF.layer_norm(xt, (3,)).numpy(), ulp, "layer_norm")
        target = rng.integers(0, 37, 5)
        check_against_torch(lambda z: F.cross_entropy(z, target), lambda z: TF.cross_entropy(z, torch.tensor(target)),
                            [rng.standard_normal((5, 37))], rng, tol=tol, dtype=dtype)
        probs = rng.dirichlet(np.ones(37), 5).astype(dtype)  # probability targets in the half type itself
        check_against_torch(lambda z: F.cross_entropy(z, clnn.tensor(probs)),
                            lambda z: TF.cross_entropy(z, torch.tensor(probs.astype(np.float64))),
                            [rng.standard_normal((5, 37))], rng, tol=tol, dtype=dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_dropout_keeps_and_scales_in_half(dev, rng, dtype):
    with clnn.use_device(dev):
        x = clnn.tensor(_pos(rng, 4097).astype(dtype), requires_grad=True)
        y = F.dropout(x, 0.25)
        kept = y.numpy().astype(np.float64) != 0
        assert y.dtype == dtype and 0.6 < kept.mean() < 0.9
        want = (x.numpy().astype(np.float64) / 0.75).astype(dtype)
        np.testing.assert_array_equal(y.numpy()[kept], want[kept])
        y.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy().astype(np.float64) != 0, kept)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("cls, tcls, kwargs", [
    (clnn.optim.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    (clnn.optim.Adam, torch.optim.Adam, dict(lr=1e-2)),
    (clnn.optim.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
], ids=["sgd", "adam", "adamw"])
def test_optimizer_updates_half_params(dev, rng, dtype, cls, tcls, kwargs):
    """One step on half parameters: clnn computes the update in float32 and rounds the new value and the
    state once; torch (float64) starts from the same half values. Elementwise, within one ulp of the result,
    plus float32's error on the difference param - update (which cancels when they are close) and float16's
    subnormal spacing 2**-24."""
    with clnn.use_device(dev):
        init, grad = rng.standard_normal((7, 93)).astype(dtype), rng.standard_normal((7, 93)).astype(dtype)
        p = clnn.tensor(init, requires_grad=True)
        tp = torch.tensor(init.astype(np.float64), requires_grad=True)
        p.grad, tp.grad = clnn.tensor(grad), torch.tensor(grad.astype(np.float64))
        cls([p], **kwargs).step()
        tcls([tp], **kwargs).step()
        ref = tp.detach().numpy()
        assert p.dtype == dtype
        bound = EPS[np.dtype(dtype)] * np.abs(ref) + 2.0**-24 + 1e-6 * (np.abs(init.astype(np.float64)) + kwargs["lr"])
        assert np.all(np.abs(p.numpy().astype(np.float64) - ref) <= bound)
