"""float32 conv2d forward throughput: clnn against PyTorch CPU in the same run.

Usage: ``python benchmarks/bench_conv.py [--batch 32] [--reps 5] [--device SPEC] [--threads N]``

The layer is issue 3's floor: 64 -> 128 channels, 3x3, padding 1, 56x56, batch 32, float32. PyTorch
runs with as many threads as the machine has cores (``--threads``). Each side is timed back to back,
best of ``--reps`` after a warm-up (the machine is shared, so the minimum is the least noisy estimate);
the clnn time includes waiting for the device to finish. Floor: clnn >= 0.25x PyTorch.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import best_time, header

import clnn
import clnn.functional as F


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cin", type=int, default=64)
    ap.add_argument("--cout", type=int, default=128)
    ap.add_argument("--size", type=int, default=56)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    dev = clnn.device(args.device)
    n, c, o, s = args.batch, args.cin, args.cout, args.size
    print(header(dev))
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print(f"conv2d x ({n}, {c}, {s}, {s}) * w ({o}, {c}, 3, 3), padding 1, float32; best of {args.reps}")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, s, s), dtype=np.float32)
    w = rng.standard_normal((o, c, 3, 3), dtype=np.float32) * np.float32(1 / 24)
    b = rng.standard_normal(o, dtype=np.float32)
    cx, cw, cb = (clnn.tensor(a, device=dev) for a in (x, w, b))
    tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))

    ref = torch.nn.functional.conv2d(tx, tw, tb, padding=1).numpy()
    got = F.conv2d(cx, cw, cb, padding=1).numpy()
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))

    def run_clnn() -> None:
        F.conv2d(cx, cw, cb, padding=1)
        dev.synchronize()

    def run_torch() -> None:
        with torch.no_grad():
            torch.nn.functional.conv2d(tx, tw, tb, padding=1)

    flops = 2.0 * n * o * s * s * c * 9
    t_clnn = best_time(run_clnn, args.reps)
    t_torch = best_time(run_torch, args.reps)
    g_clnn, g_torch = flops / t_clnn / 1e9, flops / t_torch / 1e9
    print(f"{'':>6} {'ms':>9} {'GFLOP/s':>8}")
    print(f"{'clnn':>6} {t_clnn * 1e3:9.1f} {g_clnn:8.1f}")
    print(f"{'torch':>6} {t_torch * 1e3:9.1f} {g_torch:8.1f}")
    ratio = g_clnn / g_torch
    print(f"clnn / torch = {ratio:.3f}  (floor 0.25: {'pass' if ratio >= 0.25 else 'FAIL'})  rel err {err:.1e}")


if __name__ == "__main__":
    main()
