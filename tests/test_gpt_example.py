"""examples/train_gpt.py: its model trains, and its PyTorch twin (same code, same weights, same batches and
schedule, as benchmarks/bench_gpt.py runs it) follows the same losses."""

import sys
from pathlib import Path

import numpy as np
import torch
from helpers import rel_err

import clnn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_gpt import generate, gpt, load_corpus, schedule, windows  # noqa: E402


def test_gpt_and_its_torch_twin_train_alike(dev):
    train, _, vocab = load_corpus(limit=100_000)
    v, block, steps = len(vocab), 16, 4
    clnn.manual_seed(0)
    with clnn.use_device(dev):
        model = gpt(clnn, v, block, width=24, layers=2, heads=3)
        twin = gpt(torch, v, block, width=24, layers=2, heads=3).double()
        twin.load_state_dict({k: torch.as_tensor(t.numpy()) for k, t in model.state_dict().items()})
        opt = clnn.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        topt = torch.optim.AdamW(twin.parameters(), lr=3e-3, weight_decay=0.01)
        sched = clnn.optim.LambdaLR(opt, lambda s: schedule(s, 2, steps))
        tsched = torch.optim.lr_scheduler.LambdaLR(topt, lambda s: schedule(s, 2, steps))
        rng = np.random.default_rng(0)
        for _ in range(steps):
            x, y = windows(train, block, 5, rng)
            # before each step the twin takes clnn's weights: each step is compared from one state
            twin.load_state_dict({k: torch.as_tensor(t.numpy()).double() for k, t in model.state_dict().items()})
            loss = clnn.nn.CrossEntropyLoss()(model(clnn.tensor(x)).reshape(-1, v), clnn.tensor(y.reshape(-1)))
            tloss = torch.nn.CrossEntropyLoss()(twin(torch.tensor(x)).reshape(-1, v), torch.tensor(y.reshape(-1)))
            assert abs(loss.item() - tloss.item()) < 1e-5 * tloss.item()
            opt.zero_grad()
            topt.zero_grad()
            loss.backward()
            tloss.backward()
            # gradients are long signed sums (a key bias's is zero in exact arithmetic: softmax ignores a shift),
            # so they get 1e-4 over the whole tensor; measured at most 5.5e-7 on Intel and PoCL
            for (name, p), tp in zip(model.named_parameters(), twin.parameters()):
                assert rel_err(p.grad.numpy(), tp.grad.numpy()) < 1e-4, name
            opt.step()
            topt.step()
            sched.step()
            tsched.step()
        text = generate(clnn, model, vocab, b"def ", 5, block, 0)
    assert text.startswith(b"def ") and len(text) == 9
