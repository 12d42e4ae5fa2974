"""Pooling (max, average, adaptive average) against torch.nn.functional in float64: outputs and gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import assert_close
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import clnn
import clnn.functional as F

# (clnn op, torch op, input shape, kwargs): odd sizes, primes, 1s, every parameter of each op
CASES = [
    (F.max_pool2d, TF.max_pool2d, (2, 3, 8, 8), dict(kernel_size=2)),
    (F.max_pool2d, TF.max_pool2d, (2, 3, 9, 7), dict(kernel_size=2)),  # 2x2 / 2 with a row and a column left out
    (F.max_pool2d, TF.max_pool2d, (2, 3, 8, 9), dict(kernel_size=(2, 3), stride=2)),  # 2x2 / 2's neighbour
    (F.max_pool2d, TF.max_pool2d, (1, 1, 1, 1), dict(kernel_size=1)),
    (F.max_pool2d, TF.max_pool2d, (3, 2, 7, 11), dict(kernel_size=3, stride=2, padding=1)),
    (F.max_pool2d, TF.max_pool2d, (2, 3, 13, 9), dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0))),
    (F.max_pool2d, TF.max_pool2d, (2, 2, 17, 19), dict(kernel_size=3, stride=2, dilation=2, padding=1)),
    (F.max_pool2d, TF.max_pool2d, (1, 3, 9, 10), dict(kernel_size=(2, 4), dilation=(3, 1), padding=(1, 2))),
    (F.max_pool2d, TF.max_pool2d, (2, 2, 5, 5), dict(kernel_size=2, stride=2, ceil_mode=True)),
    (F.max_pool2d, TF.max_pool2d, (2, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (F.max_pool2d, TF.max_pool2d, (1, 2, 10, 7), dict(kernel_size=3, stride=3, dilation=2, ceil_mode=True)),
    # windows apart in columns, a row between them and one below the last, overlapping along rows (CPUs:
    # pool_max_bwd_bands), then the same with the first band in the padding and one ending past the input
    (F.max_pool2d, TF.max_pool2d, (2, 3, 13, 10), dict(kernel_size=(2, 3), stride=(3, 2), padding=(0, 1))),
    (F.max_pool2d, TF.max_pool2d, (2, 3, 11, 10), dict(kernel_size=(2, 3), stride=(3, 2), padding=1, ceil_mode=True)),
    (F.max_pool2d, TF.max_pool2d, (2, 5, 5), dict(kernel_size=2, stride=1)),  # (C, H, W)
    (F.max_pool2d, TF.max_pool2d, (1, 1, 3, 31), dict(kernel_size=(1, 5), stride=(1, 4), ceil_mode=True)),
    (F.avg_pool2d, TF.avg_pool2d, (2, 3, 8, 8), dict(kernel_size=2)),
    (F.avg_pool2d, TF.avg_pool2d, (3, 2, 7, 11), dict(kernel_size=3, stride=2, padding=1)),
    (F.avg_pool2d, TF.avg_pool2d, (3, 2, 7, 11), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    (F.avg_pool2d, TF.avg_pool2d, (2, 2, 5, 5), dict(kernel_size=2, stride=2, ceil_mode=True)),
    (F.avg_pool2d, TF.avg_pool2d, (2, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (
        F.avg_pool2d,
        TF.avg_pool2d,
        (2, 2, 6, 7),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    ),
    (F.avg_pool2d, TF.avg_pool2d, (1, 3, 13, 5), dict(kernel_size=(4, 3), stride=(3, 1), padding=(2, 1))),
    (F.avg_pool2d, TF.avg_pool2d, (2, 2, 9, 9), dict(kernel_size=3, stride=2, padding=1, divisor_override=5)),
    (F.avg_pool2d, TF.avg_pool2d, (3, 7, 6), dict(kernel_size=2, stride=1, padding=1)),  # (C, H, W)
    (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, (2, 3, 8, 8), dict(output_size=4)),
    (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, (2, 3, 7, 11), dict(output_size=(3, 5))),
    (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, (1, 2, 5, 3), dict(output_size=(7, 8))),  # larger than input
    (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, (2, 2, 13, 6), dict(output_size=(None, 1))),
    (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, (2, 2, 13, 6), dict(output_size=1)),
    (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, (3, 9, 10), dict(output_size=(4, None))),  # (C, H, W)
]
IDS = [f"{c[0].__name__}-{'x'.join(map(str, c[2]))}-{i}" for i, c in enumerate(CASES)]


def _compare(op, tf, x: np.ndarray, kw: dict, dtype, tol: float, rng: np.random.Generator) -> None:
    t = clnn.tensor(x.astype(dtype), requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    y, ty = op(t, **kw), tf(tt, **kw)
    g = rng.standard_normal(ty.shape)
    y.backward(clnn.tensor(g.astype(dtype)))
    ty.backward(torch.tensor(g))
    assert y.dtype == dtype
    assert_close(y.numpy(), ty.detach().numpy(), tol, "forward")
    assert_close(t.grad.numpy(), tt.grad.numpy(), tol, "gradient")


@pytest.mark.parametrize(("op", "tf", "shape", "kw"), CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_torch(op, tf, shape, kw, dtype, rng):
    _compare(op, tf, rng.standard_normal(shape), kw, dtype, 1e-5 if dtype == np.float32 else 1e-12, rng)


# overlapping windows (with and without ceil_mode), and 2x2 / 2 (pool.cl's max_2x2)
WINDOWS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
           dict(kernel_size=2)]


@pytest.mark.parametrize("kw", WINDOWS)
def test_max_pool_ties_route_like_torch(kw, rng):
    # few distinct values: windows hold ties, and overlapping windows pick the same winners as PyTorch
    x = rng.integers(0, 3, (2, 3, 9, 8)).astype(np.float64)
    _compare(F.max_pool2d, TF.max_pool2d, x, kw, np.float64, 1e-12, rng)


@pytest.mark.parametrize("kw", WINDOWS[::2])
def test_max_pool_nan_propagates_and_takes_the_gradient(kw, rng):
    x = rng.standard_normal((1, 2, 6, 6))
    x[0, 0, 1, 1] = x[0, 0, 1, 4] = x[0, 0, 1, 5] = x[0, 1, 5, 5] = np.nan  # (1, 4) and (1, 5) in one window
    t = clnn.tensor(x, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    y, ty = F.max_pool2d(t, **kw), TF.max_pool2d(tt, **kw)
    np.testing.assert_array_equal(np.isnan(y.numpy()), np.isnan(ty.detach().numpy()))
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())


def test_empty_batch_and_zero_adaptive_output():
    x = clnn.zeros((0, 3, 5, 5), requires_grad=True)
    assert F.max_pool2d(x, 2).shape == (0, 3, 2, 2)
    assert F.avg_pool2d(x, 2).shape == (0, 3, 2, 2)
    x = clnn.ones((2, 3, 5, 5), requires_grad=True)
    assert F.adaptive_avg_pool2d(x, (0, 2)).shape == (2, 3, 0, 2)
    F.adaptive_avg_pool2d(x, (0, 2)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3, 5, 5)))


def test_composite_graph_gradient(rng):
    # x feeds two pools and a product; gradients from every path accumulate
    x = rng.standard_normal((2, 3, 9, 7))
    t = clnn.tensor(x, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    y = F.max_pool2d(t, 3, 2, 1) * F.avg_pool2d(t, 3, 2, 1, count_include_pad=False) + F.adaptive_avg_pool2d(t, (5, 4))
    ty = TF.max_pool2d(tt, 3, 2, 1) * TF.avg_pool2d(tt, 3, 2, 1, count_include_pad=False)
    ty = ty + TF.adaptive_avg_pool2d(tt, (5, 4))
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    assert_close(t.grad.numpy(), tt.grad.numpy(), 1e-12)


def test_deterministic(rng):
    # overlapping windows: every input gathers several gradients, summed in a fixed order
    x = clnn.tensor(rng.standard_normal((4, 8, 33, 31)).astype(np.float32), requires_grad=True)
    g = rng.standard_normal((4, 8, 17, 16)).astype(np.float32)
    for op, kw in ((F.max_pool2d, dict(padding=2, dilation=2)), (F.avg_pool2d, dict(padding=2))):
        runs = []
        for _ in range(2):
            x.grad = None
            y = op(x, 5, 2, ceil_mode=True, **kw)
            y.backward(clnn.tensor(g[..., : y.shape[2], : y.shape[3]]))
            runs.append((y.numpy(), x.grad.numpy()))
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize(("op", "tf", "shape", "kw"), CASES, ids=IDS)
def test_pixel_and_row_launches_agree_bitwise(op, tf, shape, kw, dev, monkeypatch, rng):
    """The GPU launch (a pixel per work-item) and the CPU launch (a row per work-item) give the same bits."""
    x = rng.standard_normal(shape).astype(np.float32)
    runs = []
    for kind in ("gpu", "cpu"):
        monkeypatch.setattr(dev, "type", kind)
        t = clnn.tensor(x, requires_grad=True)
        y = op(t, **kw)
        y.backward(clnn.tensor(np.linspace(-1, 2, y.size, dtype=np.float32).reshape(y.shape)))
        runs.append((y.numpy(), t.grad.numpy()))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_float16_storage(dev, rng):
    if not dev.supports(np.float16):
        pytest.skip(f"{dev} cannot hold float16 tensors")
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float16)
    y = F.avg_pool2d(clnn.tensor(x), 3, 2, 1)
    ref = TF.avg_pool2d(torch.tensor(x.astype(np.float64)), 3, 2, 1).numpy()
    assert_close(y.numpy(), ref, 2e-3)


@pytest.mark.usefixtures("fp64")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    h=st.integers(1, 12),
    w=st.integers(1, 12),
    k=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    s=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    p=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    d=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    ceil_mode=st.booleans(),
    count_pad=st.booleans(),
    which=st.sampled_from(["max", "avg"]),
)
def test_random_parameters_match_torch_or_both_reject(h, w, k, s, p, d, ceil_mode, count_pad, which):
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 3, h, w))
    if which == "max":
        kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil_mode)
        op, tf = F.max_pool2d, TF.max_pool2d
    else:
        kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil_mode, count_include_pad=count_pad)
        op, tf = F.avg_pool2d, TF.avg_pool2d
    try:
        out_h, out_w = tf(torch.tensor(x), **kw).shape[2:]
    except RuntimeError:
        with pytest.raises(ValueError):
            op(clnn.tensor(x), **kw)
        return
    if which == "max":
        # a window wholly in the padding gives -inf on both sides, but PyTorch's max_pool2d backward then
        # corrupts its heap (the process aborts): keep such windows out of the torch comparison
        assume(_every_window_touches_input(h, k[0], s[0], p[0], d[0], out_h))
        assume(_every_window_touches_input(w, k[1], s[1], p[1], d[1], out_w))
    _compare(op, tf, x, kw, np.float64, 1e-12, rng)


def _every_window_touches_input(n: int, k: int, s: int, p: int, d: int, n_out: int) -> bool:
    return all(any(0 <= o * s - p + j * d < n for j in range(k)) for o in range(n_out))


@pytest.mark.usefixtures("fp64")
@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 14), w=st.integers(1, 14), oh=st.integers(1, 16), ow=st.integers(1, 16))
def test_random_adaptive_sizes_match_torch(h, w, oh, ow):
    rng = np.random.default_rng()
    _compare(
        F.adaptive_avg_pool2d,
        TF.adaptive_avg_pool2d,
        rng.standard_normal((1, 2, h, w)),
        dict(output_size=(oh, ow)),
        np.float64,
        1e-12,
        rng,
    )


X = np.zeros((2, 3, 5, 5), np.float32)
ERRORS = [
    (lambda x: F.max_pool2d(x.numpy(), 2), TypeError, r"max_pool2d: x expects a clnn.Tensor; got ndarray"),
    (lambda x: F.max_pool2d(clnn.zeros((5, 5)), 2), ValueError, r"x expects a 3-D .* or 4-D .*got shape \(5, 5\)"),
    (lambda x: F.avg_pool2d(clnn.zeros((1, 1, 1, 5, 5)), 2), ValueError, r"avg_pool2d: x expects a 3-D"),
    (lambda x: F.max_pool2d(clnn.zeros((2, 0, 5, 5)), 2), ValueError, r"non-zero C, H and W.*\(2, 0, 5, 5\)"),
    (lambda x: F.adaptive_avg_pool2d(clnn.zeros((2, 3, 0, 5)), 2), ValueError, r"non-zero C, H and W"),
    (lambda x: F.max_pool2d(x.astype(np.int32), 2), TypeError, r"max_pool2d: x expects a floating tensor"),
    (lambda x: F.max_pool2d(x, 6), ValueError, r"too small for kernel_size \(6, 6\).*output would be \(0, 0\)"),
    (lambda x: F.avg_pool2d(x, (2, 7)), ValueError, r"avg_pool2d: input of spatial size \(5, 5\) is too small"),
    (lambda x: F.max_pool2d(x, 3, dilation=3), ValueError, r"dilation \(3, 3\).*output would be \(0, 0\)"),
    (lambda x: F.max_pool2d(x, 2, stride=0), ValueError, r"max_pool2d: stride expects values >= 1; got 0"),
    (lambda x: F.avg_pool2d(x, 2, stride=(1, 0)), ValueError, r"avg_pool2d: stride expects values >= 1; got \(1, 0\)"),
    (lambda x: F.max_pool2d(x, 0), ValueError, r"kernel_size expects values >= 1; got 0"),
    (lambda x: F.max_pool2d(x, 2, dilation=0), ValueError, r"dilation expects values >= 1; got 0"),
    (lambda x: F.max_pool2d(x, 2, padding=-1), ValueError, r"padding expects values >= 0; got -1"),
    (lambda x: F.max_pool2d(x, 3, padding=2), ValueError, r"padding must be at most half of kernel_size \(3, 3\)"),
    (lambda x: F.avg_pool2d(x, (4, 2), padding=(2, 2)), ValueError, r"at most half of kernel_size \(4, 2\)"),
    (lambda x: F.max_pool2d(x, (2, 2, 2)), TypeError, r"kernel_size expects an int or a tuple of 2 ints"),
    (lambda x: F.max_pool2d(x, 2.0), TypeError, r"kernel_size expects an int or a tuple of 2 ints; got 2.0"),
    (lambda x: F.avg_pool2d(x, 2, divisor_override=0), ValueError, r"divisor_override expects an int >= 1"),
    (lambda x: F.adaptive_avg_pool2d(x, (1, 2, 3)), TypeError, r"output_size expects an int, None or a pair"),
    (lambda x: F.adaptive_avg_pool2d(x, -1), ValueError, r"output_size entries must be >= 0; got -1"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), ERRORS, ids=[f"{i}-{e[1].__name__}" for i, e in enumerate(ERRORS)])
def test_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call(clnn.tensor(X))


def test_window_wholly_in_padding_gives_minus_inf_and_no_gradient(rng):
    x = rng.standard_normal((1, 2, 2, 5))
    kw = dict(kernel_size=(2, 1), stride=1, padding=(1, 0), dilation=(3, 1))  # rows -1 and 2 of a 2-row input
    ref = TF.max_pool2d(torch.tensor(x), **kw).numpy()  # torch's backward here corrupts its heap: forward only
    t = clnn.tensor(x, requires_grad=True)
    y = F.max_pool2d(t, **kw)
    np.testing.assert_array_equal(y.numpy(), ref)
    assert np.isneginf(ref).all()
    y.backward(clnn.tensor(rng.standard_normal(y.shape)))
    np.testing.assert_array_equal(t.grad.numpy(), np.zeros_like(x))
