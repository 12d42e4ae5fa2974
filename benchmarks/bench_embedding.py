"""Embedding backward (the scatter behind every gather's gradient): the walking path (every output reads
the whole index list), the sorted path (radix sort by row, then each output reads its own rows) and the
column path (one walk of the list per chunk of 16 columns, CPUs' default), against PyTorch's ``embedding``
backward on its device; "auto" is what the device's tuning picks.

Usage: ``python benchmarks/bench_embedding.py [--reps 5] [--device SPEC] [--walk-cap 30]``

A step is ``embedding(tokens, weight).backward(grad)`` plus a synchronization; the median of ``--reps``
timed steps is kept (the machine is shared). The walking path's time grows with vocabulary x tokens:
it is skipped (printed as "-") where its expected time, measured on a smaller vocabulary, exceeds
``--walk-cap`` seconds.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np
from common import header, median_time, torch_peer, torch_sync

import clnn
import clnn.ops.index as index_ops
from clnn import tuning

CASES = ((50_000, 4096, 256), (128, 2048, 128), (1000, 512, 64))  # (vocabulary, tokens, dim)


def clnn_step(dev: clnn.Device, vocab: int, tokens: int, dim: int, path: str, reps: int) -> float:
    rng = np.random.default_rng(0)
    idx = clnn.tensor(rng.integers(0, vocab, tokens), device=dev)
    w = clnn.tensor(rng.standard_normal((vocab, dim)).astype(np.float32), device=dev, requires_grad=True)
    g = clnn.tensor(rng.standard_normal((tokens, dim)).astype(np.float32), device=dev)
    saved = index_ops.WALK_MAX
    if path in ("walk", "sort"):
        index_ops.WALK_MAX = 1 << 62 if path == "walk" else -1

    def step() -> None:
        w.grad = None
        clnn.functional.embedding(idx, w).backward(g)
        dev.synchronize()

    columns = {"columns": 16, "walk": 0, "sort": 0}.get(path)
    try:
        with tuning.override("scatter", COLS_VW=columns) if columns is not None else contextlib.nullcontext():
            return median_time(step, reps, warmup=1)
    finally:
        index_ops.WALK_MAX = saved


def torch_step(tdev, vocab: int, tokens: int, dim: int, reps: int) -> float:
    import torch

    rng = np.random.default_rng(0)
    idx = torch.tensor(rng.integers(0, vocab, tokens), device=tdev)
    w = torch.tensor(rng.standard_normal((vocab, dim)).astype(np.float32), device=tdev, requires_grad=True)
    g = torch.tensor(rng.standard_normal((tokens, dim)).astype(np.float32), device=tdev)

    def step() -> None:
        w.grad = None
        torch.nn.functional.embedding(idx, w).backward(g)
        torch_sync(tdev)

    return median_time(step, reps, warmup=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--device", default=None)
    p.add_argument("--walk-cap", type=float, default=30.0)
    args = p.parse_args()
    dev = clnn.device(args.device)
    tdev = torch_peer(dev)
    print(header(dev))
    print(f"{'vocab':>7} {'tokens':>6} {'dim':>4} {'walk ms':>9} {'sort ms':>8} {'cols ms':>8} {'auto ms':>8} "
          f"{'torch ms':>8}")
    for vocab, tokens, dim in CASES:
        probe = min(vocab, 500)  # the walk's time is linear in the vocabulary
        expect = clnn_step(dev, probe, tokens, dim, "walk", 1) * vocab / probe
        walk = clnn_step(dev, vocab, tokens, dim, "walk", args.reps) if expect < args.walk_cap else None
        sort = clnn_step(dev, vocab, tokens, dim, "sort", args.reps)
        cols = clnn_step(dev, vocab, tokens, dim, "columns", args.reps)
        auto = clnn_step(dev, vocab, tokens, dim, "auto", args.reps)
        ref = torch_step(tdev, vocab, tokens, dim, args.reps)
        walk_ms = f"{walk * 1e3:9.2f}" if walk is not None else f"{'-':>9}"
        print(f"{vocab:>7} {tokens:>6} {dim:>4} {walk_ms} {sort * 1e3:8.2f} {cols * 1e3:8.2f} {auto * 1e3:8.2f} "
              f"{ref * 1e3:8.2f}" + ("" if walk is not None else f"  (walk expected {expect:.0f} s)"))


if __name__ == "__main__":
    main()
