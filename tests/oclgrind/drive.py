"""Drive clnn's real ops on tiny shapes, one op family per process, for the Oclgrind check.

Run by ``tests/test_oclgrind.py`` as ``python drive.py FAMILY --record OUT.json`` with
``CLNN_DEVICE=oclgrind`` and Oclgrind's checks switched on in the environment. Each family calls the
public API the way the library's own code does, so every kernel is built in the specializations
(``#define`` sets) it really uses, and checks the results against NumPy. ``--record`` writes every
(file, kernel, defines) that was fetched, so the test can prove each kernel in ``kernels_cl/`` ran.

Adding kernels: give the new op family a function below and a row in ``FAMILIES`` (shapes 16-64 at
most: Oclgrind interprets every work-item, about 1,000 times slower than PoCL).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Callable

import numpy as np
import pyopencl as cl

import clnn
from clnn import kernels, tuning
from clnn.ops import index as index_ops
from clnn.ops.matmul import GemmPlan, gemm_raw, linear_act

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(clnn.bfloat16)
TOL = {F16: 2e-2, BF16: 2e-2, F32: 1e-4, F64: 1e-9}
_fetched: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()


def _lower_wg(wg: int) -> None:
    """Keep this run's pose (CLNN_LIMITS), with work-groups of at most ``wg``; reductions of any size split."""
    sys.modules["clnn.ops.reduce"].SPLIT_MIN = 0  # the small inputs Oclgrind affords take the split paths
    pose = sys.modules["clnn.device"]._pose_from_env()
    clnn.limit_devices(**{**pose, "wg": min(wg, int(pose.get("wg", wg)))})


def _recording_kernel(original: Callable) -> Callable:
    def kernel(dev, file, name, defines=None):
        _fetched.add((file, name, tuple(sorted((k, str(v)) for k, v in (defines or {}).items()))))
        return original(dev, file, name, defines)

    return kernel


def _fill_from_host(queue, mem, pattern, offset, size, wait_for=None):
    """``enqueue_fill_buffer`` as a host write: Oclgrind 21.10's uninitialized-value checker does not
    count a fill as initializing memory, so every read of a filled buffer would be a false report."""
    host = np.resize(np.frombuffer(np.ascontiguousarray(pattern).tobytes(), np.uint8), size)
    return cl.enqueue_copy(queue, mem, host, dst_offset=offset, wait_for=wait_for, is_blocking=True)


_COPY_BYTES = """__kernel void copy_bytes(__global uchar *dst, __global const uchar *src, ulong dst_at, ulong src_at,
                         ulong dst_row, ulong dst_plane, ulong src_row, ulong src_plane) {
    size_t x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
    dst[dst_at + z * dst_plane + y * dst_row + x] = src[src_at + z * src_plane + y * src_row + x];
}"""


def _copy_by_kernel(original: Callable) -> Callable:
    """``enqueue_copy`` from buffer to buffer (``Device.copy``, ``Device.copy_rect``) as a byte-copy kernel:
    Oclgrind 21.10's uninitialized-value checker marks the wrong bytes as written by a copy (or host write) that
    covers only part of a buffer, so reads of the projected LSTM's state buffers, filled a step at a time, would
    be false reports; a kernel's stores carry each byte's state exactly."""
    built: dict[cl.Context, cl.Kernel] = {}

    def at(origin: tuple[int, int, int], pitches: tuple[int, int]) -> int:
        return origin[0] + origin[1] * pitches[0] + origin[2] * pitches[1]

    def copy(queue, dst, src, **kw):
        if not (isinstance(dst, cl.Buffer) and isinstance(src, cl.Buffer)):
            return original(queue, dst, src, **kw)
        if queue.context not in built:
            program = cl.Program(queue.context, _COPY_BYTES).build(["-cl-opt-disable"])
            built[queue.context] = cl.Kernel(program, "copy_bytes")
        if "region" in kw:
            region, dp, sp = kw["region"], kw["dst_pitches"], kw["src_pitches"]
            ends = (at(kw["dst_origin"], dp), at(kw["src_origin"], sp))
        else:
            region, dp, sp = (kw["byte_count"], 1, 1), (0, 0), (0, 0)
            ends = (kw.get("dst_offset", 0), kw.get("src_offset", 0))
        return built[queue.context](queue, region, None, dst, src, *(np.uint64(x) for x in (*ends, *dp, *sp)))

    return copy


def _unoptimized(original: Callable) -> Callable:
    """Build without optimization: Oclgrind 21.10 aborts on LLVM's ``freeze`` instruction, which the
    optimizer emits (e.g. around integer division); -O0 code also maps reports to source lines."""

    def options(dev, defines):
        return [*original(dev, defines), "-cl-opt-disable"]

    return options


class _NeverFree:
    """A pool that gives every tensor a fresh buffer and never releases one during the run.

    Fresh buffers make a read of an unwritten element show as uninitialized; never releasing them
    sidesteps Oclgrind 21.10 reusing a released buffer's shadow state, which reported reads of fully
    written buffers as uninitialized. The driver's tensors total a few hundred KiB."""

    def __init__(self, context: cl.Context) -> None:
        self.context = context
        self.buffers: list[cl.Buffer] = []

    def allocate(self, nbytes: int) -> cl.Buffer:
        buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
        self.buffers.append(buf)
        return buf


def check(what: str, out: object, ref: np.ndarray, dt: np.dtype) -> None:
    """Raise if ``out`` (a Tensor or array) differs from ``ref`` by more than ``dt``'s tolerance.

    Prints ``done: what`` on stderr after the result is read back, so a report above it belongs to
    this call or to one after the previous ``done`` line."""
    got = np.asarray(out, dtype=np.float64)
    print(f"done: {what} [{dt.name}]", file=sys.stderr, flush=True)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise AssertionError(f"{what} [{dt.name}]: shape {got.shape}, expected {ref.shape}")
    tol = TOL.get(dt, 0.0)
    if not np.allclose(got, ref, rtol=tol, atol=tol, equal_nan=True):
        err = np.nanmax(np.abs(got - ref))
        raise AssertionError(f"{what} [{dt.name}]: max abs error {err:.3e} > {tol:.1e}")


def data(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype, lo: float = -2, hi: float = 2) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(dt)


# ---- families -------------------------------------------------------------------------------------------
def elementwise(dt: np.dtype, rng: np.random.Generator) -> None:
    """unary (every op code), unary_grad (through backward), binary (same shapes, broadcasting), compare: in the
    device's own groups, then in 16-wide ones (PoCL's, on whole vectors; 21 elements: one group and a tail)."""
    from clnn import tuning

    for knobs in (None, {"EW_VEC": 16, "EW_STATIC": 0}):
        if knobs:
            tuning.TABLE["elementwise"] = {"default": knobs}
        _elementwise_cases(dt, rng)


def _elementwise_cases(dt: np.dtype, rng: np.random.Generator) -> None:
    from clnn.ops import elementwise as ew

    xn = data(rng, (3, 7), dt, 0.2, 2.0)  # positive: log, sqrt, pow stay real
    x = clnn.tensor(xn, requires_grad=True)
    for op in ew.UNARY:
        y = ew.unary(op, x, 0.5, 1.5)
        y.backward(clnn.ones(*y.shape, dtype=dt))
        if not np.isfinite(np.asarray(y, np.float64)).all() or not np.isfinite(np.asarray(x.grad, np.float64)).all():
            raise AssertionError(f"unary {op} [{dt.name}]: non-finite output or gradient on inputs in [0.2, 2]")
        x.grad = None
    bn = data(rng, (1, 7), dt, 0.5, 1.5)
    b = clnn.tensor(bn)
    refs = {"add": xn + bn, "sub": xn - bn, "mul": xn * bn, "div": xn / bn,
            "pow": np.power(xn.astype(np.float64), bn), "max": np.maximum(xn, bn), "min": np.minimum(xn, bn)}
    for op, ref in refs.items():
        check(f"binary {op}", ew._binary(op, x, b), ref, dt)
    check("binary add (same shapes)", ew._binary("add", x, x), xn + xn, dt)
    for op, fn in {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                   "gt": np.greater, "ge": np.greater_equal}.items():
        check(f"compare {op}", ew._compare(op, x, b), fn(xn, bn), dt)


def reduce(dt: np.dtype, rng: np.random.Generator) -> None:
    """reduce_item (short or strided axes) and reduce_group (long contiguous axes) for every op, then both
    splitting an axis across work-groups in stages (as on a big GPU, posed by a tiny work-group limit)."""
    xn = data(rng, (5, 3, 6), dt)
    x = clnn.tensor(xn, requires_grad=True)
    check("sum", x.sum(axis=1), xn.astype(np.float64).sum(axis=1), dt)
    check("max", x.max(axis=(0, 2)), xn.max(axis=(0, 2)), dt)
    check("min", x.min(axis=-1), xn.min(axis=-1), dt)
    check("argmax", x.argmax(axis=1), xn.argmax(axis=1), dt)
    check("argmin", x.argmin(), xn.argmin(), dt)
    ref = np.log(np.exp(xn.astype(np.float64)).sum(axis=2))
    check("logsumexp", clnn.logsumexp(x, axis=2), ref, dt)
    clnn.logsumexp(x, axis=2).sum().backward()
    long = data(rng, (2, 67), dt)  # 67 > SMALL_AXIS, contiguous: one work-group per output
    t = clnn.tensor(long)
    check("sum (work-group)", t.sum(axis=1), long.astype(np.float64).sum(axis=1), dt)
    check("max (work-group)", t.max(axis=1), long.max(axis=1), dt)
    check("argmin (work-group)", t.argmin(axis=1), long.argmin(axis=1), dt)
    check("logsumexp (work-group)", clnn.logsumexp(t, axis=1),
          np.log(np.exp(long.astype(np.float64)).sum(axis=1)), dt)
    for n in (401, 1009):  # longer rows: work-groups of 64 and 128, more of the tree's levels
        rows = data(rng, (2, n), dt)
        check(f"sum (work-group, rows of {n})", clnn.tensor(rows).sum(axis=1), rows.astype(np.float64).sum(axis=1), dt)
    _lower_wg(8)  # few outputs now split their axis into chunks
    v, cols = data(rng, (300,), dt), data(rng, (40, 3), dt)
    tv, tc = clnn.tensor(v), clnn.tensor(cols)
    check("sum (split)", tv.sum(), v.astype(np.float64).sum(), dt)
    check("argmax (split)", tv.argmax(), v.argmax(), dt)
    check("logsumexp (split)", clnn.logsumexp(tv, axis=0), np.log(np.exp(v.astype(np.float64)).sum()), dt)
    check("max (split, strided)", tc.max(axis=0), cols.max(axis=0), dt)
    check("argmin (split, strided)", tc.argmin(axis=0), cols.argmin(axis=0), dt)


def copy(dt: np.dtype, rng: np.random.Generator) -> None:
    """Strided copies (permute, transpose, slicing, broadcast_to) and every dtype conversion from ``dt``."""
    xn = data(rng, (4, 3, 5), dt)
    x = clnn.tensor(xn)
    check("permute", x.permute(2, 0, 1), xn.transpose(2, 0, 1), dt)
    check("last two axes swapped", x.transpose(1, 2).contiguous(), xn.transpose(0, 2, 1), dt)  # copy.cl's transpose
    with tuning.override("transpose", TB=2):  # transpose_blocks, as PoCL runs it: blocks cut at both edges
        check("last two axes swapped in blocks", x.transpose(1, 2).contiguous(), xn.transpose(0, 2, 1), dt)
    check("slice", x[1:, ::-2, 1:4], xn[1:, ::-2, 1:4], dt)
    check("slice of rows", x[1:, :, 1:4], xn[1:, :, 1:4], dt)  # a rectangular copy: the driver's copy_bytes
    check("broadcast_to", clnn.tensor(xn[:1]).broadcast_to((4, 3, 5)), np.broadcast_to(xn[:1], (4, 3, 5)), dt)
    dev = clnn.device()
    for target in (F16, BF16, F32, F64, np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_)):
        if target == dt or not dev.supports(target):
            continue
        check(f"astype {target.name}", x.astype(target), xn.astype(target), target)
        back = clnn.tensor(xn.astype(target)).astype(dt)
        check(f"astype from {target.name}", back, xn.astype(target).astype(dt), dt)


def index(dt: np.dtype, rng: np.random.Generator) -> None:
    """index.cl: the range check (passing and failing), gather/scatter in every mode (through gather,
    scatter_add, backward, embedding's skipped row, assignment), where_fill, tri, a boolean mask, the
    sorted scatter (radix sort included), then scan and topk with work-groups of 16 (multi-block scans,
    a cached and an uncached top-k row)."""
    xn = data(rng, (4, 5), dt)
    x = clnn.tensor(xn, requires_grad=True)
    i = rng.integers(0, 5, (4, 3))
    check("gather", x.gather(1, clnn.tensor(i)), np.take_along_axis(xn, i, 1), dt)
    src = data(rng, (4, 3), dt)
    want = xn.astype(np.float64)
    for r in range(4):
        np.add.at(want[r], i[r], src[r].astype(np.float64))
    check("scatter_add", x.scatter_add(1, clnn.tensor(i), clnn.tensor(src)), want, dt)
    want_add = want
    rows = np.array([3, 0, 3])
    e = clnn.functional.embedding(clnn.tensor(rows), x, padding_idx=0)
    e.backward(clnn.ones(*e.shape, dtype=dt))
    check("embedding backward", x.grad, np.array([[0] * 5, [0] * 5, [0] * 5, [2] * 5]), dt)
    try:
        x[clnn.tensor([0, 9])]
    except IndexError:
        print("done: index_check (out of range)", file=sys.stderr, flush=True)
    else:
        raise AssertionError("index_check: index 9 of 4 rows passed")
    y = clnn.tensor(xn)
    y[[2, -1]] = clnn.tensor(src[:2, :1])
    want = xn.copy()
    want[[2, -1]] = src[:2, :1]
    check("setitem", y, want, dt)
    m = rng.random((4, 1)) < 0.5
    check("where", clnn.where(clnn.tensor(m), x, 0.0), np.where(m, xn, 0), dt)
    check("triu", x.triu(1), np.triu(xn, 1), dt)
    check("mask getitem (scan, mask_positions)", x[clnn.tensor(m[:, 0])], xn[m[:, 0]], dt)
    with tuning.override("scatter", COLS_VW=4):  # one index list walked per chunk of 4 columns (rows of 5: tails)
        x.grad = None
        e = clnn.functional.embedding(clnn.tensor(rows), x, padding_idx=0)
        e.backward(clnn.ones(*e.shape, dtype=dt))
        check("embedding backward by columns", x.grad, np.array([[0] * 5, [0] * 5, [0] * 5, [2] * 5]), dt)
        y = clnn.tensor(xn)
        y[[2, -1]] = clnn.tensor(src[:2, :1])
        check("setitem by columns", y, want, dt)
    _lower_wg(16)
    index_ops.WALK_MAX = -1  # every scatter below sorts first (2 radix tiles of 16 x RADIX_K keys)
    x.grad = None
    rows = rng.integers(0, 4, 70)
    e = clnn.functional.embedding(clnn.tensor(rows), x)
    e.backward(clnn.ones(*e.shape, dtype=dt))
    check("sorted embedding backward", x.grad, np.repeat(np.bincount(rows, minlength=4)[:, None], 5, 1), dt)
    check("sorted scatter_add", x.scatter_add(1, clnn.tensor(i), clnn.tensor(src)), want_add, dt)
    v = data(rng, (2, 150), dt, 0.0, 1.0)
    check("cumsum (3 blocks)", clnn.tensor(v).cumsum(1), np.cumsum(v.astype(np.float64), 1), dt)
    check("cumsum (strided)", clnn.tensor(v[:, :7]).cumsum(0), np.cumsum(v[:, :7], 0), dt)
    w = rng.permutation(1030).astype(dt)
    check("topk (uncached row)", clnn.tensor(w).topk(2)[0], np.sort(w)[::-1][:2], dt)
    check("topk (cached rows)", clnn.tensor(v).topk(3, largest=False)[1], np.argsort(v, 1, kind="stable")[:, :3], dt)


def random(dt: np.dtype, rng: np.random.Generator) -> None:
    """uniform, normal and dropout draws (n not a multiple of 4: each work-item makes 4 numbers)."""
    from clnn.ops.random import dropout_mask

    u = np.asarray(clnn.rand(5, 7, seed=3, dtype=dt), np.float64)
    if not ((u >= 0) & (u < 1)).all():
        raise AssertionError(f"rand [{dt.name}]: values outside [0, 1)")
    n = np.asarray(clnn.randn(5, 7, seed=4, dtype=dt), np.float64)
    if not np.isfinite(n).all():
        raise AssertionError(f"randn [{dt.name}]: non-finite values")
    xn = data(rng, (5, 7), dt, 0.5, 1.5)
    x = clnn.tensor(xn)
    y, mask = clnn.empty(5, 7, dtype=dt), clnn.empty(5, 7, dtype=dt)
    dropout_mask(x, 0.25, y, mask)
    check("dropout", y, xn.astype(np.float64) * np.asarray(mask, np.float64) / 0.75, dt)


def gemm(dt: np.dtype, rng: np.random.Generator) -> None:
    """gemm with every transpose flag and beta, batched broadcast matmul, both backward products and a
    k-split product (gemm_sum), all tiled; then the direct kernel and a double-buffered tile with vector
    loads, forced, transposed and batched; then that tile's staging variants (A's tile k-major, VWA, with a slice's
    loads before its stores, PF 1, and multiplies unrolled, KU; single-buffered, fetched a slice ahead, PF 2; staged
    by ASYNC copies, A's tile row-major or k-major, float32's), one product each way; gemm_rows."""
    saved = dict(tuning.TABLE["gemm_direct"]["default"])
    tuning.TABLE["gemm_direct"]["default"]["MAX_MACS"] = 0  # the planner would pick the direct kernel here
    try:
        _gemm_tiled(dt, rng)
    finally:
        tuning.TABLE["gemm_direct"]["default"] = saved
    tile = {"TM": 16, "TN": 16, "TK": 8, "WM": 2, "WN": 4, "VW": 2, "VWG": 4, "APAD": 1, "DB": 1}
    an, bn, cn = data(rng, (2, 17, 16), dt), data(rng, (16, 20), dt), data(rng, (2, 17, 20), dt)
    ref = 0.5 * an.astype(np.float64) @ bn.astype(np.float64) + 2.0 * cn
    a, b, c = clnn.tensor(an), clnn.tensor(bn), clnn.tensor(cn)
    asyncs = ({"APAD": 0, "ASYNC": 1}, {"VWA": 2, "ASYNC": 1}) if dt == F32 else ()  # copies alike in every type
    for opts in ({"VWA": 2, "PF": 1, "KU": 4}, {"DB": 0, "PF": 2}, *asyncs):
        how = GemmPlan("tiled", {**tile, **opts}, 1, 16)
        for a_st, b_st, x, y in (((272, 16, 1), (0, 20, 1), a, b), ((272, 1, 17), (0, 1, 16), _t(an), _t(bn))):
            out = gemm_raw(x, a_st, y, b_st, 2, 17, 20, 16, alpha=0.5, beta=2.0, c=c, how=how)
            check(f"gemm {opts} strides {a_st} {b_st}", out, ref, dt)
    for how in (GemmPlan("direct", tile), GemmPlan("tiled", tile, 1, 16)):
        for a_st, b_st, x, y in (((272, 16, 1), (0, 20, 1), a, b),  # rows of 16 and 20: aligned vector loads
                                 ((272, 1, 17), (0, 1, 16), _t(an), _t(bn))):  # both read transposed
            pre = clnn.empty((2, 17, 20), dtype=dt)
            out = gemm_raw(x, a_st, y, b_st, 2, 17, 20, 16, alpha=0.5, beta=2.0, c=c, how=how, act="relu", pre=pre)
            check(f"gemm {how.kernel} DB=1 strides {a_st} {b_st} + relu", out, np.maximum(ref, 0), dt)
            check(f"gemm {how.kernel} pre-activation", pre, ref, dt)
            for beta, want in ((2.0, ref), (0.0, ref - 2.0 * cn)):  # plain stores: whole vectors in full tiles
                out = gemm_raw(x, a_st, y, b_st, 2, 17, 20, 16, alpha=0.5, beta=beta, c=c, how=how)
                check(f"gemm {how.kernel} plain store, beta {beta}", out, want, dt)
        if dt in (F16, BF16):  # autocast's product: float32 operands and bias rounded to dt in the loads
            xn, wn, bias = data(rng, (17, 16), F32), data(rng, (20, 16), F32), data(rng, (20,), F32)
            xr, wr, br = (v.astype(dt).astype(np.float64) for v in (xn, wn, bias))
            rounded = (xr @ wr.T + br)[None]
            out = gemm_raw(clnn.tensor(xn), (0, 16, 1), clnn.tensor(wn), (0, 1, 16), 1, 17, 20, 16, beta=1.0,
                           c=clnn.tensor(bias), c_strides=(0, 0, 1), how=how, dtype=dt)
            check(f"gemm {how.kernel} of float32 operands", out, rounded, dt)
            out = gemm_raw(clnn.tensor(xn), (0, 16, 1), clnn.tensor(wn), (0, 1, 16), 1, 17, 20, 16, how=how,
                           dtype=dt, store=F32)  # a float32 parameter's gradient: dt's result stored float32
            check(f"gemm {how.kernel} stored float32", out, (xr @ wr.T)[None], dt)
    # gemm_rows (CPUs): blocks past M and N, k in two chunks (SPAN 1: 64 rows each), B copied to rows when transposed
    rows = GemmPlan("rows", {"WM": 3, "WN": 16, "VW": 8, "LY": 2, "SPAN": 1})
    an, bn, cn = data(rng, (2, 7, 70), dt), data(rng, (70, 20), dt), data(rng, (2, 7, 20), dt)
    ref = 0.5 * an.astype(np.float64) @ bn.astype(np.float64) + 2.0 * cn
    a, c = clnn.tensor(an), clnn.tensor(cn)
    for b_st, y in (((0, 20, 1), clnn.tensor(bn)), ((0, 1, 70), _t(bn))):
        pre = clnn.empty((2, 7, 20), dtype=dt)
        out = gemm_raw(a, (490, 70, 1), y, b_st, 2, 7, 20, 70, alpha=0.5, beta=2.0, c=c, how=rows, act="relu", pre=pre)
        check(f"gemm_rows B strides {b_st} + relu", out, np.maximum(ref, 0), dt)
        check("gemm_rows pre-activation", pre, ref, dt)
    if dt in (F16, BF16):  # autocast's: float32 operands rounded in the loads, the result stored float32
        xn, wn = data(rng, (7, 70), F32), data(rng, (70, 20), F32)
        want = (xn.astype(dt).astype(np.float64) @ wn.astype(dt).astype(np.float64))[None]
        out = gemm_raw(clnn.tensor(xn), (0, 70, 1), clnn.tensor(wn), (0, 20, 1), 1, 7, 20, 70, how=rows, dtype=dt,
                       store=F32)
        check("gemm_rows of float32 operands", out, want, dt)
    if dt in (F16, BF16):
        _gemm_mma(dt, rng)
    if dt in (F16, BF16):  # a half k-split: float32 partials (C_REAL), rounded once by gemm_sum, stored float32
        xn, wn = data(rng, (17, 40), F32), data(rng, (40, 20), F32)
        want = (xn.astype(dt).astype(np.float64) @ wn.astype(dt).astype(np.float64))[None]
        for store in (None, F32):
            out = gemm_raw(clnn.tensor(xn), (0, 40, 1), clnn.tensor(wn), (0, 20, 1), 1, 17, 20, 40,
                           how=GemmPlan("tiled", tile, 3, 16), dtype=dt, store=store)
            check(f"gemm half k-split stored {store or dt}", out, want, dt)


# gemm.h's warp products (MMA): NVIDIA's tensor cores, here their OpenCL C form; two warps along the rows, runs of 8
# staged in 16-byte local stores, a slice's loads before its stores (PF 1, as tuning's mma row)
MMA_TILE = {"TM": 32, "TN": 8, "TK": 16, "WM": 2, "WN": 2, "VW": 2, "VWG": 8, "VWA": 1, "APAD": 1, "DB": 1, "PF": 1,
            "KU": 0, "MMA": 1}


def _gemm_mma(dt: np.dtype, rng: np.random.Generator) -> None:
    """Half products in warp-product tiles: 37 rows (a part tile), k = 20 (a short last slice, whose stale columns
    read as zeros), batched with a shared operand, read straight and transposed, alpha, beta; then float32 operands
    rounded in the loads (autocast's); then aligned operands staged by ASYNC copies."""
    an, bn, cn = data(rng, (2, 37, 20), dt), data(rng, (20, 11), dt), data(rng, (2, 37, 11), dt)
    ref = 0.5 * an.astype(np.float64) @ bn.astype(np.float64) + 2.0 * cn
    how = GemmPlan("tiled", MMA_TILE, 1, 32)
    c = clnn.tensor(cn)
    for a_st, b_st, x, y in (((740, 20, 1), (0, 11, 1), clnn.tensor(an), clnn.tensor(bn)),
                             ((740, 1, 37), (0, 1, 20), _t(an), _t(bn))):
        out = gemm_raw(x, a_st, y, b_st, 2, 37, 11, 20, alpha=0.5, beta=2.0, c=c, how=how)
        check(f"gemm MMA strides {a_st} {b_st}", out, ref, dt)
    xn, wn = data(rng, (37, 20), F32), data(rng, (11, 20), F32)
    rounded = (xn.astype(dt).astype(np.float64) @ wn.astype(dt).astype(np.float64).T)[None]
    out = gemm_raw(clnn.tensor(xn), (0, 20, 1), clnn.tensor(wn), (0, 1, 20), 1, 37, 11, 20, how=how, dtype=dt)
    check("gemm MMA of float32 operands", out, rounded, dt)
    an, bn = data(rng, (37, 32), dt), data(rng, (32, 16), dt)  # rows of 32 and 16: ASYNC's 16-byte copies
    out = gemm_raw(clnn.tensor(an), (0, 32, 1), clnn.tensor(bn), (0, 16, 1), 1, 37, 16, 32,
                   how=GemmPlan("tiled", {**MMA_TILE, "PF": 0, "ASYNC": 1}, 1, 32))
    check("gemm MMA staged by ASYNC copies", out, (an.astype(np.float64) @ bn.astype(np.float64))[None], dt)


def _t(x: np.ndarray) -> clnn.Tensor:
    """The last two axes of ``x`` swapped, contiguous, on the device."""
    return clnn.tensor(np.ascontiguousarray(np.swapaxes(x, -1, -2)))


def _gemm_tiled(dt: np.dtype, rng: np.random.Generator) -> None:
    an, bn, cn = data(rng, (17, 9), dt), data(rng, (9, 19), dt), data(rng, (1, 19), dt)
    a, b, c = clnn.tensor(an, requires_grad=True), clnn.tensor(bn, requires_grad=True), clnn.tensor(cn)
    a64, b64 = an.astype(np.float64), bn.astype(np.float64)
    check("gemm", clnn.gemm(a, b, c, alpha=0.5, beta=2.0), 0.5 * a64 @ b64 + 2.0 * cn, dt)
    check("gemm trans", clnn.gemm(a.T, b.T, trans_a=True, trans_b=True), a64 @ b64, dt)
    bias = data(rng, (19,), dt)
    y = linear_act(a, clnn.tensor(np.ascontiguousarray(bn.T)), clnn.tensor(bias), "tanh")  # stores the pre-activation
    check("linear + tanh", y, np.tanh(a64 @ b64 + bias), dt)
    wn, wbias = data(rng, (136, 9), dt), data(rng, (136,), dt)  # 136 outputs: a first tile of whole, aligned vectors
    y = linear_act(a, clnn.tensor(wn), clnn.tensor(wbias), "tanh")  # (store_act_vec, with the pre-activation)
    check("linear + tanh, whole vectors", y, np.tanh(a64 @ wn.astype(np.float64).T + wbias), dt)
    bat = data(rng, (2, 9, 5), dt)
    out = clnn.matmul(a, clnn.tensor(bat, requires_grad=True))
    check("matmul batched", out, a64 @ bat.astype(np.float64), dt)
    out.sum().backward()
    check("matmul grad a", a.grad, np.ones((17, 5)) @ bat.astype(np.float64).sum(0).T, dt)
    if dt not in (F16, BF16):  # half storage is never split
        # as planned for a 16-core device, a long k is split across work-groups and the parts summed
        # in order by gemm_sum; Oclgrind reports one compute unit, so it is planned for 16 (or the pose's) here.
        # k = 96: a few splits of two slices each (the H100 pose's: 3; k = 256 made it 16 one-slice splits, 27 of
        # its pass's 48 s)
        dev = clnn.device()
        saved, dev.compute_units = dev.compute_units, max(dev.compute_units, 16)
        try:
            ln, rn = data(rng, (4, 96), dt), data(rng, (96, 4), dt)
            check("gemm k-split", clnn.tensor(ln) @ clnn.tensor(rn), ln.astype(np.float64) @ rn, dt)
            y = linear_act(clnn.tensor(ln, requires_grad=True), clnn.tensor(np.ascontiguousarray(rn.T)), None, "silu")
            z = ln.astype(np.float64) @ rn
            check("linear k-split + silu", y, z / (1 + np.exp(-z)), dt)
        finally:
            dev.compute_units = saved


def finite(what: str, dt: np.dtype, *tensors: object) -> None:
    """Raise unless every value is finite (families whose values the main suite checks against PyTorch)."""
    for t in tensors:
        got = np.asarray(t, dtype=np.float64)
        print(f"done: {what} [{dt.name}]", file=sys.stderr, flush=True)
        if not np.isfinite(got).all():
            raise AssertionError(f"{what} [{dt.name}]: non-finite values")


def _leaf(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype, lo: float = -2, hi: float = 2):
    return clnn.tensor(data(rng, shape, dt, lo, hi), requires_grad=True)


def _grads(*tensors):
    return [t.grad for t in tensors if t is not None and t.grad is not None]


def softmax(dt: np.dtype, rng: np.random.Generator) -> None:
    """softmax/log_softmax rows walked by one work-item (<= 64) and by a work-group (70), losses."""
    import clnn.functional as F

    for shape, axis in (((3, 5), -1), ((3, 70), 1), ((2, 4, 3), 1)):
        x = _leaf(rng, shape, dt)
        (F.softmax(x, axis) * clnn.tensor(data(rng, shape, dt))).sum().backward()
        (F.log_softmax(x, axis) * clnn.tensor(data(rng, shape, dt))).sum().backward()
        finite(f"softmax {shape}", dt, F.softmax(x, axis), x.grad)
    for classes in (5, 70):
        x = _leaf(rng, (4, classes), dt)
        target = np.array([0, classes - 1, 2, 1])
        F.cross_entropy(x, target, label_smoothing=0.1).backward()
        # a device tensor of targets is range-checked on the device (target_range)
        F.nll_loss(F.log_softmax(x, 1), clnn.tensor(target), reduction="sum").backward()
        finite(f"cross_entropy/nll C={classes}", dt, x.grad)
    for classes in (5, 70):  # class weights, ignore_index and probability targets, per row and per work-group
        x = _leaf(rng, (4, classes), dt)
        w = clnn.tensor(data(rng, (classes,), dt, 0.1, 1))
        target = clnn.tensor(np.array([0, -100, classes - 1, 2]))
        F.cross_entropy(x, target, w, label_smoothing=0.2).backward()
        p = F.softmax(_leaf(rng, (4, classes), dt), 1)  # requires grad: the targets get a gradient too
        F.cross_entropy(x, p, w, label_smoothing=0.1, reduction="sum").backward()
        F.nll_loss(F.log_softmax(x, 1), target, w).backward()
        finite(f"weighted cross_entropy/nll C={classes}", dt, x.grad)
    with tuning.override("storage", GROUP_WALK=4):  # runs of rows walked, as PoCL builds them
        x = _leaf(rng, (4, 7), dt)
        F.cross_entropy(x, clnn.tensor(np.array([0, -100, 6, 2])), label_smoothing=0.2).backward()
        F.cross_entropy(x, F.softmax(_leaf(rng, (4, 7), dt), 1), label_smoothing=0.1).backward()
        finite("cross_entropy walked", dt, x.grad)
    x = _leaf(rng, (3, 4, 2), dt)
    F.cross_entropy(x, np.array([[0, 3], [1, 1], [2, 0]]), reduction="none").sum().backward()
    y = clnn.tensor(data(rng, (3, 4, 2), dt, 0, 1))
    (F.mse_loss(x, y) + F.l1_loss(x, y) + F.binary_cross_entropy_with_logits(x, y, y)).backward()
    finite("losses", dt, x.grad)


def attention(dt: np.dtype, rng: np.random.Generator) -> None:
    """Attention on each path, the fused kernels (GPUs') and the CPUs' (attention_rows.cl), forced whatever the
    device's type: no mask, bool (a row with no key), broadcast float, causal with L > S, dropout; multi-head
    layouts."""
    from clnn.ops import attention as att

    rows_path = att.rows_path
    try:
        for rows in (False, True):
            att.rows_path = lambda dev, keys, rows=rows: rows
            _attention_cases(dt, rng)
    finally:
        att.rows_path = rows_path


def _attention_cases(dt: np.dtype, rng: np.random.Generator) -> None:
    import clnn.functional as F

    q, k, v = _leaf(rng, (2, 5, 6), dt), _leaf(rng, (2, 9, 6), dt), _leaf(rng, (2, 9, 3), dt)
    keep = rng.random((2, 5, 9)) > 0.3
    keep[0, 1] = False
    for mask, causal, p in ((None, False, 0.0), (clnn.tensor(keep), False, 0.0),
                            (clnn.tensor(data(rng, (1, 9), dt)), False, 0.25), (None, True, 0.0)):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        (out * clnn.tensor(data(rng, (2, 5, 3), dt))).sum().backward()
        finite(f"attention mask={mask is not None} causal={causal} p={p}", dt, out, *_grads(q, k, v))
    out = F.scaled_dot_product_attention(k, q, q, is_causal=True)  # L = 9 > S = 5
    out.sum().backward()
    finite("attention causal L > S", dt, out, *_grads(q, k))
    from clnn.ops.attention import multi_head_attention

    for seq_first in (False, True):  # strided layouts: a packed (N, L, 3 H E) self-attention, (L, N, H E) apart
        qkv, x, n = _leaf(rng, (3, 4, 12), dt), _leaf(rng, (3, 4, 4), dt), 3 if seq_first else 4
        out = multi_head_attention(qkv, None, None, 2, seq_first, is_causal=True) + multi_head_attention(
            x, x, x, 2, seq_first, clnn.tensor(keep[1, :n, :n]))
        out.sum().backward()
        finite(f"multi_head_attention seq_first={seq_first}", dt, out, *_grads(qkv, x))


def huber(dt: np.dtype, rng: np.random.Generator) -> None:
    """smooth_l1/huber per element and summed by one work-group, then in chunks (split, as on a big GPU),
    with the gradients of input and target."""
    import clnn.functional as F

    x, y = _leaf(rng, (5, 7), dt), _leaf(rng, (5, 7), dt)
    for reduction in ("none", "mean"):
        F.smooth_l1_loss(x, y, reduction, 0.5).sum().backward()
        F.huber_loss(x, y, reduction, 1.5).sum().backward()
    finite("smooth_l1/huber", dt, x.grad, y.grad)
    _lower_wg(8)
    x = _leaf(rng, (200,), dt)
    F.smooth_l1_loss(x, clnn.tensor(data(rng, (200,), dt)), "sum", 0.0).backward()
    finite("smooth_l1 split", dt, x.grad)


def norm(dt: np.dtype, rng: np.random.Generator) -> None:
    """batch_norm (training with running statistics, eval), layer_norm and dropout, with gradients."""
    import clnn.functional as F

    x = _leaf(rng, (4, 3, 5, 2), dt)
    w, b = _leaf(rng, (3,), dt), _leaf(rng, (3,), dt)
    rm, rv = clnn.zeros(3, dtype=dt), clnn.ones(3, dtype=dt)
    (F.batch_norm(x, rm, rv, w, b, training=True) * clnn.tensor(data(rng, x.shape, dt))).sum().backward()
    finite("batch_norm train", dt, x.grad, w.grad, b.grad, rm, rv)
    finite("batch_norm eval", dt, F.batch_norm(x, rm, rv, w, b, training=False))
    # runs of rows walked, as PoCL builds it (not its MATH_BUILTIN: Oclgrind does not know llvm.sqrt)
    with tuning.override("storage", GROUP_WALK=4):
        for shape in ((4, 3, 5, 2), (5, 3)):  # rows of 10 in runs of 4; a row of the 3 channels per sample
            x = _leaf(rng, shape, dt)
            (F.batch_norm(x, rm, rv, w, b, training=True) * clnn.tensor(data(rng, x.shape, dt))).sum().backward()
            (F.batch_norm(x, rm, rv, w, b, training=False) * clnn.tensor(data(rng, x.shape, dt))).sum().backward()
            finite(f"batch_norm walked {shape}", dt, x.grad, w.grad, b.grad, rm, rv)
    with tuning.override("norm_cols", COLS_N=16):  # (N, C) as PoCL takes it: two blocks of 16 channels and a tail
        x, w, b = _leaf(rng, (5, 37), dt), _leaf(rng, (37,), dt), _leaf(rng, (37,), dt)
        (F.batch_norm(x, None, None, w, b, training=True) * clnn.tensor(data(rng, x.shape, dt))).sum().backward()
        finite("batch_norm (N, C) in blocks", dt, x.grad, w.grad, b.grad)
    x = _leaf(rng, (3, 70), dt)
    w, b = _leaf(rng, (70,), dt), _leaf(rng, (70,), dt)
    (F.layer_norm(x, 70, w, b) * clnn.tensor(data(rng, x.shape, dt))).sum().backward()
    x2 = _leaf(rng, (5, 2, 3), dt)
    (F.layer_norm(x2, (2, 3)) * clnn.tensor(data(rng, x2.shape, dt))).sum().backward()
    finite("layer_norm", dt, x.grad, w.grad, b.grad, x2.grad)
    F.dropout(x, 0.3).sum().backward()
    finite("dropout", dt, x.grad)
    _lower_wg(8)  # 320 values per channel split into chunks
    x = _leaf(rng, (64, 2, 5), dt)
    (F.batch_norm(x, None, None, training=True) * clnn.tensor(data(rng, x.shape, dt))).sum().backward()
    finite("batch_norm split", dt, x.grad)
    if dt in (F16, BF16):  # autocast: the kernels read a half x as it is, the rest float32
        x, w, b = _leaf(rng, (4, 3, 5), dt), _leaf(rng, (3,), F32), _leaf(rng, (5,), F32)
        with clnn.autocast(dt):
            y = F.batch_norm(x, None, None, w, training=True) + F.layer_norm(x, 5, bias=b)
        (y * clnn.tensor(data(rng, x.shape, F32))).sum().backward()
        finite("autocast norms of a half x", dt, y, x.grad, w.grad, b.grad)


def pool(dt: np.dtype, rng: np.random.Generator) -> None:
    """max/avg pooling with padding, dilation, ceil mode; adaptive average; their gather backwards."""
    import clnn.functional as F

    x = _leaf(rng, (2, 3, 9, 8), dt)
    ys = [
        F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
        F.max_pool2d(x, (2, 3), dilation=2),
        F.max_pool2d(x, (2, 3), stride=(4, 2), padding=(0, 1)),  # CPUs: pool_max_bwd_bands, a row below the last
        F.max_pool2d(x, 2),  # pool.cl's max_2x2: 9 rows, the last left out
        F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
        F.avg_pool2d(x, 2, ceil_mode=True, divisor_override=3),
        F.adaptive_avg_pool2d(x, (4, 3)),
    ]
    for y in ys:
        (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
    finite("pooling", dt, *ys, x.grad)


def conv(dt: np.dtype, rng: np.random.Generator) -> None:
    """conv2d (stride, padding, dilation, groups, bias), conv1d, conv_transpose2d and all gradients by the
    direct kernels, then a grouped conv2d with SiLU by the tiled implicit GEMM, then (float32, float64) 3x3
    ones by Winograd's kernels."""
    import clnn.functional as F

    x, w, b = _leaf(rng, (1, 4, 6, 5), dt), _leaf(rng, (4, 2, 3, 3), dt), _leaf(rng, (4,), dt)
    y = F.conv2d(x, w, b, stride=2, padding=1, dilation=(1, 2), groups=2)
    (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
    finite("conv2d", dt, y, *_grads(x, w, b))
    x1, w1 = _leaf(rng, (2, 3, 9), dt), _leaf(rng, (2, 3, 5), dt)
    y1 = F.conv1d(x1, w1, padding="same")
    (y1 * clnn.tensor(data(rng, y1.shape, dt))).sum().backward()
    finite("conv1d", dt, y1, *_grads(x1, w1))
    xt, wt, bt = _leaf(rng, (1, 3, 3, 2), dt), _leaf(rng, (3, 2, 3, 3), dt), _leaf(rng, (2,), dt)
    yt = F.conv_transpose2d(xt, wt, bt, stride=2, padding=1, output_padding=1)
    (yt * clnn.tensor(data(rng, yt.shape, dt))).sum().backward()
    finite("conv_transpose2d", dt, yt, *_grads(xt, wt, bt))
    _conv_autocast(dt, rng, "direct")
    saved_ov = dict(tuning.TABLE["conv_direct"]["default"])
    tuning.TABLE["conv_direct"]["default"]["OV"] = 4  # 4 outputs of a row per work-item (PoCL's row): rows of 9
    try:  # and 5, so the last work-item's lanes run past the row, and taps into the padding on both sides
        finite("conv1d, 4 outputs per work-item", dt, F.conv1d(x1, w1, padding="same"))
        xd, wd = _leaf(rng, (1, 4, 3, 5), dt), _leaf(rng, (4, 1, 3, 3), dt)
        yd = F.conv2d(xd, wd, padding=1, groups=4)
        (yd * clnn.tensor(data(rng, yd.shape, dt))).sum().backward()
        finite("depthwise conv2d, 4 outputs per work-item", dt, yd, *_grads(xd, wd))
        ys = F.conv2d(xd, wd, stride=2, padding=1, groups=4)  # strided lanes, 3 outputs a row
        (ys * clnn.tensor(data(rng, ys.shape, dt))).sum().backward()
        finite("strided depthwise conv2d, 4 outputs per work-item", dt, ys, *_grads(xd, wd))
    finally:
        tuning.TABLE["conv_direct"]["default"] = saved_ov
    conv_ops = sys.modules["clnn.ops.conv"]
    saved, thin = dict(tuning.TABLE["gemm_direct"]["default"]), conv_ops.THIN
    tuning.TABLE["gemm_direct"]["default"]["MAX_MACS"] = 0  # the tiled implicit GEMM at a size Oclgrind runs,
    conv_ops.THIN = 2  # also for 3 channels a group: 27-deep products (2 k-slices, not 81's 6), 3-row input gradients
    try:
        from clnn.ops.conv import conv_act

        x, w, b = _leaf(rng, (2, 6, 4, 3), dt), _leaf(rng, (6, 3, 3, 3), dt), _leaf(rng, (6,), dt)
        y = conv_act(x, w, b, 1, 1, 1, 2, "silu")  # stores the pre-activation too
        (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
        finite("conv2d tiled + silu", dt, y, *_grads(x, w, b))  # the input gradient: conv_fwd, one phase
        x.grad = w.grad = b.grad = None
        x = _leaf(rng, (1, 6, 3, 37), dt)  # rows of 19 outputs: strided load runs of up to 16 (GATHER_ROW)
        y = F.conv2d(x, w, b, stride=2, padding=1, groups=2)  # strided: conv_fwd, four phases
        (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
        finite("conv2d tiled, strided", dt, y, *_grads(x, w, b))
        _conv_autocast(dt, rng, "tiled")
        if dt == F32:  # the GPU staging options (their storage conversions are the default tiles')
            _conv_in_tile(w, b, dt, rng, GPU_OPTIONS_TILE, "A k-major, fetched ahead")
            _conv_in_tile(w, b, dt, rng, {**GPU_OPTIONS_TILE, "PF": 0, "ASYNC": 1}, "staged by ASYNC copies")
        if dt in (F16, BF16):
            _conv_in_tile(w, b, dt, rng, MMA_TILE, "warp products")
    finally:
        tuning.TABLE["gemm_direct"]["default"], conv_ops.THIN = saved, thin
    _winograd(dt, rng)  # its products are tiny: gemm_direct, as they would run


# a tile whose A tile is k-major (the weights in the forward, gy in the weight gradient), whose slices are fetched a
# slice ahead and multiplied unrolled (gemm.h's VWA, PF 2 and KU)
GPU_OPTIONS_TILE = {"TM": 16, "TN": 16, "TK": 8, "WM": 4, "WN": 2, "VW": 2, "VWG": 2, "VWA": 4, "APAD": 1, "DB": 0,
                    "PF": 2, "KU": 4}


def _conv_in_tile(w: clnn.Tensor, b: clnn.Tensor, dt: np.dtype, rng: np.random.Generator, tile: dict[str, int],
                  what: str) -> None:
    """A grouped conv2d with SiLU and its gradients with every tile kind's row made ``tile`` (its MMA as tuning's
    mma row: warp products, as a device posing as an NVIDIA GPU runs them): 33 output pixels, two whole column tiles
    and a part of one (rows of 37 took Oclgrind 40 s a pass), 27-deep products (a short slice)."""
    from clnn.ops.conv import conv_act

    kinds = ("gemm", "gemm_small", "conv_fwd", "conv_bwd_weight")
    rows = {kind: tuning.TABLE[kind] for kind in kinds}
    tuning.TABLE.update({kind: {"default": {k: v for k, v in tile.items() if k != "MMA"}} for kind in kinds})
    try:
        with tuning.override("mma", MMA=tile.get("MMA", 0)):
            x = _leaf(rng, (1, 6, 3, 11), dt)
            w.grad = b.grad = None
            y = conv_act(x, w, b, 1, 1, 1, 2, "silu")
            (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
            finite(f"conv2d tiled, {what}", dt, y, *_grads(x, w, b))
    finally:
        tuning.TABLE.update(rows)


def _winograd(dt: np.dtype, rng: np.random.Generator) -> None:
    """conv2d 3x3 (with ReLU, and padding 2) and conv_transpose2d 3x3 by Winograd's F(2x2) kernels, 4 tiles per
    work-item (vectors, a row's last group partial), all gradients, a row of tiles per chunk (the weight gradient
    sums across chunks), and for a half ``dt`` conv2d of float32 leaves under autocast (the kernels round them in
    their loads and store float32 gradients); then (float32, float16: the same code with other constants, so fewer
    dtypes) conv2d + ReLU by F(4x4), a tile per work-item (GPUs' kernels)."""
    import clnn.functional as F
    from clnn.ops import winograd
    from clnn.ops.conv import conv_act

    rows = {key: dict(row) for key, row in tuning.TABLE["winograd"].items()}
    workspace = winograd.WORKSPACE
    try:
        for m in (2, 4) if dt in (F32, F16) else (2,):
            for row in tuning.TABLE["winograd"].values():
                row.update(MIN_INTENSITY=1, M=m, VT=4 if m == 2 else 1)
            winograd.WORKSPACE = 2 * 72 * 9 * max(4, dt.itemsize)  # one row of tiles of images up to 8 wide
            x, w, b = _leaf(rng, (1, 5, 7, 6), dt), _leaf(rng, (4, 5, 3, 3), dt), _leaf(rng, (4,), dt)
            y = conv_act(x, w, b, 1, 1, 1, 1, "relu")
            (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
            finite(f"conv2d winograd F({m}x{m}) + relu", dt, y, *_grads(x, w, b))
            if m == 4:
                continue
            x.grad = w.grad = b.grad = None
            y = F.conv_transpose2d(x, w.detach().permute(1, 0, 2, 3).contiguous(), b, padding=2)
            (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
            finite("conv_transpose2d winograd", dt, y, *_grads(x, b))
            if dt in (F16, BF16):
                x, w = _leaf(rng, (1, 5, 7, 6), F32), _leaf(rng, (4, 5, 3, 3), F32)
                with clnn.autocast(dt):
                    y = F.conv2d(x, w, padding=1)
                (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
                finite("conv2d winograd of float32 operands", dt, y, *_grads(x, w))
    finally:
        tuning.TABLE["winograd"].update(rows)
        winograd.WORKSPACE = workspace


def _conv_autocast(dt: np.dtype, rng: np.random.Generator, path: str) -> None:
    """For a half ``dt``: conv2d and conv_transpose2d of float32 leaves under autocast (the kernels round x and
    the weight in their loads: A_F32/B_F32), forward and gradients (float32, stored so by the kernels: C_F32)."""
    import clnn.functional as F

    if dt not in (F16, BF16):
        return
    x, w = _leaf(rng, (2, 3, 4, 3), F32), _leaf(rng, (3, 3, 3, 3), F32)
    xt, wt = _leaf(rng, (1, 9, 3, 2), F32), _leaf(rng, (9, 10, 3, 3), F32)
    with clnn.autocast(dt):
        y, yt = F.conv2d(x, w, padding=1), F.conv_transpose2d(xt, wt, stride=2)
    (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
    (yt * clnn.tensor(data(rng, yt.shape, dt))).sum().backward()
    finite(f"conv2d {path} of float32 operands", dt, y, yt, *_grads(x, w, xt, wt))


def signal(dt: np.dtype, rng: np.random.Generator) -> None:
    """correlate/convolve in every mode, 1-D and 2-D, the one-work-group-per-output path, gradients."""
    from clnn import signal as sig

    a, b = _leaf(rng, (3, 9), dt), _leaf(rng, (2, 4), dt)
    for mode in ("full", "same", "valid"):
        y = sig.correlate(a, b, mode)
        (y * clnn.tensor(data(rng, y.shape, dt))).sum().backward()
        check(f"convolve2d {mode}", sig.convolve(a, b, mode), _np_convolve2d(a, b, mode), dt)
    finite("correlate2d grads", dt, a.grad, b.grad)
    split = sys.modules["clnn.ops.signal"].SPLIT_TAPS  # taps from which a work-group sums each output
    long, taps = data(rng, (split + 3,), dt, -1, 1), data(rng, (split,), dt, -1, 1)
    y = sig.correlate(clnn.tensor(long), clnn.tensor(taps), "valid")  # few outputs, long sums: work-groups
    ref = np.correlate(long.astype(np.float64), taps.astype(np.float64), "valid")
    check("correlate (work-group)", y, ref, dt if dt != F16 else np.dtype(np.float16))


def _np_convolve2d(a, b, mode: str) -> np.ndarray:
    from scipy.signal import convolve2d

    return convolve2d(np.asarray(a, np.float64), np.asarray(b, np.float64), mode)


def rnn(dt: np.dtype, rng: np.random.Generator) -> None:
    """Bidirectional two-layer LSTM (also with proj_size: its step kernel over aliased state buffers) and GRU with
    initial states: every step kernel, forward and backward (16 units: in vectors where the tuning's rnn row has
    them, the CPU pose)."""
    for mode, proj, hid in ((clnn.nn.LSTM, 0, 16), (clnn.nn.LSTM, 3, 5), (clnn.nn.GRU, 0, 16)):
        net = mode(3, hid, num_layers=2, bidirectional=True, dtype=dt, **({"proj_size": proj} if proj else {}))
        x, h0, c0 = _leaf(rng, (3, 2, 3), dt), _leaf(rng, (4, 2, proj or hid), dt), _leaf(rng, (4, 2, hid), dt)
        y, hn = net(x, (h0, c0) if mode is clnn.nn.LSTM else h0)
        states = hn if isinstance(hn, tuple) else (hn,)
        loss = (y * clnn.tensor(data(rng, y.shape, dt))).sum()
        for s in states:
            loss = loss + (s * clnn.tensor(data(rng, s.shape, dt))).sum()
        loss.backward()
        finite(mode.__name__, dt, y, *states, x.grad, h0.grad, *(p.grad for p in net.parameters()))
        if mode is clnn.nn.LSTM:
            finite("LSTM c_0", dt, c0.grad)


def optim(dt: np.dtype, rng: np.random.Generator) -> None:
    """One step of every optimizer in its richest configuration (the fused update kernel)."""
    from clnn import optim as opt

    makers = [
        lambda p: opt.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
        lambda p: opt.SGD(p, lr=0.1, maximize=True),
        lambda p: opt.Adam(p, lr=0.01, amsgrad=True, weight_decay=0.01),
        lambda p: opt.AdamW(p, lr=0.01),
        lambda p: opt.RMSprop(p, lr=0.01, momentum=0.9, centered=True, weight_decay=0.01),
    ]
    # and as PoCL builds them (optim.cl's STATIC_OP, MT_WHOLE): a tensor per launch, the update of its whole
    # work-groups untested, a tail that is not
    for pose in (contextlib.nullcontext(), tuning.override("foreach", TENSORS=1, STATIC=1)):
        with pose:
            for make in makers:
                p = _leaf(rng, (9, 31), dt)
                o = make([p])
                for _ in range(2):
                    o.zero_grad()
                    (p * p).sum().backward()
                    o.step()
                finite(f"{type(o).__name__} step", dt, p)
    leaves = [_leaf(rng, (k, 3), dt) for k in range(1, 11)]  # clip_grad_norm_'s multi-tensor passes: two launches each
    for norm_type in (2.0, math.inf):
        for p in leaves:
            p.grad = clnn.tensor(data(rng, p.shape, dt))
        clnn.nn.utils.clip_grad_norm_(leaves, 0.5, norm_type)
        finite(f"clip_grad_norm_ {norm_type}", dt, leaves[-1].grad)
    if dt != F16:  # GradScaler's in-place unscale and inf/NaN flag (scale_multi); float16 gradients are refused
        p = _leaf(rng, (5, 7), dt)
        p.grad = clnn.tensor(data(rng, p.shape, dt))
        scaler = clnn.amp.GradScaler(init_scale=4.0)
        scaler.unscale_(opt.SGD([p], lr=0.1))
        finite("GradScaler.unscale_", dt, p.grad)
        q = _leaf(rng, (3, 7), dt)  # step without unscale_: a read-only check (check_multi) and the update unscaling
        q.grad = clnn.tensor(data(rng, q.shape, dt))
        scaler.step(opt.Adam([q], lr=0.1))
        finite("GradScaler.step", dt, q)


# One row per op family: (function, dtypes it runs in). float16 and bfloat16 are storage-only on Oclgrind. The tiles
# (gemm, conv) run float16 alone of the 16-bit types: bfloat16's loads and stores read and write the same addresses
# (the other families check its conversions), and its passes took 59 of Oclgrind's 466 s (2026-11-29).
FAMILIES: dict[str, tuple[Callable[[np.dtype, np.random.Generator], None], tuple[np.dtype, ...]]] = {
    "elementwise": (elementwise, (F32, F16, BF16, F64)),
    "reduce": (reduce, (F32, F16, BF16, F64)),
    "copy": (copy, (F32, F16, BF16, F64)),
    "index": (index, (F32, F16, F64)),
    "random": (random, (F32, F16, F64)),
    "gemm": (gemm, (F32, F16, F64)),
    "softmax": (softmax, (F32, F16, BF16, F64)),
    "attention": (attention, (F32, F16, F64)),
    "huber": (huber, (F32, F16, F64)),
    "norm": (norm, (F32, F16, BF16, F64)),
    "pool": (pool, (F32, F16, F64)),
    "conv": (conv, (F32, F16, F64)),
    "signal": (signal, (F32, F16, F64)),
    "optim": (optim, (F32, F16, BF16, F64)),
    "rnn": (rnn, (F32, F64)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("--record", help="write the fetched (file, kernel, defines) here as JSON")
    parser.add_argument("--dtypes", help="comma-separated subset of the family's dtypes, e.g. float32")
    args = parser.parse_args(argv)
    kernels.kernel = _recording_kernel(kernels.kernel)
    kernels._options = _unoptimized(kernels._options)
    cl.enqueue_fill_buffer = _fill_from_host
    cl.enqueue_copy = _copy_by_kernel(cl.enqueue_copy)
    dev = clnn.device()
    dev._pool = _NeverFree(dev.context)
    print(f"oclgrind driver: {args.family} on {dev}", file=sys.stderr, flush=True)
    fn, dtypes = FAMILIES[args.family]
    rng = np.random.default_rng(0)
    wanted = set(args.dtypes.split(",")) if args.dtypes else {dt.name for dt in dtypes}
    for dt in dtypes:
        if dev.supports(dt) and dt.name in wanted:
            fn(dt, rng)
    dev.synchronize()
    if args.record:
        with open(args.record, "w") as f:
            json.dump([{"file": fl, "kernel": k, "defines": dict(d)} for fl, k, d in sorted(_fetched)], f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
