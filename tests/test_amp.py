"""Mixed precision against torch: autocast's half products and convolutions (rounding float32 operands in their loads,
storing float32 gradients), its norms, GradScaler against torch.amp.GradScaler, and Keras-style precision policies.
autocast's dtype rules are in test_autocast_rules.py."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import multi_tensor_launches, set_direct_conv_max_k, set_winograd

import clnn
from clnn import functional as F


@pytest.mark.parametrize("half", [clnn.bfloat16, clnn.float16], ids=str)
def test_float32_leaves_get_float32_grads_like_torch(dev, rng, half):
    """A linear + cross-entropy step under autocast: float32 gradients, equal to torch's (the same rounding
    of inputs and weights to the half type, float32 accumulation) within a few half ulps."""
    x, w, b = rng.standard_normal((6, 10)), rng.standard_normal((7, 10)) * 0.3, rng.standard_normal(7)
    target = rng.integers(0, 7, 6)
    with clnn.use_device(dev):
        cx, cw, cb = (clnn.tensor(v, dtype=clnn.float32, requires_grad=True) for v in (x, w, b))
        with clnn.autocast(half):
            loss = F.cross_entropy(clnn.gemm(cx, cw, cb, beta=1.0, trans_b=True), target)
        assert loss.dtype == clnn.float32
        loss.backward()
    tx, tw, tb = (torch.tensor(v, dtype=torch.float32, requires_grad=True) for v in (x, w, b))
    th = getattr(torch, str(half))  # torch's dtype of the same name
    logits = TF.linear(tx.to(th).double(), tw.to(th).double(), tb.to(th).double()).to(th)  # one rounding, as clnn
    TF.cross_entropy(logits.double(), torch.tensor(target)).backward()
    tol = 8 * {clnn.bfloat16: 2.0**-8, clnn.float16: 2.0**-11}[half]
    for ours, theirs in ((cx, tx), (cw, tw), (cb, tb)):
        assert ours.grad.dtype == clnn.float32
        g = theirs.grad.numpy()
        assert np.linalg.norm(ours.grad.numpy() - g) <= tol * np.linalg.norm(g)


# The half types of the rounding-load tests below. bfloat16's are marked: the PoCL part leaves them to the other parts
# (scripts/run_tests.py), since their code (gemm.h's BF16_ROUND) is one source on every runtime, while float16's take
# PoCL's own software conversions (HALF_SOFT).
ROUNDING_HALVES = [pytest.param(clnn.bfloat16, marks=pytest.mark.bf16_shared), clnn.float16]


def _bits(t: clnn.Tensor) -> np.ndarray:
    return np.asarray(t.numpy()).view(np.uint16 if t.dtype.itemsize == 2 else np.uint32)


def _assert_last_bits(got: clnn.Tensor, want: clnn.Tensor) -> None:
    """got equals want (both of one dtype) in the last bits of float32 arithmetic: float32 elements within 4 of its
    units at want's largest element, a half type's at most one rounding step apart (a float32 difference that tipped
    the rounding)."""
    assert got.dtype == want.dtype
    if got.dtype.itemsize == 2:  # sign-magnitude bits as ordered integers: neighbouring values differ by 1
        x, y = (np.where(v & 0x8000, -(v & 0x7FFF), v) for v in (_bits(t).astype(np.int64) for t in (got, want)))
        assert np.abs(x - y).max(initial=0) <= 1, "half elements more than one rounding step apart"
        return
    a, b = (np.asarray(t.numpy(), np.float64) for t in (got, want))
    np.testing.assert_allclose(a, b, rtol=0, atol=4 * float(np.finfo(np.float32).eps) * np.abs(b).max(initial=0))


# (name, op, input shapes, which inputs are already in the half type): a Linear of float32 tensors, one of a half
# activation and float32 weights, a batched matmul broadcasting a float32 matrix, a transposed gemm
PRODUCTS = [
    ("linear", lambda x, w, b: clnn.gemm(x, w, b, beta=1.0, trans_b=True), [(37, 65), (19, 65), (19,)], ()),
    ("linear_half_x", lambda x, w, b: clnn.gemm(x, w, b, beta=0.5, trans_b=True), [(9, 33), (17, 33), (1, 17)], (0,)),
    ("matmul_batched", clnn.matmul, [(3, 17, 31), (31, 20)], (0,)),
    ("gemm_trans_a", lambda a, b: clnn.gemm(a, b, alpha=0.5, trans_a=True), [(29, 13), (29, 7)], ()),
    # rows of whole, aligned vectors: the loads that round a vector at a time
    ("linear_aligned", lambda x, w: clnn.gemm(x, w, trans_b=True), [(40, 64), (72, 64)], ()),
]


def _extra_bytes(half, name: str, shapes) -> int | None:
    """What the backward of a product may allocate beside its gradients (and a k-split's partials): conv2d's copy of
    its weights' taps in the half type (its input gradient's phases). None with a bias, whose gradient is a
    sum (in the half type, widened after, as torch's cast of the bias does), not a product."""
    if len(shapes) == 3:
        return None
    return math.prod(shapes[1]) * np.dtype(half).itemsize if name.startswith("conv2d") else 0


def _fused_against_cast(monkeypatch, rng, half, fn, shapes, halves, direct, extra: int | None) -> list[str]:
    """Run ``fn`` under autocast on float32 (and ``halves``: half) tensors and on the same tensors cast first;
    assert equal dtypes and bit-equal outputs and gradients; return the kernels the autocast call launched.
    ``direct``: every product takes gemm.cl's direct kernel, or none does.

    Unless ``extra`` is None, the autocast call's backward allocates its gradients and nothing else but ``extra``
    bytes and a k-split's float32 partials: the kernels store a float32 operand's gradient in float32 (rounded to
    the half type, as the bit equality checks), not a half gradient widened into a second tensor (1.5x the bytes:
    the peak of a mixed-precision AlexNet step was the first Linear's weight gradient twice)."""
    from clnn import kernels, tuning
    from clnn.ops import conv

    for key in tuning.TABLE["gemm_direct"]:
        monkeypatch.setitem(tuning.TABLE["gemm_direct"], key, {"MAX_MACS": 1 << 40 if direct else 0})
    set_direct_conv_max_k(monkeypatch, 0)  # short unit-stride input gradients take tiles too
    matmul = importlib.import_module("clnn.ops.matmul")  # clnn.ops.matmul is the function
    partial_bytes, partials = [], matmul.partials

    def counted_partials(*args):
        part, defs = partials(*args)
        partial_bytes.append(part.nbytes)
        return part, defs

    for module in (matmul, conv):
        monkeypatch.setattr(module, "partials", counted_partials)
    values = [rng.standard_normal(s).astype(half if i in halves else np.float32) for i, s in enumerate(shapes)]
    fused = [clnn.tensor(v, requires_grad=True) for v in values]
    cast = [clnn.tensor(v, requires_grad=True) for v in values]
    launches = []
    launch = kernels.launch
    monkeypatch.setattr(kernels, "launch", lambda d, k, *a: launches.append(k.function_name) or launch(d, k, *a))
    with clnn.autocast(half):
        y = fn(*fused)
    monkeypatch.setattr(kernels, "launch", launch)
    y2 = fn(*(t.astype(half) for t in cast))
    assert y.dtype == y2.dtype == half
    np.testing.assert_array_equal(_bits(y), _bits(y2))
    g = clnn.tensor(rng.standard_normal(y.shape).astype(half))
    partial_bytes.clear()  # the forward's
    with clnn.profiler.profile() as prof:
        y.backward(g)
    if extra is not None:
        assert prof.bytes_allocated == sum(x.nbytes for x in fused) + extra + sum(partial_bytes)
    y2.backward(g)
    for ours, theirs in zip(fused, cast):
        assert ours.grad.dtype == ours.dtype
        np.testing.assert_array_equal(_bits(ours.grad), _bits(theirs.grad))
    return launches


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "tiled"])
@pytest.mark.parametrize("half", ROUNDING_HALVES, ids=str)
@pytest.mark.parametrize("name, fn, shapes, halves", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_products_round_float32_operands_in_their_loads(dev, rng, monkeypatch, half, name, fn, shapes, halves, direct):
    """Under autocast a product of float32 tensors is one launch (the GEMM rounds them as it loads them; a k-split
    adds its sum), and its output and gradients equal, bit for bit, those of the same product of tensors cast
    first."""
    with clnn.use_device(dev):
        launches = _fused_against_cast(monkeypatch, rng, half, fn, shapes, halves, direct,
                                       _extra_bytes(half, name, shapes))
    assert launches[0].startswith("gemm") and launches[1:] in ([], ["gemm_sum"]), launches


def _specials(half, n: int) -> np.ndarray:
    """n float32 values the rounding to ``half`` must get right: NaN, infinities, values that overflow or flush,
    and ties of round-to-nearest-even (to even below, to even above), each in both signs. The NaN with every
    payload bit set is one that rounding by integer addition would carry into an infinity or zero."""
    tie_bits = {clnn.bfloat16: [0x3F808000, 0x3F818000], clnn.float16: [0x3F801000, 0x3F803000]}[half]
    bits = np.array([0x7FFFFFFF, *tie_bits], np.uint32).view(np.float32)
    values = [np.nan, np.inf, 3.4e38, 7e4, 1e-6, 1e-9, 1.0, *bits]
    v = np.array(values, np.float32)
    return np.resize(np.concatenate([v, -v]), n)


@pytest.mark.parametrize("half", [clnn.bfloat16, clnn.float16], ids=str)
def test_loads_round_specials_as_a_cast_does(dev, rng, half):
    """The GEMM's rounding loads, a vector at a time (aligned rows) and one element at a time, give what a cast
    gives for NaN, infinities, overflow, flushes and ties: products equal those of the operands cast first."""
    with clnn.use_device(dev):
        for cols in (64, 61):  # whole aligned vectors; odd rows, element by element
            n = 64  # one special in each row of a, each column of b; whole tiles load a vector at a time
            a = rng.standard_normal((n, cols)).astype(np.float32)
            a[np.arange(n), np.arange(n) % cols] = _specials(half, n)
            b = rng.standard_normal((cols, n)).astype(np.float32)
            b[np.arange(n) * 5 % cols, np.arange(n)] = _specials(half, n)
            x, w = clnn.tensor(a), clnn.tensor(np.ascontiguousarray(b.T))
            with clnn.autocast(half):
                y = clnn.gemm(x, w, trans_b=True)
            y2 = clnn.gemm(x.astype(half), w.astype(half), trans_b=True)
            np.testing.assert_array_equal(y.numpy().astype(np.float32), y2.numpy().astype(np.float32))
            assert np.isnan(y.numpy().astype(np.float32)).any()


# (name, op, input shapes, which inputs are already in the half type): convolutions of float32 tensors, of a half
# activation and a float32 weight, grouped and strided, with a bias (its cast is the one extra launch)
CONVS = [
    ("conv2d", lambda x, w: F.conv2d(x, w, padding=1), [(2, 5, 9, 7), (11, 5, 3, 3)], ()),
    ("conv2d_half_x", lambda x, w: F.conv2d(x, w, stride=2, groups=3), [(3, 6, 11, 8), (27, 2, 3, 2)], (0,)),
    ("conv1d_bias", lambda x, w, b: F.conv1d(x, w, b, padding=2), [(2, 4, 13), (10, 4, 5), (10,)], ()),
    ("conv2d_aligned", lambda x, w: F.conv2d(x, w, padding=1), [(2, 8, 9, 7), (40, 8, 3, 3)], ()),  # rows of 72
    ("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1), [(2, 9, 5, 6), (9, 10, 3, 3)],
     ()),
    ("conv_transpose2d_half_w", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(1, 2), dilation=2),
     [(1, 10, 4, 7), (10, 11, 2, 3), (11,)], (1,)),
    ("conv_transpose2d_half_x", lambda x, w: F.conv_transpose2d(x, w, padding=1), [(1, 10, 4, 7), (10, 11, 2, 3)],
     (0,)),
]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "tiled"])
@pytest.mark.parametrize("half", ROUNDING_HALVES, ids=str)
@pytest.mark.parametrize("name, fn, shapes, halves", CONVS, ids=[c[0] for c in CONVS])
def test_convolutions_round_float32_operands_in_their_loads(dev, rng, monkeypatch, half, name, fn, shapes, halves,
                                                            direct):
    """Under autocast a convolution of float32 tensors launches only itself (and a bias's cast; and for
    conv_transpose2d, copies of its taps in their own type): the kernels
    round x and the weight as they load them; its output and gradients equal, bit for bit, those of the same
    convolution of tensors cast first."""
    with clnn.use_device(dev):
        launches = _fused_against_cast(monkeypatch, rng, half, fn, shapes, halves, direct,
                                       _extra_bytes(half, name, shapes))
    conv = [k for k in launches if k.startswith("conv_")]
    assert all(k.startswith("conv_direct") for k in conv) == direct, launches
    # conv_transpose2d's forward is an input gradient: a launch per phase of the stride, and a copy of the taps
    # landing on each phase that has any (stride (1, 2), dilation 2: every tap lands on one of two phases)
    phases, copies = {"conv_transpose2d": (4, 4), "conv_transpose2d_half_w": (2, 1),
                      "conv_transpose2d_half_x": (1, 1)}.get(name, (1, 0))
    assert len(conv) == phases and len(launches) == phases + copies + (len(shapes) == 3), launches


WINOGRAD_CONVS = [  # 3x3 stride-1: of float32 tensors, conv_transpose2d of a half activation with a bias
    ("conv2d", lambda x, w: F.conv2d(x, w, padding=1), [(2, 5, 9, 7), (11, 5, 3, 3)], ()),
    ("conv_transpose2d_half_x_bias", lambda x, w, b: F.conv_transpose2d(x, w, b, padding=1),
     [(1, 10, 4, 7), (10, 11, 3, 3), (11,)], (0,)),
]


@pytest.mark.parametrize("half", ROUNDING_HALVES, ids=str)
@pytest.mark.parametrize("name, fn, shapes, halves", WINOGRAD_CONVS, ids=[c[0] for c in WINOGRAD_CONVS])
def test_winograd_rounds_float32_operands_in_its_loads(dev, rng, monkeypatch, half, name, fn, shapes, halves):
    """Under autocast Winograd's kernels round float32 x and weights as they load them (no cast launch but the
    bias's) and store float32 gradients of float32 leaves: output and gradients equal, bit for bit, those of
    the same convolution of tensors cast first."""
    set_winograd(monkeypatch, 1)
    with clnn.use_device(dev):
        launches = _fused_against_cast(monkeypatch, rng, half, fn, shapes, halves, direct=False, extra=None)
    bias_cast = len(shapes) - 2
    assert sorted(launches) == sorted(["wino_filter", "wino_data", "gemm", "wino_store"] + ["copy"] * bias_cast), \
        launches


# (name, norm of (x, weight, bias), shapes of x, weight, bias): batch norm over channels, layer norm over rows
NORMS = [
    ("batch_norm", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [(5, 7, 3, 11), (7,), (7,)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (3, 23), w, b), [(9, 3, 23), (3, 23), (3, 23)]),
]
NORM_KERNELS = {"ln_fwd", "norm_partial", "norm_finish", "norm_apply", "norm_bwd_input", "ln_bwd", "ln_bwd_finish"}


@pytest.mark.parametrize("half", [clnn.bfloat16, clnn.float16], ids=str)
@pytest.mark.parametrize("name, fn, shapes", NORMS, ids=[n[0] for n in NORMS])
def test_norms_read_a_half_input_without_a_float32_copy(dev, rng, monkeypatch, half, name, fn, shapes):
    """Under autocast a norm of a half x with float32 parameters launches only its own kernels (they read x and
    write its gradient in x's type: no float32 copy of x is made and kept for backward). Its output (layer norm:
    float32, on autocast's float32 list; batch norm: x's type, as torch's) and all gradients equal those of the same
    norm of x cast to float32 first, rounded to the same types (by the same kernels: CPUs' own layer norm kernels for
    float32, norm.cl's *_rows, are off here), to within the last bits of their largest element: Intel's compiler sums
    a float32 x's statistics in another order than a half x's (the half build's matches the source's), so about one
    layer norm in 200 had an output 1 ulp off (_assert_last_bits: a half element may be one rounding step off)."""
    from clnn import kernels, tuning

    for key in tuning.TABLE["norm_rows"]:
        monkeypatch.setitem(tuning.TABLE["norm_rows"], key, {"VW": 0})
    values = [rng.standard_normal(s).astype(half if i == 0 else np.float32) for i, s in enumerate(shapes)]
    with clnn.use_device(dev):
        ours, cast = ([clnn.tensor(v, requires_grad=True) for v in values] for _ in range(2))
        launches = []
        launch = kernels.launch
        monkeypatch.setattr(kernels, "launch", lambda d, k, *a: launches.append(k.function_name) or launch(d, k, *a))
        with clnn.autocast(half):
            y = fn(*ours)
        g = clnn.tensor(rng.standard_normal(y.shape), dtype=y.dtype)  # a half y's gradient is half
        y.backward(g)
        monkeypatch.setattr(kernels, "launch", launch)
        y2 = fn(cast[0].astype(clnn.float32), *cast[1:])
        y2.backward(g.astype(clnn.float32))
    assert set(launches) <= NORM_KERNELS, launches
    assert y.dtype == (half if name == "batch_norm" else clnn.float32)
    _assert_last_bits(y, y2.astype(y.dtype))
    for a, b in zip(ours, cast):
        assert a.grad.dtype == a.dtype
        _assert_last_bits(a.grad, b.grad)


@pytest.mark.parametrize("bad, kind, match", [
    (clnn.float32, TypeError, "clnn.float16 or clnn.bfloat16"),
    (np.int32, TypeError, "clnn.float16 or clnn.bfloat16"),
    ("nonsense", TypeError, "clnn.float16 or clnn.bfloat16"),
])
def test_autocast_rejects_non_half_dtypes(bad, kind, match):
    with pytest.raises(kind, match=match), clnn.autocast(bad):
        pass


def test_autocast_rejects_non_bool_enabled():
    with pytest.raises(TypeError, match="enabled"), clnn.autocast(clnn.bfloat16, enabled=1):
        pass


# ---- GradScaler -------------------------------------------------------------------------------------

def test_grad_scaler_defaults_match_torch():
    ours, theirs = clnn.amp.GradScaler(), torch.amp.GradScaler("cpu")
    assert ours.get_scale() == theirs.get_scale() == 2.0**16
    assert ours.state_dict() == {k: v for k, v in theirs.state_dict().items()}


def test_grad_scaler_matches_torch_on_a_stream_with_infs_and_nans(dev, rng):
    """Same gradients (scaled by each side's own scale) into SGD: the scale sequence, the skipped steps and
    the parameters agree; one step in five has an inf or a NaN in one of the two parameters."""
    kw = dict(init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((7, 3), (5,))]
    with clnn.use_device(dev):
        params = [clnn.tensor(a, requires_grad=True) for a in init]
        opt, scaler = clnn.optim.SGD(params, lr=0.1), clnn.amp.GradScaler(**kw)
        tparams = [torch.tensor(a, requires_grad=True) for a in init]
        topt, tscaler = torch.optim.SGD(tparams, lr=0.1), torch.amp.GradScaler("cpu", **kw)
        for step in range(20):
            grads = [rng.standard_normal(a.shape).astype(np.float32) for a in init]
            if step % 5 == 2:
                grads[step % 2].flat[rng.integers(grads[step % 2].size)] = [np.inf, np.nan][step // 5 % 2]
            loss = scaler.scale(clnn.tensor(2.0))
            assert loss.item() == tscaler.scale(torch.tensor(2.0)).item() == 2 * scaler.get_scale()
            for p, tp, g in zip(params, tparams, grads):
                p.grad = clnn.tensor(g * scaler.get_scale())
                tp.grad = torch.tensor(g * tscaler.get_scale())
            before = [p.numpy() for p in params]
            scaler.step(opt)
            tscaler.step(topt)
            scaler.update()
            tscaler.update()
            skipped = all(np.array_equal(b, p.numpy()) for b, p in zip(before, params))
            assert skipped == (step % 5 == 2)
            for p, tp in zip(params, tparams):
                np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-7)
        assert scaler.state_dict() == tscaler.state_dict()


@pytest.mark.parametrize("dtype", [clnn.float32, clnn.bfloat16], ids=str)
@pytest.mark.parametrize("bad", [None, np.inf, np.nan], ids=["finite", "inf", "nan"])
def test_grad_scaler_unscales_in_place_in_multi_tensor_launches_and_one_read(dev, rng, monkeypatch, dtype, bad):
    """unscale_ multiplies each gradient by 1/scale in its own memory (a launch per foreach.MT of them, no other
    kernel), reads one flag back, gives gradients that share memory their own copy first (each is unscaled once),
    and flags an inf or NaN in any of them."""
    from clnn import kernels
    from clnn.ops import foreach

    shapes = ((7, 3), (5,), (1,), *((k,) for k in range(2, foreach.MT + 2)))  # more than one launch takes
    values = [rng.standard_normal(s).astype(np.float32) * 1e3 for s in shapes]
    if bad is not None:
        values[1][rng.integers(5)] = bad
    with clnn.use_device(dev):
        params = [clnn.tensor(rng.standard_normal(v.shape), dtype=dtype, requires_grad=True) for v in values]
        for p, v in zip(params, values):
            p.grad = clnn.tensor(v, dtype=dtype)
        shared = clnn.tensor(rng.standard_normal((7, 3)), dtype=dtype, requires_grad=True)
        shared.grad = params[0].grad  # autograd hands one gradient to several leaves (the two inputs of a + b)
        scaler = clnn.amp.GradScaler(init_scale=2.0**7)
        opt = clnn.optim.SGD([*params, shared], lr=0.1)
        expect = [np.asarray(p.grad.numpy(), np.float32) / np.float32(2.0**7) for p in params]
        memory = [p.grad.data for p in params]
        launches, reads = [], []
        launch, download = kernels.launch, dev.download
        monkeypatch.setattr(kernels, "launch", lambda d, k, *a: launches.append(k.function_name) or launch(d, k, *a))
        monkeypatch.setattr(dev, "download", lambda *a: reads.append(1) or download(*a))
        scaler.unscale_(opt)
        monkeypatch.undo()
        runs = multi_tensor_launches(dev, [math.prod(s) for s in (*shapes, shapes[0])])
        assert launches == ["scale_multi"] * runs and len(reads) == 1, launches
        assert all(p.grad.data is m for p, m in zip(params, memory))
        for p, e in zip([*params, shared], [*expect, expect[0]]):
            np.testing.assert_array_equal(np.asarray(p.grad.numpy(), np.float32), e.astype(dtype).astype(np.float32))
        assert scaler._found_inf[id(opt)] == (bad is not None)


@pytest.mark.parametrize("dtype", [clnn.float32, clnn.float16, clnn.bfloat16, np.float64],
                         ids=["float32", "float16", "bfloat16", "float64"])
def test_nonfinite_check_sees_every_element(dev, dtype):
    """GradScaler.step's read-only check (foreach.check_finite: check_multi) flags one inf or NaN wherever it lies: in
    each lane of a work-item's run of READ_VW elements and in a tensor's tail past its last whole run; finite values
    at the type's extremes (its largest, its smallest subnormal, -0) raise nothing."""
    from clnn.ops import foreach

    info = np.finfo(np.float32 if dtype == clnn.bfloat16 else dtype)
    finite = np.resize(np.array([info.max, -info.max, info.smallest_subnormal, -0.0, 1.5], np.float64), 37)
    if dtype == clnn.bfloat16:  # float32's largest rounds up to inf in bfloat16: its own largest, 0x7F7F
        finite[np.abs(finite) == info.max] = np.sign(finite[np.abs(finite) == info.max]) * 3.3895313892515355e38
    with clnn.use_device(dev):
        def flagged(values: np.ndarray) -> int:
            flag = clnn.zeros(1, dtype=np.int32)
            foreach.check_finite([clnn.tensor(np.ones(3), dtype=dtype), clnn.tensor(values, dtype=dtype)], flag)
            return int(flag.item())

        assert flagged(finite) == 0
        for at in range(finite.size):  # 37: two runs of 16 (or nine of 4) and a tail
            bad = finite.copy()
            bad[at] = (np.inf, -np.inf, np.nan)[at % 3]
            assert flagged(bad) == 1, f"an {bad[at]} at element {at} was not flagged"


@pytest.mark.parametrize("make", [lambda ps: clnn.optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: clnn.optim.Adam(ps, lr=0.01), lambda ps: clnn.optim.RMSprop(ps)],
                         ids=["sgd", "adam", "rmsprop"])
@pytest.mark.parametrize("dtype", [clnn.float32, clnn.bfloat16], ids=str)
@pytest.mark.parametrize("bad", [None, np.nan], ids=["finite", "nan"])
def test_grad_scaler_step_unscales_in_the_update(dev, rng, monkeypatch, make, dtype, bad):
    """step without unscale_ checks the gradients read-only (check_multi) and the update reads them times
    1/scale: the parameters equal unscale_-then-step's bit for bit, .grad stays scaled, one flag read per step,
    and an inf or NaN in any gradient skips the update."""
    from clnn import kernels
    from clnn.ops import foreach

    shapes = ((7, 3), (5,), (1,), *((k,) for k in range(2, foreach.MT + 2)))

    def away_from_zero(shape: tuple[int, ...]) -> np.ndarray:
        """Magnitudes in [0.5, 2): every first step (SGD 0.1 * 500 / 128 and over, Adam's 0.01, RMSprop's 0.1)
        moves every element by more than half a bfloat16 ulp, so an unchanged parameter means a skipped step."""
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)

    values = [(away_from_zero(s) * 1e3).astype(np.float32) for s in shapes]
    if bad is not None:
        values[-1][rng.integers(values[-1].size)] = bad
    init = [away_from_zero(s) for s in shapes]
    with clnn.use_device(dev):
        def model():
            params = [clnn.tensor(a, dtype=dtype, requires_grad=True) for a in init]
            for p, v in zip(params, values):
                p.grad = clnn.tensor(v, dtype=dtype)
            return params, make(params), clnn.amp.GradScaler(init_scale=2.0**7)

        params, opt, scaler = model()
        scaler.unscale_(opt)
        scaler.step(opt)
        fused, fused_opt, fused_scaler = model()
        grads = [_bits(p.grad) for p in fused]
        launches, reads = [], []
        launch, download = kernels.launch, dev.download
        monkeypatch.setattr(kernels, "launch", lambda d, k, *a: launches.append(k.function_name) or launch(d, k, *a))
        monkeypatch.setattr(dev, "download", lambda *a: reads.append(1) or download(*a))
        assert fused_scaler.step(fused_opt) is None
        monkeypatch.undo()
        runs = multi_tensor_launches(dev, [math.prod(s) for s in shapes])
        assert launches == ["check_multi"] * runs + ["optim_multi"] * runs * (bad is None), launches
        assert len(reads) == 1
        for p, q, a, g in zip(params, fused, init, grads):
            np.testing.assert_array_equal(_bits(q), _bits(p))
            assert np.array_equal(_bits(q), _bits(clnn.tensor(a, dtype=dtype))) == (bad is not None)
            np.testing.assert_array_equal(_bits(q.grad), g)
        fused_scaler.update()
        assert fused_scaler.get_scale() == 2.0**7 * (0.5 if bad is not None else 1)
        with pytest.raises(RuntimeError, match="closure"):
            fused_scaler.step(fused_opt, lambda: None)


def test_grad_scaler_state_dict_round_trips_with_torch():
    theirs = torch.amp.GradScaler("cpu", init_scale=512.0, growth_interval=7)
    ours = clnn.amp.GradScaler()
    ours.load_state_dict(theirs.state_dict())
    assert ours.state_dict() == theirs.state_dict()


def test_grad_scaler_bad_use_raises(dev, rng):
    with clnn.use_device(dev):
        p = clnn.tensor(rng.standard_normal(3), dtype=clnn.float32, requires_grad=True)
        opt, scaler = clnn.optim.SGD([p], lr=0.1), clnn.amp.GradScaler()
        with pytest.raises(ValueError, match="no parameter of the optimizer has a gradient"):
            scaler.step(opt)
        with pytest.raises(RuntimeError, match="no inf checks were recorded"):
            scaler.update()
        p.grad = clnn.ones(3)
        scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="already called"):
            scaler.unscale_(opt)
        h = clnn.tensor(rng.standard_normal(3), dtype=clnn.float16, requires_grad=True)
        h.grad = clnn.ones(3, dtype=clnn.float16)
        with pytest.raises(ValueError, match="expects float32 gradients"):
            clnn.amp.GradScaler().unscale_(clnn.optim.SGD([h], lr=0.1))
    with pytest.raises(ValueError, match="growth_interval"):
        clnn.amp.GradScaler(growth_interval=0)
    with pytest.raises(TypeError, match="optimizer"):
        clnn.amp.GradScaler().step("sgd")


# ---- Keras-style precision policies ----------------------------------------------------------------

def _train_digits():
    path = Path(__file__).resolve().parent.parent / "examples" / "train_digits.py"
    spec = importlib.util.spec_from_file_location("train_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# mixed_bfloat16's fit is marked as ROUNDING_HALVES' bfloat16: PoCL generated its model's kernels in 40-50 s of its cold
# part (2026-11-28), and mixed_float16's trains the same model there on PoCL's own half conversions
@pytest.mark.parametrize("precision", ["mixed_float16", pytest.param("mixed_bfloat16", marks=pytest.mark.bf16_shared)])
def test_fit_with_a_mixed_policy_reaches_98_percent_on_digits(dev, precision, capsys):
    """The digits example's model (conv, batch norm, pooling, linear) trained with a mixed policy: float32
    master weights, half forward, float16's loss scaled; it reaches float32's accuracy (the example's model
    and schedule)."""
    (x, y), (xt, yt) = clnn.datasets.load_digits()
    clnn.manual_seed(0)
    model = _train_digits().build_model().to(dev)
    model.compile(optimizer=clnn.optim.Adam(model.parameters(), lr=5e-3), loss="cross_entropy",
                  metrics=["accuracy"], precision=precision)
    model.summary((1, 8, 8))
    assert f"Precision policy: {precision}" in capsys.readouterr().out
    model.fit(x, y, epochs=8, batch_size=64, verbose=0, seed=0,  # examples/train_digits.py's schedule
              callbacks=[clnn.nn.LearningRateScheduler(lambda epoch, lr: 5e-3 * 0.5 ** (epoch // 3))])
    assert all(p.dtype == clnn.float32 for p in model.parameters())
    result = model.evaluate(xt, yt, batch_size=128)
    assert result["accuracy"] >= 0.98, result
    probs = model.predict(xt[:5])
    assert probs.dtype == np.float32


def test_compile_rejects_unknown_precision(dev):
    model = clnn.nn.Linear(3, 2).to(dev)
    with pytest.raises(ValueError, match="precision"):
        model.compile(precision="float16")
