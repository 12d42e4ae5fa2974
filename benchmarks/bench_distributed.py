"""Data-parallel scaling over MPI: LeNet training images/s on 1 and 2 processes, each on a one-core sub-device of
the CPU with every thread pinned to its own core, and DDP's bucket all-reduce against raw mpi4py on the same sizes.

    python benchmarks/bench_distributed.py [--steps 8] [--batch 64] [--no-pin]

It launches itself under the mpich wheel's ``mpiexec`` (``-n 1`` then ``-n 2``). Targets: 2 processes reach
>= 1.7x the images/s of one; the all-reduce of ``DistributedDataParallel.buckets`` through
``dist.all_reduce`` (map, MPI, unmap: what backward runs) within 1.2x the time of a raw ``Allreduce`` of a
host array of the same size. A sub-device caps the OpenCL runtime's worker threads at one, but does not pin
them: the benchmark pins each process's threads (the host thread and the runtime's, which inherit it) to one
core, so 1 and 2 processes are compared at the same pinning. Each rank also reports the CPU time it spent per
step and its share of a core (CPU time / wall time): a share under 1 means other processes took the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TARGET_SCALING, TARGET_REDUCE = 1.7, 1.2


def pin_threads(core: int) -> None:
    """Pin every thread of this process to ``core``; threads started later inherit it."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {core})


def cpu_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return use.ru_utime + use.ru_stime


def worker(steps: int, batch: int, pin: bool) -> None:
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
    if pin:
        pin_threads(sorted(os.sched_getaffinity(0))[rank % len(cores)])
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
    start, cpu = time.perf_counter(), cpu_seconds()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    cpu = cpu_seconds() - cpu
    dist.barrier()
    wall = time.perf_counter() - start
    mine = {"step_ms": statistics.median(times) * 1e3, "cpu_ms": cpu / steps * 1e3, "share": cpu / wall}

    buckets = model.buckets
    grads = [p.grad for p in model.parameters()]  # parameter order: not the buckets', so gathered first
    raw = [np.ones(b.size, np.float32) for b in buckets]
    timed = {"clnn": lambda: dist.all_reduce(buckets, op="sum"), "list": lambda: dist.all_reduce(grads, op="sum"),
             "mpi4py": lambda: [MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, r, op=MPI.SUM) for r in raw]}
    spent: dict[str, list[float]] = {k: [] for k in timed}
    for _ in range(20):
        for name, call in timed.items():  # interleaved, so a busy moment hits each alike
            dist.barrier()
            t0 = time.perf_counter()
            call()
            spent[name].append(time.perf_counter() - t0)
    ranks = MPI.COMM_WORLD.gather(mine)
    if rank == 0:
        print(json.dumps({"world": world, "images_s": steps * batch * world / wall, "ranks": ranks,
                          "floats": sum(b.size for b in buckets), "device": str(dev), "load": os.getloadavg()[0],
                          **{f"{k}_ms": statistics.median(v) * 1e3 for k, v in spent.items()}}))


def run(ranks: int, args: argparse.Namespace) -> dict:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent), str(here)]))
    cmd = [str(mpiexec), "-n", str(ranks), sys.executable, "-W", "ignore", __file__, "--worker",
           "--steps", str(args.steps), "--batch", str(args.batch), *([] if args.pin else ["--no-pin"])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64, help="images per process per step")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="leave threads to the OS scheduler")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.batch, args.pin)
        return
    one, two = run(1, args), run(2, args)
    scaling = two["images_s"] / one["images_s"]
    reduce_ratio = two["clnn_ms"] / two["mpi4py_ms"]
    print(f"device per process: {two['device']}, threads {'pinned' if args.pin else 'not pinned'}; load average "
          f"{one['load']:.2f} / {two['load']:.2f}")
    print(f"1 process: {one['images_s']:.1f} images/s; 2 processes: {two['images_s']:.1f} images/s; "
          f"scaling {scaling:.2f}x (efficiency {scaling / 2:.0%}; target >= {TARGET_SCALING}x)")
    for name, run_ in (("1 process", one), ("2 processes", two)):
        for r, m in enumerate(run_["ranks"]):
            print(f"  {name}, rank {r}: step {m['step_ms']:.1f} ms, CPU {m['cpu_ms']:.1f} ms per step, "
                  f"{m['share']:.2f} of a core")
    print(f"all-reduce of the buckets' {two['floats']:,} floats on 2 ranks: clnn {two['clnn_ms']:.2f} ms, raw "
          f"mpi4py {two['mpi4py_ms']:.2f} ms, ratio {reduce_ratio:.2f} (target <= {TARGET_REDUCE}); the gradients "
          f"as a list in parameter order: {two['list_ms']:.2f} ms")
    print(f"| {args.batch} | {one['images_s']:.1f} | {two['images_s']:.1f} | {scaling:.2f} | "
          f"{two['clnn_ms']:.2f} | {two['mpi4py_ms']:.2f} | {reduce_ratio:.2f} |")


if __name__ == "__main__":
    main()
