"""The everyday tensor ops against PyTorch (float64): forward and every gradient, odd shapes, negative dims.

Index arguments are drawn per row from the row's own generator, so clnn and torch see the same ones.
Shapes straddle the work-group size (1, primes, > 256) and the scan block (scan rows longer than
IDX_WG * SCAN_K elements take the three-pass path).
"""

from __future__ import annotations

import re

import numpy as np
import pyopencl as cl
import pytest
import torch
from helpers import assert_close, assert_sum_close
from torch_ref import check_against_torch

import clnn
import clnn.functional as F
from clnn import nn, tuning

T = torch.tensor


def _idx(rng, high, shape):
    return rng.integers(0, high, shape)


def _pos(rng, *shape):
    return rng.uniform(0.5, 2.0, shape)


# Ops whose gradients sum signed terms (duplicate indices, broadcast or tiled dims, contractions).
SUMMING = {"gather", "scatter_add", "index_select", "getitem", "embedding", "einsum", "repeat", "expand", "where"}


# (id, input shapes, fn(rng) -> (clnn fn, torch fn)). Built per test so index draws are fresh.
def _rows():
    rows = []

    def add(name, shapes, make):
        rows.append(pytest.param(shapes, make, name.split()[0] in SUMMING, id=name))

    add("stack dim0", [(3, 5), (3, 5), (3, 5)], lambda r: (lambda *a: clnn.stack(a), lambda *a: torch.stack(a)))
    add("stack dim-1", [(2, 7), (2, 7)], lambda r: (lambda *a: clnn.stack(a, -1), lambda *a: torch.stack(a, -1)))
    add("split int", [(11, 3)], lambda r: (lambda a: clnn.cat(a.split(4)[::-1]), lambda a: torch.cat(a.split(4)[::-1])))
    add("split sections", [(3, 10)], lambda r: (lambda a: a.split([2, 7, 1], 1)[1], lambda a: a.split([2, 7, 1], 1)[1]))
    add("chunk", [(13, 2)], lambda r: (lambda a: a.chunk(4)[-1] * 2 + a.chunk(4)[0][:1],
                                       lambda a: a.chunk(4)[-1] * 2 + a.chunk(4)[0][:1]))
    add("squeeze all", [(1, 5, 1, 3)], lambda r: (lambda a: a.squeeze(), lambda a: a.squeeze()))
    add("squeeze dim", [(1, 5, 1)], lambda r: (lambda a: a.squeeze(-1), lambda a: a.squeeze(-1)))
    add("unsqueeze", [(4, 3)], lambda r: (lambda a: a.unsqueeze(-2), lambda a: a.unsqueeze(-2)))
    add("expand", [(3, 1)], lambda r: (lambda a: a.expand(2, -1, 5), lambda a: a.expand(2, -1, 5)))
    add("repeat", [(2, 3)], lambda r: (lambda a: a.repeat(2, 1, 3), lambda a: a.repeat(2, 1, 3)))
    add("var dim", [(7, 13)], lambda r: (lambda a: a.var(1), lambda a: a.var(1)))
    add("var all correction0", [(5, 3)], lambda r: (lambda a: a.var(correction=0), lambda a: a.var(correction=0)))
    add("std keepdim", [(3, 263)], lambda r: (lambda a: a.std(-1, keepdim=True), lambda a: a.std(-1, keepdim=True)))
    add("std dims", [(4, 3, 5)], lambda r: (lambda a: a.std((0, 2)), lambda a: a.std((0, 2))))
    add("tril", [(2, 5, 7)], lambda r: (lambda a: a.tril(), lambda a: a.tril()))
    add("tril diag-2", [(6, 4)], lambda r: (lambda a: a.tril(-2), lambda a: a.tril(-2)))
    add("triu diag1", [(3, 5, 5)], lambda r: (lambda a: a.triu(1), lambda a: a.triu(1)))
    add("triu diag big", [(3, 4)], lambda r: (lambda a: clnn.triu(a, 9), lambda a: torch.triu(a, 9)))

    def where_make(r):
        m = r.random((4, 1, 6)) < 0.5
        return (lambda a, b: clnn.where(clnn.tensor(m), a, b), lambda a, b: torch.where(T(m), a, b))
    add("where broadcast", [(3, 6), (4, 3, 1)], where_make)

    def where_scalar(r):
        m = r.random((5, 7)) < 0.5
        return (lambda a: clnn.where(clnn.tensor(m), 0.5, a), lambda a: torch.where(T(m), 0.5, a))
    add("where scalar", [(5, 7)], where_scalar)

    def masked(r):
        m = r.random((1, 9)) < 0.5
        return (lambda a: a.masked_fill(clnn.tensor(m), -3.0), lambda a: a.masked_fill(T(m), -3.0))
    add("masked_fill", [(4, 9)], masked)

    def gather(dim, shape, j):
        def make(r):
            s = list(shape)
            s[dim] = j
            i = _idx(r, shape[dim], s)
            return (lambda a: a.gather(dim, clnn.tensor(i)), lambda a: a.gather(dim, T(i)))
        return make
    add("gather dim1", [(4, 7)], gather(1, (4, 7), 11))
    add("gather dim0", [(5, 3, 2)], gather(0, (5, 3, 2), 2))
    add("gather dim-1 long", [(2, 300)], gather(-1, (2, 300), 257))

    def scatter(dim, shape, j):
        def make(r):
            s = list(shape)
            s[dim] = j
            i = _idx(r, shape[dim], s)
            return (lambda a, b: a.scatter_add(dim, clnn.tensor(i), b), lambda a, b: a.scatter_add(dim, T(i), b))
        return make
    add("scatter_add dim1", [(3, 5), (3, 9)], scatter(1, (3, 5), 9))
    add("scatter_add dim0", [(4, 2, 3), (7, 2, 3)], scatter(0, (4, 2, 3), 7))

    def smaller(dim, x_shape, i_shape, src_shape=None):  # torch's rule: index at most x off dim, src at least index
        def make(r):
            i = _idx(r, x_shape[dim], i_shape)
            if src_shape is None:
                return (lambda a: a.gather(dim, clnn.tensor(i)), lambda a: a.gather(dim, T(i)))
            cut = tuple(slice(0, n) for n in i_shape)  # torch's src gradient of a smaller index fails; cut first
            return (lambda a, b: a.scatter_add(dim, clnn.tensor(i), b),
                    lambda a, b: a.scatter_add(dim, T(i), b[cut]) + 0 * b.sum())
        return make
    add("gather smaller index", [(5, 7, 3)], smaller(1, (5, 7, 3), (3, 11, 2)))
    add("gather smaller index dim0", [(4, 6)], smaller(0, (4, 6), (9, 1)))
    add("scatter_add smaller index", [(5, 7, 3), (6, 9, 3)], smaller(1, (5, 7, 3), (3, 9, 2), (6, 9, 3)))
    add("scatter_add larger src", [(3, 5), (4, 11)], smaller(1, (3, 5), (3, 9), (4, 11)))

    def index_select(dim, n, count):
        def make(r):
            i = _idx(r, n, count)
            return (lambda a: a.index_select(dim, clnn.tensor(i)), lambda a: a.index_select(dim, T(i)))
        return make
    add("index_select dim0", [(6, 5)], index_select(0, 6, 13))
    add("index_select dim-1", [(3, 2, 7)], index_select(-1, 7, 4))

    def getitem(n, shape, rest=()):
        def make(r):
            i = r.integers(-n, n, shape)
            return (lambda a: a[(clnn.tensor(i), *rest)], lambda a: a[(T(i), *rest)])
        return make
    add("getitem tensor", [(7, 3)], getitem(7, (5,)))
    add("getitem 2d index", [(5, 4, 2)], getitem(5, (2, 3)))
    add("getitem index and slice", [(6, 5)], getitem(6, (4,), (slice(1, 4),)))
    add("getitem list", [(5, 3)], lambda r: (lambda a: a[[4, 0, -1, 2]], lambda a: a[[4, 0, -1, 2]]))
    add("getitem numpy", [(5, 3)], lambda r: (lambda a: a[np.array([1, 1, 3])], lambda a: a[np.array([1, 1, 3])]))

    def masked(shape):
        def make(r):
            m = r.random(shape) < 0.4
            return (lambda a: a[clnn.tensor(m)], lambda a: a[T(m)])
        return make
    add("getitem mask", [(5, 3, 4)], masked((5, 3, 4)))
    add("getitem mask leading dims", [(7, 2, 3)], masked((7, 2)))
    add("getitem mask numpy", [(4, 3)], lambda r: (lambda a: a[np.ones((4,), bool)], lambda a: a[T(np.ones(4, bool))]))

    def embedding(pad):
        def make(r):
            i = _idx(r, 11, (3, 7))
            return (lambda w: F.embedding(clnn.tensor(i), w, pad),
                    lambda w: torch.nn.functional.embedding(T(i), w, pad))
        return make
    add("embedding", [(11, 5)], embedding(None))
    add("embedding padding", [(11, 5)], embedding(3))
    add("embedding negative padding", [(11, 5)], embedding(-2))

    def topk(k, dim, largest):
        return lambda r: (lambda a: a.topk(k, dim, largest)[0], lambda a: a.topk(k, dim, largest)[0])
    add("topk", [(4, 9)], topk(3, -1, True))
    add("topk smallest dim0", [(10, 3)], topk(10, 0, False))
    add("topk long row", [(2, 1031)], topk(5, 1, True))
    add("topk one", [(1,)], topk(1, 0, True))

    add("einsum attention", [(2, 3, 5, 4), (2, 3, 7, 4)],
        lambda r: (lambda a, b: clnn.einsum("bhqd,bhkd->bhqk", a, b),
                   lambda a, b: torch.einsum("bhqd,bhkd->bhqk", a, b)))
    add("einsum bilinear", [(3, 4), (5, 4, 6), (3, 6)],
        lambda r: (lambda a, w, b: clnn.einsum("bi,oij,bj->bo", a, w, b),
                   lambda a, w, b: torch.einsum("bi,oij,bj->bo", a, w, b)))
    add("einsum transpose", [(3, 5)],
        lambda r: (lambda a: clnn.einsum("ij->ji", a), lambda a: torch.einsum("ij->ji", a)))
    add("einsum implicit", [(3, 5), (5, 2)],
        lambda r: (lambda a, b: clnn.einsum("ij,jk", a, b), lambda a, b: torch.einsum("ij,jk", a, b)))
    add("einsum sum out", [(4, 3, 2), (2, 5)],
        lambda r: (lambda a, b: clnn.einsum("abc,cd->ad", a, b), lambda a, b: torch.einsum("abc,cd->ad", a, b)))
    return rows


@pytest.mark.parametrize(("shapes", "make", "linear"), _rows())
def test_op_against_torch(shapes, make, linear, rng):
    """Rows marked ``linear`` (einsum's contractions, scatter's and embedding's sums of duplicates) sum signed
    terms in their gradients: those are checked against the terms' magnitudes, which for an op linear in
    each input are the same op's gradients at |inputs| with |upstream|; their inputs are positive, so the
    forward sums do not cancel."""
    fn, ref = make(rng)
    inputs = [_pos(rng, *s) if linear else rng.standard_normal(s) for s in shapes]

    def magnitude(i):
        def grads(g, *ts):
            with torch.enable_grad():
                abs_ts = [t.detach().abs().requires_grad_() for t in ts]
                ref(*abs_ts).backward(g.abs())
            return abs_ts[i].grad
        return grads

    check_against_torch(fn, ref, inputs, rng, sum_magnitudes={i: magnitude(i) for i in range(len(inputs))} if linear
                        else None)


def test_var_std_gradients_against_terms(rng):
    """var's gradient 2 (x - mean) g / (n - 1) cancels; the magnitude-based row above covers it, this one pins
    a long row through the split reduction path."""
    x = rng.standard_normal((3, 70001)).astype(np.float32)
    out = clnn.tensor(x).var(1).numpy()
    assert_close(out, np.var(x.astype(np.float64), axis=1, ddof=1))


@pytest.mark.parametrize(("shape", "dim"), [((1,), 0), ((7,), 0), ((3, 1024), 1), ((2, 3000), -1), ((5000, 3), 0),
                                            ((1, 70001), 1), ((4, 5, 3), 1)])
def test_cumsum_against_torch(shape, dim, rng):
    """Rows shorter and longer than one scan block (the three-pass path; posing as a small GPU, 70001 also
    recurses on the block totals). Positive inputs: the forward's prefix sums then have no cancellation;
    the gradient's signed ones are checked against their terms' magnitudes."""
    x = _pos(rng, *shape)
    check_against_torch(lambda a: a.cumsum(dim), lambda a: a.cumsum(dim), [x], rng,
                        sum_magnitudes={0: lambda g, t: g.abs().flip(dim).cumsum(dim).flip(dim)},
                        tol=1e-5)


def test_cumsum_forward_is_a_sum_of_signed_terms(rng):
    x = rng.standard_normal((3, 5000)).astype(np.float32)
    got = clnn.tensor(x).cumsum(1).numpy()
    assert_sum_close(got, np.cumsum(x.astype(np.float64), 1), np.cumsum(np.abs(x.astype(np.float64)), 1))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_cumsum_integers_sum_in_int64(dtype, rng):
    x = rng.integers(-5, 5, (4, 600)).astype(dtype)
    got = clnn.tensor(x).cumsum(-1)
    want = torch.tensor(x).cumsum(-1).numpy()
    assert got.dtype == want.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), want)


def test_cumsum_float64(dev, rng):
    if not dev.fp64:
        pytest.skip("no float64 on this device")
    x = rng.standard_normal((2, 2100))
    got = clnn.tensor(x).cumsum(1).numpy()
    assert_sum_close(got, np.cumsum(x, 1), np.cumsum(np.abs(x), 1), tol=1e-12)


@pytest.mark.parametrize(("shape", "k", "dim", "largest"), [((5, 17), 4, 1, True), ((300, 2), 300, 0, False),
                                                             ((2, 3, 1100), 7, -1, True), ((1, 1), 1, 0, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_topk_indices_match_torch(shape, k, dim, largest, dtype, rng):
    """Distinct values (a permutation), so the indices are unique and must equal torch's."""
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(dtype) - 7
    vals, idx = clnn.tensor(x).topk(k, dim, largest)
    tv, ti = torch.tensor(x).topk(k, dim, largest)
    assert idx.dtype == np.int64 and vals.dtype == x.dtype
    np.testing.assert_array_equal(vals.numpy(), tv.numpy())
    np.testing.assert_array_equal(idx.numpy(), ti.numpy())


def test_topk_ties_and_nan():
    x = np.array([[1.0, np.nan, 3.0, 3.0, -1.0, np.nan]], np.float32)
    vals, idx = clnn.tensor(x).topk(4)
    np.testing.assert_array_equal(idx.numpy(), [[1, 5, 2, 3]])
    np.testing.assert_array_equal(vals.numpy(), [[np.nan, np.nan, 3.0, 3.0]])
    vals, idx = clnn.tensor(x).topk(3, largest=False)
    np.testing.assert_array_equal(idx.numpy(), [[4, 0, 2]])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_index_ops_on_integer_dtypes(dtype, rng):
    x = rng.integers(0, 2 if dtype == np.bool_ else 100, (6, 5)).astype(dtype)
    i = rng.integers(0, 6, 9)
    t, tt = clnn.tensor(x), torch.tensor(x)
    np.testing.assert_array_equal(t[i].numpy(), tt[i].numpy())
    np.testing.assert_array_equal(t.index_select(1, clnn.tensor(i % 5)).numpy(), tt.index_select(1, T(i % 5)).numpy())
    np.testing.assert_array_equal(t.tril(1).numpy(), tt.tril(1).numpy())
    m = rng.random((6, 5)) < 0.5
    np.testing.assert_array_equal(clnn.where(clnn.tensor(m), t, t[::-1]).numpy(),
                                  torch.where(T(m), tt, tt.flip(0)).numpy())
    np.testing.assert_array_equal(t.repeat(2, 1).numpy(), tt.repeat(2, 1).numpy())


def test_scatter_add_duplicates_are_deterministic(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    src = rng.standard_normal((3, 600)).astype(np.float32)
    i = rng.integers(0, 4, (3, 600))
    runs = [clnn.tensor(x).scatter_add(1, clnn.tensor(i), clnn.tensor(src)).numpy() for _ in range(2)]
    np.testing.assert_array_equal(runs[0], runs[1])
    want, mag = x.astype(np.float64), np.abs(x.astype(np.float64))
    for r in range(3):
        np.add.at(want[r], i[r], src[r])
        np.add.at(mag[r], i[r], np.abs(src[r]))
    assert_sum_close(runs[0], want, mag)


def test_embedding_module_matches_torch(rng):
    emb = nn.Embedding(13, 6, padding_idx=2)
    w = emb.weight.numpy()
    assert emb.weight.shape == (13, 6) and not w[2].any()
    assert abs(w[np.arange(13) != 2].std() - 1) < 0.5  # N(0, 1)
    ref = torch.nn.Embedding(13, 6, padding_idx=2).double()
    ref.load_state_dict({"weight": torch.tensor(w, dtype=torch.float64)})
    assert list(emb.state_dict()) == list(ref.state_dict())
    i = rng.integers(0, 13, (4, 9))
    i[0, 0] = 2
    out, tout = emb(clnn.tensor(i)), ref(T(i))
    assert_close(out.numpy(), tout.detach().numpy())
    g = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(clnn.tensor(g))
    tout.backward(T(g, dtype=torch.float64))
    grad = emb.weight.grad.numpy()
    assert not grad[2].any()
    magnitude = np.zeros((13, 6))
    np.add.at(magnitude, i.reshape(-1), np.abs(g).reshape(-1, 6))
    assert_sum_close(grad, ref.weight.grad.numpy(), magnitude)


def test_setitem_slices_and_indices(rng):
    x = rng.standard_normal((6, 4)).astype(np.float32)
    t = clnn.tensor(x)
    v = rng.standard_normal((2, 4)).astype(np.float32)
    t[1:3] = clnn.tensor(v)
    t[-1, ::2] = 7.0
    t[[0, 4]] = clnn.tensor(v[:1])
    t[1:] = t[:-1]  # overlapping: reads a copy
    want = x.copy()
    want[1:3] = v
    want[-1, ::2] = 7.0
    want[[0, 4]] = v[:1]
    want[1:] = want[:-1].copy()
    np.testing.assert_array_equal(t.numpy(), want)


def test_setitem_refuses_tensors_that_require_grad():
    w = clnn.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="setitem: x requires grad"):
        w[0] = 1.0
    with clnn.no_grad():
        w[0] = 1.0
    assert w.numpy()[0] == 1.0
    with pytest.raises(RuntimeError, match="setitem: value requires grad"):
        clnn.zeros(3)[:] = w


def test_cpu_tolist_and_to_dtype():
    """``.cpu()`` is ``.to("cpu")``: the CPU OpenCL device, or its DeviceError where none is (posing as GPUs)."""
    t = clnn.tensor([[1.5, 2.0]])
    try:
        cpu = clnn.device("cpu")
    except clnn.DeviceError as err:
        with pytest.raises(clnn.DeviceError, match=re.escape(str(err))):
            t.cpu()
    else:
        c = t.cpu()
        assert isinstance(c, clnn.Tensor) and c.device is cpu and c.tolist() == [[1.5, 2.0]]
    assert t.to(np.float16).dtype == np.float16
    assert t.to("float64" if t.device.fp64 else "float32").tolist() == [[1.5, 2.0]]
    assert t.to(np.int32).tolist() == [[1, 2]]


def test_split_chunk_match_torch():
    x = np.arange(10.0, dtype=np.float32)
    for got, want in ((clnn.tensor(x).split(3), torch.tensor(x).split(3)),
                      (clnn.tensor(x).chunk(4), torch.tensor(x).chunk(4)),
                      (clnn.tensor(x).chunk(3), torch.tensor(x).chunk(3))):
        assert [g.tolist() for g in got] == [w.tolist() for w in want]


@pytest.fixture(params=["walk", "sort", "columns"])
def scatter_path(request, monkeypatch):
    """Runs a test with every scatter walking its index list, or with every scatter sorted first, or with one
    index list walked per column (scatter_cols) on any device."""
    import clnn.ops.index as index_ops

    monkeypatch.setattr(index_ops, "WALK_MAX", 1 << 62 if request.param == "walk" else -1)
    with tuning.override("scatter", COLS_VW=4 if request.param == "columns" else 0):  # 4: rows of 5 have tails
        yield request.param


@pytest.mark.parametrize(("vocab", "tokens", "dim", "pad"), [(1, 7, 3, None), (11, 300, 5, 3), (97, 1031, 2, -1),
                                                             (5000, 263, 3, None), (3, 2, 257, 0)])
def test_embedding_backward_both_paths(vocab, tokens, dim, pad, scatter_path, rng):
    """Duplicates (many, for small vocabularies), unused rows, a skipped padding row; bit-identical reruns.
    Vocabularies up to 5000 (13 key bits: 4 radix passes) and token counts over a radix tile."""
    i = rng.integers(0, vocab, tokens)
    if pad is not None:
        i[-1] = (pad + 1) % vocab  # one token off the padding row: the check's magnitude is never all zero
    g = rng.standard_normal((tokens, dim)).astype(np.float32)
    runs = []
    for _ in range(2):
        w = clnn.tensor(rng.standard_normal((vocab, dim)).astype(np.float32), requires_grad=True)
        F.embedding(clnn.tensor(i), w, pad).backward(clnn.tensor(g))
        runs.append(w.grad.numpy())
    np.testing.assert_array_equal(runs[0], runs[1])
    want, mag = np.zeros((vocab, dim)), np.zeros((vocab, dim))
    np.add.at(want, i, g.astype(np.float64))
    np.add.at(mag, i, np.abs(g.astype(np.float64)))
    if pad is not None:
        want[pad] = mag[pad] = 0
    assert_sum_close(runs[0], want, mag)


@pytest.mark.parametrize(("x_shape", "dim", "i_shape"), [((3, 7, 4), 1, (3, 40, 4)), ((200, 3), 0, (901, 2)),
                                                         ((1,), 0, (600,))])
def test_scatter_add_both_paths(x_shape, dim, i_shape, scatter_path, rng):
    """Per-element indices (segments per output), a smaller index off dim, duplicates; reruns bit-identical."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    src = rng.standard_normal(i_shape).astype(np.float32)
    i = rng.integers(0, x_shape[dim], i_shape)
    runs = [clnn.tensor(x).scatter_add(dim, clnn.tensor(i), clnn.tensor(src)).numpy() for _ in range(2)]
    np.testing.assert_array_equal(runs[0], runs[1])
    want = torch.tensor(x, dtype=torch.float64).scatter_add(dim, T(i), T(src, dtype=torch.float64)).numpy()
    mag = torch.tensor(np.abs(x), dtype=torch.float64).scatter_add(dim, T(i), T(np.abs(src), dtype=torch.float64))
    assert_sum_close(runs[0], want, mag.numpy())


def test_setitem_duplicates_keep_the_last_both_paths(scatter_path, rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    i = rng.integers(-6, 6, 700)
    v = rng.standard_normal((700, 5)).astype(np.float32)
    t = clnn.tensor(x)
    t[clnn.tensor(i)] = clnn.tensor(v)
    want = x.copy()
    want[i] = v  # NumPy assigns in order: the last duplicate wins
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("n", [0, 1, 13, 2049])
def test_radix_sort_is_stable(n, rng):
    from clnn.ops.sort import radix_sort

    for bound in (1, 7, 70001):
        k = rng.integers(0, bound, n).astype(np.int32)
        ks, vs = radix_sort(clnn.tensor(k), clnn.tensor(np.arange(n, dtype=np.int32)), bound)
        order = np.argsort(k, kind="stable")
        np.testing.assert_array_equal(ks.numpy(), k[order])
        np.testing.assert_array_equal(vs.numpy(), order)


@pytest.mark.parametrize(("shape", "mshape", "fill"), [((6, 5), (6, 5), None), ((7, 3, 2), (7,), None),
                                                       ((4, 3), (4, 3), False), ((4, 3), (4,), True),
                                                       ((3000,), (3000,), None)])
def test_mask_getitem_and_setitem(shape, mshape, fill, rng):
    """Random, empty and all-true masks; the 3000-long one takes the multi-block prefix sum."""
    x = rng.standard_normal(shape).astype(np.float32)
    m = rng.random(mshape) < 0.5 if fill is None else np.full(mshape, fill)
    got = clnn.tensor(x)[clnn.tensor(m)]
    np.testing.assert_array_equal(got.numpy(), torch.tensor(x)[T(m)].numpy())
    t, want = clnn.tensor(x), x.copy()
    t[m] = -2.0
    want[m] = -2.0
    np.testing.assert_array_equal(t.numpy(), want)
    rows = int(m.sum())
    v = rng.standard_normal((rows,) + shape[len(mshape):]).astype(np.float32)
    t[clnn.tensor(m)] = clnn.tensor(v)
    want[m] = v
    np.testing.assert_array_equal(t.numpy(), want)


def test_mask_gradient_empty_mask(rng):
    x = clnn.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    out = x[clnn.tensor(np.zeros((3,), bool))]
    assert out.shape == (0, 4)
    (out.sum() + x.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((3, 4), np.float32))


def test_reductions_take_torch_names(rng):
    x = rng.standard_normal((4, 7, 3)).astype(np.float32)
    t, tt = clnn.tensor(x), torch.tensor(x, dtype=torch.float64)
    assert_close(t.sum(dim=1, keepdim=True).numpy(), tt.sum(dim=1, keepdim=True).numpy())
    assert_close(t.mean(dim=(0, 2)).numpy(), tt.mean(dim=(0, 2)).numpy())
    assert_close(t.logsumexp(dim=-1).numpy(), tt.logsumexp(dim=-1).numpy())
    np.testing.assert_array_equal(t.argmax(dim=1).numpy(), tt.argmax(dim=1).numpy())
    np.testing.assert_array_equal(t.argmin(dim=0, keepdim=True).numpy(), tt.argmin(dim=0, keepdim=True).numpy())
    for op in ("max", "min"):
        vals, idx = getattr(t, op)(dim=1, keepdim=True)
        tv, ti = getattr(tt, op)(dim=1, keepdim=True)
        np.testing.assert_array_equal(vals.numpy(), tv.numpy().astype(np.float32))
        np.testing.assert_array_equal(idx.numpy(), ti.numpy())
        assert getattr(t, op)(1).shape == (4, 3)  # a positional axis keeps NumPy's meaning: the values alone
    assert t.sum(axis=1, keepdims=True).shape == (4, 1, 3)
    with pytest.raises(TypeError, match="sum: got both axis=1 and dim=0; pass one"):
        t.sum(1, dim=0)
    with pytest.raises(TypeError, match="mean: got both keepdims=True and keepdim=True; pass one"):
        t.mean(keepdims=True, keepdim=True)
    with pytest.raises(TypeError, match=r"max: dim expects an int \(as torch.max\(x, dim\)\); got \(0, 1\)"):
        t.max(dim=(0, 1))


def test_max_dim_gradient_against_torch(rng):
    x = rng.standard_normal((5, 9))
    check_against_torch(lambda a: a.max(dim=1)[0], lambda a: a.max(dim=1)[0], [x], rng)


def test_division_and_square_root_round_correctly(dev, rng):
    """float32 quotients and square roots are the correctly rounded ones (NumPy's), bit for bit, on a device that
    offers them: kernels._device_options asks for them. NVIDIA's OpenCL otherwise divides within 2 ulp."""
    if not dev.cl_device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        pytest.skip(f"{dev} does not offer correctly rounded float32 division and square root")
    a, b = (rng.uniform(0.1, 10.0, 100_003).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal((clnn.tensor(a) / clnn.tensor(b)).numpy(), a / b)
    np.testing.assert_array_equal(clnn.tensor(a).sqrt().numpy(), np.sqrt(a))
