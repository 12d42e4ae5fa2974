"""One table of clnn against PyTorch on the same hardware: reductions, softmax, batch norm, pooling, transpose,
elementwise, host time per small op, and LeNet / AlexNet-style training steps at two batch sizes each.

The peer is PyTorch CUDA (TF32 off) when the clnn device is NVIDIA and PyTorch has CUDA, else PyTorch CPU.
Both sides see the same float32 inputs; every timed call ends with a synchronization of its own device.
``--size full`` runs the sizes of the GPU issue's table (the default on GPUs); ``--size small`` scales them
down so the table finishes in a few minutes on a CPU (the default there). The last column is PyTorch's time
over clnn's (clnn's speed as a fraction of PyTorch's: 1.0 is parity, higher is faster).

    python benchmarks/run_all.py [--device SPEC] [--size small|full] [--reps 10] [--only sum,lenet,...]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyopencl as cl
import torch
from bench_lenet import lenet
from common import (
    add_tile_option,
    header,
    median_time,
    override_tiles,
    peer_name,
    replayed,
    torch_peer,
    torch_sync,
)

import clnn
import clnn.functional as F
from clnn import kernels, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from alexnet import alexnet  # noqa: E402

HOST_OPS = 10_000  # kernel launches per host-overhead measurement


@dataclass
class Row:
    work: str
    ours_ms: float
    theirs_ms: float
    note: str = ""


def _pair(x: np.ndarray, dev: clnn.Device, tdev: torch.device) -> tuple[clnn.Tensor, torch.Tensor]:
    return clnn.tensor(x, device=dev), torch.tensor(x, device=tdev)


def _compare(work: str, ours: Callable[[], object], theirs: Callable[[], object], dev: clnn.Device,
             tdev: torch.device, reps: int, note: str = "") -> Row:
    def ours_synced() -> None:
        ours()
        dev.synchronize()

    def theirs_synced() -> None:
        theirs()
        torch_sync(tdev)

    return Row(work, median_time(ours_synced, reps) * 1e3, median_time(theirs_synced, reps) * 1e3, note)


def kernel_rows(dev: clnn.Device, tdev: torch.device, full: bool, reps: int, only: set[str] | None) -> list[Row]:
    rng = np.random.default_rng(0)
    big = 64 * 2**20 if full else 4 * 2**20
    wide = (4096, 16384) if full else (1024, 4096)
    image = (256, 64, 56, 56) if full else (32, 64, 28, 28)
    square = 4096 if full else 2048
    rows: list[Row] = []

    def want(key: str) -> bool:
        return only is None or key in only

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    if want("sum"):
        a, ta = _pair(rand(big), dev, tdev)
        rows.append(_compare(f"sum of all {big / 2**20:.0f}M elements", lambda: a.sum(), lambda: ta.sum(), dev, tdev,
                             reps))
        a, ta = _pair(rand(*wide), dev, tdev)
        for axis in (0, 1):
            rows.append(_compare(f"sum {wide} axis {axis}", lambda ax=axis: a.sum(axis=ax),
                                 lambda ax=axis: ta.sum(dim=ax), dev, tdev, reps))
        a, ta = _pair(rand(1024, 10), dev, tdev)
        rows.append(_compare("sum (1024, 10) axis 1", lambda: a.sum(axis=1), lambda: ta.sum(dim=1), dev, tdev, reps))
    if want("softmax"):
        a, ta = _pair(rand(*wide), dev, tdev)
        rows.append(_compare(f"softmax {wide} axis 1", lambda: F.softmax(a, axis=1), lambda: ta.softmax(dim=1), dev,
                             tdev, reps))
    if want("batch_norm"):
        a, ta = _pair(rand(*image), dev, tdev)
        c = image[1]
        rm, rv = clnn.zeros(c, device=dev), clnn.ones(c, device=dev)
        trm, trv = torch.zeros(c, device=tdev), torch.ones(c, device=tdev)
        rows.append(_compare(f"batch_norm training {image}",
                             lambda: F.batch_norm(a, rm, rv, training=True),
                             lambda: torch.nn.functional.batch_norm(ta, trm, trv, training=True), dev, tdev, reps))
    if want("max_pool"):
        a, ta = _pair(rand(*image), dev, tdev)
        rows.append(_compare(f"max_pool2d 2x2 {image}", lambda: F.max_pool2d(a, 2),
                             lambda: torch.nn.functional.max_pool2d(ta, 2), dev, tdev, reps))
    if want("transpose"):
        a, ta = _pair(rand(square, square), dev, tdev)
        rows.append(_compare(f"transpose copy {square}x{square}", lambda: a.transpose(0, 1),
                             lambda: ta.t().contiguous(), dev, tdev, reps))
    if want("elementwise"):
        a, ta = _pair(rand(big), dev, tdev)
        b, tb = _pair(rand(big), dev, tdev)
        for name, ours, theirs, arrays in (("add", lambda: a + b, lambda: ta + tb, 3),
                                           ("relu", lambda: a.relu(), lambda: ta.relu(), 2)):
            row = _compare(f"{name} on {big / 2**20:.0f}M elements", ours, theirs, dev, tdev, reps)
            gb = arrays * big * 4 / 1e9
            row.note = f"{gb / row.ours_ms:.2f} vs {gb / row.theirs_ms:.2f} TB/s"
            rows.append(row)
    if want("host"):
        rows += host_rows(dev, tdev)
    return rows


def host_rows(dev: clnn.Device, tdev: torch.device) -> list[Row]:
    """Host time per tiny op (16 elements) and per step of a small MLP, each beside PyTorch and beside its kernel
    launches replayed raw with PyOpenCL (``set_args`` + ``enqueue_nd_range_kernel`` on the same kernel objects and
    arguments: the floor under clnn's time, and what NVIDIA's enqueue itself costs)."""
    a, ta = _pair(np.ones(16, np.float32), dev, tdev)
    m, tm = _pair(np.ones((4, 4), np.float32), dev, tdev)
    g, tg = clnn.tensor(np.ones(16, np.float32), device=dev).requires_grad_(), ta.clone().requires_grad_()
    ops = [
        ("add", lambda: a + a, lambda: ta + ta),
        ("relu", lambda: a.relu(), lambda: ta.relu()),
        ("scalar multiply", lambda: a * 2.0, lambda: ta * 2.0),
        ("add recording autograd", lambda: g + g, lambda: tg + tg),
        ("sum (4, 4) axis 1", lambda: m.sum(axis=1), lambda: tm.sum(dim=1)),
        ("MLP training step", *_mlp_steps(dev, tdev)),
    ]

    def per_op(op: Callable[[], object], sync: Callable[[], None], calls: int) -> float:
        best = float("inf")
        for _ in range(3):
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                op()
            sync()
            best = min(best, (time.perf_counter() - t0) / calls)
        return best * 1e3

    rows = []
    for name, ours, theirs in ops:
        launches = _launches_of(ours)
        calls = max(HOST_OPS // len(launches), 100)

        def raw(launches: list[tuple] = launches) -> None:
            for k, global_size, local_size, args in launches:
                k.set_args(*args)
                cl.enqueue_nd_range_kernel(dev.queue, k, global_size, local_size)

        ours_ms = per_op(ours, dev.synchronize, calls)
        theirs_ms = per_op(theirs, lambda: torch_sync(tdev), calls)
        raw_ms = per_op(raw, dev.synchronize, calls)
        note = (f"clnn {ours_ms * 1e3:.1f} µs, PyTorch {theirs_ms * 1e3:.1f} µs, raw PyOpenCL {raw_ms * 1e3:.1f} µs "
                f"({len(launches)} launch{'es' if len(launches) > 1 else ''})")
        rows.append(Row(f"host time per small op: {name}", ours_ms, theirs_ms, note))
    return rows


def _mlp_steps(dev: clnn.Device, tdev: torch.device) -> tuple[Callable[[], None], Callable[[], None]]:
    """One SGD step of the same 16-32-32-4 ReLU MLP on a batch of 8, in clnn and in PyTorch: where the host's time
    per op is the whole cost (autograd, the optimizer, a dozen products)."""
    rng = np.random.default_rng(0)
    (x, tx), (y, ty) = (_pair(rng.standard_normal(s).astype(np.float32), dev, tdev) for s in ((8, 16), (8, 4)))

    def mlp(lib: object) -> object:
        return lib.Sequential(lib.Linear(16, 32), lib.ReLU(), lib.Linear(32, 32), lib.ReLU(), lib.Linear(32, 4))

    ref, model = mlp(torch.nn).to(tdev), mlp(nn).to(dev)
    model.load_state_dict({k: v.cpu() for k, v in ref.state_dict().items()})
    opt, topt = clnn.optim.SGD(model.parameters(), lr=1e-3), torch.optim.SGD(ref.parameters(), lr=1e-3)

    def ours() -> None:
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def theirs() -> None:
        loss = torch.nn.functional.mse_loss(ref(tx), ty)
        topt.zero_grad()
        loss.backward()
        topt.step()

    return ours, theirs


def _launches_of(op: Callable[[], object]) -> list[tuple]:
    """The kernel launches one call of ``op`` makes: (kernel, rounded global size, local size, arguments)."""
    captured = []
    launch = kernels.launch

    def capture(dev: clnn.Device, k: cl.Kernel, global_size: tuple, local_size: tuple | None, *args: object) -> object:
        if local_size is not None:
            captured.append((k, tuple(kernels.round_up(g, n) for g, n in zip(global_size, local_size)), local_size,
                             args))
        else:
            captured.append((k, global_size, local_size, args))
        return launch(dev, k, global_size, local_size, *args)

    kernels.launch = capture
    try:
        op()
    finally:
        kernels.launch = launch
    return captured


def training_rows(dev: clnn.Device, tdev: torch.device, full: bool, reps: int, only: set[str] | None,
                  graph: bool = False) -> list[Row]:
    """LeNet and AlexNet-style Adam steps against PyTorch's; ``graph``: clnn's step replays a clnn.graph of it."""
    rows: list[Row] = []
    models = []
    if only is None or "lenet" in only:
        models += [("LeNet", lenet, (1, 28, 28), b) for b in ((128, 1024) if full else (32, 128))]
    if only is None or "alexnet" in only:
        models += [("AlexNet-style", alexnet, (3, 224, 224), b) for b in ((32, 128) if full else (2, 4))]
    for name, build, shape, batch in models:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((batch, *shape), dtype=np.float32)
        y = rng.integers(0, 10, batch)
        ref = build(lib=torch.nn).to(tdev)
        model = build(lib=nn).to(dev)
        model.load_state_dict({k: v.cpu() for k, v in ref.state_dict().items()})
        topt = torch.optim.Adam(ref.parameters(), lr=1e-4)
        opt = clnn.optim.Adam(model.parameters(), lr=1e-4)
        xc, yc = clnn.tensor(x, device=dev), clnn.tensor(y, device=dev)
        xt, yt = torch.tensor(x, device=tdev), torch.tensor(y, device=tdev)

        def ours(model=model, opt=opt, xc=xc, yc=yc) -> None:
            loss = F.cross_entropy(model(xc), yc)
            opt.zero_grad()
            loss.backward()
            opt.step()

        def theirs(ref=ref, topt=topt, xt=xt, yt=yt) -> None:
            loss = torch.nn.functional.cross_entropy(ref(xt), yt)
            topt.zero_grad()
            loss.backward()
            topt.step()

        label = f"{name} training step, batch {batch}" + (", replayed graph" if graph else "")
        rows.append(_compare(label, replayed(ours, dev) if graph else ours, theirs, dev, tdev, reps))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="clnn device spec (default: CLNN_DEVICE or auto)")
    parser.add_argument("--size", choices=("small", "full"), default=None,
                        help="problem sizes (default: full on a GPU, small otherwise)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--only", default=None,
                        help="comma-separated subset of sum,softmax,batch_norm,max_pool,transpose,elementwise,host,"
                             "lenet,alexnet")
    parser.add_argument("--graph", action="store_true", help="training steps replay a clnn.graph of clnn's step")
    add_tile_option(parser)
    args = parser.parse_args()
    dev = clnn.device(args.device)
    override_tiles(dev, args.tile)
    tdev = torch_peer(dev)
    full = (args.size or ("full" if dev.type == "gpu" else "small")) == "full"
    only = None if args.only is None else {s.strip() for s in args.only.split(",")}
    training_reps = max(3, args.reps // 3)
    rows = kernel_rows(dev, tdev, full, args.reps, only)
    rows += training_rows(dev, tdev, full, training_reps, only, args.graph)

    print(header(dev))
    print(f"peer: {peer_name(tdev)}; sizes: {'full' if full else 'small'}; medians of {args.reps} "
          f"({training_reps} for training steps)\n")
    print("| work | clnn ms | PyTorch ms | PyTorch time / clnn time | note |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r.work} | {r.ours_ms:.3f} | {r.theirs_ms:.3f} | {r.theirs_ms / r.ours_ms:.2f} | {r.note} |")


if __name__ == "__main__":
    main()
