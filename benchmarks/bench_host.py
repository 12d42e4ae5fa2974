"""clnn's host time per training step: the Python around its kernel launches, on any device.

Models of short kernels are bound by this time on a GPU (the GPT example's step on an H200: 308 launches, 4.3 ms of
kernels in 38-44 ms). It is measured here without the device: the steps of two small models (the GPT example's,
shrunk to 2 layers of width 32 on 4 windows of 16 characters, with AdamW and gradient clipping; a 16-32-32-4 ReLU MLP
with SGD) run with ``pyopencl.enqueue_nd_range_kernel`` replaced by a function that returns at once, timed in the
calling thread's CPU time (``time.thread_time``: the runtime's worker threads and the VM's neighbours do not count).
What remains is clnn's own cost per launch; the enqueue itself comes on top (``run_all.py --only host`` times it
raw). Set ``CLNN_LIMITS`` to a GPU pose (``scripts/run_tests.py``'s H100) for a GPU's launches: its multi-tensor
optimizer launches and tiles. A second table times both steps with real enqueues, eager against the replays of a
``clnn.graph`` of the step (whose Python runs once, at capture), in the same thread CPU time.

    python benchmarks/bench_host.py [--steps 50] [--repeats 5] [--device SPEC]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyopencl as cl
from common import SETTLE_S, header, replayed

import clnn
import clnn.functional as F
from clnn import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_gpt import gpt  # noqa: E402


def gpt_step(captured: bool = False) -> Callable[[], None]:
    """The GPT example's step; ``captured``: device batches and one clnn.graph of the step, replayed."""
    vocab, block, width, layers, heads, batch = 65, 16, 32, 2, 2, 4
    clnn.manual_seed(0)
    model = gpt(clnn, vocab, block, width, layers, heads)
    opt = clnn.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, vocab, (batch, block)), rng.integers(0, vocab, (batch, block))
    if captured:
        x, y = clnn.tensor(x), clnn.tensor(y)

    def step() -> None:  # NumPy targets: checked on the host (a device target's check reads back what no kernel wrote)
        loss = loss_fn(model(x if captured else clnn.tensor(x)).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()

    return replayed(step) if captured else step


def mlp_step(captured: bool = False) -> Callable[[], None]:
    rng = np.random.default_rng(0)
    x, y = (clnn.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((8, 16), (8, 4)))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = clnn.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return replayed(step) if captured else step


def host_time(step: Callable[[], None], steps: int, repeats: int, stub: bool = True) -> tuple[int, float]:
    """(launches per step, the fewest thread CPU seconds per step over ``repeats`` runs of ``steps`` steps), with
    the kernel enqueue stubbed out (``stub``) or real (its host work counted too)."""
    for _ in range(3):
        step()  # builds, plans, the optimizer's state
    clnn.device().synchronize()
    time.sleep(SETTLE_S)
    enqueue, launches = cl.enqueue_nd_range_kernel, []

    def counted(*args: object, **kw: object) -> object:
        launches.append(1)
        return enqueue(*args, **kw) if not stub else None

    cl.enqueue_nd_range_kernel = counted
    try:
        step()
        per_step, best = len(launches), float("inf")
        for _ in range(repeats):
            t0 = time.thread_time()
            for _ in range(steps):
                step()
            best = min(best, (time.thread_time() - t0) / steps)
            clnn.device().synchronize()
    finally:
        cl.enqueue_nd_range_kernel = enqueue
    return per_step, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default=None, help="a clnn device spec (default: CLNN_DEVICE or auto)")
    args = parser.parse_args()
    dev = clnn.set_default_device(clnn.device(args.device))
    print(header(dev))
    print("| step | launches | host ms per step | host us per launch |\n|---|---:|---:|---:|")
    for name, make in (("GPT example, 2x32, batch 4x16", gpt_step), ("MLP 16-32-32-4, batch 8", mlp_step)):
        launches, secs = host_time(make(), args.steps, args.repeats)
        print(f"| {name} | {launches} | {secs * 1e3:.2f} | {secs / launches * 1e6:.1f} |")
    print("\nWith real enqueues, eager against replays of a clnn.graph of the same step (device batches):\n")
    print("| step | launches | eager host ms | replay host ms | eager / replay |\n|---|---:|---:|---:|---:|")
    for name, make in (("GPT example, 2x32, batch 4x16", gpt_step), ("MLP 16-32-32-4, batch 8", mlp_step)):
        launches, eager = host_time(make(), args.steps, args.repeats, stub=False)
        _, replay = host_time(make(captured=True), args.steps, args.repeats, stub=False)
        print(f"| {name} | {launches} | {eager * 1e3:.2f} | {replay * 1e3:.2f} | {eager / replay:.1f} |")

if __name__ == "__main__":
    main()
