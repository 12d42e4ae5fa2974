"""Activations and softmax/log_softmax against torch.nn.functional in float64: outputs and gradients."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
import scipy.special
import torch
import torch.nn.functional as TF
from helpers import assert_close
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_ref import check_against_torch

import clnn
import clnn.functional as F
from clnn import kernels, tuning


def _gelu_ref(x: torch.Tensor) -> torch.Tensor:
    """Exact GELU through erfc: torch's own float64 gelu computes 1 + erf(x / sqrt 2), which loses the
    digits of the tail below x = -5 (2% off at x = -8), where clnn (through erfc) is accurate."""
    return 0.5 * x * torch.special.erfc(-x / math.sqrt(2))


def _gelu_tanh_ref(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation as x * sigmoid(2u) (= 0.5 x (1 + tanh u)): torch's 1 + tanh(u) cancels in the tail."""
    return x * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))


def _tanh_ref(x: torch.Tensor) -> torch.Tensor:
    """tanh as s (1 - e) / (1 + e), e = exp(-2|x|), s = x's sign: its derivative 4e / (1 + e)^2 keeps its digits in
    the tail, where torch's float64 1 - tanh(x)^2 cancels (1.1e-4 off at x = 15, a 4-sigma draw of these tests)."""
    s = torch.where(x < 0, -1.0, 1.0).to(x.dtype)  # a constant: |x| = s x keeps the derivative 1 at x = 0
    e = torch.exp(-2 * s * x)
    return s * (1 - e) / (1 + e)


# (name, clnn call, torch call): every parameter of each activation
ACTIVATIONS = [
    ("relu", F.relu, TF.relu),
    ("leaky_relu", F.leaky_relu, TF.leaky_relu),
    ("leaky_relu-0.2", lambda x: F.leaky_relu(x, negative_slope=0.2), lambda x: TF.leaky_relu(x, 0.2)),
    ("elu", F.elu, TF.elu),
    ("elu-0.5", lambda x: F.elu(x, alpha=0.5), lambda x: TF.elu(x, alpha=0.5)),
    ("gelu", F.gelu, _gelu_ref),
    ("gelu-tanh", lambda x: F.gelu(x, approximate="tanh"), _gelu_tanh_ref),
    ("sigmoid", F.sigmoid, torch.sigmoid),
    ("tanh", F.tanh, _tanh_ref),
    ("softplus", F.softplus, TF.softplus),
    ("softplus-2-5", lambda x: F.softplus(x, beta=2, threshold=5), lambda x: TF.softplus(x, beta=2, threshold=5)),
    ("softplus-0.5", lambda x: F.softplus(x, beta=0.5), lambda x: TF.softplus(x, beta=0.5)),
    ("silu", F.silu, TF.silu),
    ("hardswish", F.hardswish, TF.hardswish),
]
SHAPES = [(1,), (7,), (3, 37), (2, 3, 5, 11)]


def _gelu_terms(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return g.abs() * (cdf + x.abs() * pdf)


def _gelu_tanh_terms(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    s, sn = torch.sigmoid(2 * inner), torch.sigmoid(-2 * inner)
    return g.abs() * (s + 2 * x.abs() * s * sn * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x))


def _silu_terms(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return g.abs() * torch.sigmoid(x) * (1 + x.abs() * torch.sigmoid(-x))


# Derivatives that are sums of two signed terms, as the kernels compute them: GELU's cdf + x pdf, SiLU's
# s (1 + x (1 - s)). Each has a root (x = -0.75, -1.28) where the terms cancel, so float32's few-ulp error of
# each term is a large share of the small result; one element drawn within 0.01 of the root misses 1e-5
# relative to the derivative, whatever the kernel does. Those gradients are checked against the terms' sizes.
DERIVATIVE_TERMS = {"gelu": _gelu_terms, "gelu-tanh": _gelu_tanh_terms, "silu": _silu_terms}


def _check_activation(name, fn, ref, x, rng) -> None:
    terms = DERIVATIVE_TERMS.get(name)
    check_against_torch(fn, ref, [x], rng, sum_magnitudes={0: terms} if terms else None)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name,fn,ref", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation(name, fn, ref, shape, rng):
    # reaches the threshold and clamp regions; within +-8, where float32 still holds the tails (GELU's at -10 is a
    # subnormal: a lone element drawn there missed 1e-5 about once in 200 draws)
    _check_activation(name, fn, ref, np.clip(rng.standard_normal(shape) * 4, -8, 8), rng)


@pytest.mark.parametrize("name,fn,ref", [a for a in ACTIVATIONS if a[0] in DERIVATIVE_TERMS],
                         ids=[a[0] for a in ACTIVATIONS if a[0] in DERIVATIVE_TERMS])
def test_derivative_at_its_root(name, fn, ref, rng):
    """Inputs packed around the derivative's root, where its terms cancel: the error still stays within
    float32's rounding of the terms."""
    root = {"silu": -1.2785}.get(name, -0.7518)
    _check_activation(name, fn, ref, root + rng.uniform(-0.02, 0.02, 257), rng)


# (shape, axis): short rows (one work-item each), long rows (a work-group each), strided rows
SOFTMAX_CASES = [
    ((1,), 0),
    ((1, 1), -1),
    ((7,), -1),
    ((3, 37), 1),
    ((3, 37), 0),
    ((4, 3, 130), 0),
    ((5, 300, 7), 1),
    ((2, 1031), -1),
    ((300, 70), 0),
    ((130, 1030), 0),
    ((2, 3, 4, 5), 2),
]


def _softmax_magnitudes(log: bool, axis: int) -> dict:
    """softmax's input gradient y * (g - sum(y * g)) and log_softmax's g - y * sum(g) are differences: when the
    row's terms nearly balance (a 2-element row with g1 ~ g2, or y_max near 1) float32 alone misses 1e-5 relative
    to the result, so the gradient is checked against the terms' magnitudes, y * (|g| + sum(y * |g|)) and
    |g| + y * sum(|g|)."""
    def magnitude(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(x, axis)
        if log:
            return g.abs() + y * g.abs().sum(axis, keepdim=True)
        return y * (g.abs() + (y * g.abs()).sum(axis, keepdim=True))

    return {0: magnitude}


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES, ids=[f"{s}-{a}" for s, a in SOFTMAX_CASES])
def test_softmax(shape, axis, log, rng):
    fn, ref = (F.log_softmax, torch.log_softmax) if log else (F.softmax, torch.softmax)
    x = rng.standard_normal(shape)
    check_against_torch(lambda t: fn(t, axis=axis), lambda t: ref(t, axis), [x], rng,
                        sum_magnitudes=_softmax_magnitudes(log, axis))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 70), min_size=1, max_size=4), data=st.data(), log=st.booleans())
def test_softmax_hypothesis(shape, data, log, rng):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    fn, ref = (F.log_softmax, torch.log_softmax) if log else (F.softmax, torch.softmax)
    check_against_torch(lambda t: fn(t, axis=axis), lambda t: ref(t, axis), [rng.standard_normal(shape)], rng,
                        sum_magnitudes=_softmax_magnitudes(log, axis))


@pytest.mark.usefixtures("fp64")
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_float64(log, rng):
    fn, ref = (F.log_softmax, torch.log_softmax) if log else (F.softmax, torch.softmax)
    x = rng.standard_normal((6, 257))
    check_against_torch(lambda t: fn(t, axis=1), lambda t: ref(t, 1), [x], rng, tol=1e-13, dtype=np.float64)


def test_softmax_float16_storage(rng):
    x = rng.standard_normal((5, 300)).astype(np.float16)
    y = F.softmax(clnn.tensor(x), axis=1)
    assert y.dtype == np.float16
    assert_close(y.numpy(), torch.softmax(torch.tensor(x.astype(np.float64)), 1).numpy(), 2e-3)


def test_softmax_rows_sum_to_one(rng):
    y = F.softmax(clnn.tensor(rng.standard_normal((9, 500)).astype(np.float32)), axis=1).numpy()
    np.testing.assert_allclose(y.sum(axis=1), 1, rtol=1e-6)


STABLE = [
    ("softmax", lambda x: F.softmax(x, axis=-1), lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: F.log_softmax(x, axis=-1), lambda x: torch.log_softmax(x, -1)),
    ("softmax-axis0", lambda x: F.softmax(x, axis=0), lambda x: torch.softmax(x, 0)),
    ("log_softmax-axis0", lambda x: F.log_softmax(x, axis=0), lambda x: torch.log_softmax(x, 0)),
    ("sigmoid", F.sigmoid, torch.sigmoid),
    ("tanh", F.tanh, _tanh_ref),
    ("softplus", F.softplus, TF.softplus),
    ("silu", F.silu, TF.silu),
    ("elu", F.elu, TF.elu),
    ("gelu", F.gelu, _gelu_ref),
    ("gelu-tanh", lambda x: F.gelu(x, approximate="tanh"), _gelu_tanh_ref),
]


@pytest.mark.parametrize("shape", [(4, 9), (3, 300)], ids=str)
@pytest.mark.parametrize("name,fn,ref", STABLE, ids=[s[0] for s in STABLE])
def test_stable_for_large_inputs(name, fn, ref, shape, rng):
    """Inputs of +-1e4 give finite values and gradients that match the float64 reference."""
    x = rng.choice([-1e4, 1e4], size=shape) + rng.standard_normal(shape)
    out, (t,) = check_against_torch(fn, ref, [x], rng)
    assert np.isfinite(out.numpy()).all() and np.isfinite(t.grad.numpy()).all()


def test_deterministic(rng):
    x = rng.standard_normal((37, 1031)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    runs = []
    for _ in range(2):
        t = clnn.tensor(x, requires_grad=True)
        y = F.log_softmax(F.softmax(t, axis=1), axis=0)
        y.backward(clnn.tensor(g))
        runs.append((y.numpy(), t.grad.numpy()))
    assert all(np.array_equal(a, b) for a, b in zip(*runs))


def _x(shape=(2, 3)):
    return clnn.zeros(*shape)


ERRORS = [
    (lambda: F.relu(np.zeros(3)), TypeError, r"relu: x expects a clnn.Tensor; got ndarray"),
    (lambda: F.sigmoid(clnn.zeros(3, dtype=np.int32)), TypeError, r"sigmoid: x expects a floating tensor"),
    (lambda: F.gelu(_x(), approximate="erf"), ValueError, r"gelu: approximate expects one of .*; got 'erf'"),
    (lambda: F.leaky_relu(_x(), negative_slope="a"), TypeError, r"leaky_relu: negative_slope expects a real"),
    (lambda: F.elu(_x(), alpha=float("nan")), ValueError, r"elu: alpha expects a number that is not NaN; got nan"),
    (lambda: F.softplus(_x(), beta=0), ValueError, r"softplus: beta must be nonzero"),
    (lambda: F.softmax(_x(), axis=2), ValueError, r"axis: expected a value in \[-2, 1\]; got 2"),
    (lambda: F.log_softmax(_x(), axis=1.0), TypeError, r"axis: expected an int; got float"),
    (lambda: F.softmax([1.0, 2.0]), TypeError, r"softmax: x expects a clnn.Tensor; got list"),
]


@pytest.mark.parametrize("call,exc,pattern", ERRORS, ids=[e[2][:30] for e in ERRORS])
def test_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


@pytest.mark.parametrize("soft", [0, 1])
def test_gelu_tail_against_scipy(soft, monkeypatch):
    """GELU and its derivative in float32 over [-12, 12], through the device's erfc or unary.h's own (ERFC_SOFT,
    PoCL's), within 2e-5 of SciPy's float64 erfc wherever the result is a normal float32 (torch's float64 GELU
    itself loses the tail below x = -5: 1 + erf cancels); the derivative, a sum cdf + x pdf that crosses zero,
    relative to its terms' magnitudes."""
    rows = {key: {**row, "ERFC_SOFT": soft} for key, row in tuning.TABLE["storage"].items()}
    monkeypatch.setitem(tuning.TABLE, "storage", rows)
    monkeypatch.setattr(kernels, "_kernels", {})  # kernels are cached by their own defines, not the storage row's
    x32 = np.linspace(-12, 12, 24001, dtype=np.float32)
    x = clnn.tensor(x32, requires_grad=True)
    y = F.gelu(x)
    y.backward(clnn.ones_like(y))
    x64 = x32.astype(np.float64)
    cdf, xpdf = 0.5 * scipy.special.erfc(-x64 / np.sqrt(2)), x64 * np.exp(-x64 * x64 / 2) / np.sqrt(2 * np.pi)
    for got, ref, size in ((y.numpy(), x64 * cdf, np.abs(x64 * cdf)), (x.grad.numpy(), cdf + xpdf, cdf + np.abs(xpdf))):
        normal = size > 1e-30
        err = np.abs(got - ref)[normal] / size[normal]
        assert err.max() < 2e-5, f"relative error {err.max():.2e} at x = {x32[normal][err.argmax()]}"


@pytest.mark.parametrize("n", [1, 3, 4, 5, 1031])
@pytest.mark.parametrize("vec, static", [(1, 0), (4, 0), (16, 0), (1, 1), (16, 1)])
def test_contiguous_maps_at_every_width(vec, static, n, rng, monkeypatch):
    """unary, unary_grad and binary_same at 1, 4 and 16 elements per work-item (the tuning knob EW_VEC; 16 on
    whole vectors, PoCL's), the op a run-time argument or built in (EW_STATIC: a build per op, so at the widths of
    the rows that build it in, Intel's 1 and PoCL's 16), tails of every length: each element is mapped exactly
    once."""
    monkeypatch.setitem(tuning.TABLE, "elementwise", {"default": {"EW_VEC": vec, "EW_STATIC": static}})
    for name, fn, ref in ACTIVATIONS[::3]:
        _check_activation(name, fn, ref, rng.standard_normal(n), rng)  # |x| < 8: no tail underflows to 0
    for ours, ref in ((operator.add, operator.add), (operator.mul, operator.mul), (clnn.maximum, torch.maximum)):
        check_against_torch(ours, ref, [rng.standard_normal(n), rng.standard_normal(n)], rng)
