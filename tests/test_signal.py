"""clnn.signal against scipy.signal (float64) for values and torch autograd (conv1d/conv2d) for gradients."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss
import torch
import torch.nn.functional as TF
from helpers import assert_close, assert_sum_close
from hypothesis import given, settings
from hypothesis import strategies as st

import clnn

MODES = ["full", "same", "valid"]
OPS = {"correlate": (clnn.signal.correlate, ss.correlate), "convolve": (clnn.signal.convolve, ss.convolve)}
# (in1 shape, in2 shape): 1s, primes, even/odd lengths, in2 longer than in1 (both argument orders)
SHAPES = [
    ((1,), (1,)),
    ((1,), (5,)),
    ((5,), (1,)),
    ((7,), (3,)),
    ((3,), (7,)),
    ((8,), (4,)),
    ((4,), (8,)),
    ((6,), (5,)),
    ((13,), (13,)),
    ((31,), (2,)),
    ((64,), (65,)),
    ((257,), (33,)),
    ((1, 1), (1, 1)),
    ((5, 7), (3, 2)),
    ((3, 2), (5, 7)),
    ((6, 4), (6, 4)),
    ((9, 1), (2, 1)),
    ((1, 9), (1, 4)),
    ((4, 6), (7, 9)),
    ((17, 13), (4, 6)),
    # long sums over few outputs take correlate2d_wg (forward, or the gradient w.r.t. the shorter input)
    ((3001,), (7,)),
    ((7,), (3001,)),
    ((1500,), (1100,)),
    ((40, 45), (33, 40)),
]
IDS = [f"{'x'.join(map(str, a))}-{'x'.join(map(str, b))}" for a, b in SHAPES]


def torch_signal(op: str, a: torch.Tensor, b: torch.Tensor, mode: str) -> torch.Tensor:
    """The same op built from torch's conv (a correlation) on zero-padded input: an independent reference
    for values and gradients."""
    conv = TF.conv1d if a.dim() == 1 else TF.conv2d
    w = torch.flip(b, tuple(range(b.dim()))) if op == "convolve" else b
    full = conv(a[None, None], w[None, None], padding=tuple(n - 1 for n in b.shape))[0, 0]
    if mode == "full":
        return full
    if mode == "same":
        idx = tuple(slice((q - 1) // 2, (q - 1) // 2 + p) for p, q in zip(a.shape, b.shape))
    else:
        idx = tuple(slice(min(p, q) - 1, max(p, q)) for p, q in zip(a.shape, b.shape))
    return full[idx]


def _valid_ok(sa, sb) -> bool:
    return all(p >= q for p, q in zip(sa, sb)) or all(p <= q for p, q in zip(sa, sb))


@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=IDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", OPS)
def test_values_and_gradients(op, mode, sa, sb, rng):
    if mode == "valid" and not _valid_ok(sa, sb):
        pytest.skip("scipy rejects these shapes in 'valid' mode (see test_errors)")
    _check_against_peers(op, mode, sa, sb, rng, (np.float64, np.float32))


@pytest.mark.usefixtures("fp64")
@settings(max_examples=30, deadline=None)
@given(
    sa=st.lists(st.integers(1, 12), min_size=1, max_size=2),
    sb=st.lists(st.integers(1, 12), min_size=2, max_size=2),
    mode=st.sampled_from(MODES),
    op=st.sampled_from(sorted(OPS)),
)
def test_random_shapes_match_scipy_or_both_reject(sa, sb, mode, op):
    sb = sb[: len(sa)]
    a, b = np.ones(sa), np.ones(sb)
    try:
        OPS[op][1](a, b, mode=mode)
    except ValueError:
        with pytest.raises(ValueError):
            OPS[op][0](a, b, mode=mode)
        return
    _check_against_peers(op, mode, tuple(sa), tuple(sb), np.random.default_rng(), (np.float64,))


def _check_against_peers(op: str, mode: str, sa, sb, rng: np.random.Generator, dtypes) -> None:
    """Values against scipy.signal, gradients of both inputs against torch autograd, in each dtype.

    float64 runs on signed normal inputs. float32 runs on inputs and upstream gradients in [0.25, 1]: a
    short signed sum (a 1-element output, or the gradient of a 1-element in2) can cancel to near zero,
    where no float32 result is within 1e-5 relative of the exact one; positive terms bound the relative
    error by the sum's length times 2**-24."""
    ours, theirs = OPS[op]
    for dtype in dtypes:
        tol = 1e-10 if dtype == np.float64 else 1e-5
        draw = rng.standard_normal if dtype == np.float64 else (lambda shape: rng.uniform(0.25, 1.0, shape))
        a, b = draw(sa), draw(sb)
        ref = theirs(a, b, mode=mode, method="direct")
        ta = clnn.tensor(a.astype(dtype), requires_grad=True)
        tb = clnn.tensor(b.astype(dtype), requires_grad=True)
        out = ours(ta, tb, mode=mode)
        assert out.dtype == dtype
        assert_close(out.numpy(), ref, tol, f"{dtype.__name__} {op}")
        g = draw(ref.shape)
        out.backward(clnn.tensor(g.astype(dtype)))
        pa, pb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        torch_signal(op, pa, pb, mode).backward(torch.tensor(g))
        assert_close(ta.grad.numpy(), pa.grad.numpy(), tol, f"{dtype.__name__} d in1")
        assert_close(tb.grad.numpy(), pb.grad.numpy(), tol, f"{dtype.__name__} d in2")


def test_torch_reference_matches_scipy(rng):
    """Two float64 references agree to 1e-12 of each output's terms, op(|a|, |b|): a 1-element "valid" output
    (13 x 13) can cancel to 1e-4 of its terms, where their few-ulp rounding differences are 1e-12 of it."""
    for sa, sb in SHAPES:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        for op, mode in [(op, m) for op in OPS for m in MODES if m != "valid" or _valid_ok(sa, sb)]:
            ref = OPS[op][1](a, b, mode=mode)
            terms = OPS[op][1](np.abs(a), np.abs(b), mode=mode)
            assert_sum_close(torch_signal(op, torch.tensor(a), torch.tensor(b), mode).numpy(), ref, terms, 1e-12)


def test_gradient_by_finite_differences(rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((3, 7))
    ta, tb = clnn.tensor(a, requires_grad=True), clnn.tensor(b, requires_grad=True)
    clnn.signal.convolve(ta, tb, mode="same").sum().backward()
    eps = 1e-6
    for x, grad, other_first in ((a, ta.grad.numpy(), False), (b, tb.grad.numpy(), True)):
        num = np.zeros_like(x)
        for i in np.ndindex(*x.shape):
            hi, lo = x.copy(), x.copy()
            hi[i] += eps
            lo[i] -= eps
            f = [ss.convolve(*((a, v) if other_first else (v, b)), mode="same").sum() for v in (hi, lo)]
            num[i] = (f[0] - f[1]) / (2 * eps)
        assert_close(grad, num, 1e-7)


def test_numpy_and_list_inputs(rng):
    a, b = rng.uniform(0.25, 1.0, 9), rng.uniform(0.25, 1.0, 4)  # positive: float32 sums stay well conditioned
    out = clnn.signal.correlate(a, b)  # two NumPy arrays: a float64 Tensor
    assert isinstance(out, clnn.Tensor) and out.dtype == np.float64
    assert_close(out.numpy(), ss.correlate(a, b), 1e-12)
    out = clnn.signal.convolve(a.astype(np.float32), b.astype(np.float32), "same")
    assert out.dtype == np.float32
    assert_close(out.numpy(), ss.convolve(a, b, "same"), 1e-5)
    out = clnn.signal.convolve(clnn.tensor(a.astype(np.float32)), b)  # the array takes the tensor's dtype
    assert out.dtype == np.float32
    assert_close(out.numpy(), ss.convolve(a, b), 1e-5)
    out = clnn.signal.correlate([1, 2, 3], [0, 1, 0.5], "valid")
    np.testing.assert_allclose(out.numpy(), ss.correlate([1, 2, 3], [0, 1, 0.5], "valid"))


@pytest.mark.parametrize("n1", [1, 2, 5, 8])
@pytest.mark.parametrize("n2", [1, 3, 4, 9])
@pytest.mark.parametrize("mode", MODES)
def test_correlation_lags(n1, n2, mode):
    lags = clnn.signal.correlation_lags(n1, n2, mode)
    ref = ss.correlation_lags(n1, n2, mode)
    assert lags.dtype.kind == "i"
    np.testing.assert_array_equal(lags, ref)
    assert lags.shape == ss.correlate(np.ones(n1), np.ones(n2), mode).shape


def test_lags_locate_a_shift(rng):
    """The peak of a delayed copy's correlation is at its delay: a sum of 393 squares (about 393) against other lags'
    sums of about +-20; 20,000 draws never came within 220 of it (40 of 50 samples put it elsewhere once in 900)."""
    x = rng.standard_normal(500)
    y = np.roll(x, 7)[:400]
    corr = clnn.signal.correlate(y, x).numpy()
    assert clnn.signal.correlation_lags(400, 500)[np.argmax(corr)] == 7


def test_deterministic(rng):
    a = clnn.tensor(rng.standard_normal((37, 29)).astype(np.float32), requires_grad=True)
    b = clnn.tensor(rng.standard_normal((9, 11)).astype(np.float32), requires_grad=True)
    runs = []
    for _ in range(2):
        a.grad = b.grad = None
        out = clnn.signal.correlate(a, b, "same")
        (out * out).sum().backward()
        runs.append((out.numpy(), a.grad.numpy(), b.grad.numpy()))
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)


def test_float16_storage(dev, rng):
    if not dev.supports(np.float16):
        pytest.skip(f"{dev} cannot hold float16 tensors")
    a, b = rng.standard_normal((9, 8)).astype(np.float16), rng.standard_normal((3, 4)).astype(np.float16)
    out = clnn.signal.convolve(clnn.tensor(a), clnn.tensor(b), "same")
    assert out.dtype == np.float16
    assert_close(out.numpy(), ss.convolve(a.astype(np.float64), b.astype(np.float64), "same"), 2e-3)


def test_no_graph_without_requires_grad():
    out = clnn.signal.convolve(clnn.ones(5), clnn.ones(3))
    assert not out.requires_grad and out.grad_fn is None


# v (5,) and m (3, 4) are tensors made inside the test, on the device under test
ERRORS = [
    (lambda v, m: clnn.signal.correlate(v, m), ValueError, r"correlate: in1 and in2 must both be 1-D or both 2-D"),
    (
        lambda v, m: clnn.signal.convolve(clnn.ones((2, 2, 2)), clnn.ones((2, 2, 2))),
        ValueError,
        r"must both be 1-D or both 2-D; got in1 of shape \(2, 2, 2\)",
    ),
    (lambda v, m: clnn.signal.correlate(clnn.ones(()), clnn.ones(())), ValueError, r"got in1 of shape \(\)"),
    (lambda v, m: clnn.signal.correlate(clnn.ones(0), v), ValueError, r"non-empty; got shapes \(0,\) and \(5,\)"),
    (lambda v, m: clnn.signal.correlate(v, v, mode="circular"), ValueError, r"mode expects one of .*got 'circular'"),
    (lambda v, m: clnn.signal.convolve(v, v, mode=1), ValueError, r"convolve: mode expects one of"),
    (
        lambda v, m: clnn.signal.correlate(m, clnn.ones((2, 5)), mode="valid"),
        ValueError,
        r"'valid' mode one input must be at least as large.*\(3, 4\).*\(2, 5\)",
    ),
    (lambda v, m: clnn.signal.correlate(v, v.astype(np.float64)), TypeError, r"in1 has dtype float32 but in2 .*64"),
    (lambda v, m: clnn.signal.correlate(v, v.astype(np.int32)), TypeError, r"in2 expects a floating tensor"),
    (lambda v, m: clnn.signal.convolve(v, np.array(["a"])), TypeError, r"in2 expects real numbers; got dtype <U1"),
    (lambda v, m: clnn.signal.convolve(v, "abc"), TypeError, r"in2 expects a clnn.Tensor or a NumPy array; got str"),
    (lambda v, m: clnn.signal.convolve({1: 2}, v), TypeError, r"in1 expects a clnn.Tensor or a NumPy array; got dict"),
    (lambda v, m: clnn.signal.correlate(np.ones(3, complex), v), TypeError, r"in1 expects real numbers; got dtype c"),
    (lambda v, m: clnn.signal.correlation_lags(0, 3), ValueError, r"in1_len expects an int >= 1; got 0"),
    (lambda v, m: clnn.signal.correlation_lags(3, 2.5), TypeError, r"in2_len expects an int; got float"),
    (lambda v, m: clnn.signal.correlation_lags(3, 2, "middle"), ValueError, r"mode expects one of .*got 'middle'"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), ERRORS, ids=[f"{i}-{e[1].__name__}" for i, e in enumerate(ERRORS)])
def test_errors(call, exc, pattern):
    v, m = clnn.tensor(np.ones(5, np.float32)), clnn.tensor(np.ones((3, 4), np.float32))
    with pytest.raises(exc, match=pattern):
        call(v, m)
