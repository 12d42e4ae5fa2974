"""float32 GEMM throughput: clnn against NumPy, PyTorch CPU and CLBlast (pyclblast) on the same device.

Usage: ``python benchmarks/bench_gemm.py [--sizes 1024 2048] [--reps 5] [--device SPEC]``

Every peer runs in this process, back to back per size, and the best of ``--reps`` timed runs is kept
(the machine is shared, so the minimum is the least noisy estimate). Ratios are clnn's GFLOP/s over
the peer's. Floors (issue 3): clnn >= 0.2x NumPy and >= 3x CLBlast at 1024 and 2048.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import numpy as np
from common import best_time, header

import clnn


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
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()

    import torch

    dev = clnn.device(args.device)
    print(header(dev))
    print(
        f"numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"GFLOP/s, best of {args.reps}; ratios are clnn / peer")
    columns = ("clnn", "numpy", "torch", "clblast", "/numpy", "/torch", "/clblast")
    print(f"{'size':>6}" + "".join(f"{c:>9}" for c in columns))
    notes = set()
    rng = np.random.default_rng(0)
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        flops = 2.0 * n**3
        ca, cb = clnn.tensor(a, device=dev), clnn.tensor(b, device=dev)
        err = np.linalg.norm(clnn.matmul(ca, cb).numpy() - a @ b) / np.linalg.norm(a @ b)
        if err > 1e-5:
            raise SystemExit(f"clnn matmul is wrong at n={n}: relative error {err:.2e}")

        def run_clnn(ca: clnn.Tensor = ca, cb: clnn.Tensor = cb) -> None:
            clnn.matmul(ca, cb)
            dev.synchronize()

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        rates = {
            "clnn": flops / best_time(run_clnn, args.reps) / 1e9,
            "numpy": flops / best_time(lambda a=a, b=b: a @ b, args.reps) / 1e9,
            "torch": flops / best_time(lambda ta=ta, tb=tb: ta @ tb, args.reps) / 1e9,
        }
        blast, why = clblast_runner(dev, a, b)
        if blast is None:
            notes.add(why)
            rates["clblast"] = float("nan")
        else:
            rates["clblast"] = flops / best_time(blast, args.reps) / 1e9
        r = rates["clnn"]
        peers = ("numpy", "torch", "clblast")
        print(
            f"{n:>6}"
            + "".join(f"{rates[c]:>9.1f}" for c in ("clnn", *peers))
            + "".join(f"{r / rates[c]:>9.2f}" for c in peers)
        )
    for note in sorted(notes):
        print("note:", note)


if __name__ == "__main__":
    main()
