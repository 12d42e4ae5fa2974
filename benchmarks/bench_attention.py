"""Scaled dot-product attention, forward + backward: clnn's fused kernels against PyTorch's
``F.scaled_dot_product_attention`` on the same hardware, with device memory.

Usage: ``python benchmarks/bench_attention.py [--lengths 128 512 2048] [--batch 8] [--heads 8] [--head-dim 64]
[--reps 3] [--device SPEC]``

PyTorch runs on CUDA when the clnn device is NVIDIA and PyTorch has CUDA, else on the CPU. A step is
``out.backward(g)`` after the forward, plus a synchronization; the best of ``--reps`` is kept. clnn's memory is
the pool's growth over one step from an empty pool (``clnn.memory_stats``: bytes in use + bytes held), PyTorch's
the CUDA peak (``max_memory_allocated``; "-" on the CPU). Prints a markdown table; ratio is PyTorch's time over
clnn's (higher is faster).
"""

from __future__ import annotations

import argparse

import numpy as np
from common import best_time, header, peer_name, torch_peer, torch_sync

import clnn
import clnn.functional as F


def _pool_bytes(dev: clnn.Device) -> int:
    s = clnn.memory_stats(dev)
    return s["bytes_in_use"] + s["bytes_held"]


def row(length: int, args: argparse.Namespace, dev: clnn.Device, tdev) -> str:
    import torch

    rng = np.random.default_rng(0)
    shape = (args.batch, args.heads, length, args.head_dim)
    q, k, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    before = _pool_bytes(dev)
    cq, ck, cv = (clnn.tensor(a, device=dev, requires_grad=True) for a in (q, k, v))
    cg = clnn.tensor(g, device=dev)

    def clnn_step() -> None:
        F.scaled_dot_product_attention(cq, ck, cv).backward(cg)
        dev.synchronize()

    clnn_step()
    mem = _pool_bytes(dev) - before
    tq, tk, tv = (torch.tensor(a, device=tdev, requires_grad=True) for a in (q, k, v))
    tg = torch.tensor(g, device=tdev)

    def torch_step() -> None:
        torch.nn.functional.scaled_dot_product_attention(tq, tk, tv).backward(tg)
        torch_sync(tdev)

    cuda = tdev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(tdev)
    torch_step()
    tmem = f"{torch.cuda.max_memory_allocated(tdev) / 2**20:.1f}" if cuda else "-"
    t_clnn, t_torch = best_time(clnn_step, args.reps), best_time(torch_step, args.reps)
    return (f"| {length} | {t_clnn * 1e3:.2f} | {t_torch * 1e3:.2f} | {t_torch / t_clnn:.2f} | {mem / 2**20:.1f} "
            f"| {tmem} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    dev = clnn.device(args.device)
    tdev = torch_peer(dev)
    print(header(dev))
    print(f"peer: {peer_name(tdev)}; batch {args.batch}, heads {args.heads}, head dim {args.head_dim}, float32\n")
    print("| length | clnn ms | PyTorch ms | ratio | clnn MiB | PyTorch MiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for length in args.lengths:
        print(row(length, args, dev, tdev))


if __name__ == "__main__":
    main()
