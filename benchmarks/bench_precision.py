"""AlexNet-style training step (examples/alexnet.py's model, Adam) in float32 vs mixed_float16 vs mixed_bfloat16.

Each policy trains float32 master weights; the mixed ones run the step under ``clnn.autocast`` (convolutions and
Linear layers in the half type, norms, softmax and the loss in float32), float16 with a ``clnn.amp.GradScaler``,
as ``compile(precision=...)`` does. Measured per policy: the median step time (forward, backward, Adam,
synchronized) and the peak device memory of one step: the pool is emptied first, so ``clnn.memory_stats``'s
bytes in use plus bytes held after the step is what the allocator needed at the step's peak (the pool keeps
every block it allocated; its size bins round requests up alike for every policy). Prints a Markdown table with
the ratios against float32 for BENCHMARKS.md. Targets (issue 11): peak memory <= 0.6x float32; time <= 0.7x on
a GPU, no slower on a CPU.

    python benchmarks/bench_precision.py [--batch 64] [--steps 3] [--warmup 1] [--device cpu] [--mma KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import POLICIES, add_mma_option, header, image_step, median_time, override_mma

import clnn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from alexnet import alexnet  # noqa: E402


def run(dev: clnn.Device, policy: str, batch: int, steps: int, warmup: int) -> tuple[float, int]:
    """(median step seconds, peak bytes) of the AlexNet step under ``policy``."""
    clnn.manual_seed(0)
    unsynced = image_step(dev, alexnet().to(dev), (3, 224, 224), batch, policy)

    def step() -> None:
        unsynced()
        dev.synchronize()

    step()  # the optimizer's state exists from here on, as in training
    dev.pool.free_held()
    step()
    stats = clnn.memory_stats(dev)
    peak = stats["bytes_in_use"] + stats["bytes_held"]
    return median_time(step, steps, warmup), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default=None)
    add_mma_option(parser)
    args = parser.parse_args()
    dev = clnn.device(args.device)
    override_mma(dev, args.mma)
    results = {name: run(dev, name, args.batch, args.steps, args.warmup) for name in POLICIES}
    base_t, base_m = results["float32"]
    print(header(dev))
    print(f"AlexNet-style step (Adam), batch {args.batch}, 3x224x224, median of {args.steps} steps\n")
    print("| policy | step time | vs float32 | peak device memory | vs float32 |")
    print("|---|---|---|---|---|")
    for name, (t, mem) in results.items():
        print(f"| {name} | {t * 1e3:.0f} ms | {t / base_t:.2f}x | {mem / 2**20:.0f} MiB | {mem / base_m:.2f}x |")


if __name__ == "__main__":
    main()
