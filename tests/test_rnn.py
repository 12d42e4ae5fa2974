"""nn.LSTM (also with proj_size) and nn.GRU against PyTorch's (float64, with the same weights): outputs, final states
and the gradients of the input, the initial states and every parameter; the launch budget of a step; bad input.

The weight and bias gradients (and the input's) are sums of signed terms over time, batch and gates: they
are checked against float32's summation bound, each element's sum of absolute terms taken from a float64
unrolled twin of the layers (:func:`unrolled`, itself checked against PyTorch's result).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import F32_TOL, assert_close, assert_sum_close

import clnn
import clnn.functional as F
from clnn import kernels, nn
from clnn.ops.matmul import rows_config

# mode, seq len, batch, input size, hidden size, layers, bidirectional, batch_first, initial states, bias
CASES = [
    ("LSTM", 1, 1, 1, 3, 1, False, False, False, True),
    ("LSTM", 7, 3, 5, 6, 2, True, False, True, True),
    ("LSTM", 5, 2, 4, 5, 3, True, True, True, False),
    ("LSTM", 11, 1, 3, 9, 1, False, True, False, True),
    ("LSTM", 13, 5, 33, 37, 1, True, False, True, True),  # sizes past a GEMM tile
    ("LSTM", 6, 3, 5, 32, 2, True, False, True, True),    # hidden sizes of whole vectors (CPUs' rnn VW 16)
    ("GRU", 1, 1, 1, 3, 1, False, False, False, True),
    ("GRU", 7, 3, 5, 6, 2, True, False, True, True),
    ("GRU", 5, 2, 4, 5, 3, True, True, False, False),
    ("GRU", 13, 2, 2, 7, 1, False, False, True, True),
    ("GRU", 13, 5, 33, 37, 1, True, True, True, True),
    ("GRU", 6, 3, 5, 48, 2, True, True, True, True),
]
# LSTM with proj_size: seq len, batch, input size, hidden size, layers, bidirectional, batch_first, initial states,
# bias, proj_size
PROJ_CASES = [
    (1, 1, 1, 3, 1, False, False, True, True, 1),
    (7, 3, 5, 6, 2, True, False, True, True, 4),
    (5, 2, 4, 5, 3, True, True, True, False, 2),
    (11, 1, 3, 9, 1, False, True, False, True, 5),
    (13, 5, 33, 37, 2, True, False, True, True, 17),  # sizes past a GEMM tile
    (6, 3, 5, 32, 2, True, False, True, True, 7),
]


def _pair(mode: str, n_in: int, hid: int, layers: int, bidir: bool, batch_first: bool, bias: bool, proj: int = 0):
    """A PyTorch float64 module and a clnn one loaded from its state_dict."""
    kw = {"num_layers": layers, "bidirectional": bidir, "batch_first": batch_first, "bias": bias}
    kw = {**kw, "proj_size": proj} if proj else kw
    ref = getattr(torch.nn, mode)(n_in, hid, **kw).double()
    with torch.no_grad():  # weights rounded to float32, so both sides compute with the same values
        for p in ref.parameters():
            p.copy_(p.float().double())
    mine = getattr(nn, mode)(n_in, hid, **kw)
    mine.load_state_dict({k: v.numpy().astype(np.float32) for k, v in ref.state_dict().items()})
    return ref, mine


def unrolled(mode: str, ref: torch.nn.Module, x: torch.Tensor, hx: list[torch.Tensor] | None):
    """PyTorch's recurrence written out step by step (time-major, batched input) in float64.

    Returns (output, final states, steps): steps[(layer, direction)] lists per time step the layer input,
    h_{t-1}, the input and recurrent pre-activations, and with a projection (h'_t, h_t) (retaining the
    gradients of all but the input, h_{t-1} and h'_t).
    """
    d_count = 2 if ref.bidirectional else 1
    hid, proj = ref.hidden_size, ref.proj_size
    t_len, batch = x.shape[:2]
    finals: list[list[torch.Tensor]] = [[], []]
    steps = {}
    inp = x
    for layer in range(ref.num_layers):
        outs = []
        for d in range(d_count):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w_ih, w_hh = getattr(ref, "weight_ih" + sfx), getattr(ref, "weight_hh" + sfx)
            b_ih = getattr(ref, "bias_ih" + sfx) if ref.bias else 0
            b_hh = getattr(ref, "bias_hh" + sfx) if ref.bias else 0
            k = layer * d_count + d
            h = hx[0][k] if hx else torch.zeros(batch, proj or hid, dtype=x.dtype)
            c = hx[1][k] if hx and mode == "LSTM" else torch.zeros(batch, hid, dtype=x.dtype)
            ys = [None] * t_len
            rec = steps[(layer, d)] = []
            for t in (range(t_len) if d == 0 else range(t_len - 1, -1, -1)):
                gx = inp[t] @ w_ih.T + b_ih
                gh = h @ w_hh.T + b_hh
                gx.retain_grad()
                gh.retain_grad()
                rec.append((inp[t], h, gx, gh, None))
                if mode == "LSTM":
                    i, f, g, o = (gx + gh).chunk(4, 1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = torch.sigmoid(o) * torch.tanh(c)
                    if proj:
                        hf, h = h, h @ getattr(ref, "weight_hr" + sfx).T
                        h.retain_grad()
                        rec[-1] = (*rec[-1][:4], (hf, h))
                else:
                    xr, xz, xn = gx.chunk(3, 1)
                    hr, hz, hn = gh.chunk(3, 1)
                    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                    h = (1 - z) * torch.tanh(xn + r * hn) + z * h
                ys[t] = h
            finals[0].append(h)
            finals[1].append(c)
            outs.append(torch.stack(ys))
        inp = torch.cat(outs, 2)
    return inp, [torch.stack(f) for f in finals[: 2 if mode == "LSTM" else 1]], steps


def _magnitudes(mode: str, ref: torch.nn.Module, steps: dict
                ) -> tuple[dict[str, np.ndarray], np.ndarray, dict[tuple[int, int], np.ndarray]]:
    """Each parameter gradient's, the layer-0 input gradient's and each (layer, direction)'s initial hidden
    state gradient's per-element sum of absolute terms (the state feeds the first step processed: dgh_0 W_hh)."""
    mags, h0_mags = {}, {}
    gx_mag = 0
    for (layer, d), rec in steps.items():
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        xs, hs, gxs, ghs, projected = zip(*rec)
        xs, hs = torch.stack(xs).detach(), torch.stack(hs).detach()
        dgx, dgh = torch.stack([g.grad for g in gxs]).abs(), torch.stack([g.grad for g in ghs]).abs()
        if projected[0] is not None:  # dW_hr = sum_t dh_t^T h'_t
            hfs, hps = zip(*projected)
            mags["weight_hr" + sfx] = torch.einsum("tbp,tbh->ph", torch.stack([p.grad for p in hps]).abs(),
                                                   torch.stack(hfs).detach().abs())
        mags["weight_ih" + sfx] = torch.einsum("tbg,tbi->gi", dgx, xs.abs())
        mags["weight_hh" + sfx] = torch.einsum("tbg,tbh->gh", dgh, hs.abs())
        mags["bias_ih" + sfx] = dgx.sum((0, 1))
        mags["bias_hh" + sfx] = dgh.sum((0, 1))
        h0_mags[(layer, d)] = (dgh[0] @ getattr(ref, "weight_hh" + sfx).abs()).detach().numpy()
        if layer == 0:  # in processing order: reverse direction's steps run backward in time
            rows = dgx @ getattr(ref, "weight_ih" + sfx).abs()
            gx_mag = gx_mag + (rows if d == 0 else rows.flip(0))
    return {k: v.detach().numpy() for k, v in mags.items()}, gx_mag.detach().numpy(), h0_mags


def _projection_magnitudes(ref: torch.nn.Module, steps: dict, layers: int) -> tuple[np.ndarray, np.ndarray]:
    """With a projection, each output's and each final h's sum of absolute terms ``|W_hr| |h'_t|``: the output
    time-major (T, B, D * P), the final states (L * D, B, P)."""
    outs, finals = [], []
    for (layer, d), rec in sorted(steps.items()):  # (layer, direction) in h_n's order
        w = getattr(ref, f"weight_hr_l{layer}" + ("_reverse" if d else "")).detach().abs()
        terms = [hf.detach().abs() @ w.T for hf, _ in (r[4] for r in rec)]
        finals.append(terms[-1])
        if layer == layers - 1:  # the reverse direction's steps run backward in time
            outs.append(torch.stack(terms if d == 0 else terms[::-1]))
    return torch.cat(outs, 2).numpy(), torch.stack(finals).numpy()


def _run(mode, t_len, batch, n_in, hid, layers, bidir, batch_first, with_state, bias, rng, unbatched=False, proj=0):
    ref, mine = _pair(mode, n_in, hid, layers, bidir, batch_first, bias, proj)
    d_count = 2 if bidir else 1
    shape = (t_len, n_in) if unbatched else (batch, t_len, n_in) if batch_first else (t_len, batch, n_in)
    s_shapes = [(layers * d_count, *(() if unbatched else (batch,)), n) for n in (proj or hid, hid)]
    x = rng.standard_normal(shape).astype(np.float32)
    states = [rng.standard_normal(s).astype(np.float32) for s in s_shapes[: 2 if mode == "LSTM" else 1]]
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ts = [torch.tensor(s, dtype=torch.float64, requires_grad=True) for s in states]
    cx = clnn.tensor(x, requires_grad=True)
    cs = [clnn.tensor(s, requires_grad=True) for s in states]
    pack = (lambda s: tuple(s)) if mode == "LSTM" else (lambda s: s[0])
    t_out, t_fin = ref(tx, pack(ts) if with_state else None)
    c_out, c_fin = mine(cx, pack(cs) if with_state else None)
    t_fin, c_fin = (list(t_fin), list(c_fin)) if mode == "LSTM" else ([t_fin], [c_fin])
    ups = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in [t_out, *t_fin]]
    sum(((a * torch.tensor(u, dtype=torch.float64)).sum() for a, u in zip([t_out, *t_fin], ups))).backward()
    sum((a * clnn.tensor(u)).sum() for a, u in zip([c_out, *c_fin], ups)).backward()
    # the twin, time-major and batched, with the same upstream gradients
    twin = {k: v.detach().clone().requires_grad_() for k, v in ref.named_parameters()}
    tm = tx.detach().clone()
    tm = tm.unsqueeze(1) if unbatched else tm.transpose(0, 1) if batch_first else tm
    th = [s.detach().clone() for s in ts]
    th = [s.unsqueeze(1) for s in th] if unbatched else th
    proxy = type("Twin", (), {**twin, "bidirectional": bidir, "hidden_size": hid, "num_layers": layers,
                              "bias": bias, "proj_size": proj})()
    u_out, u_fin, steps = unrolled(mode, proxy, tm, th if with_state else None)
    up_out = torch.tensor(ups[0], dtype=torch.float64)
    up_out = up_out.unsqueeze(1) if unbatched else up_out.transpose(0, 1) if batch_first else up_out
    t_ref_out = t_out.detach().unsqueeze(1) if unbatched else t_out.detach().transpose(0, 1) if batch_first \
        else t_out.detach()
    assert_close(u_out.detach().numpy(), t_ref_out.numpy(), 1e-12, "unrolled twin")
    loss = (u_out * up_out).sum()
    for f, u in zip(u_fin, ups[1:]):
        loss = loss + (f * torch.tensor(u, dtype=torch.float64).reshape(f.shape)).sum()
    loss.backward()
    mags, gx_mag, h0_mags = _magnitudes(mode, proxy, steps)
    if proj:  # h_t = W_hr h'_t is a sum of signed terms: checked against their magnitude
        out_mag, hn_mag = _projection_magnitudes(proxy, steps, layers)
        out_mag = out_mag[:, 0] if unbatched else out_mag.transpose(1, 0, 2) if batch_first else out_mag
        hn_mag = hn_mag[:, 0] if unbatched else hn_mag
    for i, (what, a, b) in enumerate(zip(["output", "h_n", "c_n"], [c_out, *c_fin], [t_out, *t_fin])):
        assert a.shape == tuple(b.shape), f"{what}: shape {a.shape} != {tuple(b.shape)}"
        b = b.detach().numpy()
        if proj and i < 2:
            assert_sum_close(a.numpy(), b, (out_mag, hn_mag)[i] + np.abs(b), F32_TOL, what)
        else:
            assert_close(a.numpy(), b, F32_TOL, what)
    gx_mag = gx_mag[:, 0] if unbatched else gx_mag.transpose(1, 0, 2) if batch_first else gx_mag
    assert_sum_close(cx.grad.numpy(), tx.grad.numpy(), gx_mag + np.abs(tx.grad.numpy()), F32_TOL, "input grad")
    if with_state:  # h0's gradient is a sum (dgh_0 W_hh: its terms may cancel), c0's a product
        h0_mag = np.stack([h0_mags[(k // d_count, k % d_count)] for k in range(layers * d_count)])
        h0_ref = ts[0].grad.numpy()
        assert_sum_close(cs[0].grad.numpy(), h0_ref, h0_mag.reshape(h0_ref.shape) + np.abs(h0_ref), F32_TOL,
                         "hx[0] grad")
        for i, (a, b) in enumerate(zip(cs[1:], ts[1:]), 1):
            assert_close(a.grad.numpy(), b.grad.numpy(), F32_TOL, f"hx[{i}] grad")
    names = dict(ref.named_parameters())
    assert sorted(names) == sorted(k for k, _ in mine.named_parameters())
    for k, p in mine.named_parameters():
        if not mags[k].any():  # W_hh over one step from a zero state: every term is 0
            np.testing.assert_array_equal(p.grad.numpy(), 0, f"{k} grad")
        else:
            assert_sum_close(p.grad.numpy(), names[k].grad.numpy(), mags[k], F32_TOL, f"{k} grad")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_against_torch(case, rng):
    _run(*case, rng)


@pytest.mark.parametrize("case", PROJ_CASES, ids=lambda c: "-".join(map(str, c)))
def test_proj_size_against_torch(case, rng):
    *dims, proj = case
    _run("LSTM", *dims, rng, proj=proj)


@pytest.mark.parametrize("mode, proj", [("LSTM", 0), ("GRU", 0), ("LSTM", 3)])
@pytest.mark.parametrize("with_state", [False, True])
def test_unbatched(mode, proj, with_state, rng):
    _run(mode, 6, 1, 3, 5, 2, True, False, with_state, True, rng, unbatched=True, proj=proj)


@pytest.mark.parametrize("mode, proj", [("LSTM", 0), ("GRU", 0), ("LSTM", 6)])
def test_state_dict_to_torch_and_init(mode, proj, rng):
    hid = 11
    kw = {"num_layers": 2, "bidirectional": True, **({"proj_size": proj} if proj else {})}
    mine = getattr(nn, mode)(4, hid, **kw)
    ref = getattr(torch.nn, mode)(4, hid, **kw)
    assert [(k, tuple(v.shape)) for k, v in mine.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in ref.state_dict().items()]
    assert [k for k, _ in mine.named_parameters()] == [k for k, _ in ref.named_parameters()]
    bound = 1 / math.sqrt(hid)
    for k, v in mine.state_dict().items():  # U(-bound, bound): std bound / sqrt(3); a GRU bias of 33 values had a
        a = np.asarray(v)  # std under 0.4 bound once in 2700 draws, under 0.3 far less than once in 10^7
        assert np.abs(a).max() <= bound and np.abs(a).max() > 0.5 * bound and a.std() > 0.3 * bound, k
    ref.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in mine.state_dict().items()})
    x = rng.standard_normal((4, 2, 4)).astype(np.float32)
    out, _ = mine(clnn.tensor(x))
    assert_close(out.numpy(), ref.double()(torch.tensor(x, dtype=torch.float64))[0].detach().numpy(), F32_TOL)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_dropout_between_layers(mode, rng):
    """Training applies F.dropout to every layer's output but the last, from the global generator."""
    net = getattr(nn, mode)(3, 5, num_layers=2, dropout=0.5)
    one, two = (getattr(nn, mode)(n, 5) for n in (3, 5))
    one.load_state_dict({k: v for k, v in net.state_dict().items() if k.endswith("l0")})
    two.load_state_dict({k.replace("l1", "l0"): v for k, v in net.state_dict().items() if k.endswith("l1")})
    x = clnn.tensor(rng.standard_normal((6, 2, 3)).astype(np.float32))
    clnn.manual_seed(7)
    got = net(x)[0].numpy()
    clnn.manual_seed(7)
    want = two(F.dropout(one(x)[0], 0.5))[0].numpy()
    np.testing.assert_array_equal(got, want)
    net.eval()
    assert not np.array_equal(net(x)[0].numpy(), got)
    np.testing.assert_array_equal(net(x)[0].numpy(), two(one(x)[0])[0].numpy())


def _launched(monkeypatch, fn) -> list[str]:
    """The kernels ``fn`` launches, in order."""
    names = []
    launch = kernels.launch

    def recording(dev, k, *args):
        names.append(k.function_name)
        return launch(dev, k, *args)

    monkeypatch.setattr(kernels, "launch", recording)
    fn()
    monkeypatch.setattr(kernels, "launch", launch)
    return names


@pytest.mark.parametrize("mode, proj", [("LSTM", 0), ("GRU", 0), ("LSTM", 96)])
def test_two_launches_per_step(mode, proj, monkeypatch, rng):
    """Within a layer and direction, consecutive steps' gate kernels (forward and backward) are separated by
    exactly one launch, the recurrent GEMM (never split into partials): two launches per step, three with
    a projection (its GEMM too, forward and backward). Posing as an H100 (CI's h100 part), these sizes would
    otherwise take k-split tiled GEMMs plus their partial sums. On CPUs these GEMMs are gemm_rows' (the weights
    copied to rows once, before a direction's first step)."""
    t_len, layers, dirs = 4, 2, 2
    net = getattr(nn, mode)(17, 128, num_layers=layers, bidirectional=True, **({"proj_size": proj} if proj else {}))
    x = clnn.tensor(rng.standard_normal((t_len, 64, 17)).astype(np.float32), requires_grad=True)
    out = []
    forward = _launched(monkeypatch, lambda: out.append(net(x)[0]))
    g = clnn.tensor(rng.standard_normal(out[0].shape).astype(np.float32))
    backward = _launched(monkeypatch, lambda: out[0].backward(g))
    for names, step in ((forward, f"{mode.lower()}_step"), (backward, f"{mode.lower()}_step_bwd")):
        at = [i for i, n in enumerate(names) if n == step]
        assert len(at) == t_len * layers * dirs, f"{step}: {len(at)} launches"
        between = [names[a + 1:b] for a, b in zip(at, at[1:])]
        gemms = [b for b in between if len(b) == 1 + bool(proj) and all(n.startswith("gemm") and n != "gemm_sum"
                                                                        for n in b)]
        assert len(gemms) == (t_len - 1) * layers * dirs, f"{step}: launches between steps {between}"
        rows = rows_config(clnn.default_device(), np.dtype(np.float32)) is not None
        assert all((n == "gemm_rows") == rows for b in gemms for n in b), gemms


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_gradient_through_final_state_only(mode, rng):
    """A classifier's use: the loss reads h_n alone, the output sequence gets no gradient."""
    ref, mine = _pair(mode, 3, 5, 2, True, True, True)
    x = rng.standard_normal((4, 6, 3)).astype(np.float32)
    tx, cx = torch.tensor(x, dtype=torch.float64, requires_grad=True), clnn.tensor(x, requires_grad=True)
    t_fin, c_fin = ref(tx)[1], mine(cx)[1]
    t_h, c_h = (t_fin[0], c_fin[0]) if mode == "LSTM" else (t_fin, c_fin)
    up = rng.standard_normal(tuple(t_h.shape)).astype(np.float32)
    (t_h * torch.tensor(up, dtype=torch.float64)).sum().backward()
    (c_h * clnn.tensor(up)).sum().backward()
    assert_close(cx.grad.numpy(), tx.grad.numpy(), F32_TOL, "input grad")


def test_deterministic(rng):
    net = nn.LSTM(5, 7, num_layers=2, bidirectional=True)
    x = rng.standard_normal((9, 3, 5)).astype(np.float32)
    runs = []
    for _ in range(2):
        xt = clnn.tensor(x, requires_grad=True)
        net.zero_grad()
        net(xt)[0].sum().backward()
        runs.append([xt.grad.numpy()] + [p.grad.numpy() for p in net.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def _x(*shape, dtype=np.float32):
    return lambda: (clnn.ones(shape, dtype=dtype),)


# (module, its call's arguments or None for a constructor error, exception, message)
BAD = [
    (lambda: nn.LSTM(3, 4), _x(5, 2, 4), ValueError, r"LSTM: input expects shape .*\(L, N, 3\); got \(5, 2, 4\)"),
    (lambda: nn.GRU(3, 4, batch_first=True), _x(5, 2), ValueError, r"GRU: input expects shape .*\(N, L, 3\)"),
    (lambda: nn.GRU(3, 4), lambda: (clnn.ones((5, 2, 3)), clnn.ones((1, 3, 4))), ValueError,
     r"GRU: h_0 expects shape \(1, 2, 4\) for input of shape \(5, 2, 3\); got \(1, 3, 4\)"),
    (lambda: nn.LSTM(3, 4, bidirectional=True),
     lambda: (clnn.ones((5, 2, 3)), (clnn.ones((2, 2, 4)), clnn.ones((1, 2, 4)))),
     ValueError, r"LSTM: c_0 expects shape \(2, 2, 4\) .* got \(1, 2, 4\)"),
    (lambda: nn.LSTM(3, 4), lambda: (clnn.ones((5, 2, 3)), clnn.ones((1, 2, 4))), TypeError,
     r"LSTM: hx expects a tuple"),
    (lambda: nn.GRU(3, 4), lambda: (clnn.ones((5, 3)), clnn.ones((1, 2, 4))), ValueError,
     r"h_0 expects shape \(1, 4\)"),
    (lambda: nn.GRU(3, 4), _x(0, 2, 3), ValueError, r"sequence length and batch size of at least 1"),
    (lambda: nn.GRU(3, 4), _x(5, 2, 3, dtype=np.int32), TypeError, r"GRU: input"),
    (lambda: nn.GRU(3, 4), _x(5, 2, 3, dtype=np.float16), TypeError, r"GRU: .*float16"),
    (lambda: nn.LSTM(3, 4, dropout=1.5), None, ValueError, r"LSTM: dropout"),
    (lambda: nn.GRU(3, 4, dropout=-0.1), None, ValueError, r"GRU: dropout"),
    (lambda: nn.LSTM(3, 4, proj_size=4), None, ValueError, r"LSTM: proj_size expects a value smaller than "
     r"hidden_size \(4\); got 4"),
    (lambda: nn.LSTM(3, 4, proj_size=-1), None, ValueError, r"LSTM: proj_size expects an int >= 0; got -1"),
    (lambda: nn.LSTM(3, 4, proj_size=2.0), None, TypeError, r"LSTM: proj_size expects an int"),
    (lambda: nn.GRU(3, 4, proj_size=2), None, ValueError, r"GRU: proj_size is only supported by LSTM"),
    (lambda: nn.LSTM(3, 4, proj_size=2), lambda: (clnn.ones((5, 2, 3)), (clnn.ones((1, 2, 4)), clnn.ones((1, 2, 4)))),
     ValueError, r"LSTM: h_0 expects shape \(1, 2, 2\) for input of shape \(5, 2, 3\); got \(1, 2, 4\)"),
    (lambda: nn.LSTM(3, 4, proj_size=2), lambda: (clnn.ones((5, 3)), (clnn.ones((1, 2)), clnn.ones((1, 2)))),
     ValueError, r"LSTM: c_0 expects shape \(1, 4\)"),
    (lambda: nn.GRU(3, 0), None, ValueError, r"GRU: hidden_size"),
    (lambda: nn.LSTM(3, 4, num_layers=0), None, ValueError, r"LSTM: num_layers"),
]


@pytest.mark.parametrize("build, args, error, pattern", BAD, ids=[p for *_, p in BAD])
def test_bad_input(build, args, error, pattern, monkeypatch):
    if args is None:
        with pytest.raises(error, match=pattern):
            build()
        return
    net, inputs = build(), args()
    monkeypatch.setattr(kernels, "launch", lambda *a: pytest.fail("launched before the error"))
    with pytest.raises(error, match=pattern):
        net(*inputs)
