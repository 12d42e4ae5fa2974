"""float32 GEMM throughput: clnn against PyTorch on the same hardware, NumPy and CLBlast (pyclblast).

Usage: ``python benchmarks/bench_gemm.py [--sizes 1024 2048 127x253x61] [--reps 5] [--device SPEC]
[--dtype float32|float16|bfloat16] [--tile KEY=VALUE ...] [--mma KEY=VALUE ...]``

A size is ``n`` (n x n x n) or ``MxNxK``. PyTorch runs on CUDA (TF32 off) when the clnn device is NVIDIA and
PyTorch has CUDA, else on the CPU; the default sizes are the GEMM issue's table on a GPU, 1024 and 2048 on a
CPU. Every peer runs in this process, back to back per size, and the best of ``--reps`` timed runs is kept
(the machine is shared, so the minimum is the least noisy estimate). Ratios are clnn's GFLOP/s over the
peer's. Targets (issue 10): >= 0.6x NumPy at 1024 and 2048 on a CPU; >= 0.8x cuBLAS at 2048-8192 on a GPU.
``--dtype`` times half products (operands and result in that type, float32 accumulation) against PyTorch's in the
same type; NumPy and CLBlast then sit out.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import numpy as np
from common import (
    add_mma_option,
    add_tile_option,
    best_time,
    header,
    override_mma,
    override_tiles,
    peer_name,
    torch_peer,
    torch_sync,
)

import clnn
from clnn.ops.matmul import plan


def clblast_runner(dev: clnn.Device, a: np.ndarray, b: np.ndarray) -> tuple[Callable[[], object] | None, str]:
    """A callable running CLBlast's SGEMM on ``dev``'s queue, or None and the reason it is unavailable."""
    try:
        import pyclblast
        import pyopencl.array as cla
    except ImportError as err:
        return None, f"pyclblast not installed ({err}); install libclblast-dev, then pip install pyclblast"
    q = dev.queue
    m, k = a.shape
    n = b.shape[1]
    da, db = cla.to_device(q, a), cla.to_device(q, b)
    dc = cla.zeros(q, (m, n), np.float32)

    def run() -> None:
        pyclblast.gemm(q, m, n, k, da, db, dc, a_ld=k, b_ld=n, c_ld=n)
        q.finish()

    try:
        run()
    except Exception as err:  # CLBlast reports failures with its own exception types
        return None, f"CLBlast failed on {dev}: {err}"
    if not np.allclose(dc.get(), a @ b, rtol=1e-3, atol=1e-3):
        return None, "CLBlast returned a wrong result"
    return run, "ok"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=None, help="n or MxNxK (default: the issue's sizes)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    add_tile_option(ap)
    add_mma_option(ap)
    args = ap.parse_args()

    import torch

    dev = clnn.device(args.device)
    override_tiles(dev, args.tile)
    override_mma(dev, args.mma)
    dtype = getattr(clnn, args.dtype)
    half = args.dtype != "float32"
    tdev = torch_peer(dev)
    gpu_sizes = ["1024", "2048", "4096", "8192", "127x253x61", "1000", "4096x4096x256", "64x100352x288"]
    sizes = args.sizes or (gpu_sizes if tdev.type == "cuda" else ["1024", "2048"])
    print(header(dev))
    print(
        f"numpy {np.__version__}, peer {peer_name(tdev)}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{args.dtype} GFLOP/s, best of {args.reps}; ratios are clnn / peer; 'kernels': clnn's rate over its kernels"
          "' own time (the profiler's; far above 'clnn' when launches bound it); 'plan': matmul.plan's choice")
    columns = ("clnn", "numpy", "torch", "clblast", "/numpy", "/torch", "/clblast", "kernels")
    print(f"{'MxNxK':>15}" + "".join(f"{c:>9}" for c in columns) + "  plan")
    notes = set()
    rng = np.random.default_rng(0)
    for size in sizes:
        m, n, k = (int(v) for v in size.split("x")) if "x" in size else (int(size),) * 3
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        flops = 2.0 * m * n * k
        ca, cb = (clnn.tensor(v, device=dev).astype(dtype) for v in (a, b))
        if half:  # the product of the rounded operands, within the result's rounding
            a, b = (v.astype(clnn.float32).numpy() for v in (ca, cb))
        ref = a.astype(np.float64) @ b
        err = np.linalg.norm(clnn.matmul(ca, cb).astype(clnn.float32).numpy() - ref) / np.linalg.norm(ref)
        if err > (2**-7 if half else 1e-5):
            raise SystemExit(f"clnn matmul is wrong at {m}x{n}x{k}: relative error {err:.2e}")

        def run_clnn(ca: clnn.Tensor = ca, cb: clnn.Tensor = cb) -> None:
            clnn.matmul(ca, cb)
            dev.synchronize()

        ta, tb = (torch.from_numpy(v).to(tdev).to(getattr(torch, args.dtype)) for v in (a, b))

        def run_torch(ta: torch.Tensor = ta, tb: torch.Tensor = tb) -> None:
            ta @ tb
            torch_sync(tdev)

        rates = {
            "clnn": flops / best_time(run_clnn, args.reps) / 1e9,
            "numpy": float("nan") if half else flops / best_time(lambda a=a, b=b: a @ b, args.reps) / 1e9,
            "torch": flops / best_time(run_torch, args.reps) / 1e9,
        }
        blast, why = (None, f"{args.dtype}: NumPy and CLBlast sit out") if half else clblast_runner(dev, a, b)
        if blast is None:
            notes.add(why)
            rates["clblast"] = float("nan")
        else:
            rates["clblast"] = flops / best_time(blast, args.reps) / 1e9
        kernel_ns = []
        for _ in range(3):
            with clnn.profiler.profile(dev) as prof:
                run_clnn()
            kernel_ns.append(sum(k.device_ns for k in prof.kernels))
        kernel_rate = flops / (min(kernel_ns) / 1e9) / 1e9
        how = plan(dev, np.dtype(dtype), 1, m, n, k)
        if how.kernel == "rows":  # gemm_rows: a block per work-item, no tile
            tile = f"{how.cfg['WM']}x{how.cfg['WN']} blocks"
        else:
            options = [f"VWA {how.cfg['VWA']}"] * (how.cfg["VWA"] > 1) + ["PF"] * how.cfg["PF"] + ["DB"] * how.cfg[
                "DB"] + ["MMA"] * how.cfg.get("MMA", 0)
            tile = f"{how.cfg['TM']}x{how.cfg['TN']}x{how.cfg['TK']} in {how.cfg['WM']}x{how.cfg['WN']}" + (
                f" ({', '.join(options)})" if options else "")
        r = rates["clnn"]
        peers = ("numpy", "torch", "clblast")
        print(
            f"{m}x{n}x{k}".rjust(15)
            + "".join(f"{rates[c]:>9.1f}" for c in ("clnn", *peers))
            + "".join(f"{r / rates[c]:>9.2f}" for c in peers)
            + f"{kernel_rate:>9.1f}  {how.kernel}"
            + {"tiled": f" {tile}, {how.splits} k-ranges", "rows": f" {tile}"}.get(how.kernel, "")
        )
    for note in sorted(notes):
        print("note:", note)


if __name__ == "__main__":
    main()
