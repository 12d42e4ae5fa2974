"""Tensor round trips and every foundation op against NumPy on fresh random values."""

from __future__ import annotations

import dataclasses
import operator

import numpy as np
import pytest
import torch
from helpers import assert_close
from numpy.lib.stride_tricks import as_strided
from torch_ref import check_against_torch

import clnn
from clnn.kernels import descriptor
from clnn.ops.shape import _rect, strided_copy

SIZES = [1, 7, 1023, 4097]
DTYPES = ["float32", "float64", "float16"]


def _skip_unsupported(dev, dtype):
    if not dev.supports(np.dtype(dtype)):
        pytest.skip(f"{dtype} is not supported on {dev}")


def _tol(dtype):
    return {"float32": 1e-5, "float64": 1e-12, "float16": 1e-3}[np.dtype(dtype).name]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "bool"])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 3, 4, 5)])
def test_round_trip_is_exact(dev, rng, dtype, shape):
    _skip_unsupported(dev, dtype)
    host = (rng.standard_normal(shape) * 100).astype(dtype)
    t = clnn.tensor(host, device=dev)
    assert t.shape == shape and t.dtype == np.dtype(dtype) and t.device is dev
    np.testing.assert_array_equal(t.numpy(), host)
    np.testing.assert_array_equal(np.asarray(t), host)
    assert t.numpy().dtype == host.dtype


def test_tensor_from_lists_and_default_dtypes(dev):
    assert clnn.tensor([1.5, 2.0], device=dev).dtype == np.float32
    assert clnn.tensor([1, 2], device=dev).dtype == np.int64
    assert clnn.tensor([True, False], device=dev).dtype == np.bool_
    assert clnn.tensor(np.ones(3, np.int32), device=dev).dtype == np.int32
    assert clnn.tensor([[1, 2]], dtype="float32", device=dev).numpy().tolist() == [[1.0, 2.0]]


def test_non_contiguous_numpy_input(dev, rng):
    host = rng.standard_normal((6, 8)).astype(np.float32)[::2, 1::3].T
    np.testing.assert_array_equal(clnn.tensor(host, device=dev).numpy(), host)


@pytest.mark.parametrize(
    ("make", "ref"),
    [
        (lambda d: clnn.zeros(3, 4, device=d), np.zeros((3, 4), np.float32)),
        (lambda d: clnn.ones((2, 5), dtype="float64", device=d), np.ones((2, 5))),
        (lambda d: clnn.full((7,), -2.5, device=d), np.full(7, -2.5, np.float32)),
        (lambda d: clnn.arange(1, 10, 2, device=d), np.arange(1, 10, 2)),
        (lambda d: clnn.arange(0.5, 3.0, 0.5, device=d), np.arange(0.5, 3.0, 0.5).astype(np.float32)),
        (lambda d: clnn.zeros_like(clnn.ones(2, 2, device=d)), np.zeros((2, 2), np.float32)),
        (lambda d: clnn.ones_like(clnn.zeros(3, device=d, dtype="int32")), np.ones(3, np.int32)),
    ],
)
def test_creation_functions(dev, make, ref):
    if not dev.fp64 and ref.dtype == np.float64:
        pytest.skip("no fp64")
    t = make(dev)
    assert t.dtype == ref.dtype
    np.testing.assert_array_equal(t.numpy(), ref)


def test_empty_has_shape_and_dtype(dev):
    t = clnn.empty(4, 5, dtype="int32", device=dev)
    assert t.shape == (4, 5) and t.dtype == np.int32


def _philox4x32_10(counter: list[np.ndarray], key: list[int]) -> list[np.ndarray]:
    """Philox4x32-10 (Salmon et al., SC'11) on the host, in NumPy: the reference for kernels_cl/philox.h."""
    mask, c = np.uint64(0xFFFFFFFF), [np.asarray(v, np.uint64) for v in counter]
    k = [np.uint64(v) for v in key]
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k[0], p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k[1], p0 & mask]
        k = [(k[0] + np.uint64(0x9E3779B9)) & mask, (k[1] + np.uint64(0xBB67AE85)) & mask]
    return c


def test_uniform_draws_are_philox4x32_10(dev):
    """rand's words are Philox4x32-10's, bit for bit: the host reference reproduces Random123's known answers,
    and element 4i + j of a draw with seed s is word j of counter (i, 0, 0, 0) under key (s low, s high)."""
    kat = {((0,) * 4, (0, 0)): (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
           ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2): (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)):
               (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)}
    for (counter, key), words in kat.items():
        assert [int(w) for w in _philox4x32_10(list(counter), list(key))] == list(words)
    n, seed = 1031, 0x299F31D0_A4093822
    i = np.arange(-(-n // 4), dtype=np.uint64)
    words = np.stack(_philox4x32_10([i, 0 * i, 0 * i, 0 * i], [seed & 0xFFFFFFFF, seed >> 32]), axis=1).ravel()[:n]
    ref = (words >> np.uint64(8)).astype(np.float32) * np.float32(2.0**-24)
    np.testing.assert_array_equal(clnn.rand(n, seed=seed, device=dev).numpy(), ref)


@pytest.mark.parametrize("n", [1, 7, 4097, 100_003])
def test_random_draws_are_seeded_and_distributed(dev, n):
    u = clnn.rand(n, seed=42, device=dev).numpy()
    assert u.dtype == np.float32 and u.shape == (n,)
    np.testing.assert_array_equal(u, clnn.rand(n, seed=42, device=dev).numpy())
    assert ((u >= 0) & (u < 1)).all()
    z = clnn.randn(n, seed=7, device=dev).numpy()
    assert np.isfinite(z).all()
    if n > 4000:
        assert abs(u.mean() - 0.5) < 0.02 and abs(u.std() - 12**-0.5) < 0.02
        assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
        assert not np.array_equal(u, clnn.rand(n, seed=43, device=dev).numpy())
    clnn.manual_seed(3)
    a = clnn.randn(5, 3, device=dev).numpy()
    b = clnn.randn(5, 3, device=dev).numpy()
    clnn.manual_seed(3)
    np.testing.assert_array_equal(a, clnn.randn(5, 3, device=dev).numpy())
    assert not np.array_equal(a, b)


BINARY = [
    (operator.add, None),
    (operator.sub, None),
    (operator.mul, None),
    (operator.truediv, "nonzero"),
    (operator.pow, "positive"),
    (clnn.maximum, None),
    (clnn.minimum, None),
]
NP_BINARY = {clnn.maximum: np.maximum, clnn.minimum: np.minimum}


def _inputs(rng, shape, kind, dtype):
    x = rng.standard_normal(shape)
    if kind == "positive":
        x = np.abs(x) + 0.5
    elif kind == "nonzero":
        x = np.sign(x) * (np.abs(x) + 0.5)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(("op", "kind"), BINARY)
def test_binary_ops_match_numpy(dev, rng, dtype, n, op, kind):
    _skip_unsupported(dev, dtype)
    # float16: operands of 0.5 and more, so that no product or quotient falls among half's subnormals (below 6e-5),
    # which hold fewer bits than the tolerance (a lone product did about once in 9000 draws)
    least = "nonzero" if dtype == "float16" else None
    a = _inputs(rng, (n,), "positive" if op is operator.pow else least, dtype)
    b = _inputs(rng, (n,), kind or least, dtype)
    ref_op = NP_BINARY.get(op, op)
    ref = ref_op(a.astype(np.float64), b.astype(np.float64))
    assert_close(op(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev)).numpy(), ref, _tol(dtype))


BROADCAST_CASES = [
    ((1,), (7,)),
    ((7,), (1,)),
    ((), (3, 4)),
    ((3, 1), (1, 4)),
    ((5, 1, 7), (3, 1)),
    ((2, 1, 3, 1), (4, 1, 5)),
    ((1, 1), (1, 1)),
    ((1023, 1), (1, 3)),
    ((0, 3), (1, 3)),
    ((2, 3, 1, 2, 1, 2, 1, 2, 3), (3, 1, 2, 1, 2, 1, 1)),
]


@pytest.mark.parametrize(("sa", "sb"), BROADCAST_CASES)
@pytest.mark.parametrize(("op", "kind"), BINARY[:4])
def test_broadcasting_matches_numpy(dev, rng, sa, sb, op, kind):
    a, b = _inputs(rng, sa, None, np.float32), _inputs(rng, sb, kind, np.float32)
    out = op(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev))
    ref = op(a.astype(np.float64), b.astype(np.float64))
    assert out.shape == ref.shape
    if ref.size:
        assert_close(out.numpy(), ref)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow])
@pytest.mark.parametrize("scalar", [2, -0.75, 3.5])
def test_scalar_operands_on_both_sides(dev, rng, op, scalar):
    a = np.abs(rng.standard_normal((5, 3))).astype(np.float32) + 0.5
    t = clnn.tensor(a, device=dev)
    assert_close(op(t, scalar).numpy(), op(a.astype(np.float64), scalar))
    assert_close(op(scalar if op is not operator.pow else abs(scalar), t).numpy(),
                 op(scalar if op is not operator.pow else abs(scalar), a.astype(np.float64)))


def test_numpy_array_operands_upload_beside_the_tensor(dev, rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    assert_close((clnn.tensor(a, device=dev) + b).numpy(), a.astype(np.float64) + b)
    assert_close((b * clnn.tensor(a, device=dev)).numpy(), a.astype(np.float64) * b)


UNARY = [
    ("neg", operator.neg, np.negative, None),
    ("exp", lambda t: t.exp(), np.exp, None),
    ("log", lambda t: t.log(), np.log, "positive"),
    ("sqrt", lambda t: t.sqrt(), np.sqrt, "positive"),
    ("abs", abs, np.abs, None),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(("name", "op", "ref", "kind"), UNARY)
def test_unary_ops_match_numpy(dev, rng, dtype, n, name, op, ref, kind):
    _skip_unsupported(dev, dtype)
    a = _inputs(rng, (n, 1), kind, dtype)
    assert_close(op(clnn.tensor(a, device=dev)).numpy(), ref(a.astype(np.float64)), _tol(dtype), name)


COMPARE = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@pytest.mark.parametrize("op", COMPARE)
@pytest.mark.parametrize(("sa", "sb"), [((7,), (7,)), ((1023, 1), (1, 5)), ((3,), ())])
def test_comparisons_match_numpy(dev, rng, op, sa, sb):
    a = rng.integers(-3, 3, sa).astype(np.float32)
    b = rng.integers(-3, 3, sb).astype(np.float32)
    out = op(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev))
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out.numpy(), op(a, b))
    np.testing.assert_array_equal(op(clnn.tensor(a, device=dev), 1.0).numpy(), op(a, 1.0))


def test_integer_tensors_compare_as_numbers(dev, rng):
    y = rng.integers(0, 10, 4097)
    p = y.copy()
    p[::3] = 0
    eq = clnn.tensor(p, device=dev) == clnn.tensor(y, device=dev)
    np.testing.assert_array_equal(eq.numpy(), p == y)
    assert float(eq.astype("float32").mean().item()) == pytest.approx((p == y).mean())


REDUCE_SHAPES = [(1,), (7,), (1023,), (4097,), (3, 5), (4097, 3), (2, 3, 4, 5), (1, 1, 7)]


@pytest.mark.parametrize("shape", REDUCE_SHAPES)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "argmax", "argmin", "logsumexp"])
def test_reductions_over_each_axis_and_all(dev, rng, shape, name):
    # sums of signed values can cancel to near zero, where float32's relative error is unbounded:
    # sum and mean get positive inputs (condition number 1); the others have no cancellation
    if name in ("sum", "mean"):
        a = (rng.random(shape) + 0.5).astype(np.float32)
    else:
        a = rng.standard_normal(shape).astype(np.float32)
    t = clnn.tensor(a, device=dev)
    a64 = a.astype(np.float64)

    def ref(axis, keepdims):
        if name == "logsumexp":
            m = a64.max(axis=axis, keepdims=True)
            out = np.log(np.exp(a64 - m).sum(axis=axis, keepdims=True)) + m
            return out if keepdims else np.squeeze(out, axis=axis)
        return getattr(np, name)(a64, axis=axis, keepdims=keepdims)

    axes = [None, *range(len(shape)), *range(-len(shape), 0)]
    if len(shape) >= 3:
        axes += [(0, 2), (1, 2), (0, len(shape) - 1)]
    for axis in axes:
        if name.startswith("arg") and isinstance(axis, tuple):
            continue
        for keepdims in (False, True):
            out = getattr(t, name)(axis=axis, keepdims=keepdims)
            expected = ref(axis, keepdims)
            if name.startswith("arg"):
                assert out.dtype == np.int64
                np.testing.assert_array_equal(out.numpy(), expected)
            else:
                assert out.shape == np.shape(expected), (axis, keepdims)
                assert_close(out.numpy(), expected, 1e-5, f"{name} axis={axis}")


def test_long_reductions_are_deterministic(dev, rng):
    # positive values: a signed sum of 10**6 normals is ~1000 times smaller than the sum of magnitudes,
    # and float32 accumulation error relative to that small result exceeds 1e-5 by itself
    t = clnn.tensor((rng.random(1_000_003) + 0.5).astype(np.float32), device=dev)
    first = t.sum().numpy()
    assert all(np.array_equal(first, t.sum().numpy()) for _ in range(3))
    assert_close(first, t.numpy().astype(np.float64).sum())


def test_reductions_propagate_nan_like_numpy(dev):
    a = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -1.0]], np.float32)
    t = clnn.tensor(a, device=dev)
    np.testing.assert_array_equal(t.max(axis=1).numpy(), np.max(a, axis=1))
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), np.argmax(a, axis=1))
    assert np.isnan(t.sum().item())


def test_ties_pick_the_first_index(dev):
    t = clnn.tensor(np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32), device=dev)
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), [1, 0])
    np.testing.assert_array_equal(t.argmin(axis=1).numpy(), [3, 0])
    assert int(t.argmax().item()) == 1


# (shape, axis, whether even a 2-unit CPU splits the axis)
# (1031, 161) over rows: CPUs' column sums take two whole blocks of 4 x 16 columns, two vectors and a column
SPLIT_CASES = [((1,), None, False), ((13,), 0, False), ((2**20 + 3,), None, True), ((1031, 161), 0, True),
               ((4097, 33), -1, False), ((33, 4097), 0, False), ((33, 4097), -1, False), ((3, 5003, 5), 1, True),
               ((3, 3001, 5), 1, False)]  # 45K elements: under SPLIT_MIN, one stage


@pytest.mark.parametrize(("shape", "axis", "splits"), SPLIT_CASES, ids=[f"{s}-{a}" for s, a, _ in SPLIT_CASES])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", ["device", "gpu"])
def test_reductions_split_across_work_groups(dev, rng, monkeypatch, shape, axis, splits, dtype, plan):
    # long axes with few outputs are reduced in stages (partials per chunk of the axis, then again);
    # the plan follows the device's compute units, so these shapes split on a 2-unit CPU too.
    # plan="gpu" poses as a GPU, so a CPU also runs the work-group paths it would not pick itself
    _skip_unsupported(dev, dtype)
    from clnn.ops import reduce as red

    if plan == "gpu":
        monkeypatch.setattr(dev, "type", "gpu")

    stages = []
    original = red._stage
    monkeypatch.setattr(red, "_stage", lambda op, src, part, *a: stages.append(part is not None) or
                        original(op, src, part, *a))
    # positive: the sum's condition number is 1; float16 scaled so a sum of 2**20 values stays finite
    a = ((rng.random(shape) + 0.5) * (2**-5 if dtype == "float16" else 1)).astype(dtype)
    t, a64 = clnn.tensor(a, device=dev), a.astype(np.float64)
    for name in ("sum", "max", "min", "logsumexp", "argmax", "argmin"):
        out = getattr(t, name)(axis=axis).numpy()
        if name.startswith("arg"):
            np.testing.assert_array_equal(out, getattr(np, name)(a, axis=axis))
            continue
        ref = np.log(np.exp(a64).sum(axis=axis)) if name == "logsumexp" else getattr(np, name)(a64, axis=axis)
        assert_close(out, ref, _tol(dtype), f"{name} axis={axis}")
    assert any(stages) or not splits, f"{shape} axis {axis} was never split on {dev}"


def test_split_arg_reductions_keep_the_first_extreme_and_nan(dev, rng):
    a = rng.standard_normal(2**20 + 3).astype(np.float32)
    a[[700_001, 3, 900_000]] = 9.0  # ties in different chunks: the first index wins
    a[[5, 1_000_000]] = -9.0
    t = clnn.tensor(a, device=dev)
    assert (int(t.argmax().item()), int(t.argmin().item())) == (3, 5)
    a[[800_000, 400_000]] = np.nan  # NaN beats everything; the first NaN wins
    t = clnn.tensor(a, device=dev)
    assert (int(t.argmax().item()), int(t.argmin().item())) == (400_000, 400_000)
    assert np.isnan(t.max().item()) and np.isnan(t.min().item())
    cols = clnn.tensor(np.repeat(a[:, None], 3, 1)[:100_003], device=dev)
    np.testing.assert_array_equal(cols.argmax(axis=0).numpy(), np.argmax(a[:100_003, None].repeat(3, 1), axis=0))


@pytest.mark.parametrize("shape", [(3, 5001), (5001, 3)])
def test_logsumexp_of_infinite_rows(dev, rng, shape):
    a = rng.standard_normal(shape).astype(np.float32)
    axis = 1 if shape[0] == 3 else 0
    row = (slice(None), 1) if axis == 0 else (1, slice(None))
    a[row] = -np.inf  # an all -inf row gives -inf (every chunk of it too)
    a[(2, 4000) if axis == 1 else (4000, 2)] = np.inf
    out = clnn.tensor(a, device=dev).logsumexp(axis=axis).numpy()
    a64 = a.astype(np.float64)
    np.testing.assert_array_equal(out[1:], [-np.inf, np.inf])
    assert_close(out[0], np.log(np.exp(a64.take(0, axis=1 - axis)).sum()))


def test_split_reductions_are_bit_identical_on_rerun(dev, rng):
    t = clnn.tensor(rng.standard_normal((4097, 33)).astype(np.float32), device=dev)
    for axis in (None, 0, 1):
        for name in ("sum", "logsumexp"):
            first = getattr(t, name)(axis=axis).numpy()
            assert np.array_equal(first, getattr(t, name)(axis=axis).numpy()), (name, axis)


LAYOUT = [
    (lambda t: t.reshape(6, -1), lambda a: a.reshape(6, -1)),
    (lambda t: t.reshape((4, 3, 5)), lambda a: a.reshape(4, 3, 5)),
    (lambda t: t.flatten(), lambda a: a.reshape(-1)),
    (lambda t: t.flatten(1), lambda a: a.reshape(2, -1)),
    (lambda t: t.transpose(0, 2), lambda a: a.transpose(2, 1, 0)),
    (lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    (lambda t: t.T, lambda a: a.T),
    (lambda t: t[1], lambda a: a[1]),
    (lambda t: t[:, 1:3], lambda a: a[:, 1:3]),
    (lambda t: t[..., ::2], lambda a: a[..., ::2]),
    (lambda t: t[::-1, None, 2, 4:0:-3], lambda a: a[::-1, None, 2, 4:0:-3]),
    (lambda t: t[-1, -2, -3], lambda a: a[-1, -2, -3]),
    (lambda t: t[:, 5:], lambda a: a[:, 5:]),
    (lambda t: t.broadcast_to((3, 2, 6, 5)), lambda a: np.broadcast_to(a, (3, 2, 6, 5))),
]


@pytest.mark.parametrize(("op", "ref"), LAYOUT)
def test_layout_ops_match_numpy(dev, rng, op, ref):
    a = rng.standard_normal((2, 6, 5)).astype(np.float32)
    out = op(clnn.tensor(a, device=dev))
    expected = ref(a)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("dst", ["float32", "float16", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("src", ["float32", "int64", "bool"])
def test_astype_matches_numpy(dev, rng, src, dst):
    _skip_unsupported(dev, dst)
    a = (rng.standard_normal(1023) * 50).astype(src)
    np.testing.assert_array_equal(clnn.tensor(a, device=dev).astype(dst).numpy(), a.astype(dst))


def test_to_moves_between_devices(dev, rng):
    other = dataclasses.replace(dev, _context=None, _queue=None, _pool=None)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    moved = clnn.tensor(a, device=dev).to(other)
    assert moved.device is other
    np.testing.assert_array_equal(moved.numpy(), a)
    np.testing.assert_array_equal(clnn.tensor(a, device=dev).to(dtype="float16").numpy(), a.astype(np.float16))


def test_item_len_repr(dev):
    t = clnn.tensor([[2.5]], device=dev)
    assert t.item() == 2.5 and float(t) == 2.5 and len(t) == 1
    assert "tensor(" in repr(t) and "float32" in repr(t)


ERRORS = [
    (lambda d: clnn.ones(3, device=d) + clnn.ones(4, device=d), ValueError, r"add: shapes \(3,\) and \(4,\)"),
    (lambda d: clnn.ones(3, device=d) * clnn.ones(3, dtype="float16", device=d), TypeError,
     "a has dtype float32 but b has dtype float16"),
    (lambda d: clnn.ones(3, device=d) < clnn.ones((2, 2), device=d), ValueError, "cannot be broadcast"),
    (lambda d: clnn.ones(6, device=d).reshape(4, -1), ValueError, r"cannot reshape .*\(6,\)"),
    (lambda d: clnn.ones(6, device=d).reshape(-1, -1), ValueError, "one -1"),
    (lambda d: clnn.ones((2, 3), device=d).permute(0, 0), ValueError, "permutation"),
    (lambda d: clnn.ones((2, 3), device=d).sum(axis=2), ValueError, r"axis: expected a value in \[-2, 1\]; got 2"),
    (lambda d: clnn.ones((2, 3), device=d)[2], IndexError, "index 2 is out of bounds for axis 0 with size 2"),
    (lambda d: clnn.ones((2, 3), device=d)[0, 0, 0], IndexError, "too many indices"),
    (lambda d: clnn.ones((2, 3), device=d)[[0.5]], TypeError, "expects integer indices"),
    (lambda d: clnn.ones((2, 3), device=d)[::0], ValueError, "step cannot be zero"),
    (lambda d: clnn.ones(3, dtype="int64", device=d) + 1, TypeError, "expects a floating tensor"),
    (lambda d: clnn.zeros(3, dtype="complex64", device=d), TypeError, "dtype: expected one of"),
    (lambda d: clnn.zeros((2, -1), device=d), ValueError, "dimensions must be >= 0"),
    (lambda d: clnn.zeros((0, 3), device=d).max(), ValueError, "cannot reduce an empty axis"),
    (lambda d: clnn.ones(3, device=d).item(), ValueError, "one element"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), ERRORS)
def test_errors_name_both_sides(dev, call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call(dev)


def test_mixed_devices_raise_before_launch(dev):
    other = dataclasses.replace(dev, _context=None, _queue=None, _pool=None)
    a, b = clnn.ones(3, device=dev), clnn.ones(3, device=other)
    with pytest.raises(ValueError, match=r"add: a is on .* but b is on .*\.to\(device\)"):
        a + b
    with pytest.raises(ValueError, match="matmul: a is on"):
        clnn.ones((2, 2), device=dev) @ clnn.ones((2, 2), device=other)


def test_float64_on_a_device_without_fp64_is_refused(dev, monkeypatch):
    monkeypatch.setattr(dev, "fp64", False)
    with pytest.raises(TypeError, match="float64 is not supported on .*cl_khr_fp64"):
        clnn.zeros(3, dtype="float64", device=dev)
    half = clnn.tensor(np.arange(5, dtype=np.float16), device=dev)  # half storage works everywhere
    np.testing.assert_array_equal((half * 2).numpy(), np.arange(5, dtype=np.float16) * 2)


def test_float16_arithmetic_is_native_half_where_the_device_has_fp16(dev, rng):
    from clnn import kernels

    a = rng.standard_normal(4097).astype(np.float16)
    out = clnn.tensor(a, device=dev) * 3 - 1  # two half roundings at most: < 2 ** -10 relative each
    assert_close(out.numpy(), a.astype(np.float64) * 3 - 1, 1e-3)
    builds = [dict(key[3]) for key in kernels._programs if key[2] == "elementwise.cl" and key[0] == dev.context.int_ptr]
    half = [d for d in builds if d["STORE_T"] == "half"]
    assert half and all(d["REAL_T"] == ("half" if dev.fp16 else "float") for d in half)


def test_a_kernels_first_launch_fixes_its_scalar_types(dev, rng):
    """The first launch declares the by-value argument types to PyOpenCL (its fast packing path); later
    launches pass other sizes, and plain Python floats, which are converted to those types."""
    from clnn import kernels
    from clnn.ops._core import empty
    from clnn.ops.elementwise import UNARY

    k = kernels.kernel(dev, "elementwise.cl", "unary", kernels.defines(np.float32, EW_VEC=1, TYPES_PROBE=1))
    assert k in kernels._untyped
    for n, scale in ((37, np.float32(2.5)), (1, -3.0), (4097, 0.1)):
        x = rng.standard_normal(n).astype(np.float32)
        src, dst = clnn.tensor(x, device=dev), empty((n,), np.float32, dev)
        kernels.launch_1d(dev, k, n, np.int32(UNARY["mul_s"]), np.int32(n), src.data, dst.data, scale, np.float32(0))
        assert k not in kernels._untyped
        assert_close(dst.numpy(), x.astype(np.float64) * np.float32(scale), 1e-6)


def test_zero_size_tensors(dev):
    t = clnn.zeros((0, 4), device=dev)
    assert (t + 1).shape == (0, 4)
    assert t.sum(axis=0).numpy().tolist() == [0.0] * 4
    assert t.numpy().shape == (0, 4)


# (9, 67, 11, 3) and (2, 3, 4099): a CPU's strided copy walks 85 rows of 3 a work-item, across the edges of the 67
# rows outside them, and runs of 256 of a 4099-long row (kernels.launch_runs)
PERMUTES = [((33, 65), (1, 0)), ((3, 31, 1, 97), (0, 3, 2, 1)), ((2, 5, 7, 32), (0, 2, 3, 1)), ((1, 129), (1, 0)),
            ((4, 17, 16), (0, 2, 1)), ((3, 4, 5, 6), (2, 0, 3, 1)), ((9, 67, 11, 3), (0, 2, 1, 3)),
            ((2, 3, 4099), (1, 0, 2))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "axes"), PERMUTES)
def test_permutes_copy_exactly(dev, rng, dtype, shape, axes):
    """Permutes, forward and backward: batched transposes of the last axes go through copy.cl's tiled kernel (tiles
    straddled by odd sizes), other orders through the strided copy; every element lands exactly."""
    _skip_unsupported(dev, dtype)
    x = rng.standard_normal(shape).astype(dtype)
    t = clnn.tensor(x, device=dev, requires_grad=True)
    y = t.permute(axes)
    np.testing.assert_array_equal(y.numpy(), x.transpose(axes))
    g = rng.standard_normal(y.shape).astype(dtype)
    y.backward(clnn.tensor(g, device=dev))
    np.testing.assert_array_equal(t.grad.numpy(), g.transpose(np.argsort(axes)))


def test_broadcasts_walk_several_rows_a_work_item(dev, rng):
    """The broadcasting maps and where by runs of 85 rows of 3 a work-item on a CPU (kernels.launch_runs), across the
    edges of the 67 rows outside them; exact, as NumPy's float32 arithmetic."""
    a, b = rng.standard_normal((9, 67, 11, 3)).astype(np.float32), rng.standard_normal((67, 1, 3)).astype(np.float32)
    ta, tb = clnn.tensor(a, device=dev), clnn.tensor(b, device=dev)
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta > tb).numpy(), a > b)
    cond = rng.random((67, 11, 1)) > 0.5
    np.testing.assert_array_equal(clnn.where(clnn.tensor(cond, device=dev), ta, tb).numpy(), np.where(cond, a, b))


CATS = [([(3,), (1,), (5,)], 0), ([(2, 3), (2, 1)], 1), ([(2, 3, 4), (5, 3, 4)], 0),
        ([(2, 3, 4), (2, 3, 7), (2, 3, 1)], -1), ([(1, 1)], 0)]


@pytest.mark.parametrize(("shapes", "axis"), CATS)
def test_cat_matches_torch(rng, shapes, axis):
    """cat's output and each part's gradient (a slice of the upstream gradient), against torch in float64."""
    check_against_torch(lambda *ts: clnn.cat(ts, axis=axis), lambda *ts: torch.cat(ts, dim=axis),
                        [rng.standard_normal(s) for s in shapes], rng)


# (shape, source strides, destination strides, source offset, destination offset, whether rows are a rectangular
# copy): strided_copy moves rows contiguous on both sides with the runtime's rectangular copy, the rest by kernel
STRIDED_COPIES = [
    ((7,), (1,), (1,), 3, 2, True),
    ((5, 3, 4), (40, 4, 1), (12, 4, 1), 6, 0, True),  # rows 1 .. 4 of each of five (10, 4) blocks
    ((5, 3, 4), (12, 4, 1), (40, 4, 1), 0, 9, True),  # and back
    ((3, 2, 5), (27, 13, 1), (10, 5, 1), 1, 0, False),  # slice pitch 27 not a multiple of row pitch 13
    ((3, 2, 5), (13, 6, 1), (10, 5, 1), 0, 0, False),  # slice pitch 13 under two rows of pitch 6
    ((2, 4, 3), (12, 3, 1), (12, 1, 4), 0, 0, False),  # destination rows not contiguous
    ((4, 3), (0, 1), (3, 1), 0, 0, False),  # a broadcast
    ((2, 3, 2, 3), (100, 30, 7, 1), (18, 6, 3, 1), 0, 0, False),  # four dims that do not merge
    ((2, 2, 2, 9001), (40000, 19000, 9500, 1), (36004, 18002, 9001, 1), 5, 0, False),  # rows of three chunks (CPUs)
]


@pytest.mark.parametrize(("shape", "s_src", "s_dst", "o_src", "o_dst", "rect"), STRIDED_COPIES)
@pytest.mark.parametrize("room", [0, 64])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
def test_strided_copy_rows_and_elements(rng, monkeypatch, shape, s_src, s_dst, o_src, o_dst, rect, room, dtype):
    """strided_copy against NumPy's strided views, the whole destination compared (nothing else written), and the
    rectangular-copy test itself: it takes exactly the cases that OpenCL's rectangular copy allows. Buffers end
    where the copy does (``room`` 0: the last slice's pitch reaches past them, which NVIDIA's runtime refuses to
    copy as a rectangle) or ``room`` elements later, where rectangles are copied as such."""
    assert (_rect(descriptor(shape, s_src, s_dst)) is not None) == rect
    span = [o + sum((n - 1) * s for n, s in zip(shape, st)) + 1 for o, st in ((o_src, s_src), (o_dst, s_dst))]
    src_n = (rng.standard_normal(span[0] + room) * 100).astype(dtype)
    dst_n = (rng.standard_normal(span[1] + 3 + room) * 100).astype(dtype)
    src, dst = clnn.tensor(src_n), clnn.tensor(dst_n)
    rects, copy_rect = [], clnn.Device.copy_rect
    monkeypatch.setattr(clnn.Device, "copy_rect", lambda dev, *args: rects.append(args) or copy_rect(dev, *args))
    strided_copy(src, dst, shape, s_src, s_dst, src_offset=o_src, dst_offset=o_dst)
    if room or not rect:  # without room, the pool's rounding of the buffers decides
        assert len(rects) == int(rect)
    size = src_n.itemsize
    view = as_strided(dst_n[o_dst:], shape, [s * size for s in s_dst])
    view[...] = as_strided(src_n[o_src:], shape, [s * size for s in s_src])
    np.testing.assert_array_equal(dst.numpy(), dst_n)
