"""LSTM and GRU training steps (forward + backward): clnn against PyTorch on the same hardware.

Usage: ``python benchmarks/bench_rnn.py [--seq 64] [--batch 32] [--input 128] [--hidden 256] [--layers 2]
[--reps 5] [--device SPEC]``

PyTorch runs on CUDA (TF32 off) when the clnn device is NVIDIA and PyTorch has CUDA, else on the CPU. Both
modules hold the same float32 weights and see the same input; a step is ``out.sum().backward()`` plus a
synchronization. The best of ``--reps`` timed steps is kept. The ratio is PyTorch's time over clnn's
(1.0 is parity, higher is faster). Each clnn step is 2 launches per time step, layer and direction forward
and backward, so on a GPU short sequences of small batches are launch-bound.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import best_time, header, peer_name, torch_peer, torch_sync

import clnn
from clnn import nn


def step_times(mode: str, args: argparse.Namespace, x: np.ndarray, dev: clnn.Device, tdev) -> tuple[float, float]:
    """Seconds of one clnn and one PyTorch training step of a ``mode`` module with the same weights."""
    import torch

    ref = getattr(torch.nn, mode)(args.input, args.hidden, num_layers=args.layers).to(tdev)
    mine = getattr(nn, mode)(args.input, args.hidden, num_layers=args.layers, device=dev)
    mine.load_state_dict({k: v.detach().cpu().numpy() for k, v in ref.state_dict().items()})
    tx = torch.tensor(x, device=tdev, requires_grad=True)
    cx = clnn.tensor(x, device=dev, requires_grad=True)

    def torch_step() -> None:
        ref(tx)[0].sum().backward()
        torch_sync(tdev)

    def clnn_step() -> None:
        mine(cx)[0].sum().backward()
        dev.synchronize()

    return best_time(clnn_step, args.reps), best_time(torch_step, args.reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    dev = clnn.device(args.device)
    tdev = torch_peer(dev)
    print(header(dev))
    print(f"peer: {peer_name(tdev)}")
    print(f"seq {args.seq}, batch {args.batch}, input {args.input}, hidden {args.hidden}, layers {args.layers}")
    x = np.random.default_rng(0).standard_normal((args.seq, args.batch, args.input)).astype(np.float32)
    for mode in ("LSTM", "GRU"):
        t_clnn, t_torch = step_times(mode, args, x, dev, tdev)
        print(f"{mode:5s} step  clnn {t_clnn * 1e3:9.2f} ms  PyTorch {t_torch * 1e3:9.2f} ms  "
              f"ratio {t_torch / t_clnn:5.2f}")


if __name__ == "__main__":
    main()
