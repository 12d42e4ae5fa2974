"""Captured graphs (clnn.graph, Graph.replay): replays equal eager steps bit for bit (random draws, optimizer state,
schedulers, batch-norm counters and device-target losses included), capture runs nothing, what a graph cannot
replay is refused, checks of device values run at each replay before the work they guard, and a graph's memory
is its own."""

import numpy as np
import pytest

import clnn
import clnn.functional as F
from clnn import nn, profiler

STEPS = 4


def _mlp(dev):
    return nn.Sequential(nn.Linear(13, 24), nn.BatchNorm1d(24), nn.ReLU(), nn.Dropout(0.3), nn.Linear(24, 5)).to(dev)


def _transformer(dev):
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(11, 16)
            self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=24, dropout=0.2, batch_first=True)
            self.head = nn.Linear(16, 11)
            self.register_buffer("causal", clnn.tensor(np.triu(np.full((7, 7), -np.inf, np.float32), 1)))

        def forward(self, idx):
            return self.head(self.layer(self.tokens(idx), src_mask=self.causal, is_causal=True))

    return Tiny().to(dev)


def _mlp_batches(rng):
    for _ in range(STEPS):
        y = rng.integers(0, 5, 9)
        y[rng.random(9) < 0.3] = -100  # ignored targets: the mean's count changes from batch to batch
        yield rng.standard_normal((9, 13)).astype(np.float32), y


def _token_batches(rng):
    for _ in range(STEPS):
        yield rng.integers(0, 11, (3, 7)), rng.integers(0, 11, (3, 7))


MODELS = {"mlp": (_mlp, _mlp_batches), "transformer": (_transformer, _token_batches)}
OPTIMIZERS = {
    "sgd": lambda ps: clnn.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: clnn.optim.Adam(ps, lr=0.01),
    "adamw": lambda ps: clnn.optim.AdamW(ps, lr=0.01, amsgrad=True),
}


def _loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _stepper(dev, step, captured):
    """``step`` (returning its loss) as a callable that runs it eagerly, or replays one capture of it."""
    if not captured:
        return step
    g = clnn.Graph()
    with clnn.graph(g, dev):
        loss = step()

    def replay():
        g.replay()
        return loss

    return replay


def _train(dev, make, optimizer, batches, captured):
    """(losses, parameters, buffers) after STEPS steps of ``make``'s model, eager or by replays of one capture;
    the scheduler steps between steps and the gradients are clipped, as a training loop does."""
    clnn.manual_seed(5)
    model = make(dev)
    opt = OPTIMIZERS[optimizer](model.parameters())
    sched = clnn.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    batches = list(batches)
    x, y = (clnn.tensor(a, device=dev) for a in batches[0])

    def step():
        loss = _loss(model, x, y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        opt.step()
        return loss

    run = _stepper(dev, step, captured)
    losses = []
    for bx, by in batches:
        x.copy_(bx)
        y.copy_(by)
        losses.append(run().item())
        sched.step()
    return losses, [p.numpy() for p in model.parameters()], {k: v.numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_replays_equal_eager_steps(dev, model, optimizer):
    make, batches = MODELS[model]
    eager = _train(dev, make, optimizer, batches(np.random.default_rng(3)), captured=False)
    replayed = _train(dev, make, optimizer, batches(np.random.default_rng(3)), captured=True)
    assert len(set(eager[0])) == STEPS  # the steps saw different data
    np.testing.assert_array_equal(replayed[0], eager[0])
    for got, want in zip(replayed[1], eager[1]):
        np.testing.assert_array_equal(got, want)
    assert replayed[2].keys() == eager[2].keys()
    for k in eager[2]:
        np.testing.assert_array_equal(replayed[2][k], eager[2][k], err_msg=k)


@pytest.mark.parametrize("unscale_first", [False, True])
def test_grad_scaler_replays_equal_eager_steps(dev, unscale_first):
    """GradScaler's scale, skipped steps (batches with inf) and backoff/growth by replays as by eager steps."""
    batches = [np.random.default_rng(i).standard_normal((6, 13)).astype(np.float32) for i in range(6)]
    batches[2][1, 3] = np.inf  # a skipped step, and the scale backs off
    batches[4][0, 0] = np.nan

    def run(captured):
        clnn.manual_seed(2)
        model = nn.Sequential(nn.Linear(13, 8), nn.ReLU(), nn.Linear(8, 1)).to(dev)
        opt = clnn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scaler = clnn.amp.GradScaler(init_scale=2.0**10, growth_interval=2)
        x = clnn.tensor(batches[0], device=dev)

        def step():
            with clnn.autocast(clnn.float16):
                out = model(x).astype(np.float32)
                loss = (out * out).mean()
            opt.zero_grad()
            scaler.scale(loss).backward()
            if unscale_first:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            scaler.step(opt)
            scaler.update()
            return loss

        run = _stepper(dev, step, captured)
        scales, losses = [], []
        for b in batches:
            x.copy_(b)
            losses.append(run().item())
            scales.append(scaler.get_scale())
        return scales, losses, [p.numpy() for p in model.parameters()], scaler.state_dict()

    eager, replayed = run(False), run(True)
    assert eager[0] == replayed[0] and len(set(eager[0])) > 2  # backed off twice, grew
    np.testing.assert_array_equal(replayed[1], eager[1])
    for got, want in zip(replayed[2], eager[2]):
        np.testing.assert_array_equal(got, want)
    assert replayed[3] == eager[3]


def test_capture_runs_nothing(dev, rng):
    model = _mlp(dev)
    opt = clnn.optim.Adam(model.parameters())
    before = [p.numpy() for p in model.parameters()]
    x = clnn.tensor(rng.standard_normal((4, 13)).astype(np.float32), device=dev)
    g = clnn.Graph()
    with clnn.graph(g, dev):
        y = model(x).relu()
        loss = y.sum()
        loss.backward()
        opt.step()
    assert g.launches > 10
    assert not opt.state  # the update runs at replays only
    assert model[1]._batches == 0
    for p, b in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)
    g.replay()
    assert model[1]._batches == 1 and all(s["step"] == 1 for s in opt.state.values())
    assert np.isfinite(y.numpy()).all() and (y.numpy() >= 0).all()


def test_replays_keep_their_memory(dev, rng):
    """Inputs made before the capture stay reserved after their tensors die; tensors made after it never share
    the graph's memory, and replays do not write theirs."""
    a = rng.standard_normal(1000).astype(np.float32)
    x = clnn.tensor(a, device=dev)
    g = clnn.Graph()
    with clnn.graph(g, dev):
        tmp = x * 3.0  # dies inside the capture: its block serves the next tensor, in the captured order
        del tmp
        y = (x + 1.0) * 2.0
    del x
    others = [clnn.full((1000,), 7.0, device=dev) for _ in range(8)]
    g.replay()
    g.replay()
    np.testing.assert_array_equal(y.numpy(), (a + np.float32(1)) * np.float32(2))
    for o in others:
        np.testing.assert_array_equal(o.numpy(), np.full(1000, 7.0, np.float32))
    assert (g._pool.active_blocks, g._pool.held_blocks) == (1, 1)  # y's, and one that tmp and x + 1 took in turn
    stats = clnn.memory_stats(dev)
    assert stats["bytes_in_use"] >= sum(o.nbytes for o in others) + y.nbytes and stats["blocks_held"] >= 1
    in_use = stats["bytes_in_use"]
    del y
    assert clnn.memory_stats(dev)["bytes_in_use"] == in_use - 4000  # y's block was the graph's


def test_checks_of_device_values_run_at_each_replay(dev, rng):
    emb = nn.Embedding(6, 3).to(dev)
    idx = clnn.tensor(rng.integers(0, 6, (2, 4)), device=dev)
    target = clnn.tensor(rng.integers(0, 3, 2), device=dev)
    g = clnn.Graph()
    with clnn.graph(g, dev):
        loss = F.cross_entropy(emb(idx).sum(axis=1), target)
    g.replay()
    before = loss.item()
    assert before == F.cross_entropy(emb(idx).sum(axis=1), target).item()
    idx.copy_(np.array([[0, 1, 2, 3], [4, 5, 2**40, 0]]))
    with pytest.raises(IndexError, match=r"embedding: input\[\(1, 2\)\] is 1099511627776, out of range"):
        g.replay()
    assert loss.item() == before  # the replay stopped at the check: nothing after it ran
    idx.copy_(np.zeros((2, 4), np.int64))
    target.copy_(np.array([1, 3]))
    with pytest.raises(ValueError, match=r"cross_entropy: target values must be class indices in \[0, 2\]; got 3"):
        g.replay()
    assert loss.item() == before


@pytest.mark.parametrize("dtype", [np.float16, clnn.bfloat16])
def test_half_losses_by_replay_match_eager(dev, rng, dtype):
    """A half loss's mean divides by a device count in a replay: the loss equals eager's bit for bit (its float32
    product with 1/count rounded once); the input's gradient reads 1/count rounded to the half type first, so it
    is eager's within one rounding of that type."""
    xs = rng.standard_normal((37, 5))
    y = clnn.tensor(rng.integers(0, 5, 37), device=dev)
    x = clnn.tensor(xs, dtype=dtype, device=dev, requires_grad=True)
    g = clnn.Graph()
    with clnn.graph(g, dev):
        loss = F.cross_entropy(x, y)
        loss.backward()
    g.replay()
    eager_x = clnn.tensor(xs, dtype=dtype, device=dev, requires_grad=True)
    want = F.cross_entropy(eager_x, y)
    want.backward()
    assert loss.dtype == want.dtype == np.dtype(dtype)
    assert loss.astype(np.float32).item() == want.astype(np.float32).item()
    got, ref = (t.grad.astype(np.float32).numpy() for t in (x, eager_x))
    ulp = 2.0**-10 if dtype == np.float16 else 2.0**-7
    np.testing.assert_allclose(got, ref, rtol=2 * ulp, atol=2.0**-24)


def _sync(dev, x):
    dev.synchronize()


@pytest.mark.parametrize("work, pattern", [
    (lambda dev, x: x.sum().item(), "a read of device memory"),
    (lambda dev, x: x.numpy(), "a read of device memory"),
    (lambda dev, x: x + clnn.tensor(np.ones(3, np.float32), device=dev), "an upload copies host data"),
    (lambda dev, x: x.copy_(np.ones(3, np.float32)), "an upload copies host data"),
    (_sync, "synchronize"),
    (lambda dev, x: nn.BatchNorm1d(3, momentum=None).to(dev)(x.reshape(1, 3).expand((2, 3))), "momentum=None"),
])
def test_capture_refuses_what_a_replay_cannot_redo(dev, rng, work, pattern):
    x = clnn.tensor(rng.standard_normal(3).astype(np.float32), device=dev)
    g = clnn.Graph()
    with pytest.raises(clnn.GraphError, match=pattern), clnn.graph(g, dev):
        x * 2.0
        work(dev, x)
    with pytest.raises(clnn.GraphError, match="nothing captured"):  # a failed capture keeps nothing
        g.replay()
    assert dev._graph is None
    np.testing.assert_allclose((x * 2.0).numpy(), x.numpy() * 2)  # the device runs eagerly again


def test_graphs_are_used_in_turn(dev):
    g, h = clnn.Graph(), clnn.Graph()
    with pytest.raises(TypeError, match="g expects a clnn.Graph; got int"), clnn.graph(1, dev):
        pass
    with pytest.raises(clnn.GraphError, match="nothing captured"):
        g.replay()
    with clnn.graph(g, dev):
        with pytest.raises(clnn.GraphError, match="captures do not nest"), clnn.graph(h, dev):
            pass
        with pytest.raises(clnn.GraphError, match="being captured"):
            h.replay()
        clnn.zeros((2,), device=dev) + 1.0
    with pytest.raises(clnn.GraphError, match="captured already"), clnn.graph(g, dev):
        pass
    with profiler.profile(dev) as prof:
        with pytest.raises(clnn.GraphError, match="a profile is active"), clnn.graph(h, dev):
            pass
        g.replay()
    assert len(prof.kernels) == g.launches == 1
    busy = "a graph is being captured on .*; profile its replays instead"
    with clnn.graph(clnn.Graph(), dev), pytest.raises(RuntimeError, match=busy), profiler.profile(dev):
        pass


def test_copy_matches_numpy(dev, rng):
    x = clnn.zeros((3, 4), device=dev)
    a = rng.standard_normal(4)
    np.testing.assert_array_equal(x.copy_(a).numpy(), np.broadcast_to(a.astype(np.float32), (3, 4)))
    b = rng.standard_normal((3, 1)).astype(np.float32)
    np.testing.assert_array_equal(x.copy_(clnn.tensor(b, device=dev)).numpy(), np.broadcast_to(b, (3, 4)))
    i = clnn.zeros((3,), dtype=np.int64, device=dev)
    np.testing.assert_array_equal(i.copy_(np.array([5, -2, 7], np.int32)).numpy(), [5, -2, 7])
    with pytest.raises(ValueError, match=r"copy_: cannot broadcast src of shape \(5,\) to x's shape \(3, 4\)"):
        x.copy_(np.ones(5))
    w = clnn.zeros((2,), device=dev).requires_grad_()
    with pytest.raises(RuntimeError, match="copy_: x requires grad"):
        w.copy_(np.ones(2))
    with clnn.no_grad():
        np.testing.assert_array_equal(w.copy_(np.ones(2)).numpy(), [1, 1])
