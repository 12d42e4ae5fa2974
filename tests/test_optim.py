"""Optimizers and schedulers against torch.optim on the same gradients (fresh random values each run)."""

import numpy as np
import pytest
import torch
from helpers import rel_err

import clnn
from clnn import optim

SHAPES = [(1,), (7, 93), (3, 5, 4)]

# (clnn class, torch class, kwargs)
OPTIMIZERS = [
    (optim.SGD, torch.optim.SGD, dict(lr=0.1)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-2)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.5, maximize=True)),
    (optim.Adam, torch.optim.Adam, dict(lr=1e-2)),
    (optim.Adam, torch.optim.Adam, dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    (optim.Adam, torch.optim.Adam, dict(lr=1e-2, amsgrad=True)),
    (optim.AdamW, torch.optim.AdamW, dict(lr=1e-2)),
    (optim.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.3, amsgrad=True)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=1e-2)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=1e-3, alpha=0.9, momentum=0.9, weight_decay=1e-2)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=1e-3, centered=True, momentum=0.5)),
]


@pytest.mark.parametrize("cls, tcls, kwargs", OPTIMIZERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_optimizer_matches_torch(dev, rng, cls, tcls, kwargs):
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    params = [clnn.tensor(a, device=dev, requires_grad=True) for a in init]
    tparams = [torch.tensor(a, requires_grad=True) for a in init]
    opt, topt = cls(params, **kwargs), tcls(tparams, **kwargs)
    for _ in range(6):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        for p, tp, g in zip(params, tparams, grads):
            p.grad = clnn.tensor(g, device=dev)
            tp.grad = torch.tensor(g)
        opt.step()
        topt.step()
        ours = np.concatenate([p.numpy().ravel() for p in params])
        ref = np.concatenate([tp.detach().numpy().ravel() for tp in tparams])
        assert rel_err(ours, ref) < 1e-6
    opt.zero_grad()
    assert all(p.grad is None for p in params)


def test_param_groups_and_skipped_grads(dev, rng):
    a = clnn.tensor(rng.standard_normal(5).astype(np.float32), device=dev, requires_grad=True)
    b = clnn.tensor(rng.standard_normal(3).astype(np.float32), device=dev, requires_grad=True)
    before_b = b.numpy()
    opt = optim.SGD([{"params": [a], "lr": 0.5}, {"params": [b]}], lr=0.1)
    a.grad = clnn.ones(5, device=dev)
    expect = a.numpy() - 0.5
    opt.step()
    np.testing.assert_allclose(a.numpy(), expect, rtol=1e-6)
    np.testing.assert_array_equal(b.numpy(), before_b)  # no grad: untouched


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (lambda p: optim.SGD(p, lr=-1), ValueError, "SGD: lr expects a number >= 0; got -1"),
        (lambda p: optim.SGD(p, lr=0.1, nesterov=True), ValueError, "nesterov expects momentum > 0"),
        (lambda p: optim.Adam(p, betas=(1.0, 0.9)), ValueError, r"betas\[0\] expects a number in \[0, 1\)"),
        (lambda p: optim.Adam([]), ValueError, "params is empty"),
        (lambda p: optim.Adam(p[0]), TypeError, "single Tensor"),
        (lambda p: optim.RMSprop([1.0]), TypeError, r"params\[0\] expects a clnn.Tensor; got float"),
        (lambda p: optim.SGD(p + p), ValueError, "more than one group"),
        (lambda p: optim.SGD([{"params": p, "foo": 1}]), ValueError, "unknown hyperparameters"),
    ],
)
def test_optimizer_errors(dev, call, exc, pattern):
    params = [clnn.zeros(3, device=dev, requires_grad=True)]
    with pytest.raises(exc, match=pattern):
        call(params)


def _torch_and_clnn_opt(dev):
    p = clnn.zeros(2, device=dev, requires_grad=True)
    tp = torch.zeros(2, requires_grad=True)
    return optim.SGD([p], lr=0.5), torch.optim.SGD([tp], lr=0.5)


@pytest.mark.parametrize(
    "make, tmake",
    [
        (lambda o: optim.StepLR(o, step_size=3, gamma=0.5),
         lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
        (lambda o: optim.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
         lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=0.01)),
    ],
)
def test_schedulers_match_torch(dev, make, tmake):
    opt, topt = _torch_and_clnn_opt(dev)
    sched, tsched = make(opt), tmake(topt)
    for _ in range(25):
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12)


def test_reduce_lr_on_plateau_matches_torch(dev, rng):
    opt, topt = _torch_and_clnn_opt(dev)
    kw = dict(mode="min", factor=0.5, patience=2, threshold=1e-2, cooldown=1, min_lr=0.01)
    sched = optim.ReduceLROnPlateau(opt, **kw)
    tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
    metrics = np.concatenate([np.linspace(1, 0.5, 5), np.full(20, 0.5) + rng.uniform(0, 0.001, 20)])
    for m in metrics:
        sched.step(m)
        tsched.step(m)
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12)
    assert sched.get_last_lr()[0] < 0.5


def test_zero_grad_sets_none_or_fresh_zeros(dev):
    model = clnn.nn.Linear(3, 2).to(dev)
    opt = clnn.optim.SGD(model.parameters(), lr=0.1)
    for zero in (model.zero_grad, opt.zero_grad):
        (model(clnn.ones((4, 3), device=dev)).sum()).backward()
        shared = model.weight.grad
        zero(set_to_none=False)
        assert model.weight.grad is not shared  # a new tensor: grads may be shared, never zeroed in place
        np.testing.assert_array_equal(model.weight.grad.numpy(), np.zeros((2, 3), np.float32))
        assert np.abs(shared.numpy()).sum() > 0
        zero()
        assert model.weight.grad is None and model.bias.grad is None
