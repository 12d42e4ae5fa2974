"""Data-parallel scaling over MPI: LeNet training images/s on 1 and 2 processes, each pinned to a one-core
sub-device of the CPU (PoCL), and clnn's all-reduce of LeNet's gradients against raw mpi4py on the same sizes.

    python benchmarks/bench_distributed.py [--steps 8] [--batch 64]

It launches itself under the mpich wheel's ``mpiexec`` (``-n 1`` then ``-n 2``). Targets: 2 processes reach
>= 1.7x the images/s of one; ``dist.all_reduce`` (device -> host -> MPI -> device) within 1.2x the time of a
raw ``Allreduce`` of the same host buffer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TARGET_SCALING, TARGET_REDUCE = 1.7, 1.2


def worker(steps: int, batch: int) -> None:
    from bench_lenet import lenet
    from mpi4py import MPI

    import clnn
    import clnn.functional as F
    from clnn import distributed as dist
    from clnn import nn

    dist.init()
    rank, world = dist.rank(), dist.world_size()
    cores = clnn.device().split(clnn.device().compute_units)
    dev = clnn.set_default_device(cores[rank % len(cores)])
    model = nn.DistributedDataParallel(lenet(nn))
    opt = clnn.optim.Adam(model.parameters())
    g = np.random.default_rng(rank)
    xb = clnn.tensor(g.standard_normal((batch, 1, 28, 28)).astype(np.float32))
    yb = clnn.tensor(g.integers(0, 10, batch))

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
        dev.synchronize()

    for _ in range(2):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    images = steps * batch * world / (time.perf_counter() - start)

    grads = [p.grad for p in model.parameters()]
    n = sum(t.size for t in grads)
    raw = np.ones(n, np.float32)
    ours, theirs = [], []
    for _ in range(10):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(grads, op="sum")
        ours.append(time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)
        theirs.append(time.perf_counter() - t0)
    if rank == 0:
        print(json.dumps({"world": world, "images_s": images, "floats": n, "device": str(dev),
                          "clnn_ms": statistics.median(ours) * 1e3, "mpi4py_ms": statistics.median(theirs) * 1e3}))


def run(ranks: int, args: argparse.Namespace) -> dict:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent), str(here)]))
    cmd = [str(mpiexec), "-n", str(ranks), sys.executable, "-W", "ignore", __file__, "--worker",
           "--steps", str(args.steps), "--batch", str(args.batch)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64, help="images per process per step")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.batch)
        return
    one, two = run(1, args), run(2, args)
    scaling = two["images_s"] / one["images_s"]
    reduce_ratio = two["clnn_ms"] / two["mpi4py_ms"]
    print(f"device per process: {two['device']}")
    print(f"1 process: {one['images_s']:.1f} images/s; 2 processes: {two['images_s']:.1f} images/s; "
          f"scaling {scaling:.2f}x (efficiency {scaling / 2:.0%}; target >= {TARGET_SCALING}x)")
    print(f"all-reduce of {two['floats']:,} floats on 2 ranks: clnn {two['clnn_ms']:.2f} ms, raw mpi4py "
          f"{two['mpi4py_ms']:.2f} ms, ratio {reduce_ratio:.2f} (target <= {TARGET_REDUCE})")
    print(f"| {args.batch} | {one['images_s']:.1f} | {two['images_s']:.1f} | {scaling:.2f} | "
          f"{two['clnn_ms']:.2f} | {two['mpi4py_ms']:.2f} | {reduce_ratio:.2f} |")


if __name__ == "__main__":
    main()
