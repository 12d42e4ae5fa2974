"""float32 conv2d throughput, forward or a training layer: clnn against PyTorch on the same hardware, in the same run.

Usage: ``python benchmarks/bench_conv.py [--layer 0] [--batch N] [--backward] [--reps 5] [--device SPEC]
[--threads N] [--algorithm auto|gemm|winograd] [--tile KEY=VALUE ...]``

The layers of the GEMM/convolution issue's table: 0: 64 -> 128 channels, 3x3, padding 1, 56x56, batch 32; 1: 256 ->
256, 3x3, padding 1, 28x28, batch 64; 2: 3 -> 64, 7x7, stride 2, padding 3, 224x224, batch 128; and the
AlexNet-style step's first two (examples/alexnet.py), whose implicit GEMMs take most of its time on a GPU: 3: 3 ->
96, 11x11, stride 4, padding 5, 224x224; 4: 96 -> 256, 5x5, padding 2, 27x27; both batch 128; and MobileNetV2's
depthwise 3x3 layers over 144 channels (groups 144), which take the direct kernels: 5: 56x56, padding 1, batch 32;
6: the same at stride 2 (``--batch`` overrides). PyTorch runs on CUDA (TF32 off, cuDNN) when the clnn device is
NVIDIA and PyTorch has CUDA, else on the CPU with as many threads as the machine has cores (``--threads``). Each
side is timed back to back, best of ``--reps`` after a warm-up (the machine is shared, so the minimum is the least
noisy estimate); both times include waiting for the device. ``--backward`` times the layer in training: the forward,
then the input, weight and bias gradients of a given output gradient, through each library's autograd (3x the
forward's FLOPs). ``--algorithm`` forces clnn's implicit GEMM or Winograd's kernels (3x3 stride-1 layers) where
``auto`` lets the device's tuning choose. Target: clnn >= 0.8x PyTorch CPU, >= 0.6x cuDNN.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import add_tile_option, best_time, header, override, override_tiles, peer_name, torch_peer, torch_sync

import clnn
import clnn.functional as F

# (batch, in channels, out channels, image size, kernel, stride, padding, groups)
LAYERS = [(32, 64, 128, 56, 3, 1, 1, 1), (64, 256, 256, 28, 3, 1, 1, 1), (128, 3, 64, 224, 7, 2, 3, 1),
          (128, 3, 96, 224, 11, 4, 5, 1), (128, 96, 256, 27, 5, 1, 2, 1), (32, 144, 144, 56, 3, 1, 1, 144),
          (32, 144, 144, 56, 3, 2, 1, 144)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, choices=range(len(LAYERS)), default=0)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--backward", action="store_true", help="forward and all three gradients")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--algorithm", choices=("auto", "gemm", "winograd"), default="auto")
    add_tile_option(ap)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    dev = clnn.device(args.device)
    override_tiles(dev, args.tile)
    if args.algorithm != "auto":  # Winograd from intensity 1 (wherever it computes the layer), or never
        override("winograd", MIN_INTENSITY=int(args.algorithm != "gemm"))
    tdev = torch_peer(dev)
    n, c, o, s, kk, st, pad, groups = LAYERS[args.layer]
    n = args.batch or n
    print(header(dev))
    print(f"peer {peer_name(tdev)}")
    print(f"conv2d x ({n}, {c}, {s}, {s}) * w ({o}, {c // groups}, {kk}, {kk}), stride {st}, padding {pad}, "
          f"groups {groups}, float32, "
          f"{'forward + all gradients' if args.backward else 'forward'}; best of {args.reps}")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, s, s), dtype=np.float32)
    w = rng.standard_normal((o, c // groups, kk, kk), dtype=np.float32) * np.float32(1 / (c // groups * kk * kk) ** 0.5)
    b = rng.standard_normal(o, dtype=np.float32)
    oh = (s + 2 * pad - kk) // st + 1
    gy = rng.standard_normal((n, o, oh, oh), dtype=np.float32)
    grad = args.backward
    cx, cw, cb = (clnn.tensor(a, device=dev, requires_grad=grad) for a in (x, w, b))
    cgy = clnn.tensor(gy, device=dev)
    tx, tw, tb = (torch.from_numpy(a).to(tdev).requires_grad_(grad) for a in (x, w, b))
    tgy = torch.from_numpy(gy).to(tdev)

    def run_clnn() -> list:
        y = F.conv2d(cx, cw, cb, stride=st, padding=pad, groups=groups)
        if grad:
            for t in (cx, cw, cb):
                t.grad = None
            y.backward(cgy)
        dev.synchronize()
        return [y, cx.grad, cw.grad, cb.grad] if grad else [y]

    def run_torch() -> list:
        with torch.set_grad_enabled(grad):
            y = torch.nn.functional.conv2d(tx, tw, tb, stride=st, padding=pad, groups=groups)
            if grad:
                for t in (tx, tw, tb):
                    t.grad = None
                y.backward(tgy)
        torch_sync(tdev)
        return [y, tx.grad, tw.grad, tb.grad] if grad else [y]

    err = max(float(np.linalg.norm(ours.numpy() - ref.detach().cpu().numpy()) / np.linalg.norm(ref.detach().cpu()))
              for ours, ref in zip(run_clnn(), run_torch()))

    flops = 2.0 * n * o * oh * oh * c // groups * kk * kk * (3 if grad else 1)
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
