"""Where a training step's time goes: wall time, kernel time, launches, and the kernels that take the most.

For each model named: the median step (forward, backward, optimizer, synchronized) after warm-up, then one
profiled step (``clnn.profiler``) summed by (kernel, op), and its longest launches with their grids. A step whose
kernel time is far below its wall time is host-bound: count its launches (through NVIDIA's OpenCL each costs the
host tens of microseconds).

    python benchmarks/profile_steps.py [--models alexnet,gpt,lenet] [--batch 64] [--policy mixed_float16]
                                       [--top 20] [--launches 8] [--device SPEC]

``alexnet`` is examples/alexnet.py's model with Adam, ``lenet`` bench_lenet.py's with Adam, ``gpt`` the GPT
example's step (AdamW, gradient clipping) on its own corpus; ``--policy`` runs the first two under autocast as
``compile(precision=...)`` does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from bench_lenet import lenet
from common import POLICIES, add_tile_option, header, image_step, override_tiles

import clnn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from alexnet import alexnet  # noqa: E402
from train_gpt import CONFIG, gpt, load_corpus, windows  # noqa: E402


def gpt_step(dev: clnn.Device) -> Callable:
    """One step of the GPT example (examples/train_gpt.py's configuration)."""
    train, _, vocab = load_corpus(400_000)
    model = gpt(clnn, len(vocab), CONFIG["block"], CONFIG["width"], CONFIG["layers"], CONFIG["heads"]).to(dev)
    opt = clnn.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = clnn.nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)

    def step() -> None:
        x, y = windows(train, CONFIG["block"], CONFIG["batch"], rng)
        logits = model(clnn.tensor(x, device=dev))
        loss = loss_fn(logits.reshape(-1, len(vocab)), clnn.tensor(y.reshape(-1), device=dev))
        opt.zero_grad()
        loss.backward()
        clnn.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()

    return step


def model_step(name: str, dev: clnn.Device, batch: int, policy: str) -> Callable:
    """One training step of ``name`` (alexnet, gpt or lenet) on ``dev``; AlexNet's and LeNet's at ``batch`` under
    ``policy``."""
    if name == "alexnet":
        return image_step(dev, alexnet().to(dev), (3, 224, 224), batch, policy)
    if name == "lenet":
        return image_step(dev, lenet(clnn.nn).to(dev), (1, 28, 28), batch, policy)
    if name == "gpt":
        return gpt_step(dev)
    raise SystemExit(f"--models expects names from alexnet, gpt, lenet; got {name!r}")


def report(name: str, dev: clnn.Device, step: Callable, top: int, launches: int, reps: int = 5) -> None:
    """Print the step's median wall time, its kernel time and launches, its ``top`` (kernel, op) pairs and its
    ``launches`` longest launches with their grids (which tells one layer's launch of a kernel from another's)."""
    for _ in range(2):
        step()
    dev.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        dev.synchronize()
        times.append(time.perf_counter() - t0)
    with clnn.profiler.profile(dev) as prof:
        step()
        dev.synchronize()
    by_kernel: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for k in prof.kernels:
        by_kernel[k.name, k.op][0] += k.device_ns
        by_kernel[k.name, k.op][1] += 1
    total = sum(ns for ns, _ in by_kernel.values())
    print(f"\n{name}: step {statistics.median(times) * 1e3:.2f} ms, kernels {total / 1e6:.2f} ms, "
          f"{len(prof.kernels)} launches")
    print("| kernel | op | ms | launches |\n|---|---|---:|---:|")
    for (kernel, op), (ns, n) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {kernel} | {op} | {ns / 1e6:.3f} | {n} |")
    if launches:
        print("\n| launch | op | ms | global size | local size |\n|---|---|---:|---|---|")
        for k in sorted(prof.kernels, key=lambda k: -k.device_ns)[:launches]:
            print(f"| {k.name} | {k.op} | {k.device_ns / 1e6:.3f} | {k.global_size} | {k.local_size} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="alexnet,gpt,lenet")
    parser.add_argument("--batch", type=int, default=64, help="AlexNet's and LeNet's batch")
    parser.add_argument("--policy", choices=sorted(POLICIES), default="float32")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--launches", type=int, default=8, help="the longest single launches to list")
    parser.add_argument("--device", default=None)
    add_tile_option(parser)
    args = parser.parse_args()
    dev = clnn.set_default_device(clnn.device(args.device))
    override_tiles(dev, args.tile)
    print(header(dev))
    clnn.manual_seed(0)
    for name in args.models.split(","):
        step = model_step(name, dev, args.batch, args.policy)
        report(f"{name} ({args.policy}, batch {args.batch})" if name != "gpt" else "gpt", dev, step, args.top,
               args.launches)


if __name__ == "__main__":
    main()
