"""nn.MultiheadAttention and the Transformer layers against torch.nn's (float64, torch's weights loaded): outputs,
attention weights, the input gradients and every parameter's gradient; masks of every kind, causal, unbatched,
batch_first both ways, kdim/vdim, add_bias_kv and add_zero_attn; state_dict both ways; bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import attention_path, rel_err  # noqa: F401 (a fixture)

import clnn
from clnn import nn

# float64 rows check to 1e-10 (float64 sums of a few hundred terms). float32 rows check every gradient norm-wise
# to 1e-4: a parameter gradient here is a sum over N L rows taken through softmax and LayerNorm backward, whose
# cancellation float32 cannot follow element by element; a wrong gradient errs by O(1).
TOL = {np.float64: 1e-10, np.float32: 1e-4}
DTYPES = [np.float64, np.float32]


def _skip_without_fp64(dtype):
    if dtype == np.float64 and not clnn.default_device().fp64:
        pytest.skip("no fp64 on this device")


def _array(a):
    return None if a is None else np.asarray(a)


def _to_clnn(a, dtype, grad=False):
    a = np.asarray(a)
    return clnn.tensor(a.astype(dtype) if a.dtype != bool else a, requires_grad=grad)


def _compare(cmod, tmod, inputs, call, dtype, rng, grad_inputs=(0,)):
    """Load tmod's weights into cmod, run ``call(module, *inputs)`` on both (it returns a tensor or a tuple),
    backward random upstream gradients and compare outputs, input gradients and every parameter gradient."""
    tmod.double()
    cmod.load_state_dict(tmod.state_dict())
    cmod.to(dtype=dtype)
    host = [a if a is None or a.dtype == bool else a.astype(dtype) for a in map(_array, inputs)]
    cs = [None if a is None else _to_clnn(a, dtype, i in grad_inputs) for i, a in enumerate(host)]
    ts = [None if a is None else torch.tensor(a if a.dtype == bool else a.astype(np.float64),
                                              requires_grad=i in grad_inputs) for i, a in enumerate(host)]
    couts, touts = call(cmod, *cs), call(tmod, *ts)
    couts, touts = (o if isinstance(o, tuple) else (o,) for o in (couts, touts))
    closs = tloss = 0
    tol = TOL[dtype]
    for c, t in zip(couts, touts):
        assert (c is None) == (t is None)
        if c is None:
            continue
        assert c.shape == tuple(t.shape), f"shape {c.shape} != torch's {tuple(t.shape)}"
        assert rel_err(c.numpy(), t.detach().numpy()) < tol, f"output error {rel_err(c.numpy(), t.detach().numpy())}"
        g = rng.standard_normal(c.shape)
        closs = closs + (c * _to_clnn(g, dtype)).sum()
        tloss = tloss + (t * torch.tensor(g)).sum()
    closs.backward()
    tloss.backward()
    # a gradient that vanishes in exact arithmetic (queries over a single key: softmax is constant there) is its
    # reference's rounding noise or exactly 0, as PyTorch's version has it: it is measured on the others' scale
    scale = max(np.linalg.norm(ts[i].grad.numpy()) for i in grad_inputs)
    for i in grad_inputs:
        out, ref = cs[i].grad.numpy(), ts[i].grad.numpy()
        err = rel_err(out, ref) if np.linalg.norm(ref) > 1e-6 * scale else np.linalg.norm(out - ref) / scale
        assert err < tol, f"gradient of input {i}: error {err:.3e}"
    tparams = dict(tmod.named_parameters())
    cparams = dict(cmod.named_parameters())
    assert cparams.keys() == tparams.keys()
    for name, p in cparams.items():
        err = rel_err(p.grad.numpy(), tparams[name].grad.numpy())
        assert err < tol, f"gradient of {name}: error {err:.3e}"


def _bool_mask(rng, shape):
    m = rng.random(shape) < 0.3
    # Every query keeps two keys. With none, torch's weights are NaN. With one, its weight is exactly 1 and the
    # query's gradient exactly 0, which float32 and torch's float64 each miss by their own rounding: a key padding
    # mask hiding all keys but the first (0.3 ** 6 of draws) failed an unbatched case with relative error 1
    m[..., :2] = False
    return m


def _masks(kind, rng, n, h, lq, s, unbatched):
    """(key_padding_mask, attn_mask, is_causal) for a mask kind (torch's conventions: bool True = masked out)."""
    kpm_shape = (s,) if unbatched else (n, s)
    a3 = (h, lq, s) if unbatched else (n * h, lq, s)
    causal = np.triu(np.ones((lq, s), bool), 1)
    return {
        None: (None, None, False),
        "bool": (None, _bool_mask(rng, (lq, s)), False),
        "float": (None, rng.standard_normal((lq, s)), False),
        "bool3": (None, _bool_mask(rng, a3), False),
        "float3": (None, rng.standard_normal(a3), False),
        "kpm": (_bool_mask(rng, kpm_shape), None, False),
        "kpm-float": (rng.standard_normal(kpm_shape), None, False),
        "kpm+bool": (_bool_mask(rng, kpm_shape), _bool_mask(rng, (lq, s)), False),
        "kpm+float3": (_bool_mask(rng, kpm_shape), rng.standard_normal(a3), False),
        "causal": (None, causal, True),
        "causal+kpm": (_bool_mask(rng, kpm_shape), causal, True),
    }[kind]


# (E, H, L, S, N, kdim, vdim, batch_first, unbatched, mask kind)
MHA_CASES = [
    (12, 3, 5, 7, 2, None, None, False, False, None),
    (12, 3, 1, 7, 3, None, None, True, False, "kpm"),
    (8, 2, 7, 1, 2, None, None, False, False, "float"),
    (12, 3, 11, 11, 2, None, None, True, False, "causal"),
    (12, 3, 11, 11, 2, None, None, False, False, "causal+kpm"),
    (10, 5, 13, 5, 3, 7, 3, False, False, "bool"),         # kdim, vdim differ: q/k/v_proj_weight
    (12, 4, 6, 9, 2, None, 5, True, False, "bool3"),
    (12, 3, 6, 9, 2, None, None, False, False, "float3"),
    (6, 2, 5, 8, 3, None, None, True, False, "kpm+bool"),
    (6, 2, 5, 8, 3, None, None, False, False, "kpm+float3"),
    (6, 2, 5, 8, 2, None, None, False, False, "kpm-float"),
    (12, 3, 5, 7, 1, None, None, False, True, "kpm+bool"),   # unbatched
    (12, 3, 5, 7, 1, 5, None, True, True, "float3"),        # unbatched, batch_first has no effect
    (16, 4, 70, 67, 2, None, None, True, False, "kpm"),      # longer than a work-group and a tile
]


# (E, H, L, S, N, kdim, vdim, batch_first, unbatched, mask kind, add_bias_kv, add_zero_attn): the appended keys
# with masks of each kind (torch pads them with a column per key), causal both ways (with need_weights torch pads
# the explicit mask, without it its causal hint also hides the appended keys: clnn follows both)
EXTRA_KEY_CASES = [
    (12, 3, 5, 7, 2, None, None, False, False, None, True, False),
    (12, 3, 5, 7, 3, None, None, True, False, "kpm+bool", True, True),
    (10, 5, 13, 5, 3, 7, 3, False, False, "float3", False, True),
    (12, 3, 11, 11, 2, None, None, True, False, "causal", True, True),
    (12, 3, 11, 11, 2, None, None, False, False, "causal+kpm", False, True),
    (12, 3, 5, 7, 1, None, 5, False, True, "kpm+float3", True, True),  # unbatched
    (6, 2, 5, 8, 3, None, None, False, False, "kpm-float", True, False),
]


def _check_mha(e, h, lq, s, n, kdim, vdim, batch_first, unbatched, kind, need_weights, average, dtype,
               add_bias_kv=False, add_zero_attn=False):
    _skip_without_fp64(dtype)
    rng = np.random.default_rng()
    torch.manual_seed(int(rng.integers(1 << 30)))
    kw = {"kdim": kdim, "vdim": vdim, "batch_first": batch_first, "add_bias_kv": add_bias_kv,
          "add_zero_attn": add_zero_attn}
    tmod = torch.nn.MultiheadAttention(e, h, **kw)
    with torch.no_grad():  # torch zeroes the biases: draw them so their gradients and use are checked
        for p in (tmod.in_proj_bias, tmod.out_proj.bias):
            p.normal_()
    cmod = nn.MultiheadAttention(e, h, **kw)

    def shape(t, f):
        return (t, f) if unbatched else (n, t, f) if batch_first else (t, n, f)

    q = rng.standard_normal(shape(lq, e))
    k, v = rng.standard_normal(shape(s, kdim or e)), rng.standard_normal(shape(s, vdim or e))
    kpm, mask, causal = _masks(kind, rng, n, h, lq, s, unbatched)

    def call(mod, q, k, v, kpm, mask):
        out, w = mod(q, k, v, key_padding_mask=kpm, attn_mask=mask, need_weights=need_weights,
                     average_attn_weights=average, is_causal=causal)
        return out, w

    _compare(cmod, tmod, [q, k, v, kpm, mask], call, dtype, rng, grad_inputs=(0, 1, 2))


WEIGHTS_KINDS = [(False, True), (True, True), (True, False)]  # (need_weights, average_attn_weights)


@pytest.mark.usefixtures("attention_path")
@pytest.mark.parametrize("e, h, lq, s, n, kdim, vdim, batch_first, unbatched, kind", MHA_CASES)
@pytest.mark.parametrize("need_weights, average", WEIGHTS_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_multihead_attention_matches_torch(e, h, lq, s, n, kdim, vdim, batch_first, unbatched, kind, need_weights,
                                           average, dtype):
    _check_mha(e, h, lq, s, n, kdim, vdim, batch_first, unbatched, kind, need_weights, average, dtype)


@pytest.mark.usefixtures("attention_path")
@pytest.mark.parametrize("case", EXTRA_KEY_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("need_weights, average", WEIGHTS_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_multihead_attention_extra_keys_match_torch(case, need_weights, average, dtype):
    *dims, bias_kv, zero_attn = case
    _check_mha(*dims, need_weights, average, dtype, add_bias_kv=bias_kv, add_zero_attn=zero_attn)


def test_multihead_attention_self_attention_eval_and_init():
    """Self-attention (one tensor for q, k, v) in eval mode, and the parameters' names, shapes and init."""
    rng = np.random.default_rng()
    tmod = torch.nn.MultiheadAttention(12, 3, dropout=0.5).eval()
    cmod = nn.MultiheadAttention(12, 3, dropout=0.5).eval()
    x = rng.standard_normal((5, 2, 12))
    _compare(cmod, tmod, [x], lambda m, x: m(x, x, x), np.float32, rng)
    fresh = nn.MultiheadAttention(12, 3, kdim=5, vdim=7, bias=True)
    want = torch.nn.MultiheadAttention(12, 3, kdim=5, vdim=7).state_dict()
    got = fresh.state_dict()
    assert list(got) == list(want)
    assert all(got[k].shape == tuple(want[k].shape) for k in want)
    assert not got["in_proj_bias"].numpy().any() and not got["out_proj.bias"].numpy().any()
    w = fresh.q_proj_weight.numpy()
    bound = np.sqrt(6 / 24)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound  # xavier_uniform
    assert list(nn.MultiheadAttention(12, 3, bias=False).state_dict()) == list(
        torch.nn.MultiheadAttention(12, 3, bias=False).state_dict())


def test_multihead_attention_bias_kv_self_attention_and_init():
    """With add_bias_kv, self-attention (fused, no packed projection) matches torch; bias_k and bias_v are named,
    shaped and drawn as torch's (xavier_normal_: std 1/sqrt(E)), also with bias=False."""
    rng = np.random.default_rng()
    tmod = torch.nn.MultiheadAttention(12, 3, add_bias_kv=True, add_zero_attn=True)
    cmod = nn.MultiheadAttention(12, 3, add_bias_kv=True, add_zero_attn=True)
    x = rng.standard_normal((5, 2, 12))
    _compare(cmod, tmod, [x], lambda m, x: m(x, x, x, need_weights=False)[0], np.float32, rng)
    kw = {"add_bias_kv": True, "bias": False, "kdim": 5}  # 1200 draws: the bounds below stand 14 sigmas out
    got, want = nn.MultiheadAttention(600, 3, **kw).state_dict(), torch.nn.MultiheadAttention(600, 3, **kw).state_dict()
    assert list(got) == list(want)
    assert all(got[k].shape == tuple(want[k].shape) for k in want)
    drawn = np.concatenate([got["bias_k"].numpy().ravel(), got["bias_v"].numpy().ravel()])
    assert 0.7 / np.sqrt(600) < drawn.std() < 1.3 / np.sqrt(600) and abs(drawn.mean()) < 0.5 / np.sqrt(600)
    assert not np.array_equal(got["bias_k"].numpy(), got["bias_v"].numpy())
    assert nn.MultiheadAttention(12, 3).bias_k is None


LAYER_CASES = [  # (norm_first, activation, batch_first, unbatched, mask kind)
    (False, "relu", False, False, None),
    (True, "gelu", True, False, "kpm"),
    (False, "gelu", True, False, "causal"),
    (True, "relu", False, False, "causal+kpm"),
    (False, "callable", False, True, "float"),
    (True, "relu", True, False, "kpm+bool"),
]


def _activation(name):
    if name != "callable":
        return name, name
    return (lambda x: clnn.functional.tanh(x)), torch.tanh


@pytest.mark.parametrize("norm_first, act, batch_first, unbatched, kind", LAYER_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_encoder_matches_torch(norm_first, act, batch_first, unbatched, kind, dtype):
    _skip_without_fp64(dtype)
    rng = np.random.default_rng()
    torch.manual_seed(int(rng.integers(1 << 30)))
    d, h, n, s = 12, 3, 2, 9
    ca, ta = _activation(act)
    kw = {"dim_feedforward": 11, "dropout": 0.0, "batch_first": batch_first, "norm_first": norm_first}
    tmod = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, h, activation=ta, **kw), 2,
                                       norm=torch.nn.LayerNorm(d), enable_nested_tensor=False)
    cmod = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, h, activation=ca, **kw), 2, norm=nn.LayerNorm(d))
    x = rng.standard_normal((s, d) if unbatched else (n, s, d) if batch_first else (s, n, d))
    kpm, mask, causal = _masks(kind, rng, 1 if unbatched else n, h, s, s, unbatched)
    if mask is not None and mask.ndim == 3:
        mask = mask[:h] if unbatched else mask
    _compare(cmod, tmod, [x, mask, kpm],
             lambda m, x, mask, kpm: m(x, mask=mask, src_key_padding_mask=kpm, is_causal=causal), dtype, rng)


@pytest.mark.parametrize("norm_first, act, batch_first, unbatched, kind", LAYER_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_decoder_matches_torch(norm_first, act, batch_first, unbatched, kind, dtype):
    _skip_without_fp64(dtype)
    rng = np.random.default_rng()
    torch.manual_seed(int(rng.integers(1 << 30)))
    d, h, n, lt, sm = 12, 3, 2, 7, 5
    ca, ta = _activation(act)
    kw = {"dim_feedforward": 11, "dropout": 0.0, "batch_first": batch_first, "norm_first": norm_first}
    tmod = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(d, h, activation=ta, **kw), 2)
    cmod = nn.TransformerDecoder(nn.TransformerDecoderLayer(d, h, activation=ca, **kw), 2)

    def seq(t):
        return (t, d) if unbatched else (n, t, d) if batch_first else (t, n, d)

    tgt, mem = rng.standard_normal(seq(lt)), rng.standard_normal(seq(sm))
    nb = 1 if unbatched else n
    kpm, mask, causal = _masks(kind, rng, nb, h, lt, lt, unbatched)
    mkpm, mmask, _ = _masks("kpm+bool" if kind else None, rng, nb, h, lt, sm, unbatched)

    def call(m, tgt, mem, mask, kpm, mmask, mkpm):
        return m(tgt, mem, tgt_mask=mask, memory_mask=mmask, tgt_key_padding_mask=kpm,
                 memory_key_padding_mask=mkpm, tgt_is_causal=causal)

    _compare(cmod, tmod, [tgt, mem, mask, kpm, mmask, mkpm], call, dtype, rng, grad_inputs=(0, 1))


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_feed_forward_fuses_its_activation(act):
    """A layer's activation named by a string runs in linear1's store, one launch fewer than the same activation
    as a callable, with the same results: relu's bit for bit; gelu's to float32's rounding, as the store's gelu
    and the unary kernel's round differently, and its output flows on through linear2 and norm2."""
    rng = np.random.default_rng()
    kw = {"dim_feedforward": 13, "dropout": 0.0, "batch_first": True}
    fused = nn.TransformerEncoderLayer(10, 2, activation=act, **kw)
    apart = nn.TransformerEncoderLayer(10, 2, activation=lambda x: getattr(clnn.functional, act)(x), **kw)
    apart.load_state_dict(fused.state_dict())
    xa, ga = rng.standard_normal((3, 7, 10)).astype(np.float32), rng.standard_normal((3, 7, 10)).astype(np.float32)
    runs, counts = [], []
    for layer in (fused, apart):
        x = clnn.tensor(xa, requires_grad=True)
        with clnn.profiler.profile() as prof:
            y = layer(x)
        counts.append(len(prof.kernels))
        y.backward(clnn.tensor(ga))
        runs.append([y.numpy(), x.grad.numpy(), *(p.grad.numpy() for p in layer.parameters())])
    assert counts[0] == counts[1] - 1, counts
    for i, (a, b) in enumerate(zip(*runs)):
        assert a.tobytes() == b.tobytes() if act == "relu" else rel_err(a, b) < 1e-5, f"result {i}"


def test_state_dict_round_trip_and_deep_copies():
    """torch -> clnn -> torch gives back torch's weights; the encoder's layers are independent copies."""
    tmod = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16), 3, enable_nested_tensor=False)
    cmod = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 3)
    assert list(cmod.state_dict()) == list(tmod.state_dict())
    cmod.load_state_dict(tmod.state_dict())
    back = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16), 3, enable_nested_tensor=False)
    back.load_state_dict({k: torch.tensor(v.numpy()) for k, v in cmod.state_dict().items()})
    for k, v in tmod.state_dict().items():
        np.testing.assert_array_equal(back.state_dict()[k].numpy(), v.numpy().astype(np.float32))
    a, b = cmod.layers[0].linear1.weight, cmod.layers[1].linear1.weight
    assert a.data is not b.data and isinstance(b, nn.Parameter)


BAD = [
    (lambda: nn.MultiheadAttention(10, 3), ValueError, "divisible by num_heads"),
    (lambda: nn.TransformerEncoderLayer(12, 3, activation="tanh"), ValueError, "activation"),
]


def _mha_call(q=(5, 2, 12), k=(7, 2, 12), v=(7, 2, 12), **kw):
    m = nn.MultiheadAttention(12, 3)
    return lambda: m(*(clnn.randn(*s) for s in (q, k, v)), **kw)


BAD_CALLS = [
    (dict(k=(7, 2, 8), v=(7, 2, 8)), ValueError, "key expects 12 features"),
    (dict(v=(6, 2, 12)), ValueError, "key and value expect the same"),
    (dict(k=(7, 3, 12), v=(7, 3, 12)), ValueError, "same batch size"),
    (dict(q=(5, 12)), ValueError, "all 3-D"),
    (dict(attn_mask=np.zeros((5, 6), bool)), ValueError, r"attn_mask expects shape \(5, 7\) or \(6, 5, 7\)"),
    (dict(attn_mask=np.zeros((3, 5, 7), bool)), ValueError, "attn_mask expects shape"),
    (dict(key_padding_mask=np.zeros((7, 2), bool)), ValueError, r"key_padding_mask expects shape \(2, 7\)"),
    (dict(key_padding_mask=np.zeros((2, 7), np.int32)), TypeError, "bool or float"),
    (dict(is_causal=True), ValueError, "needs that attn_mask"),
]


@pytest.mark.parametrize("make, exc, pattern", BAD)
def test_bad_construction(make, exc, pattern):
    with pytest.raises(exc, match=pattern):
        make()


@pytest.mark.parametrize("kw, exc, pattern", BAD_CALLS)
def test_bad_calls_raise_before_launch(kw, exc, pattern):
    kw = {k: clnn.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    with pytest.raises(exc, match=pattern):
        _mha_call(**kw)()
