"""The character-level GPT of ``examples/train_gpt.py`` trained by clnn and by a PyTorch twin side by side.

Usage: ``python benchmarks/bench_gpt.py [--steps 1500] [--device SPEC] [--graph]``

The twin is the same model code built from ``torch`` (``train_gpt.gpt``) holding clnn's initial weights; both
take the same batches (one window sampler) and the same warm-up + cosine schedule. Printed: the step time of
each (median over the run), clnn's device memory pool at the end (its high-water mark), and both validation
losses on the same held-out windows at the end. Issue 12's bound: the twin ends within 0.05 nats of clnn's
loss. PyTorch runs on CUDA (TF32 off) when the clnn device is NVIDIA and PyTorch has CUDA, else on the CPU.
``--graph``: clnn's step is captured once (``clnn.graph``) and replayed on each batch, copied into its inputs
(the same losses as eager steps; PyTorch's stay eager).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from common import header, torch_peer, torch_sync

import clnn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_gpt import CONFIG, gpt, load_corpus, schedule, windows  # noqa: E402

BOUND = 0.05


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=CONFIG["steps"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graph", action="store_true", help="replay a clnn.graph of clnn's step")
    args = parser.parse_args()
    cfg = dict(CONFIG, steps=args.steps)
    dev = clnn.set_default_device(clnn.device(args.device))
    tdev = torch_peer(dev)
    print(header(dev) + f"  peer: PyTorch {torch.__version__} on {tdev}")

    train, val, vocab = load_corpus()
    v = len(vocab)
    clnn.manual_seed(args.seed)
    model = gpt(clnn, v, cfg["block"], cfg["width"], cfg["layers"], cfg["heads"])
    twin = gpt(torch, v, cfg["block"], cfg["width"], cfg["layers"], cfg["heads"]).to(tdev)
    twin.load_state_dict({k: torch.as_tensor(t.numpy()) for k, t in model.state_dict().items()})
    opt = clnn.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    topt = torch.optim.AdamW(twin.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    lam = lambda s: schedule(s, cfg["warmup"], cfg["steps"])  # noqa: E731
    sched, tsched = clnn.optim.LambdaLR(opt, lam), torch.optim.lr_scheduler.LambdaLR(topt, lam)
    loss_fn, tloss_fn = clnn.nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()

    def learn(x: clnn.Tensor, y: clnn.Tensor) -> None:
        loss = loss_fn(model(x).reshape(-1, v), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        clnn.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()

    inputs = [clnn.empty(cfg["batch"], cfg["block"], dtype=np.int64) for _ in range(2)]
    if args.graph:
        g = clnn.Graph()
        with clnn.graph(g):
            learn(*inputs)

    def clnn_step(x: np.ndarray, y: np.ndarray) -> None:
        if args.graph:
            inputs[0].copy_(x)
            inputs[1].copy_(y)
            g.replay()
        else:
            learn(clnn.tensor(x), clnn.tensor(y))
        sched.step()
        dev.synchronize()

    def torch_step(x: np.ndarray, y: np.ndarray) -> None:
        target = torch.as_tensor(y.reshape(-1), device=tdev)
        loss = tloss_fn(twin(torch.as_tensor(x, device=tdev)).reshape(-1, v), target)
        topt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), max_norm=1.0)
        topt.step()
        tsched.step()
        torch_sync(tdev)

    rng = np.random.default_rng(args.seed)
    times: dict[str, list[float]] = {"clnn": [], "torch": []}
    for step in range(cfg["steps"]):
        x, y = windows(train, cfg["block"], cfg["batch"], rng)
        for name, fn in (("clnn", clnn_step), ("torch", torch_step)):
            t0 = time.perf_counter()
            fn(x, y)
            times[name].append(time.perf_counter() - t0)
        if (step + 1) % 100 == 0:
            print(f"step {step + 1}/{cfg['steps']}", file=sys.stderr)

    val_rng = np.random.default_rng(args.seed + 1)
    held = [windows(val, cfg["block"], cfg["batch"], val_rng) for _ in range(cfg["eval_batches"])]
    model.eval()
    twin.eval()
    with clnn.no_grad(), torch.no_grad():
        ours = np.mean([loss_fn(model(clnn.tensor(x)).reshape(-1, v), clnn.tensor(y.reshape(-1))).item()
                        for x, y in held])
        theirs = np.mean([tloss_fn(twin(torch.as_tensor(x, device=tdev)).reshape(-1, v),
                                   torch.as_tensor(y.reshape(-1), device=tdev)).item() for x, y in held])
    ms = {k: statistics.median(t) * 1e3 for k, t in times.items()}
    stats = clnn.memory_stats(dev)
    pool = (stats["bytes_in_use"] + stats["bytes_held"]) / 2**20  # the pool keeps what it once needed
    print(f"validation loss after {cfg['steps']} steps: clnn {ours:.4f}, PyTorch {theirs:.4f} nats/byte, "
          f"difference {abs(ours - theirs):.4f} (bound {BOUND})")
    print("| steps | clnn ms/step | PyTorch ms/step | speed ratio | clnn val loss | PyTorch val loss | clnn pool MiB |")
    print(f"| {cfg['steps']} | {ms['clnn']:.1f} | {ms['torch']:.1f} | {ms['torch'] / ms['clnn']:.2f} | {ours:.4f} | "
          f"{theirs:.4f} | {pool:.0f} |")


if __name__ == "__main__":
    main()
