"""F.scaled_dot_product_attention against PyTorch (float64): forward, the three input gradients, every mask kind,
causal, scale, dropout, and the forward's O(L) memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_sum_close, attention_path, rel_err  # noqa: F401 (a fixture)

import clnn
import clnn.functional as F
from clnn import tuning
from clnn.ops import attention

pytestmark = pytest.mark.usefixtures("attention_path")

# (batch dims, L, S, E, Ev, mask, is_causal, scale); mask: None, "bool", "float", "bool-bcast", "float-bcast"
CASES = [
    ((), 1, 1, 1, 1, None, False, None),
    ((2,), 1, 7, 5, 3, None, False, None),
    ((3,), 7, 1, 5, 3, None, False, None),
    ((2, 3), 5, 11, 7, 3, None, False, None),
    ((), 37, 70, 20, 9, None, True, None),      # causal, L < S; S longer than a small GPU's tile
    ((3,), 70, 37, 20, 9, None, True, None),    # causal, L > S: rows past S see every key
    ((2,), 131, 67, 13, 17, None, True, 0.3),   # more than a work-group of rows
    ((2,), 290, 300, 8, 5, None, True, None),   # causal over three row blocks, each seeing fewer keys than S
    ((5, 2), 37, 41, 20, 9, "bool", False, None),
    ((5, 2), 37, 41, 20, 9, "bool-bcast", False, None),   # (5, 1, 1, S): a key padding mask
    ((2,), 29, 41, 6, 5, "float", False, 0.7),
    ((5, 2), 37, 41, 20, 9, "float-bcast", False, None),  # (2, 1, S): per head, every row and batch
    ((3,), 19, 23, 64, 64, "float", False, None),
    ((2,), 9, 13, 150, 33, None, True, None),   # wide heads: the CPU path's work-items take 2 query rows
]


def _mask(kind: str | None, batch: tuple[int, ...], lq: int, s: int, rng: np.random.Generator) -> np.ndarray | None:
    if kind is None:
        return None
    shape = {"bool": (*batch, lq, s), "float": (*batch, lq, s),
             "bool-bcast": (batch[0], 1, 1, s), "float-bcast": (batch[-1], 1, s)}[kind]
    if kind.startswith("bool"):
        m = rng.random(shape) > 0.3
        m.reshape(-1, s)[0] = False  # a row (or a padded batch) with no key: torch gives 0
        return m
    m = rng.standard_normal(shape)
    m.reshape(-1, s)[0, :2] = -np.inf
    return m


def _magnitudes(q, k, v, g, p, scale):
    """Sums of absolute terms of out, dq, dk, dv, for float32's summation bound (p: the attention weights)."""
    aq, ak, av, ag = (np.abs(a) for a in (q, k, v, g))
    out = p @ av
    ds = p * (ag @ np.swapaxes(av, -1, -2) + (ag * out).sum(-1, keepdims=True))
    return out, scale * ds @ ak, scale * np.swapaxes(ds, -1, -2) @ aq, np.swapaxes(p, -1, -2) @ ag


def _torch_sdpa(q, k, v, mask, causal, scale):
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tm = None if mask is None else torch.tensor(mask)
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal, scale=scale)
    return out, (tq, tk, tv)


def _weights(q, k, mask, causal, scale):
    s = torch.tensor(q) @ torch.tensor(k).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -torch.inf)
    if mask is not None:
        s = s.masked_fill(~torch.tensor(mask), -torch.inf) if mask.dtype == bool else s + torch.tensor(mask)
    return torch.nan_to_num(torch.softmax(s, -1), nan=0.0).numpy()


@pytest.mark.parametrize("batch, lq, s, e, ev, mask_kind, causal, scale", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_matches_torch(batch, lq, s, e, ev, mask_kind, causal, scale, dtype):
    if dtype == np.float64 and not clnn.default_device().fp64:
        pytest.skip("no fp64 on this device")
    _check_sdpa(batch, lq, s, e, ev, mask_kind, causal, scale, dtype)


@pytest.mark.parametrize("vw", [4, 8])
@pytest.mark.parametrize("batch, lq, s, e, ev, mask_kind, causal", [((5, 2), 37, 41, 20, 9, "bool", False),
                                                                    ((3,), 70, 37, 20, 9, None, True)])
def test_sdpa_rows_path_in_narrower_vectors(vw, batch, lq, s, e, ev, mask_kind, causal):
    """The CPU path's kernels built for 4- and 8-lane vectors (tuning's attention_rows VW; the table's CPUs take 16):
    several key blocks, heads wider than the vectors, a mask or causal rows."""
    if not attention.rows_path(clnn.default_device(), s):
        pytest.skip("the CPU path's vector width")
    with tuning.override("attention_rows", VW=vw):
        _check_sdpa(batch, lq, s, e, ev, mask_kind, causal, None, np.float32)


def _check_sdpa(batch, lq, s, e, ev, mask_kind, causal, scale, dtype):
    """Attention's output and gradients against torch in float64, each element within its terms' sum."""
    rng = np.random.default_rng()
    q, k, v = rng.standard_normal((*batch, lq, e)), rng.standard_normal((*batch, s, e)), rng.standard_normal(
        (*batch, s, ev))
    g = rng.standard_normal((*batch, lq, ev))
    mask = _mask(mask_kind, batch, lq, s, rng)
    ref, leaves = _torch_sdpa(q, k, v, mask, causal, scale)
    ref.backward(torch.tensor(g))
    cq, ck, cv = (clnn.tensor(a.astype(dtype), requires_grad=True) for a in (q, k, v))
    cm = None if mask is None else clnn.tensor(mask if mask.dtype == bool else mask.astype(dtype))
    out = F.scaled_dot_product_attention(cq, ck, cv, attn_mask=cm, is_causal=causal, scale=scale)
    out.backward(clnn.tensor(g.astype(dtype)))
    sc = 1 / np.sqrt(e) if scale is None else scale
    mags = _magnitudes(q, k, v, g, _weights(q, k, mask, causal, sc), sc)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for what, got, want, mag in zip(("out", "dq", "dk", "dv"), (out, cq.grad, ck.grad, cv.grad),
                                    (ref.detach(), *(t.grad for t in leaves)), mags):
        assert got.shape == tuple(want.shape)
        assert_sum_close(got.numpy(), want.numpy(), mag + 1e-300, tol, what)


def test_sdpa_reruns_are_bit_identical():
    rng = np.random.default_rng()
    q, k, v = (clnn.tensor(rng.standard_normal((2, 45, 20)).astype(np.float32), requires_grad=True) for _ in range(3))
    runs = []
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        runs.append([out.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_sdpa_gradients_with_far_negative_scores_match_torch():
    """The last query row's scores are all near -200 (its logsumexp too), so exp(0 - logsumexp) overflows: a kernel
    that lets the rows past L of a block of query rows (zeros in place of q and dO) weigh anything gets NaN in dk and
    dv. Five query rows leave three of a block of 8 past L."""
    rng = np.random.default_rng()
    k = 1 + 0.01 * rng.standard_normal((2, 3, 4))
    q = rng.standard_normal((2, 5, 4))
    q[:, -1] = -100
    v, g = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4))
    q, k, v, g = (a.astype(np.float32) for a in (q, k, v, g))  # torch in float64 on the same values
    cq, ck, cv = (clnn.tensor(a, requires_grad=True) for a in (q, k, v))
    F.scaled_dot_product_attention(cq, ck, cv).backward(clnn.tensor(g))
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(tq, tk, tv).backward(torch.tensor(g, dtype=torch.float64))
    for c, t in ((cq, tq), (ck, tk), (cv, tv)):  # scores of -200 in float32 are good to ~1e-5 of a unit
        assert rel_err(c.grad.numpy(), t.grad.numpy()) < 1e-4


def test_sdpa_dropout_matches_torch_with_its_mask():
    """v = identity reveals the kept weights: out = P * keep / (1 - p). The same seed then reproduces that mask,
    and with a real v the forward and gradients equal torch's computation with the mask applied."""
    rng = np.random.default_rng()
    lq, s, e, ev, p = 23, 19, 8, 5, 0.3
    q, k = rng.standard_normal((2, lq, e)), rng.standard_normal((2, s, e))
    eye = np.broadcast_to(np.eye(s), (2, s, s))
    clnn.manual_seed(7)
    shown = F.scaled_dot_product_attention(clnn.tensor(q), clnn.tensor(k), clnn.tensor(eye), dropout_p=p).numpy()
    keep = shown != 0
    assert 0.5 < keep.mean() < 0.9
    v, g = rng.standard_normal((2, s, ev)), rng.standard_normal((2, lq, ev))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    weights = torch.softmax(tq @ tk.transpose(-1, -2) / np.sqrt(e), -1) * torch.tensor(keep) / (1 - p)
    np.testing.assert_allclose(shown, weights.detach().numpy(), rtol=1e-12, atol=1e-15)
    ref = weights @ tv
    ref.backward(torch.tensor(g))
    clnn.manual_seed(7)
    cq, ck, cv = (clnn.tensor(a, requires_grad=True) for a in (q, k, v))
    out = F.scaled_dot_product_attention(cq, ck, cv, dropout_p=p)
    out.backward(clnn.tensor(g))
    for got, want in ((out, ref.detach()), (cq.grad, tq.grad), (ck.grad, tk.grad), (cv.grad, tv.grad)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("lq", [64, 512])
def test_sdpa_forward_memory_is_linear_in_length(lq):
    """Every byte the forward allocates. The fused kernels (GPUs): the output and one logsumexp per row, nothing
    of size L x S. The CPU path also k transposed, its rows padded to whole vectors of keys: linear in the length
    too."""
    rng = np.random.default_rng()
    q, k, v = (clnn.tensor(rng.standard_normal((2, lq, 16)).astype(np.float32), requires_grad=True) for _ in range(3))
    with clnn.profiler.profile() as prof:
        F.scaled_dot_product_attention(q, k, v)
    out, lse = 2 * lq * 16 * 4, 2 * lq * 4
    expected = out + lse
    dev = clnn.default_device()
    if attention.rows_path(dev, lq):
        vw = tuning.params(dev, "attention_rows")["VW"]
        expected += 2 * 16 * -(-lq // vw) * vw * 4
    assert prof.bytes_allocated == expected


# Half inputs: q, k, v, the upstream gradient and a float mask are drawn, rounded to the half type, and torch
# computes on those very values in float64, so the only errors left are clnn's. Those are its float32 sums
# (~1e-7 of the terms' magnitude) and two roundings to the half type, each at most u = 2^-11 (float16) or
# 2^-8 (bfloat16) relative: the stored result's, and for the gradients the stored output's, which enters
# D = dO . out and so dS = p (dO . v - D) by at most u of the same terms' magnitude. So every element must be
# within 3 u of its terms' magnitude (2 u plus float32's share), plus float16's subnormal spacing: a gradient
# below 2^-14 is stored with an absolute error up to 2^-25, however small its terms. A wrong kernel errs by
# the terms' magnitude itself.
HALF = {clnn.float16: (2.0**-11, 2.0**-25), clnn.bfloat16: (2.0**-8, 0.0)}
HALF_CASES = [CASES[k] for k in (0, 2, 4, 6, 7, 8, 10)]  # L = 1, S = 1, causal (both ways, past a tile, blocks), masks


@pytest.mark.parametrize("batch, lq, s, e, ev, mask_kind, causal, scale", HALF_CASES)
@pytest.mark.parametrize("dtype", list(HALF))
def test_sdpa_half_matches_torch_on_the_rounded_inputs(batch, lq, s, e, ev, mask_kind, causal, scale, dtype):
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal(shape).astype(dtype) for shape in ((*batch, lq, e), (*batch, s, e),
                                                                        (*batch, s, ev)))
    g = rng.standard_normal((*batch, lq, ev)).astype(dtype)
    mask = _mask(mask_kind, batch, lq, s, rng)
    mask = None if mask is None else mask if mask.dtype == bool else mask.astype(dtype)
    exact = [None if a is None else a if a.dtype == bool else a.astype(np.float64) for a in (q, k, v, g, mask)]
    ref, leaves = _torch_sdpa(*exact[:3], exact[4], causal, scale)
    ref.backward(torch.tensor(exact[3]))
    cq, ck, cv = (clnn.tensor(a, requires_grad=True) for a in (q, k, v))
    out = F.scaled_dot_product_attention(cq, ck, cv, attn_mask=None if mask is None else clnn.tensor(mask),
                                         is_causal=causal, scale=scale)
    out.backward(clnn.tensor(g))
    sc = 1 / np.sqrt(e) if scale is None else scale
    mags = _magnitudes(*exact[:4], _weights(*exact[:2], exact[4], causal, sc), sc)
    u, tiny = HALF[dtype]
    for what, got, want, mag in zip(("out", "dq", "dk", "dv"), (out, cq.grad, ck.grad, cv.grad),
                                    (ref.detach(), *(t.grad for t in leaves)), mags):
        assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
        got = got.numpy().astype(np.float64)
        assert not np.isnan(got).any(), f"{what}: NaN (a poisoned element was not written?)"
        excess = np.abs(got - want.numpy()) - (3 * u * mag + tiny)
        assert excess.max() <= 0, f"{what}: error over 3 u of the terms' magnitude by up to {excess.max():.3e}"


def test_sdpa_under_autocast_runs_in_its_dtype_as_torch():
    """torch.autocast has scaled_dot_product_attention on its lower-precision list (CPU and CUDA): float32
    inputs and a float mask are cast, the output has the autocast dtype, and float32 leaves get float32
    gradients; float64 is never cast."""
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((2, 13, 8)).astype(np.float32) for _ in range(3))
    mask = rng.standard_normal((13, 13)).astype(np.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.nn.functional.scaled_dot_product_attention(*map(torch.tensor, (q, k, v, mask)))
        want64 = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a, dtype=torch.float64)
                                                                     for a in (q, k, v)))
    assert want.dtype == torch.bfloat16 and want64.dtype == torch.float64
    cq, ck, cv = (clnn.tensor(a, requires_grad=True) for a in (q, k, v))
    with clnn.autocast(dtype=clnn.bfloat16):
        out = F.scaled_dot_product_attention(cq, ck, cv, attn_mask=clnn.tensor(mask))
        if clnn.default_device().fp64:
            assert F.scaled_dot_product_attention(*(clnn.tensor(a.astype(np.float64)) for a in (q, k, v))).dtype \
                == np.float64
    assert out.dtype == clnn.bfloat16
    out.sum().backward()
    assert all(t.grad.dtype == np.float32 for t in (cq, ck, cv))
    # the same computation on bfloat16 copies, as torch's cast: within a bfloat16 rounding or two of torch's
    cast = [clnn.tensor(a.astype(clnn.bfloat16)) for a in (q, k, v, mask)]
    np.testing.assert_array_equal(out.numpy(), F.scaled_dot_product_attention(*cast).numpy())
    np.testing.assert_allclose(out.numpy().astype(np.float32), want.float().numpy(), rtol=0, atol=4 * 2.0**-8)


@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_with_half_parameters(dtype, need_weights):
    """MultiheadAttention converted to a half type against torch's in float64 with the same (rounded) weights:
    the projections, attention and output projection each round once, so the check is norm-wise to 16 u."""
    rng = np.random.default_rng()
    e, h, lq, s, n = 12, 3, 37, 41, 2
    torch.manual_seed(int(rng.integers(1 << 30)))
    tmod = torch.nn.MultiheadAttention(e, h, batch_first=True).double()
    with torch.no_grad():
        tmod.in_proj_bias.normal_()
        tmod.out_proj.bias.normal_()
    cmod = clnn.nn.MultiheadAttention(e, h, batch_first=True)
    cmod.load_state_dict(tmod.state_dict())
    cmod.to(dtype=dtype)
    assert all(p.dtype == dtype for p in cmod.parameters())
    tmod.load_state_dict({k: torch.tensor(v.numpy().astype(np.float64)) for k, v in cmod.state_dict().items()})
    x, mem = rng.standard_normal((n, lq, e)).astype(dtype), rng.standard_normal((n, s, e)).astype(dtype)
    kpm = rng.random((n, s)) < 0.3
    kpm[:, 0] = False
    cx, cm = (clnn.tensor(a, requires_grad=True) for a in (x, mem))
    tx, tm = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (x, mem))
    cout, _ = cmod(cx, cm, cm, key_padding_mask=clnn.tensor(kpm), need_weights=need_weights)
    tout, _ = tmod(tx, tm, tm, key_padding_mask=torch.tensor(kpm), need_weights=need_weights)
    assert cout.dtype == dtype
    g = rng.standard_normal(cout.shape).astype(dtype)
    cout.backward(clnn.tensor(g))
    tout.backward(torch.tensor(g.astype(np.float64)))
    tol = 16 * HALF[dtype][0]
    pairs = [("out", cout, tout.detach()), ("d query", cx.grad, tx.grad), ("d key/value", cm.grad, tm.grad)]
    pairs += [(f"d {k}", p.grad, dict(tmod.named_parameters())[k].grad) for k, p in cmod.named_parameters()]
    for what, got, want in pairs:
        assert got.dtype == dtype, f"{what}: dtype {got.dtype}"
        err = rel_err(got.numpy().astype(np.float64), want.numpy())
        assert err < tol, f"{what}: error {err:.3e} >= {tol:.1e}"
