"""Host time per op: what the CPU spends issuing small ops, clnn against PyTorch on the peer device, with the floor
under clnn's (PyOpenCL setting the arguments of one cached kernel and enqueueing it).

Models whose kernels are short are bound by this time, not by their kernels: on the H200 the GPT example's step
ran 308 launches with 4.3 ms of kernel time in 38-44 ms. Each row times ``--ops`` calls on tiny tensors and one
synchronize (so the device's share is negligible), best of ``--reps``; the MLP row is one training step (forward,
backward, SGD) of a 3-layer MLP on a batch of 8, per launch of clnn's.

    python benchmarks/bench_host.py [--device SPEC] [--ops 2000] [--reps 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from common import SETTLE_S, header, peer_name, torch_peer, torch_sync

import clnn
import clnn.functional as F
from clnn import kernels


def per_call(fn: Callable[[], object], sync: Callable[[], None], calls: int, reps: int) -> float:
    """Seconds per call of ``fn``: ``calls`` calls and a synchronize, best of ``reps``."""
    time.sleep(SETTLE_S)
    for _ in range(min(calls, 50)):
        fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best / calls


def mlp_step(lib, layers: list, opt, x, y) -> Callable[[], None]:
    """One SGD step of ``layers`` (Linear, ReLU, ...) in ``lib`` (clnn or torch) on ``(x, y)``."""
    def step() -> None:
        h = x
        for layer in layers:
            h = layer(h)
        loss = lib.nn.functional.mse_loss(h, y) if lib.__name__ == "torch" else F.mse_loss(h, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    dev = clnn.set_default_device(clnn.device(args.device))
    tdev = torch_peer(dev)
    print(header(dev) + f"  peer: {peer_name(tdev)}")

    rng = np.random.default_rng(0)
    host = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
            (("a", (4,)), ("b", (4,)), ("m", (8, 8)), ("x", (8, 16)), ("y", (8, 4)))}
    c = {k: clnn.tensor(v) for k, v in host.items()}
    t = {k: torch.tensor(v, device=tdev) for k, v in host.items()}
    rows = [
        ("a + b, 4 floats", lambda: c["a"] + c["b"], lambda: t["a"] + t["b"]),
        ("relu, 4 floats", lambda: F.relu(c["a"]), lambda: torch.relu(t["a"])),
        ("sum, 4 floats", lambda: c["a"].sum(), lambda: t["a"].sum()),
        ("8x8 @ 8x8", lambda: c["m"] @ c["m"], lambda: t["m"] @ t["m"]),
        ("reshape, transpose", lambda: c["m"].reshape(4, 16).T, lambda: t["m"].reshape(4, 16).T),
    ]

    clnn.manual_seed(0)
    torch.manual_seed(0)
    ours = [clnn.nn.Linear(16, 32), clnn.nn.ReLU(), clnn.nn.Linear(32, 32), clnn.nn.ReLU(), clnn.nn.Linear(32, 4)]
    theirs = [torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
              torch.nn.Linear(32, 4)]
    theirs = [m.to(tdev) for m in theirs]
    params = [p for m in ours for p in m.parameters()]
    ours_step = mlp_step(clnn, ours, clnn.optim.SGD(params, lr=1e-3), c["x"], c["y"])
    theirs_step = mlp_step(torch, theirs, torch.optim.SGD([p for m in theirs for p in m.parameters()], lr=1e-3),
                           t["x"], t["y"])
    with clnn.profiler.profile() as prof:
        ours_step()
        dev.synchronize()
    launches = len(prof.kernels)
    rows.append((f"MLP training step ({launches} launches)", ours_step, theirs_step))

    a, b = c["a"], c["b"]
    out = clnn.zeros_like(a)
    k = kernels.kernel(dev, "elementwise.cl", "binary_same", kernels.defines(a.dtype, EW_VEC=1, EW_STATIC=0))
    args_ = (np.int32(0), np.int32(4), a.data, b.data, out.data)
    k.set_scalar_arg_dtypes([np.int32, np.int32, None, None, None])  # as clnn's launches declare them
    floor = per_call(lambda: k(dev.queue, (64,), None, *args_), dev.synchronize, args.ops, args.reps)

    print(f"\nfloor: PyOpenCL's set-arguments and enqueue of a cached kernel, {floor * 1e6:.1f} us\n")
    print("| op | clnn us | PyTorch us | PyTorch time / clnn time |")
    print("|---|---:|---:|---:|")
    for name, ours_fn, theirs_fn in rows:
        calls = args.ops if "step" not in name else max(args.ops // 20, 10)
        us = per_call(ours_fn, dev.synchronize, calls, args.reps) * 1e6
        them = per_call(theirs_fn, lambda: torch_sync(tdev), calls, args.reps) * 1e6
        print(f"| {name} | {us:.1f} | {them:.1f} | {them / us:.2f} |")


if __name__ == "__main__":
    main()
