"""LeNet-style training step (forward, backward, Adam) at batch 128 on 28x28 inputs: clnn vs PyTorch.

The network (issue 4, item 9): Conv2d(1,32,3,p=1)-ReLU-MaxPool-Conv2d(32,64,3,p=1)-ReLU-MaxPool-Flatten-
Linear(3136,128)-ReLU-Linear(128,10). Both frameworks start from the same weights and see the same batch;
each step ends with a device synchronization. PyTorch runs on CUDA (TF32 off) when the clnn device is NVIDIA
and PyTorch has CUDA, else on the CPU. Prints the median step times, the ratio and a Markdown row for
BENCHMARKS.md. Targets: within 2x of PyTorch CPU's step time (issue 10), 1.5x of PyTorch CUDA's (issue 9).

    python benchmarks/bench_lenet.py [--steps 10] [--device cpu] [--threads N] [--profile] [--graph]

With ``--profile`` it also profiles one clnn step and prints the profiler's table; with ``--graph`` clnn's step
replays a ``clnn.graph`` of it.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from common import header, median_time, peer_name, replayed, torch_peer, torch_sync

import clnn
import clnn.functional as F
from clnn import nn


def lenet(lib):
    return lib.Sequential(
        lib.Conv2d(1, 32, 3, padding=1), lib.ReLU(), lib.MaxPool2d(2),
        lib.Conv2d(32, 64, 3, padding=1), lib.ReLU(), lib.MaxPool2d(2),
        lib.Flatten(), lib.Linear(3136, 128), lib.ReLU(), lib.Linear(128, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="PyTorch threads (default: all cores)")
    parser.add_argument("--profile", action="store_true", help="profile one clnn step and print the table")
    parser.add_argument("--graph", action="store_true", help="replay a clnn.graph of clnn's step")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    dev = clnn.device(args.device)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)

    tdev = torch_peer(dev)
    ref = lenet(torch.nn)
    model = lenet(nn).to(dev)
    model.load_state_dict(ref.state_dict())
    ref = ref.to(tdev)
    topt = torch.optim.Adam(ref.parameters(), lr=1e-3)
    opt = clnn.optim.Adam(model.parameters(), lr=1e-3)
    xt, yt = torch.tensor(x, device=tdev), torch.tensor(y, device=tdev)
    xc, yc = clnn.tensor(x, device=dev), clnn.tensor(y, device=dev)

    def torch_step() -> None:
        loss = torch.nn.functional.cross_entropy(ref(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        torch_sync(tdev)

    def train() -> None:
        loss = F.cross_entropy(model(xc), yc)
        opt.zero_grad()
        loss.backward()
        opt.step()

    run = replayed(train, dev) if args.graph else train

    def clnn_step() -> None:
        run()
        dev.synchronize()

    ours = median_time(clnn_step, args.steps, args.warmup) * 1e3
    theirs = median_time(torch_step, args.steps, args.warmup) * 1e3
    ratio = ours / theirs
    target = 1.5 if tdev.type == "cuda" else 2.0
    verdict = "pass" if ratio <= target else "above target"
    print(header(dev))
    print(f"peer {peer_name(tdev)}; {os.cpu_count()} cores visible")
    print(f"LeNet training step, batch {args.batch}: clnn {ours:.1f} ms, PyTorch {theirs:.1f} ms, "
          f"ratio {ratio:.2f}x (target <= {target}x: {verdict})")
    print("\nMarkdown row:")
    print(f"| {dev.name} ({dev.platform_name}) | {args.batch} | {ours:.1f} | {theirs:.1f} | {ratio:.2f}x | "
          f"{verdict} |")
    if args.profile:
        with clnn.profiler.profile(dev) as prof:
            clnn_step()
        print("\nOne clnn step, profiled:")
        print(prof.table(sort_by="device_time", top=20))


if __name__ == "__main__":
    main()
