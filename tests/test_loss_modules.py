"""Loss modules and ModuleList/ModuleDict against torch.nn: values, gradients, buffers, state_dict keys."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import rel_err
from torch_ref import check_against_torch

import clnn
from clnn import nn

# (clnn module, torch module, kwargs taking ``w`` the class/element weights, target kind)
MODULES = [
    (nn.CrossEntropyLoss, torch.nn.CrossEntropyLoss,
     lambda w: dict(weight=w, ignore_index=1, reduction="mean", label_smoothing=0.2), "class"),
    (nn.CrossEntropyLoss, torch.nn.CrossEntropyLoss, lambda w: dict(reduction="sum"), "probabilities"),
    (nn.NLLLoss, torch.nn.NLLLoss, lambda w: dict(weight=w, reduction="none"), "class"),
    (nn.MSELoss, torch.nn.MSELoss, lambda w: dict(reduction="sum"), "same"),
    (nn.L1Loss, torch.nn.L1Loss, lambda w: dict(), "same"),
    (nn.BCEWithLogitsLoss, torch.nn.BCEWithLogitsLoss, lambda w: dict(pos_weight=w, reduction="sum"), "unit"),
    (nn.SmoothL1Loss, torch.nn.SmoothL1Loss, lambda w: dict(beta=0.5), "same"),
    (nn.HuberLoss, torch.nn.HuberLoss, lambda w: dict(delta=0.5, reduction="sum"), "same"),
]


@pytest.mark.parametrize("ours,theirs,kwargs,kind", MODULES, ids=[f"{m[0].__name__}-{m[3]}" for m in MODULES])
def test_loss_module(ours, theirs, kwargs, kind, rng):
    shape = (5, 7, 3)
    w = (rng.random(7) + 0.1).astype(np.float32)
    target = {
        "class": rng.integers(0, 7, (5, 3)),
        "probabilities": rng.dirichlet(np.ones(7), (5, 3)).transpose(0, 2, 1).astype(np.float32),
        "same": rng.standard_normal(shape).astype(np.float32),
        "unit": rng.random(shape).astype(np.float32),
    }[kind]
    if ours is nn.BCEWithLogitsLoss:
        w = w.reshape(7, 1)
    mod = ours(**kwargs(clnn.tensor(w)))
    ref = theirs(**kwargs(torch.tensor(w, dtype=torch.float64)))
    x = rng.standard_normal(shape)
    if ours is nn.NLLLoss:
        x = -np.abs(x)  # log-probabilities: the picked terms share a sign
    # gradients that are differences of two terms (sigmoid(x) (1 + (p - 1) y) - p y; 2 (x - y); (x - y) / beta
    # inside smooth L1's quadratic zone) are checked against the terms' magnitudes; L1's sign(d) g / n cannot cancel
    t64 = torch.tensor(target).double()
    magnitudes = {
        nn.BCEWithLogitsLoss: lambda g, a: (torch.sigmoid(a) * (1 + (torch.tensor(w).double() - 1) * t64)
                                            + torch.tensor(w).double() * t64) * g.abs(),
        nn.MSELoss: lambda g, a: 2 * (a.abs() + t64.abs()) * g.abs(),
        nn.SmoothL1Loss: lambda g, a: (a.abs() + t64.abs()) / 0.5 * g.abs() / a.numel(),
    }
    check_against_torch(lambda a: mod(a, clnn.tensor(target) if kind != "class" else target),
                        lambda a: ref(a, torch.tensor(target).double() if kind != "class" else torch.tensor(target)),
                        [x], rng, sum_magnitudes={0: magnitudes[ours]} if ours in magnitudes else None)
    assert list(mod.state_dict()) == list(ref.state_dict())


def test_loss_module_buffers_move_with_to(rng):
    w = clnn.tensor(rng.random(4).astype(np.float32))
    loss = nn.CrossEntropyLoss(weight=w).to(dtype=np.float64)
    assert loss.weight.dtype == np.float64 and list(loss.state_dict()) == ["weight"]


@pytest.mark.parametrize("call,exc,pattern", [
    (lambda: nn.CrossEntropyLoss(label_smoothing=1.5), ValueError, r"CrossEntropyLoss: label_smoothing"),
    (lambda: nn.CrossEntropyLoss(reduction="avg"), ValueError, r"CrossEntropyLoss: reduction expects one of"),
    (lambda: nn.NLLLoss(weight=[1.0, 2.0]), TypeError, r"NLLLoss: weight expects a clnn.Tensor; got list"),
    (lambda: nn.NLLLoss(ignore_index=0.5), TypeError, r"NLLLoss: ignore_index"),
    (lambda: nn.SmoothL1Loss(beta=-1), ValueError, r"SmoothL1Loss: beta"),
    (lambda: nn.HuberLoss(delta=0), ValueError, r"HuberLoss: delta expects a number > 0; got 0"),
    (lambda: nn.ModuleList([nn.Linear(2, 2), 3]), TypeError, r"ModuleList: item 1 expects a Module; got int"),
    (lambda: nn.ModuleList(nn.Linear(2, 2)), TypeError, r"extend expects an iterable of Modules; got Linear"),
    (lambda: nn.ModuleList([nn.ReLU()])[1], IndexError, r"index 1 is out of range for 1 modules"),
    (lambda: nn.ModuleDict({"a.b": nn.ReLU()}), KeyError, r"must be non-empty and contain no '.'"),
    (lambda: nn.ModuleDict({"to": nn.ReLU()}), KeyError, r"would hide the ModuleDict attribute"),
    (lambda: nn.ModuleDict({1: nn.ReLU()}), TypeError, r"keys must be strings; got int"),
    (lambda: nn.ModuleDict({"a": nn.ReLU()})["b"], KeyError, r"no module under key 'b'; keys are \['a'\]"),
    (lambda: nn.ModuleDict([("a", nn.ReLU(), 1)]), TypeError, r"\(key, module\) pairs; item 0"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


class _Ours(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 5), nn.Linear(5, 5)])
        self.layers.insert(1, nn.LayerNorm(5))
        self.layers.extend([nn.Linear(5, 4)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 3)})
        self.heads["b"] = nn.Linear(4, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).tanh() if isinstance(layer, nn.Linear) else layer(x)
        return [self.heads[k](x) for k in self.heads]


class _Theirs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(6, 5), torch.nn.Linear(5, 5)])
        self.layers.insert(1, torch.nn.LayerNorm(5))
        self.layers.extend([torch.nn.Linear(5, 4)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 3)})
        self.heads["b"] = torch.nn.Linear(4, 2)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x)) if isinstance(layer, torch.nn.Linear) else layer(x)
        return [self.heads[k](x) for k in self.heads]


def test_containers_load_torch_state_dict(rng):
    """torch's state_dict loads into the same clnn model (keys equal, in order) and the forwards agree."""
    ours, theirs = _Ours(), _Theirs().double()
    with torch.no_grad():
        for p in theirs.parameters():  # by 1/sqrt of the last axis, about as initialized: N(0, 1) weights saturated
            # tanh, and a LayerNorm row of near-equal values magnified float32's rounding past 1e-5 (once in 3000 draws)
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) / np.sqrt(p.shape[-1])))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict(theirs.state_dict())
    x = rng.standard_normal((7, 6)).astype(np.float32)
    for a, b in zip(ours(clnn.tensor(x)), theirs(torch.tensor(x).double())):
        # relative to the whole output (one element near 0 missed an elementwise rtol once)
        assert rel_err(a.numpy(), b.detach().numpy()) < 1e-5
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))


def test_module_list_api():
    a, b, c, d = nn.ReLU(), nn.Tanh(), nn.Identity(), nn.Linear(2, 2)
    ml = nn.ModuleList([a, b])
    ml.append(c)
    ml += [d]
    assert len(ml) == 4 and list(ml) == [a, b, c, d] and ml[-1] is d and ml[1] is b
    sliced = ml[1:3]
    assert isinstance(sliced, nn.ModuleList) and list(sliced) == [b, c] and list(sliced._modules) == ["0", "1"]
    ml.insert(0, nn.Sigmoid())
    del ml[2]  # removes b
    assert [type(m).__name__ for m in ml] == ["Sigmoid", "ReLU", "Identity", "Linear"]
    assert list(ml.state_dict()) == ["3.weight", "3.bias"]
    ml[3] = nn.Linear(2, 3)
    assert ml[3].out_features == 3 and len(list(ml.parameters())) == 2
    assert [type(m).__name__ for m in ml + [a]] == ["Sigmoid", "ReLU", "Identity", "Linear", "ReLU"]
    ml.train(False)
    assert not any(m.training for m in ml)


def test_module_dict_api():
    a, b = nn.Linear(2, 2), nn.ReLU()
    md = nn.ModuleDict([("x", a)])
    md.update({"y": b})
    assert list(md) == ["x", "y"] and list(md.keys()) == ["x", "y"] and list(md.values()) == [a, b]
    assert dict(md.items()) == {"x": a, "y": b} and "x" in md and "z" not in md and len(md) == 2
    assert list(md.state_dict()) == ["x.weight", "x.bias"]
    assert md.pop("x") is a and list(md) == ["y"]
    del md["y"]
    assert len(md) == 0
    md["z"] = a
    md.clear()
    assert len(md) == 0 and list(md.parameters()) == []
