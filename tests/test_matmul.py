"""matmul and gemm against PyTorch in float64: NumPy shape rules, tiles, transposes, gradients, errors.

Tolerances (relative error ||out - ref|| / ||ref||): float32 1e-5; float64 1e-12; float16 1e-3, because
float16 storage rounds every input and output to 11 significant bits (relative step 2**-11 = 4.9e-4)
even though the kernel accumulates in float32.
"""

from __future__ import annotations

import dataclasses
import importlib
import types

import numpy as np
import pytest
import torch
from helpers import assert_close, assert_sum_close

import clnn
from clnn import kernels, tuning
from clnn.ops.matmul import (
    OPTIONAL_KEYS,
    PF_MAX_FETCHED,
    ROW_FIT,
    ROWS_MOST_WM,
    SHORT_K_MACS,
    GemmPlan,
    _fewer_cols,
    _fewer_rows,
    config_problem,
    gemm_config,
    gemm_raw,
    plan,
    plan_options,
    tiled_plan,
    warp_product_misfits,
    work_items,
)

matmul_mod = importlib.import_module("clnn.ops.matmul")  # clnn.ops.matmul is also the function
TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-3}
DTYPES = list(TOL)


def _skip_unsupported(dev, dtype):
    if not dev.supports(np.dtype(dtype)):
        pytest.skip(f"{dtype} is not supported on {dev}")


def _rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def _ref(x):
    """A float64 torch tensor holding exactly the (possibly rounded) values clnn sees."""
    return torch.from_numpy(np.asarray(x, np.float64))


def _tile(dev):
    return gemm_config(dev, np.dtype("float32"))


MATMUL_SHAPES = [
    ((7,), (7,)),  # 1-D x 1-D: dot product, 0-d result
    ((5,), (5, 3)),  # 1-D x 2-D
    ((4, 5), (5,)),  # 2-D x 1-D
    ((1, 1), (1, 1)),
    ((127, 253), (253, 61)),  # primes
    ((2, 1, 5, 7), (3, 7, 4)),  # batch dims broadcast to (2, 3)
    ((3, 7, 4), (4, 2)),  # shared right operand
    ((6,), (2, 6, 3)),  # 1-D left against a batch
    ((2, 3, 4), (4,)),  # batch against 1-D right
    ((3, 0), (0, 4)),  # empty inner dimension: zeros
    ((0, 5), (5, 2)),  # empty output
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul_matches_torch(dev, rng, dtype, sa, sb):
    _skip_unsupported(dev, dtype)
    a, b = _rand(rng, sa, dtype), _rand(rng, sb, dtype)
    if len(sa) == len(sb) == 1:  # one signed 7-term dot product cancels below 1e-5 in ~0.2% of draws
        a, b = np.abs(a) + 0.5, np.abs(b) + 0.5
    out = clnn.matmul(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev))
    ref = torch.matmul(_ref(a), _ref(b)).numpy()
    assert out.shape == ref.shape and out.dtype == np.dtype(dtype)
    if ref.size and np.any(ref):
        assert_close(out.numpy(), ref, TOL[dtype], f"matmul {sa} @ {sb} {dtype}")
    else:
        np.testing.assert_array_equal(out.numpy(), ref)


def test_matmul_operator_and_array_operand(dev, rng):
    a, b = _rand(rng, (3, 4)), _rand(rng, (4, 2))
    ta = clnn.tensor(a, device=dev)
    assert_close((ta @ clnn.tensor(b, device=dev)).numpy(), _ref(a) @ _ref(b), TOL["float32"], "a @ b")
    assert_close(clnn.matmul(ta, b).numpy(), _ref(a) @ _ref(b), TOL["float32"], "tensor @ ndarray")


@pytest.mark.parametrize("kind", ["gemm", "gemm_small"])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("delta", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sizes_straddling_the_tile(dev, rng, monkeypatch, dtype, delta, trans, kind):
    """M, N, K one below, at and one above each of the device's tiles (K two k-slices deep), so interior
    and edge blocks of both operands, plain and transposed, are staged."""
    _skip_unsupported(dev, dtype)
    monkeypatch.setitem(tuning.TABLE, "gemm", tuning.TABLE[kind])  # both kinds: this tile
    monkeypatch.setitem(tuning.TABLE, "gemm_small", tuning.TABLE[kind])
    cfg = gemm_config(dev, np.dtype(dtype))
    m, n, k = cfg["TM"] + delta, cfg["TN"] + delta, 2 * cfg["TK"] + delta
    a = _rand(rng, (k, m) if trans else (m, k), dtype)
    b = _rand(rng, (n, k) if trans else (k, n), dtype)
    out = clnn.gemm(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev), trans_a=trans, trans_b=trans)
    ra, rb = _ref(a), _ref(b)
    ref = (ra.T @ rb.T) if trans else (ra @ rb)
    assert_close(out.numpy(), ref.numpy(), TOL[dtype], f"{m}x{n}x{k} trans={trans} ({cfg})")


GEMM_CASES = [  # (m, n, k, trans_a, trans_b, alpha, beta, c shape or None)
    (1, 1, 1, False, False, 1.0, 0.0, None),
    (127, 61, 253, False, False, 1.0, 0.0, None),
    (127, 61, 253, True, False, 0.5, 0.0, None),
    (127, 61, 253, False, True, 1.0, 2.0, (127, 61)),
    (127, 61, 253, True, True, -1.5, 0.25, (61,)),
    (33, 130, 9, True, False, 2.0, -1.0, (33, 1)),
    (5, 3, 200, False, True, 1.0, 1.0, ()),
    (130, 131, 96, True, True, 1.0, 0.0, None),  # a short last k-slice a multiple of the vector width
    (33, 130, 72, False, True, 1.0, 0.0, None),
    (4, 4, 0, False, False, 1.0, 3.0, (4, 4)),  # empty k: beta * c only
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n, k, ta, tb, alpha, beta, cshape", GEMM_CASES)
def test_gemm_matches_torch(dev, rng, dtype, m, n, k, ta, tb, alpha, beta, cshape):
    _skip_unsupported(dev, dtype)
    a = _rand(rng, (k, m) if ta else (m, k), dtype)
    b = _rand(rng, (n, k) if tb else (k, n), dtype)
    c = None if cshape is None else _rand(rng, cshape, dtype)
    out = clnn.gemm(
        clnn.tensor(a, device=dev), clnn.tensor(b, device=dev), None if c is None else clnn.tensor(c, device=dev),
        alpha=alpha, beta=beta, trans_a=ta, trans_b=tb,
    )
    ra, rb = _ref(a), _ref(b)
    ref = alpha * ((ra.T if ta else ra) @ (rb.T if tb else rb))
    if c is not None:
        ref = ref + beta * _ref(c)
    assert out.shape == (m, n)
    assert_close(out.numpy(), ref.numpy(), TOL[dtype], f"gemm {m}x{n}x{k} ta={ta} tb={tb}")


def test_gemm_raw_strided_batches(dev, rng):
    """The convolution's entry point: transposes and a shared operand expressed as strides."""
    batch, m, n, k = 3, 17, 9, 11
    a = _rand(rng, (batch, k, m))  # read transposed
    b = _rand(rng, (k, n))  # shared by every batch
    c = _rand(rng, (batch, m, n))
    out = gemm_raw(
        clnn.tensor(a, device=dev), (k * m, 1, m), clnn.tensor(b, device=dev), (0, n, 1),
        batch, m, n, k, alpha=2.0, beta=-1.0, c=clnn.tensor(c, device=dev),
    )
    ref = 2.0 * _ref(a).transpose(1, 2) @ _ref(b) - _ref(c)
    assert out.shape == (batch, m, n)
    assert_close(out.numpy(), ref.numpy(), TOL["float32"], "gemm_raw")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch, m, n, k", [(1, 32, 9, 20011), (3, 7, 3, 3001), (1, 65, 33, 4099)])
def test_split_k(dev, rng, monkeypatch, dtype, batch, m, n, k):
    """Few output tiles over a long k split k into ranges summed in order (a convolution's weight
    gradient): uneven last ranges, both operands k-contiguous, alpha and beta; bit-identical reruns.
    The device is made to report 64 compute units, so that every tile size splits, and the direct kernel is
    kept for products smaller than these (a GPU pose would take it for 3x7x3x3001)."""
    _skip_unsupported(dev, dtype)
    monkeypatch.setattr(dev, "compute_units", 64)
    monkeypatch.setitem(tuning.TABLE, "gemm_direct", {"default": {"MAX_MACS": 0}})
    assert plan(dev, np.dtype(dtype), batch, m, n, k).splits > 1
    a, b, c = _rand(rng, (batch, m, k), dtype), _rand(rng, (batch, n, k), dtype), _rand(rng, (batch, m, n), dtype)
    ta, tb, tc = (clnn.tensor(v, device=dev) for v in (a, b, c))

    def run():
        return gemm_raw(ta, (m * k, k, 1), tb, (n * k, 1, k), batch, m, n, k, alpha=0.5, beta=2.0, c=tc).numpy()

    out = run()
    ref = 0.5 * _ref(a) @ _ref(b).transpose(1, 2) + 2.0 * _ref(c)
    assert_close(out, ref.numpy(), TOL[dtype], f"split-k {batch}x{m}x{n}x{k}")
    np.testing.assert_array_equal(run(), out)


@pytest.mark.parametrize("dtype, tol", [(clnn.float16, 2**-10), (clnn.bfloat16, 2**-7)], ids=["float16", "bfloat16"])
def test_half_split_k_keeps_float32_partials(dev, rng, dtype, tol):
    """A half product split along k sums float32 partials and rounds once: the two ranges of A = [P, P],
    B = [Q; -Q + R/1000] give partials of the size of P Q that cancel to a result a thousand times smaller, which
    partials rounded to half would bury (elementwise error about 1e-1 of the result). The planner splits half
    products too."""
    tile = {**_tile(dev), "DB": 0}
    m, n, k0 = 37, 29, max(64, tile["TK"])  # each range whole k-slices
    p, q, r = (rng.standard_normal(s) for s in ((m, k0), (k0, n), (k0, n)))
    a = np.concatenate([p, p], axis=1).astype(dtype)
    b = np.concatenate([q, -q + r / 1000], axis=0).astype(dtype)
    how = GemmPlan("tiled", tile, 2, kernels.round_up(k0, tile["TK"]))
    assert k0 % tile["TK"] == 0
    out = gemm_raw(clnn.tensor(a, device=dev), (0, 2 * k0, 1), clnn.tensor(b, device=dev), (0, n, 1), 1, m, n,
                   2 * k0, how=how).numpy().astype(np.float64)
    exact = (_ref(a) @ _ref(b)).numpy()
    # within a rounding of each element (plus float32's sum over 2 k0 terms of P Q's size)
    bound = tol * np.abs(exact) + 2 * k0 * 2**-23 * (_ref(a).abs() @ _ref(b).abs()).numpy()
    assert np.all(np.abs(out - exact) <= bound), np.max(np.abs(out - exact) / bound)
    monkey = dataclasses.replace(dev, type="gpu", compute_units=132, max_work_group_size=1024, local_mem_size=49152)
    assert plan(monkey, np.dtype(dtype), 1, 64, 64, 100352).splits > 1


# (2, 3, 5, 7) @ (7, 4): one b for every batch, whose gradient is one product over the batches' rows
GRAD_MATMUL = [((7,), (7,)), ((5,), (5, 3)), ((4, 5), (5,)), ((13, 9), (9, 6)), ((2, 1, 5, 7), (3, 7, 4)),
               ((2, 3, 5, 7), (7, 4)), ((5, 7), (3, 7, 4))]


@pytest.mark.parametrize("sa, sb", GRAD_MATMUL)
def test_matmul_gradients_match_torch(dev, rng, sa, sb):
    a, b = _rand(rng, sa), _rand(rng, sb)
    ca, cb = clnn.tensor(a, device=dev, requires_grad=True), clnn.tensor(b, device=dev, requires_grad=True)
    out = clnn.matmul(ca, cb)
    g = _rand(rng, out.shape)
    out.backward(clnn.tensor(g, device=dev))
    ta, tb = _ref(a).requires_grad_(), _ref(b).requires_grad_()
    torch.matmul(ta, tb).backward(_ref(g))
    assert_close(ca.grad.numpy(), ta.grad.numpy(), TOL["float32"], f"d/da {sa} @ {sb}")
    assert_close(cb.grad.numpy(), tb.grad.numpy(), TOL["float32"], f"d/db {sa} @ {sb}")


@pytest.mark.parametrize("ta, tb, cshape", [(False, False, (6, 5)), (True, False, (5,)), (False, True, (6, 1)),
                                            (True, True, None)])
def test_gemm_gradients_match_torch(dev, rng, ta, tb, cshape):
    m, n, k, alpha, beta = 6, 5, 11, 0.75, -2.0
    a, b = _rand(rng, (k, m) if ta else (m, k)), _rand(rng, (n, k) if tb else (k, n))
    c = None if cshape is None else _rand(rng, cshape)
    ca, cb = clnn.tensor(a, device=dev, requires_grad=True), clnn.tensor(b, device=dev, requires_grad=True)
    cc = None if c is None else clnn.tensor(c, device=dev, requires_grad=True)
    out = clnn.gemm(ca, cb, cc, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
    g = _rand(rng, (m, n))
    out.backward(clnn.tensor(g, device=dev))
    ra, rb = _ref(a).requires_grad_(), _ref(b).requires_grad_()
    ref = alpha * ((ra.T if ta else ra) @ (rb.T if tb else rb))
    rc = None if c is None else _ref(c).requires_grad_()
    if rc is not None:
        ref = ref + beta * rc
    ref.backward(_ref(g))
    assert_close(ca.grad.numpy(), ra.grad.numpy(), TOL["float32"], "d/da")
    assert_close(cb.grad.numpy(), rb.grad.numpy(), TOL["float32"], "d/db")
    if rc is not None:
        assert_close(cc.grad.numpy(), rc.grad.numpy(), TOL["float32"], "d/dc")


def test_gradients_through_a_shared_operand(dev, rng):
    """x feeds both sides of a product and a second product: gradients accumulate as in torch."""
    x, w = _rand(rng, (6, 6)), _rand(rng, (6, 4))
    cx, cw = clnn.tensor(x, device=dev, requires_grad=True), clnn.tensor(w, device=dev, requires_grad=True)
    ((cx @ cx) @ cw + clnn.gemm(cx, cw)).sum().backward()
    tx, tw = _ref(x).requires_grad_(), _ref(w).requires_grad_()
    ((tx @ tx) @ tw + tx @ tw).sum().backward()
    assert_close(cx.grad.numpy(), tx.grad.numpy(), TOL["float32"], "d/dx")
    assert_close(cw.grad.numpy(), tw.grad.numpy(), TOL["float32"], "d/dw")


@pytest.mark.parametrize("dtype", DTYPES)
def test_reruns_are_bit_identical(dev, rng, dtype):
    _skip_unsupported(dev, dtype)
    a, b = _rand(rng, (2, 150, 301), dtype), _rand(rng, (301, 133), dtype)

    def run():
        ca, cb = clnn.tensor(a, device=dev, requires_grad=True), clnn.tensor(b, device=dev, requires_grad=True)
        out = clnn.matmul(ca, cb)
        out.sum().backward()
        return out.numpy(), ca.grad.numpy(), cb.grad.numpy()

    for first, second in zip(run(), run()):
        np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param({"TM": 64, "TN": 64, "TK": 16, "WM": 4, "WN": 4, "VW": 4, "APAD": 1}, id="old-gpu-row"),
        pytest.param({"TM": 16, "TN": 24, "TK": 8, "WM": 2, "WN": 3, "VW": 1, "APAD": 1}, id="scalar"),
        pytest.param({"TM": 32, "TN": 24, "TK": 8, "WM": 4, "WN": 3, "VW": 1, "VWA": 2, "APAD": 1}, id="k-major"),
    ],
)
def test_other_tunings_are_correct(dev, rng, monkeypatch, row):
    """Tiles meant for other devices (or odd ones a tuner may write) still compute the right thing."""
    monkeypatch.setitem(tuning.TABLE, "gemm", {"default": row})
    monkeypatch.setitem(tuning.TABLE, "gemm_small", {"default": row})
    if (row["TM"] // row["WM"]) * (row["TN"] // row["WN"]) <= dev.max_work_group_size:  # else it shrinks
        assert gemm_config(dev, np.dtype("float32")) == {"VWG": row["VW"], "DB": 0, **OPTIONAL_KEYS, **row}
    for ta, tb, (m, n, k) in [(False, False, (67, 61, 37)), (True, True, (67, 61, 37)), (False, True, (64, 48, 32))]:
        a, b = _rand(rng, (k, m) if ta else (m, k)), _rand(rng, (n, k) if tb else (k, n))
        out = clnn.gemm(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev), trans_a=ta, trans_b=tb)
        ra, rb = _ref(a), _ref(b)
        ref = (ra.T if ta else ra) @ (rb.T if tb else rb)
        assert_close(out.numpy(), ref.numpy(), TOL["float32"], f"{row} ta={ta} tb={tb}")


GPU_ROW = tuning.TABLE["gemm"]["gpu"]  # 128x128, 8x8 per work-item
ROWS_BLOCK = {"WM": 4, "WN": 64, "VW": 16, "LY": 8, "SPAN": 1 << 22}
SMALL_DB = {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 2, "VWG": 4, "APAD": 1, "DB": 1}  # fits wg=64
FORCED = {  # name: (kind, tile, k-splits); the tile also builds the direct kernel
    "direct": ("direct", SMALL_DB, 1),
    "gpu-row": ("tiled", GPU_ROW, 1),
    "gpu-row-split": ("tiled", GPU_ROW, 3),
    "small-db": ("tiled", SMALL_DB, 1),
    "small-db-split": ("tiled", SMALL_DB, 4),
    # A's tile row-major, a row at a time (gemm.h's VWA 1, the GPU row k-major in 4-row vectors), and k-major in
    # 2-row vectors, double-buffered and split
    "gpu-row-row-major": ("tiled", {**GPU_ROW, "VWA": 1, "VWG": 4}, 1),
    "small-db-k-major-split": ("tiled", {**SMALL_DB, "VWA": 2}, 4),
    # slices fetched a slice ahead into registers (gemm.h's PF 2), and a slice's loads all before its stores (PF 1),
    # double-buffered (single-buffered: test_conv's GPU options)
    "gpu-row-prefetch-split": ("tiled", {**GPU_ROW, "PF": 2}, 2),
    "small-db-loads-first": ("tiled", {**SMALL_DB, "VWA": 4, "PF": 1}, 1),
    # a full slice's k-loop unrolled (gemm.h's KU; the GPU row's 16 in its 32-deep slices), by a count that does
    # not divide the slice's 8 steps
    "small-db-unrolled-by-3": ("tiled", {**SMALL_DB, "KU": 3}, 1),
    # gemm_rows (CPUs' products): AVX-512's block, and an odd one (3 rows, 3 vectors of 8) over k chunks of
    # ROWS_LEAST_CHUNK (SPAN 1 byte) whose partial sums go through their buffer
    "rows": ("rows", ROWS_BLOCK, 1),
    "rows-odd-chunked": ("rows", {"WM": 3, "WN": 24, "VW": 8, "LY": 4, "SPAN": 1}, 1),
}
FORCED_SHAPES = [  # (a shape, b shape): batches broadcast as in matmul
    ((127, 61), (61, 253)),  # the issue's small product
    ((1, 1), (1, 1)),
    ((131, 67), (67, 137)),  # primes past a 128 tile, a short last k-slice
    ((3, 1, 17, 40), (2, 40, 9)),  # batch (3, 2) with both operands broadcast
]


def _force(dev, how):
    kind, cfg, splits = FORCED[how]
    problem = None if kind == "rows" else config_problem(cfg, dev)
    if problem:
        pytest.skip(f"{how} does not fit {dev}: {problem}")
    return kind, cfg, splits


@pytest.mark.gpu_tiles
@pytest.mark.parametrize("how", list(FORCED))
@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("sa, sb", FORCED_SHAPES)
def test_forced_plans_match_torch(dev, rng, how, ta, tb, sa, sb):
    """Every kernel path, whatever the planner would pick on this device: the direct kernel, the GPU
    row's tile (double-buffered, vector loads), a small double-buffered tile that fits small devices,
    each with k split; every transpose, batches broadcast through a zero batch stride, alpha and beta."""
    kind, cfg, splits = _force(dev, how)
    a, b = _rand(rng, sa), _rand(rng, sb)
    batch_shape = np.broadcast_shapes(sa[:-2], sb[:-2])
    (m, k), n = sa[-2:], sb[-1]
    batch = int(np.prod(batch_shape, dtype=np.int64))
    ab = np.broadcast_to(a, batch_shape + sa[-2:]).reshape(-1, m, k)
    bb = np.broadcast_to(b, batch_shape + sb[-2:]).reshape(-1, k, n)
    ta_np = np.ascontiguousarray(ab.transpose(0, 2, 1)) if ta else np.ascontiguousarray(ab)
    tb_np = np.ascontiguousarray(bb.transpose(0, 2, 1)) if tb else np.ascontiguousarray(bb)
    a_st = (m * k, 1, m) if ta else (m * k, k, 1)
    b_st = (k * n, 1, k) if tb else (k * n, n, 1)
    if len(sa) == 2 and batch > 1:
        ta_np, a_st = ta_np[:1], (0, *a_st[1:])
    if len(sb) == 2 and batch > 1:  # one B for every batch (a shared weight; copied to rows once by gemm_rows)
        tb_np, b_st = tb_np[:1], (0, *b_st[1:])
    c = _rand(rng, (batch, m, n))
    if kind == "rows":
        forced = GemmPlan(kind, cfg)
    else:
        ks = max(cfg["TK"], kernels.round_up(-(-k // splits), cfg["TK"]))
        forced = GemmPlan(kind, cfg, -(-k // ks), ks)
    out = gemm_raw(clnn.tensor(ta_np, device=dev), a_st, clnn.tensor(tb_np, device=dev), b_st, batch, m, n, k,
                   alpha=-0.5, beta=2.0, c=clnn.tensor(c, device=dev), how=forced)
    ref = -0.5 * _ref(ab) @ _ref(bb) + 2.0 * _ref(c)
    magnitude = 0.5 * _ref(ab).abs() @ _ref(bb).abs() + 2.0 * _ref(c).abs()  # the terms cancel (1 x 1: one sum)
    assert_sum_close(out.numpy(), ref.numpy(), magnitude.numpy(), TOL["float32"],
                     f"{how} {sa}@{sb} ta={ta} tb={tb} splits={forced.splits}")


@pytest.mark.parametrize("how", ["direct", "small-db"])
def test_one_plan_for_products_of_other_shapes(dev, rng, monkeypatch, how):
    """gemm_raw keeps each planned product's kernel and geometry with the plan it got: a planner that hands the same
    plan to products of other shapes and batches (a patched one, as the fused-layer tests use) still has each
    launched over its own rows, columns and batch."""
    kind, cfg, _ = _force(dev, how)
    forced = GemmPlan(kind, cfg, 1, cfg["TK"])  # one k-slice: every k below is shorter
    monkeypatch.setattr(matmul_mod, "plan", lambda *args, **kw: forced)
    for batch, m, n, k in ((1, 5, 7, 3), (1, 9, 7, 3), (1, 5, 13, 3), (2, 5, 7, 3), (1, 70, 3, 5)):
        a, b = _rand(rng, (batch, m, k)), _rand(rng, (batch, k, n))
        out = gemm_raw(clnn.tensor(a, device=dev), (m * k, k, 1), clnn.tensor(b, device=dev), (k * n, n, 1),
                       batch, m, n, k)
        assert_close(out.numpy(), (_ref(a) @ _ref(b)).numpy(), TOL["float32"], f"{batch}x{m}x{n}x{k}")


def test_direct_products_of_any_shape_launch_one_work_group_size(dev, rng, monkeypatch):
    """The direct kernel runs over a flat grid in work-groups of one size whatever the product's shape and batch,
    so a runtime that compiles a kernel for each work-group size (PoCL: 0.15-0.35 s each) compiles it once."""
    monkeypatch.setitem(tuning.TABLE, "gemm_direct", {"default": {"MAX_MACS": 1 << 40}})
    with clnn.profiler.profile(dev) as prof:
        for batch, m, n, k in ((1, 1, 1, 3), (1, 5, 7, 2), (3, 70, 3, 5), (2, 9, 41, 4), (1, 257, 1, 1)):
            a, b = _rand(rng, (batch, m, k)), _rand(rng, (batch, k, n))
            out = gemm_raw(clnn.tensor(a, device=dev), (m * k, k, 1), clnn.tensor(b, device=dev), (k * n, n, 1),
                           batch, m, n, k)
            assert_close(out.numpy(), (_ref(a) @ _ref(b)).numpy(), TOL["float32"], f"{batch}x{m}x{n}x{k}")
    groups = {e.local_size for e in prof.kernels if e.name == "gemm_direct"}
    assert len(groups) == 1 and len(prof.kernels) == 5, (groups, [e.name for e in prof.kernels])


def test_planner_picks_by_shape(dev):
    """On a GPU the issue's 127x253x61 takes the direct kernel and a big square product the GPU row's
    tile; a long k over few outputs splits; on the CPU the small product takes gemm_rows, or without it a tile."""
    gpu = dataclasses.replace(dev, type="gpu", max_work_group_size=1024, local_mem_size=49152, compute_units=132)
    f32 = np.dtype("float32")
    assert plan(gpu, f32, 1, 127, 253, 61).kernel == "direct"
    big = plan(gpu, f32, 1, 4096, 4096, 4096)
    assert (big.kernel, big.cfg, big.splits) == ("tiled", {**OPTIONAL_KEYS, **GPU_ROW}, 1)
    assert plan(gpu, f32, 1, 64, 64, 100352).splits > 1
    assert plan(dev, f32, 1, 1, 1, 1).kernel == "direct"
    if dev.type == "cpu":
        assert plan(dev, f32, 1, 127, 253, 61).kernel == "rows"
        assert plan(dev, f32, 1, 127, 253, 61, rows=False).kernel == "tiled"


def test_cpu_products_take_gemm_rows(dev, rng, monkeypatch):
    """On a CPU, products take gemm_rows (float64 in half the columns; float16 widened in its loads), B of
    non-contiguous columns copied to rows where there are MIN_M_COPY rows or more; a transposed B of fewer rows and a
    product of fewer work-groups than compute units (a tile splits k instead) take the tiled kernel; off CPUs
    nothing does. Each against torch in float64 (of the half inputs)."""
    cpu = dataclasses.replace(dev, type="cpu", compute_units=2)
    if tuning.params(cpu, "gemm_rows")["LY"] == 0:
        pytest.skip(f"{dev} has no gemm_rows")
    assert plan(cpu, np.dtype("float64"), 1, 64, 64, 64).cfg["WN"] * 2 == plan(cpu, np.dtype("float32"), 1, 64, 64,
                                                                                    64).cfg["WN"]
    half = "rows" if tuning.params(cpu, "gemm_rows")["FLOAT16"] else "tiled"
    assert plan(cpu, np.dtype("float16"), 1, 64, 64, 64).kernel == half
    with tuning.override("gemm_rows", FLOAT16=0):
        assert plan(cpu, np.dtype("float16"), 1, 64, 64, 64).kernel == "tiled"
        assert plan(cpu, clnn.bfloat16, 1, 64, 64, 64).kernel == "rows"
    wide = plan(cpu, np.dtype("float32"), 1, 64, 512, 64).cfg
    narrow = plan(cpu, np.dtype("float32"), 1, 512, wide["VW"] + 3, 64).cfg  # two vectors' columns, more rows
    assert (narrow["WN"], narrow["WM"]) == (2 * wide["VW"], min(ROWS_MOST_WM, wide["WM"] * wide["WN"] // narrow["WN"]))
    assert plan(cpu, np.dtype("float32"), 1, 8, 9, 100000).kernel == "tiled"  # one work-group: k splits instead
    gpu = dataclasses.replace(dev, type="gpu", max_work_group_size=1024, local_mem_size=49152, compute_units=132)
    assert plan(gpu, np.dtype("float32"), 1, 4096, 4096, 4096).kernel == "tiled"
    if tuning.params(dev, "gemm_rows")["LY"] == 0:
        return  # (a GPU pose) the products below take its tiles
    monkeypatch.setattr(dev, "compute_units", 2)
    copy_from = int(tuning.params(dev, "gemm_rows")["MIN_M_COPY"])
    launches = []
    launch = kernels.launch
    monkeypatch.setattr(kernels, "launch", lambda d, k, *a: launches.append(k.function_name) or launch(d, k, *a))
    for dtype in ("float32", "float16", "float64"):
        _skip_unsupported(dev, dtype)
        for m, n, tb in ((copy_from + 3, 67, False), (copy_from + 3, 67, True), (copy_from - 1, 67, True),
                         (300, 19, False)):  # the last in a narrow block
            k = 131
            a, b = _rand(rng, (m, k), dtype), _rand(rng, (n, k) if tb else (k, n), dtype)
            launches.clear()
            out = clnn.gemm(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev), trans_b=tb)
            rows = (m >= copy_from or not tb) and (dtype != "float16" or tuning.params(dev, "gemm_rows")["FLOAT16"])
            if rows:  # B's rows copied first (a copy kernel: which one depends on the device)
                assert launches[-1] == "gemm_rows" and len(launches) == 1 + tb, launches
            else:
                assert "gemm_rows" not in launches and all(k.startswith("gemm") for k in launches), launches
            ref, mag = _ref(a) @ (_ref(b).T if tb else _ref(b)), _ref(a).abs() @ (_ref(b).T if tb else _ref(b)).abs()
            assert_sum_close(out.numpy(), ref.numpy(), mag.numpy(), TOL[dtype], f"{dtype} {m} rows tb={tb}")


def test_planner_fills_fewer_rows_and_prices_splits(dev, monkeypatch):
    """A product with a quarter of the big tile's rows takes the tile cut to them, not the empty rows or the
    small tile, and one with 96 rows a tile of 96; a k-split is taken or not as its partials' price (the plan
    row's SPLIT) says."""
    f32 = np.dtype("float32")
    row = {"TM": 256, "TN": 64, "TK": 16, "WM": 4, "WN": 4, "VW": 4, "VWG": 4, "APAD": 0, "DB": 0}
    small = {**row, "TM": 16, "TN": 16, "WM": 2, "WN": 2, "VW": 2, "VWG": 2}
    monkeypatch.setitem(tuning.TABLE, "gemm", {"default": row})
    monkeypatch.setitem(tuning.TABLE, "gemm_small", {"default": small})
    cpu = dataclasses.replace(dev, type="cpu", compute_units=2, max_work_group_size=1024, local_mem_size=1 << 20)
    assert [c["TM"] for c in _fewer_rows(row, 16, 64)] == [128, 64]
    assert [c["TM"] for c in _fewer_rows(row, 16, 81)] == [128, 96, 64]  # 81 rows rounded up to ROW_FIT
    assert [c["TM"] for c in _fewer_rows(row, 16, 300)] == [128, 64]
    assert [c["TM"] for c in _fewer_rows(row, 16, 20)] == [128, 64]  # the quarter holds them: no tile of 32 rows
    assert [c["TM"] for c in _fewer_rows(row, 128, 96)] == [128]
    assert plan(cpu, f32, 1, 64, 4096, 512, rows=False).cfg == {**OPTIONAL_KEYS, **row, "TM": 64}
    assert plan(cpu, f32, 1, 96, 4096, 512, rows=False).cfg == {**OPTIONAL_KEYS, **row, "TM": 96}
    # 3 tiles of 256 x 64 over a long k on 2 units: a split in two evens the units out unless it costs too much
    monkeypatch.setitem(tuning.TABLE, "plan", {"default": {"STAGE": 0.5, "SPLIT": 1.0, "FILL": 0}})
    assert plan(cpu, f32, 1, 256, 192, 1 << 16, rows=False).splits > 1
    monkeypatch.setitem(tuning.TABLE, "plan", {"default": {"STAGE": 0.5, "SPLIT": 1e9, "FILL": 0}})
    assert plan(cpu, f32, 1, 256, 192, 1 << 16, rows=False).splits == 1


def test_narrow_products_weigh_a_tile_of_their_columns():
    """A product narrower than gemm_small's tile is weighed in that tile cut to the least power of two of columns
    holding it (at least a vector), its blocks and runs cut to fit; a product as wide as the tile is not."""
    small = {"TM": 32, "TN": 64, "TK": 64, "WM": 4, "WN": 32, "VW": 16, "VWG": 16, "APAD": 0, "DB": 0}
    assert _fewer_cols(small, 9) == [{**small, "TN": 16, "WN": 16}]
    assert _fewer_cols(small, 3) == [{**small, "TN": 16, "WN": 16}]  # one vector
    assert _fewer_cols(small, 33) == []  # 64 columns: the tile's own
    gpu = {"TM": 64, "TN": 64, "TK": 16, "WM": 8, "WN": 8, "VW": 4, "VWG": 4, "APAD": 1, "DB": 1}
    assert _fewer_cols(gpu, 5) == [{**gpu, "TN": 8, "WN": 8}]
    assert _fewer_cols(gpu, 2) == [{**gpu, "TN": 4, "WN": 4}]


def test_a_tile_of_the_products_rows_computes_it(dev, rng):
    """83 rows: the planner weighs the big tile cut to 96 (83 rounded up to ROW_FIT; neither its half nor its
    quarter), takes it on a CPU, and that tile computes the product (against torch in float64)."""
    f32 = np.dtype("float32")
    m, n, k = 83, 517, 300
    fit, rows = kernels.round_up(m, ROW_FIT), gemm_config(dev, f32)["TM"]
    if not rows // 4 < fit < rows:
        pytest.skip(f"{dev}'s big tile has {rows} rows")
    fits = [o.how for o in plan_options(dev, f32, 1, m, n, k) if o.how.cfg["TM"] == fit and o.how.splits == 1]
    assert fits
    if dev.type == "cpu" and not dev.real:
        assert plan(dev, f32, 1, m, n, k, rows=False).cfg["TM"] == fit
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    out = gemm_raw(clnn.tensor(a), (0, k, 1), clnn.tensor(b), (0, n, 1), 1, m, n, k, how=fits[0])
    wide = [torch.tensor(v.astype(np.float64)) for v in (a, b)]
    ref, mag = wide[0] @ wide[1], wide[0].abs() @ wide[1].abs()
    assert_sum_close(out.numpy()[0], ref.numpy(), mag.numpy(), TOL["float32"], "96-row tile")


def test_big_short_products_take_a_short_k_slice(dev, rng):
    """A product of k = 9 from SHORT_K_MACS multiply-adds up takes its tile with the k-slice cut to 16 (or the
    tile's VWG), a smaller one keeps the tile's own (no program built for it), and the cut tile computes the
    product (against torch in float64)."""
    f32 = np.dtype("float32")
    tile = plan(dev, f32, 1, 64, 64, 64, rows=False).cfg
    if tile["TK"] <= max(16, tile["VWG"]):
        pytest.skip(f"{dev}'s tile's k-slice is already {tile['TK']}")
    n = -(-SHORT_K_MACS // (64 * 9))
    short = plan(dev, f32, 1, 64, n, 9, rows=False)
    assert short.kernel == "tiled" and short.cfg["TK"] == max(16, short.cfg["VWG"])
    assert plan(dev, f32, 1, 64, n // 4, 9, rows=False).cfg["TK"] > 16
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 9), (9, n)))
    out = gemm_raw(clnn.tensor(a), (0, 9, 1), clnn.tensor(b), (0, n, 1), 1, 64, n, 9, how=short)[0]
    wide = [torch.tensor(v.astype(np.float64)) for v in (a, b)]
    ref, mag = wide[0] @ wide[1], wide[0].abs() @ wide[1].abs()
    assert_sum_close(out.numpy(), ref.numpy(), mag.numpy(), TOL["float32"], "short k")


@pytest.mark.parametrize("vwa", [1, 4])
@pytest.mark.parametrize(
    "wg, local, dtype",
    [(64, 16384, "float32"), (64, 16384, "float64"), (256, 32768, "float32"), (16, 1024, "float32")],
)
def test_config_fits_small_devices(dev, wg, local, dtype, vwa, monkeypatch):
    """The tile shrinks to the device's work-group and local memory, A's tile k-major (VWA 4: TK rows of TM plus
    APAD vectors) or not (TM rows of TK + APAD)."""
    monkeypatch.setitem(tuning.TABLE, "gemm", {key: {**row, "VWA": vwa} for key, row in tuning.TABLE["gemm"].items()})
    small = dataclasses.replace(dev, max_work_group_size=wg, local_mem_size=local)
    cfg = gemm_config(small, np.dtype(dtype))
    itemsize = np.dtype(dtype).itemsize
    assert (cfg["TM"] // cfg["WM"]) * (cfg["TN"] // cfg["WN"]) <= wg
    assert cfg["WM"] % cfg["VWA"] == 0 and cfg["VWA"] <= vwa
    tm, tk, apad = cfg["TM"], cfg["TK"], cfg["APAD"]
    a_tile = tk * (tm + apad * cfg["VWA"]) if cfg["VWA"] > 1 else tm * (tk + apad)
    assert (1 + cfg["DB"]) * (a_tile + cfg["TK"] * cfg["TN"]) * itemsize <= local
    assert config_problem(cfg, small, itemsize) is None


def test_runs_within_small_gpu_limits(dev, rng):
    """As under CLNN_LIMITS=wg=64,local=16384: the tile shrinks and results stay right."""
    small = dataclasses.replace(
        dev, max_work_group_size=64, local_mem_size=16384, _context=None, _queue=None, _pool=None
    )
    a, b = _rand(rng, (70, 45)), _rand(rng, (45, 66))
    out = clnn.matmul(clnn.tensor(a, device=small), clnn.tensor(b, device=small))
    assert_close(out.numpy(), (_ref(a) @ _ref(b)).numpy(), TOL["float32"], "limited device")


def test_halving_keeps_a_real_tile(dev, monkeypatch):
    """A tile too big for a small device halves into a valid one, its blocks cut to what divides it: a 96-column
    tile of 32-column blocks (Intel's weight gradient) used to fall to the 4x4 scalar tile on a 64-item GPU."""
    row = {"TM": 128, "TN": 96, "TK": 64, "WM": 8, "WN": 32, "VW": 16, "VWG": 16, "APAD": 0, "DB": 0}
    monkeypatch.setitem(tuning.TABLE, "gemm", {"default": row})
    small = dataclasses.replace(dev, max_work_group_size=64, local_mem_size=16384)
    cfg = gemm_config(small, np.dtype("float32"))
    assert config_problem(cfg, small) is None and cfg != matmul_mod._FALLBACK
    assert (cfg["TM"], cfg["TN"], cfg["TK"]) == (64, 48, 32) and cfg["TN"] % cfg["WN"] == 0


def test_no_tile_fits_raises(dev):
    tiny = dataclasses.replace(dev, max_work_group_size=8, local_mem_size=64)
    with pytest.raises(ValueError, match=r"gemm: .* allows work-groups of 8 and 64 bytes"):
        gemm_config(tiny, np.dtype("float32"))


def _other(dev):
    return dataclasses.replace(dev, _context=None, _queue=None, _pool=None)


ERRORS = [  # (call given dev, exception, message pattern)
    (lambda d: clnn.matmul(clnn.ones((3, 4), device=d), clnn.ones((5, 6), device=d)), ValueError,
     r"matmul: a has shape \(3, 4\) and b has shape \(5, 6\): inner dimensions 4 != 5"),
    (lambda d: clnn.matmul(clnn.ones((2, 3, 4), device=d), clnn.ones((3, 4, 5), device=d)), ValueError,
     r"matmul: batch dimensions of a \(2, 3, 4\) and b \(3, 4, 5\) cannot be broadcast"),
    (lambda d: clnn.gemm(clnn.ones((3, 4), device=d), clnn.ones((3, 4), device=d)), ValueError,
     r"gemm: op\(a\) is 3x4 but op\(b\) is 3x4: .*a \(3, 4\), trans_a=False; b \(3, 4\), trans_b=False"),
    (lambda d: clnn.matmul(clnn.ones((3, 4), device=d), clnn.ones((4, 2), dtype="float64", device=d)), TypeError,
     r"matmul: a has dtype float32 but b has dtype float64"),
    (lambda d: clnn.matmul(clnn.ones((3, 4), device=d), clnn.ones((4, 2), device=_other(d))), ValueError,
     r"matmul: a is on .* but b is on .*"),
    (lambda d: clnn.gemm(clnn.ones((3, 4), device=d), clnn.ones((4, 2), device=_other(d))), ValueError,
     r"gemm: a is on .* but b is on .*"),
    (lambda d: clnn.matmul(clnn.ones((), device=d), clnn.ones((3,), device=d)), ValueError,
     r"matmul: operands must have at least 1 dimension; got shapes \(\) and \(3,\)"),
    (lambda d: clnn.matmul(clnn.ones((3,), device=d), clnn.ones((), device=d)), ValueError,
     r"at least 1 dimension"),
    (lambda d: clnn.gemm(clnn.ones((3,), device=d), clnn.ones((3, 2), device=d)), ValueError,
     r"gemm: a and b must be 2-D; got shapes \(3,\) and \(3, 2\)"),
    (lambda d: clnn.gemm(clnn.ones((3, 4), device=d), clnn.ones((4, 2), device=d), clnn.ones((3, 3), device=d),
                         beta=1.0), ValueError,
     r"gemm: c must broadcast to the output shape \(3, 2\); got shape \(3, 3\)"),
    (lambda d: clnn.gemm(clnn.ones((3, 4), device=d), clnn.ones((4, 2), device=d),
                         clnn.ones((3, 2), dtype="float64", device=d), beta=1.0), TypeError,
     r"gemm: a has dtype float32 but c has dtype float64"),
    (lambda d: clnn.matmul(clnn.ones((3, 4), dtype="int32", device=d), clnn.ones((4, 2), dtype="int32", device=d)),
     TypeError, r"matmul: a expects a floating tensor .* got dtype int32"),
    (lambda d: clnn.gemm(np.ones((3, 4), np.float32), clnn.ones((4, 2), device=d)), TypeError,
     r"gemm: a expects a clnn.Tensor; got ndarray"),
    (lambda d: clnn.matmul([1.0], [1.0]), TypeError, r"matmul: expected a clnn.Tensor operand; got list and list"),
]


@pytest.mark.parametrize("call, exc, pattern", ERRORS)
def test_validation_errors(dev, call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call(dev)


@pytest.mark.parametrize("addend", ["row", "column", "full"])
@pytest.mark.parametrize("kind, splits", [("direct", 1), ("tiled", 1), ("tiled", 3), ("rows", 1)])
@pytest.mark.parametrize("n", [29, 128])
def test_strided_addend_in_the_store(dev, rng, addend, kind, splits, n):
    """beta * C read through strides in the store of every kernel (a Linear bias is a row of zero stride):
    the direct kernel, the tiled one, a k-split whose gemm_sum adds it, and gemm_rows; 128 columns are whole
    tiles, which the tiled kernel stores as whole vectors (with whole vectors of a row-contiguous C)."""
    batch, m, k = 2, 37, 70
    shape, strides = {"row": ((n,), (0, 0, 1)), "column": ((m,), (0, 1, 0)), "full": ((batch, m, n), (m * n, n, 1))}[
        addend]
    a, b, c = _rand(rng, (batch, m, k)), _rand(rng, (batch, k, n)), _rand(rng, shape)
    cfg = gemm_config(dev, np.dtype("float32"), "gemm_small")
    ks = max(cfg["TK"], kernels.round_up(-(-k // splits), cfg["TK"]))
    how = GemmPlan(kind, cfg, -(-k // ks), ks) if kind != "rows" else GemmPlan("rows", {**ROWS_BLOCK, "SPAN": 1})
    out = gemm_raw(clnn.tensor(a, device=dev), (m * k, k, 1), clnn.tensor(b, device=dev), (k * n, n, 1), batch, m,
                   n, k, alpha=0.5, beta=-2.0, c=clnn.tensor(c, device=dev), c_strides=strides, how=how)
    c_full = {"row": c[None, None, :], "column": c[None, :, None], "full": c}[addend]
    ref = 0.5 * _ref(a) @ _ref(b) - 2.0 * _ref(np.broadcast_to(c_full, (batch, m, n)).copy())
    assert_close(out.numpy(), ref.numpy(), 1e-5, f"{kind} x{how.splits}, {addend} addend")


ACT_MODULES = {"relu": clnn.nn.ReLU, "gelu": clnn.nn.GELU, "gelu_tanh": lambda: clnn.nn.GELU("tanh"),
               "sigmoid": clnn.nn.Sigmoid, "tanh": clnn.nn.Tanh, "silu": clnn.nn.SiLU}
TORCH_ACTS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu,
              "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh"), "sigmoid": torch.sigmoid,
              "tanh": torch.tanh, "silu": torch.nn.functional.silu}


def _linear_plan(dev, path, k):
    """The forward product's plan for ``path``: the direct kernel, one tile, k split in 3 ranges, or gemm_rows (in
    k chunks)."""
    cfg = gemm_config(dev, np.dtype("float32"))
    if path == "direct":
        return GemmPlan("direct", cfg)
    if path == "rows":
        return GemmPlan("rows", {**ROWS_BLOCK, "SPAN": 1})
    if path == "tiled":
        return tiled_plan(cfg, k)
    cfg = {**cfg, "TK": min(cfg["TK"], 64)}  # slices short enough for 3 ranges of 131
    ks = kernels.round_up(-(-k // 3), cfg["TK"])
    return GemmPlan("tiled", cfg, -(-k // ks), ks)


# every activation in the tiled product's store; relu (its output's mask) and gelu (its kept pre-activation) in every
# kernel that stores (on GPUs each activation is a program of its own, gemm.h's ACT_CODE: built per kernel and tile)
FUSED_PATHS = [(act, path) for act in matmul_mod.FUSED_ACTS for path in ("direct", "tiled", "split", "rows")
               if act in ("relu", "gelu") or path == "tiled"]


@pytest.mark.parametrize("act, path", FUSED_PATHS)
@pytest.mark.parametrize("bias", [True, False])
# 37 outputs: primes past every tile, stored lane by lane; 136: a first tile of whole, aligned vectors (gemm.cl's
# store_act_vec: the activation and the pre-activation a vector at a time), then a tile lane by lane
@pytest.mark.parametrize("fout", [37, 136])
def test_fused_linear_activation(dev, rng, monkeypatch, act, path, bias, fout):
    """Sequential(Linear, activation) is one launch fewer than the layers apart (the activation in the GEMM's
    store, after the k-split's sum), its gradients are bit-identical to theirs, and both match torch."""
    fin, xs = 131, (3, 7, 131)  # a short last k-range
    lin = clnn.nn.Linear(fin, fout, bias=bias, device=dev)
    xa, gy = _rand(rng, xs), _rand(rng, (3, 7, fout))
    w64, b64 = lin.weight.numpy().astype(np.float64), lin.bias.numpy().astype(np.float64) if bias else 0.0
    while act == "relu" and np.abs(xa @ w64.T + b64).min() < 1e-5:  # none within float32's error of the kink
        xa = _rand(rng, xs)  # (where the masks, and so the gradients, could differ)
    how = _linear_plan(dev, path, fin)
    assert path != "split" or how.splits == 3
    runs, counts = [], []
    for fused in (True, False):
        x = clnn.tensor(xa, device=dev)
        x.requires_grad = True
        for p in lin.parameters():
            p.grad = None
        with monkeypatch.context() as m, clnn.profiler.profile(dev) as prof:
            m.setattr(matmul_mod, "plan", lambda *args, **kw: how)  # the forward's product only
            y = clnn.nn.Sequential(lin, ACT_MODULES[act]())(x) if fused else ACT_MODULES[act]()(lin(x))
        counts.append(len(prof.kernels))
        y.backward(clnn.tensor(gy, device=dev))
        runs.append([t.numpy() for t in (y, x.grad, *(p.grad for p in lin.parameters()))])
    assert counts[0] == counts[1] - 1, counts
    for i, (a, b) in enumerate(zip(*runs)):
        if i > 0 or act == "relu":  # the gradients, and relu's output, exactly; the others' output as computed
            assert a.tobytes() == b.tobytes(), f"fused vs unfused, result {i}"  # by another kernel's math
        else:
            assert_close(a, b, 1e-6, "fused vs unfused output")
    tx, tw = (_ref(v).requires_grad_() for v in (xa, lin.weight.numpy()))
    tb = _ref(lin.bias.numpy()).requires_grad_() if bias else None
    z = torch.nn.functional.linear(tx, tw, tb)
    ref = TORCH_ACTS[act](z)
    ref.backward(_ref(gy))
    assert_close(runs[0][0], ref.detach().numpy(), 1e-5, "fused output")
    dz = (_ref(gy) * torch.autograd.functional.jacobian(lambda v: TORCH_ACTS[act](v).sum(), z.detach())).abs()
    mags = (dz @ tw.detach().abs(), dz.reshape(-1, fout).T @ tx.detach().abs().reshape(-1, fin),
            dz.reshape(-1, fout).sum(0))
    for got, want, mag, what in zip(runs[0][1:], (tx.grad, tw.grad, tb.grad if bias else None), mags,
                                    ("input", "weight", "bias")):
        assert_sum_close(got, want.numpy(), mag.numpy(), 1e-5, f"fused {what} gradient")


@pytest.mark.parametrize("path", ["direct", "tiled", "split", "rows"])
def test_only_fused_stores_build_the_activation_in(dev, rng, monkeypatch, path):
    """Plain products build their stores without activations (gemm.h's FUSED_ACT: faster builds); a fused Linear ->
    tanh builds them into the kernel that stores (the product's, or gemm_sum after a k-split) alone: off CPUs tanh
    alone (ACT_CODE: no switch over the others, whose registers a GPU's tile paid for)."""
    how = _linear_plan(dev, path, 131)
    monkeypatch.setattr(matmul_mod, "plan", lambda *args, **kw: how)
    built, real_kernel = [], kernels.kernel

    def spy(d, file, name, defines=None):
        defines = defines or {}
        code = matmul_mod.UNARY["tanh"] if dev.type != "cpu" else None
        built.append((name, defines.get("FUSED_ACT", 0) and defines.get("ACT_CODE") == code))
        return real_kernel(d, file, name, defines)

    monkeypatch.setattr(kernels, "kernel", spy)
    x, w = clnn.tensor(_rand(rng, (7, 131)), device=dev), clnn.tensor(_rand(rng, (37, 131)), device=dev)
    matmul_mod.linear_act(x, w, None)
    assert built and all(fused == 0 for _, fused in built), built
    built.clear()
    matmul_mod.linear_act(x, w, None, "tanh")  # gemm_rows copies w's rows first: the copy is built after it
    assert [name for name, fused in built if fused] == [{"direct": "gemm_direct", "tiled": "gemm", "split": "gemm_sum",
                                                         "rows": "gemm_rows"}[path]], built


def test_products_fused_with_different_activations_apply_their_own(dev, rng):
    """The same product fused with each activation in turn, in one process, equals the product followed by that
    activation (off CPUs each is a program of its own: ACT_CODE)."""
    x, w, b = (clnn.tensor(_rand(rng, shape), device=dev) for shape in ((37, 131), (29, 131), (29,)))
    plain = matmul_mod.linear_act(x, w, b)
    for act in matmul_mod.FUSED_ACTS:
        want = ACT_MODULES[act]()(plain).numpy()
        assert_close(matmul_mod.linear_act(x, w, b, act).numpy(), want, 1e-6, act)


# tiles of gemm.h's warp products (MMA): one warp of 16x8 products; four warps of 32x16 blocks (two row pairs, two
# column products each: every index of the lane mapping), a slice's loads before its stores; four warps of 16x8 over
# k-slices of 64, fetched ahead. Runs of 2, 8 and 16 elements (VWG): staged in local stores of 2, 8 and two of 8
MMA_TILES = [
    {"TM": 16, "TN": 8, "TK": 16, "WM": 2, "WN": 2, "VW": 2, "VWG": 2, "VWA": 1, "APAD": 1, "DB": 0, "PF": 0, "KU": 0},
    {"TM": 64, "TN": 32, "TK": 32, "WM": 4, "WN": 4, "VW": 2, "VWG": 8, "VWA": 1, "APAD": 1, "DB": 1, "PF": 1, "KU": 0},
    {"TM": 32, "TN": 16, "TK": 64, "WM": 2, "WN": 2, "VW": 2, "VWG": 16, "VWA": 1, "APAD": 1, "DB": 0, "PF": 2,
     "KU": 0},
]


@pytest.mark.gpu_tiles
@pytest.mark.parametrize("tile", MMA_TILES, ids=["1warp", "4warps", "tk64pf"])
@pytest.mark.parametrize("dtype, tol", [(clnn.float16, 2**-10), (clnn.bfloat16, 2**-7)], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("batch, m, n, k, splits", [(1, 37, 29, 45, 1), (2, 70, 41, 100, 2), (1, 1, 9, 17, 1),
                                                    (2, 40, 48, 96, 1)])
@pytest.mark.parametrize("a_rows", [True, False], ids=["a", "a_t"])
@pytest.mark.parametrize("staging", ["", "ldsm", "async"])
def test_mma_products(dev, rng, tile, dtype, tol, batch, m, n, k, splits, a_rows, staging):
    """gemm.h's warp products (NVIDIA's tensor cores, or their OpenCL C form here) against float64 products of the
    same half inputs: within a rounding of each output plus float32's sum, through edge tiles, short last
    k-slices (k not a multiple of 16: the stale columns past k read as zeros), k-splits, A read along its rows or
    transposed (staged in runs along k, or along the rows), operands whose runs are aligned (40 x 48 x 96) or not,
    alpha, beta and a broadcast addend; on NVIDIA's runtime
    also with the fragments loaded by ldmatrix (LDSM: x4 blocks, and x2 for the one-warp tile's single column
    product); and staged by gemm.h's ASYNC copies (runs of 8 and 16 elements; the one-warp tile's 2 as before)."""
    if staging == "ldsm" and not kernels.runs_ptx(dev):
        pytest.skip("ldmatrix: NVIDIA's runtime only (elsewhere LDSM is ignored)")
    cfg = {**tile, "MMA": 1, **{"": {}, "ldsm": {"LDSM": 1}, "async": {"ASYNC": 1, "PF": 0}}[staging]}
    assert config_problem(cfg) is None
    if (problem := config_problem(cfg, dev)) is not None:  # a small GPU's pose: work-groups of 64
        pytest.skip(problem)
    a = rng.standard_normal((batch, m, k) if a_rows else (batch, k, m)).astype(dtype)
    a_strides = (m * k, k, 1) if a_rows else (k * m, 1, m)
    b = rng.standard_normal((batch, k, n)).astype(dtype)
    d = rng.standard_normal(n).astype(dtype)
    how = GemmPlan("tiled", cfg, splits, kernels.round_up(-(-k // splits), tile["TK"]))
    out = gemm_raw(clnn.tensor(a, device=dev), a_strides, clnn.tensor(b, device=dev), (k * n, n, 1), batch, m,
                   n, k, alpha=0.5, beta=2.0, c=clnn.tensor(d, device=dev), c_strides=(0, 0, 1), how=how)
    ra, rb, rd = _ref(a) if a_rows else _ref(a).transpose(1, 2), _ref(b), _ref(d)
    exact = (0.5 * ra @ rb + 2.0 * rd).numpy()
    bound = tol * np.abs(exact) + k * 2**-22 * (0.5 * ra.abs() @ rb.abs() + 2 * rd.abs()).numpy()
    err = np.abs(out.numpy().astype(np.float64) - exact)
    assert np.all(err <= bound), np.max(err / bound)


def test_mma_tiles(dev):
    """MMA is laid over half products' tiles only, on devices whose ``mma`` row asks for it, where the tile
    allows; config_problem names what a warp-product tile needs."""
    with tuning.override("mma", MMA=1):
        assert "MMA" not in gemm_config(dev, np.dtype(np.float32))
        for dtype in (np.float16, clnn.bfloat16):
            cfg = gemm_config(dev, np.dtype(dtype))
            assert cfg.get("MMA", 0) == (config_problem({**cfg, "MMA": 1, "VW": 2, "VWA": 1}, dev) is None)
    with tuning.override("mma", MMA=0):
        assert "MMA" not in gemm_config(dev, np.dtype(np.float16))
    assert "MMA needs VW 2" in config_problem({**MMA_TILES[0], "MMA": 1, "TK": 8})


def test_the_mma_row_fits_every_half_tile(dev):
    """Where tuning's own mma row asks for warp products (NVIDIA, or the H100 pose), every kind's half tile takes
    them: the row's keys (double-buffered k-slices of 32) fit the device's local memory and work-groups, which
    gemm_config would otherwise drop for the SIMT tile without a word."""
    if not (tuning.params(dev, "mma")["MMA"] and kernels.warp_products(dev)):
        pytest.skip("this device's mma row asks for no warp products")
    assert warp_product_misfits(dev) == []


def test_warp_product_tiles_fetch_ahead_only_what_their_registers_hold(dev):
    """The mma row fetches k-slices ahead (PF) in the big tile it was chosen for; a tile with fewer work-items for the
    same slices (gemm_small's, the planner's cut rows and columns) fetches none (in clang's NVPTX build gemm_small's
    spilled), and the big one keeps PF where its slices fit."""
    def fetched(cfg):
        return (cfg["TM"] + cfg["TN"]) * cfg["TK"] / work_items(cfg)

    with tuning.override("mma", MMA=1, TK=32, DB=1, PF=2):
        big = gemm_config(dev, np.dtype(np.float16))
        if not big.get("MMA"):
            pytest.skip("no warp-product tile fits this device")
        assert big["PF"] == (2 if fetched(big) <= PF_MAX_FETCHED else 0), big
        cfgs = [o.how.cfg for m, n, k in ((2048, 2048, 2048), (40, 4096, 576), (4096, 24, 4096), (64, 100352, 288))
                for o in plan_options(dev, np.dtype(np.float16), 1, m, n, k)]
        assert all(cfg["MMA"] and (cfg["PF"] == 0 or fetched(cfg) <= PF_MAX_FETCHED) for cfg in cfgs), cfgs
        assert any(cfg["PF"] == 0 and fetched({**cfg, "PF": 2}) > PF_MAX_FETCHED for cfg in cfgs), cfgs


def test_warp_products_need_compute_capability_8(monkeypatch, dev):
    """NVIDIA's runtime gets warp products (mma.sync's 16x8x16 float16 and bfloat16 forms) from compute capability
    8.0 on, or none where it does not say; other runtimes run their OpenCL C form; gemm_config follows."""
    def device(vendor, **attrs):
        return types.SimpleNamespace(platform_vendor=vendor, cl_device=types.SimpleNamespace(**attrs))

    nvidia = "NVIDIA Corporation"
    assert not kernels.warp_products(device(nvidia, compute_capability_major_nv=7))  # Volta, Turing
    assert kernels.warp_products(device(nvidia, compute_capability_major_nv=8))
    assert not kernels.warp_products(device(nvidia))
    assert kernels.warp_products(device("Intel(R) Corporation"))
    monkeypatch.setattr(kernels, "warp_products", lambda d: False)
    with tuning.override("mma", MMA=1):
        assert "MMA" not in gemm_config(dev, np.dtype(np.float16))


ASYNC_TILES = {  # gemm.h's ASYNC copies: (A along k, A along its rows, B along its columns, B along k) copied as
    "gpu-row": {**GPU_ROW, "ASYNC": 1},  # (each element, whole 16-byte pieces, whole, each element)
    "gpu-row-row-major": {**GPU_ROW, "VWA": 1, "VWG": 4, "APAD": 4, "ASYNC": 1},  # (whole, each, whole, each)
    "small-db": {**SMALL_DB, "ASYNC": 1},  # A's rows of 9 elements: (each, each, whole, each)
}


@pytest.mark.gpu_tiles
@pytest.mark.parametrize("name", list(ASYNC_TILES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_async_staging_gives_the_staged_bits(dev, rng, name, dtype, ta, tb):
    """gemm.h's ASYNC (cp.async on NVIDIA's runtime, plain copies of the same bytes elsewhere) stages what staging run
    by run does, so the products are the same bits: every transpose, in each local layout's copies, for operands
    whose runs are aligned (131 rows: an edge tile; 136 x 72 x 104: whole 16-byte copies) or not (every run of
    67 x 137 element by element or staged as before), a k-split, and against float64."""
    if dtype == np.float64 and not dev.fp64:
        pytest.skip("no float64 on this device")
    cfg = ASYNC_TILES[name]
    if (problem := config_problem(cfg, dev)) is not None:
        pytest.skip(problem)
    for m, n, k, splits in ((131, 67, 137, 1), (136, 72, 104, 2)):
        a = _rand(rng, (k, m) if ta else (m, k)).astype(dtype)
        b = _rand(rng, (n, k) if tb else (k, n)).astype(dtype)
        out = {}
        for copies in (0, 1):
            tile = {**cfg, "ASYNC": copies}
            ks = kernels.round_up(-(-k // splits), tile["TK"])
            out[copies] = gemm_raw(clnn.tensor(a, device=dev), (0, 1, m) if ta else (0, k, 1),
                                   clnn.tensor(b, device=dev), (0, 1, k) if tb else (0, n, 1), 1, m, n, k,
                                   how=GemmPlan("tiled", tile, -(-k // ks), ks)).numpy().reshape(m, n)
        np.testing.assert_array_equal(out[1], out[0], f"{name} {m}x{n}x{k}")
        ref = (_ref(a).T if ta else _ref(a)) @ (_ref(b).T if tb else _ref(b))
        assert_close(out[1], ref.numpy(), TOL[np.dtype(dtype).name], f"{name} {m}x{n}x{k}")


def test_async_staging_reaches_nvidia_compiler_only_from_compute_capability_8(dev, monkeypatch):
    """ASYNC tiles build cp.async (ASYNC_PTX) on NVIDIA's runtime from compute capability 8.0 only; elsewhere their
    plain copies. A tile row's ASYNC reaches its SIMT tiles, the mma row's its warp-product tiles; either needs PF 0."""
    def ptx(**attrs):
        nvidia = types.SimpleNamespace(platform_vendor="NVIDIA Corporation", fp16=False,
                                       cl_device=types.SimpleNamespace(**attrs))
        with monkeypatch.context() as patch:
            patch.setattr(tuning, "params", lambda d, kind: {})  # the storage row of a device that is not here
            return kernels._full_defines(nvidia, {"ASYNC": 1}).get("ASYNC_PTX")

    assert (ptx(compute_capability_major_nv=8), ptx(compute_capability_major_nv=7), ptx()) == (1, 0, 0)
    assert kernels._full_defines(dev, {"ASYNC": 1})["ASYNC_PTX"] == int(kernels.runs_ptx(dev) and kernels.sm80(dev))
    assert "ASYNC_PTX" not in kernels._full_defines(dev, {"ASYNC": 0})
    assert "PF 0" in config_problem({**SMALL_DB, "ASYNC": 1, "PF": 1})
    with tuning.override("gemm", ASYNC=1), tuning.override("mma", MMA=1):
        assert gemm_config(dev, np.dtype(np.float32))["ASYNC"] == 1
        cfg = gemm_config(dev, np.dtype(np.float16))
        assert cfg.get("ASYNC") == (None if cfg.get("MMA") else 1)
    with tuning.override("mma", MMA=1, PF=0, ASYNC=1):
        cfg = gemm_config(dev, np.dtype(np.float16))
        assert cfg.get("ASYNC") == (1 if cfg.get("MMA") else None)


def test_register_cap_reaches_nvidia_compiler_only(dev):
    """The mma row's REGS caps a warp-product tile's registers: NVIDIA's own runtime gets -cl-nv-maxrregcount, any
    other runtime (one posing as NVIDIA too) only the define; no REGS, no cap. REGS and LDSM reach half
    products' warp-product tiles only; a tile row's REGS reaches its SIMT tiles only."""
    nvidia = types.SimpleNamespace(platform_vendor="NVIDIA Corporation", cl_device=dev.cl_device)
    assert "-cl-nv-maxrregcount=128" in kernels._options(nvidia, {"MMA": 1, "REGS": 128})
    assert not any("maxrreg" in o for o in kernels._options(nvidia, {"MMA": 1}))
    mine = kernels._options(dev, {"MMA": 1, "REGS": 128})
    assert "-DREGS=128" in mine and any("maxrreg" in o for o in mine) == kernels.runs_ptx(dev)
    with tuning.override("mma", MMA=1, REGS=96, LDSM=1):
        cfg = gemm_config(dev, np.dtype(np.float16))
        assert (cfg.get("REGS"), cfg.get("LDSM")) == ((96, 1) if cfg.get("MMA") else (None, None))
        assert "REGS" not in gemm_config(dev, np.dtype(np.float32))
    with tuning.override("gemm", REGS=128), tuning.override("mma", MMA=1):  # a SIMT tile's cap stays off MMA tiles
        assert gemm_config(dev, np.dtype(np.float32))["REGS"] == 128
        cfg = gemm_config(dev, np.dtype(np.float16))
        assert cfg.get("REGS") == (None if cfg.get("MMA") else 128)
