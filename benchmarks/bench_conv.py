"""float32 conv2d forward throughput: clnn against PyTorch on the same hardware, in the same run.

Usage: ``python benchmarks/bench_conv.py [--layer 0] [--batch N] [--reps 5] [--device SPEC] [--threads N]``

The layers of the GEMM/convolution issue's table: 0: 64 -> 128 channels, 3x3, padding 1, 56x56, batch 32;
1: 256 -> 256, 3x3, padding 1, 28x28, batch 64; 2: 3 -> 64, 7x7, stride 2, padding 3, 224x224, batch 128
(``--batch`` overrides). PyTorch runs on CUDA (TF32 off, cuDNN) when the clnn device is NVIDIA and PyTorch
has CUDA, else on the CPU with as many threads as the machine has cores (``--threads``). Each side is timed
back to back, best of ``--reps`` after a warm-up (the machine is shared, so the minimum is the least noisy
estimate); both times include waiting for the device. Target: clnn >= 0.8x PyTorch CPU, >= 0.6x cuDNN.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import best_time, header, peer_name, torch_peer, torch_sync

import clnn
import clnn.functional as F

# (batch, in channels, out channels, image size, kernel, stride, padding)
LAYERS = [(32, 64, 128, 56, 3, 1, 1), (64, 256, 256, 28, 3, 1, 1), (128, 3, 64, 224, 7, 2, 3)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, choices=range(len(LAYERS)), default=0)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    dev = clnn.device(args.device)
    tdev = torch_peer(dev)
    n, c, o, s, kk, st, pad = LAYERS[args.layer]
    n = args.batch or n
    print(header(dev))
    print(f"peer {peer_name(tdev)}")
    print(f"conv2d x ({n}, {c}, {s}, {s}) * w ({o}, {c}, {kk}, {kk}), stride {st}, padding {pad}, float32; "
          f"best of {args.reps}")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, s, s), dtype=np.float32)
    w = rng.standard_normal((o, c, kk, kk), dtype=np.float32) * np.float32(1 / (c * kk * kk) ** 0.5)
    b = rng.standard_normal(o, dtype=np.float32)
    cx, cw, cb = (clnn.tensor(a, device=dev) for a in (x, w, b))
    tx, tw, tb = (torch.from_numpy(a).to(tdev) for a in (x, w, b))

    ref = torch.nn.functional.conv2d(tx, tw, tb, stride=st, padding=pad).cpu().numpy()
    got = F.conv2d(cx, cw, cb, stride=st, padding=pad).numpy()
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))

    def run_clnn() -> None:
        F.conv2d(cx, cw, cb, stride=st, padding=pad)
        dev.synchronize()

    def run_torch() -> None:
        with torch.no_grad():
            torch.nn.functional.conv2d(tx, tw, tb, stride=st, padding=pad)
        torch_sync(tdev)

    oh = (s + 2 * pad - kk) // st + 1
    flops = 2.0 * n * o * oh * oh * c * kk * kk
    t_clnn = best_time(run_clnn, args.reps)
    t_torch = best_time(run_torch, args.reps)
    g_clnn, g_torch = flops / t_clnn / 1e9, flops / t_torch / 1e9
    print(f"{'':>6} {'ms':>9} {'GFLOP/s':>8}")
    print(f"{'clnn':>6} {t_clnn * 1e3:9.1f} {g_clnn:8.1f}")
    print(f"{'torch':>6} {t_torch * 1e3:9.1f} {g_torch:8.1f}")
    ratio = g_clnn / g_torch
    target = 0.6 if tdev.type == "cuda" else 0.8
    print(f"clnn / torch = {ratio:.3f}  (target {target}: {'pass' if ratio >= target else 'below'})  rel err {err:.1e}")


if __name__ == "__main__":
    main()
