"""Optimizers and schedulers against torch.optim on the same gradients (fresh random values each run)."""

import math

import numpy as np
import pytest
import torch
from helpers import multi_tensor_launches, rel_err

import clnn
from clnn import optim

# more parameters than one multi-tensor launch updates (clnn.ops.foreach.MT), sizes 1 and primes, and two past
# tuning's foreach SMALL on CPUs (launched one by one there, the small ones together)
SHAPES = [(1,), (7, 93), (3, 5, 4), (97, 89), *((k,) for k in (2, 3, 5, 11, 13, 17, 19, 8209))]

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
    for step in range(6):  # some parameters skip some steps: their step counts (and launches) part ways
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        for i, (p, tp, g) in enumerate(zip(params, tparams, grads)):
            skip = (step + i) % 4 == 3
            p.grad = None if skip else clnn.tensor(g, device=dev)
            tp.grad = None if skip else torch.tensor(g)
        opt.step()
        topt.step()
        ours = np.concatenate([p.numpy().ravel() for p in params])
        ref = np.concatenate([tp.detach().numpy().ravel() for tp in tparams])
        assert rel_err(ours, ref) < 1e-6
    opt.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("cls, kwargs", [(optim.SGD, dict(lr=0.1, momentum=0.9)), (optim.AdamW, dict(lr=1e-2))],
                         ids=["sgd", "adamw"])
def test_update_launches(dev, rng, monkeypatch, cls, kwargs):
    """A step launches once per foreach.MT small parameters and once per foreach.per_launch others."""
    from clnn import kernels

    params = [clnn.tensor(rng.standard_normal(s).astype(np.float32), device=dev, requires_grad=True) for s in SHAPES]
    opt = cls(params, **kwargs)
    for p in params:
        p.grad = clnn.tensor(rng.standard_normal(p.shape).astype(np.float32), device=dev)
    opt.step()  # SGD's first step differs in its flags, not its launches
    launches = []
    launch = kernels.launch
    monkeypatch.setattr(kernels, "launch", lambda d, k, *a: launches.append(k.function_name) or launch(d, k, *a))
    opt.step()
    assert launches == ["optim_multi"] * multi_tensor_launches(dev, [p.size for p in params])


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


# (clnn scheduler, torch scheduler) factories on an optimizer of each
WARMUP_COSINE = lambda step: min(1.0, (step + 1) / 4) * 0.5 * (1 + math.cos(math.pi * min(step, 20) / 20))  # noqa: E731
SCHEDULERS = [
    (lambda o: optim.LambdaLR(o, WARMUP_COSINE), lambda o: torch.optim.lr_scheduler.LambdaLR(o, WARMUP_COSINE)),
    (lambda o: optim.StepLR(o, step_size=3, gamma=0.5),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    (lambda o: optim.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=0.01)),
]
PLATEAU = (lambda o: optim.ReduceLROnPlateau(o, factor=0.5, patience=1),
           lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=1))


@pytest.mark.parametrize("make, tmake", SCHEDULERS)
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


def _to_torch(sd):
    """A clnn optimizer state_dict with its tensors as torch tensors (what torch's load_state_dict takes)."""
    state = {i: {k: v if k == "step" else torch.from_numpy(clnn.io.to_numpy(v)) for k, v in s.items()}
             for i, s in sd["state"].items()}
    return {"state": state, "param_groups": sd["param_groups"]}


@pytest.mark.parametrize("cls, tcls, kwargs", OPTIMIZERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_state_dict_moves_between_clnn_and_torch(dev, rng, cls, tcls, kwargs):
    """Three steps in torch, its state into clnn, three more steps in clnn, its state back into torch for a
    last step: every parameter tracks an uninterrupted torch run, so each state entry went across."""
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(7)]
    ref = [torch.tensor(a, requires_grad=True) for a in init]
    ref_opt = tcls(ref, **kwargs)
    for g in grads:
        for tp, gi in zip(ref, g):
            tp.grad = torch.tensor(gi)
        ref_opt.step()

    tparams = [torch.tensor(a, requires_grad=True) for a in init]
    topt = tcls(tparams, **kwargs)
    for g in grads[:3]:
        for tp, gi in zip(tparams, g):
            tp.grad = torch.tensor(gi)
        topt.step()
    params = [clnn.tensor(tp.detach().numpy(), device=dev, requires_grad=True) for tp in tparams]
    opt = cls(params, lr=1.0)  # hyperparameters come from the state_dict
    opt.load_state_dict(topt.state_dict())
    assert {k: v for k, v in opt.param_groups[0].items() if k != "params"} == {
        k: v for k, v in topt.param_groups[0].items() if k in opt.defaults}
    for g in grads[3:6]:
        for p, gi in zip(params, g):
            p.grad = clnn.tensor(gi, device=dev)
        opt.step()
    sd = opt.state_dict()
    want_keys = {i: sorted(k for k, v in s.items() if v is not None) for i, s in ref_opt.state_dict()["state"].items()}
    assert {i: sorted(s) for i, s in sd["state"].items()} == {i: k for i, k in want_keys.items() if k}
    assert sd["param_groups"][0]["params"] == list(range(len(SHAPES)))
    back = [torch.tensor(p.numpy(), requires_grad=True) for p in params]
    topt = tcls(back, lr=1.0)
    topt.load_state_dict(_to_torch(sd))
    for tp, gi in zip(back, grads[6]):
        tp.grad = torch.tensor(gi)
    topt.step()
    ours = np.concatenate([tp.detach().numpy().ravel() for tp in back])
    want = np.concatenate([tp.detach().numpy().ravel() for tp in ref])
    assert rel_err(ours, want) < 1e-6


def test_load_state_dict_checks_before_changing(dev):
    p = clnn.zeros(3, device=dev, requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    other = optim.Adam([clnn.zeros(3, device=dev, requires_grad=True), clnn.zeros(2, device=dev, requires_grad=True)])
    with pytest.raises(ValueError, match=r"param_groups expect sizes \[1\]; got \[2\]"):
        opt.load_state_dict(other.state_dict())
    bad = {"state": {0: {"step": 1, "exp_avg": np.zeros(4), "exp_avg_sq": np.zeros(3)}},
           "param_groups": [{"lr": 0.5, "params": [0]}]}
    with pytest.raises(ValueError, match=r"state\[0\]\['exp_avg'\] expects shape \(3,\).*; got \(4,\)"):
        opt.load_state_dict(bad)
    with pytest.raises(ValueError, match=r"hyperparameters \['momentum'\] that Adam does not use"):
        opt.load_state_dict({"state": {}, "param_groups": [{"lr": 0.5, "momentum": 0.9, "params": [0]}]})
    assert opt.param_groups[0]["lr"] == 0.1 and opt.state == {}


@pytest.mark.parametrize("make, tmake", [*SCHEDULERS, PLATEAU])
def test_scheduler_state_dict_resumes_and_moves_to_torch(dev, make, tmake):
    """Five epochs, then the scheduler's state into a fresh clnn scheduler and a fresh torch one: both go on
    exactly as the uninterrupted scheduler."""
    metrics = [1.0, 0.9, 0.95, 0.97, 0.99, 1.2, 1.3, 0.5, 0.6, 0.7]

    def step(s, m):
        s.step(m) if isinstance(s, (optim.ReduceLROnPlateau, torch.optim.lr_scheduler.ReduceLROnPlateau)) \
            else s.step()

    opt, _ = _torch_and_clnn_opt(dev)
    sched = make(opt)
    for m in metrics[:5]:
        step(sched, m)
    sd = sched.state_dict()
    assert "optimizer" not in sd
    opt2, topt2 = _torch_and_clnn_opt(dev)
    opt2.param_groups[0]["lr"] = topt2.param_groups[0]["lr"] = opt.param_groups[0]["lr"]
    resumed, tresumed = make(opt2), tmake(topt2)
    resumed.load_state_dict(sd)
    tresumed.load_state_dict(dict(sd))
    for m in metrics[5:]:
        for s in (sched, resumed, tresumed):
            step(s, m)
        assert resumed.get_last_lr() == sched.get_last_lr() == pytest.approx(tresumed.get_last_lr(), rel=1e-12)
