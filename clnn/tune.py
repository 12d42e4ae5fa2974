"""``clnn tune``: measure tunable kernels' parameters on a device and store the winners.

For each tunable kernel family the tuner walks a parameter space (the current choice first, then
the built-in table's rows for other device types, then the rest in a fixed shuffled order), skips
candidates that are invalid or exceed the device's limits or fail to build, saying why, checks every
remaining candidate against NumPy in float64 before timing it, and stores the fastest correct one in
the database of :mod:`clnn.tuning`, which gemm then consults before its built-in table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

from . import kernels, tuning
from .device import Device, device
from .ops.creation import tensor
from .ops.matmul import _KEYS, config_problem, gemm_config, gemm_raw, tiled_plan
from .tensor import Tensor

Printer = Callable[[str], None]

_SPACE = {  # gemm.cl's tunables; config_problem() rejects invalid combinations
    "TM": (16, 32, 64, 128), "TN": (16, 32, 64, 128), "TK": (8, 16, 32, 64),
    "WM": (1, 2, 4, 8), "WN": (1, 2, 4, 8, 16), "VW": (1, 2, 4, 8), "VWG": (1, 2, 4, 8),
    "APAD": (0, 1), "DB": (0, 1),
}
_MAX_ACC = 128  # accumulators per work-item; more spills registers on every device


def _shapes(dev: Device, kind: str) -> tuple[int, int, int]:
    """The (M, N, K) a ``kind`` tile is timed at: square for ``gemm``, a convolution's few-row
    product for ``gemm_small``; smaller on CPUs so that a candidate takes milliseconds."""
    big = dev.type != "cpu"
    if kind == "gemm":
        return (2048, 2048, 2048) if big else (512, 512, 512)
    return (64, 25088, 288) if big else (64, 4096, 288)


def candidates(dev: Device, kind: str, seed: int = 0) -> Iterator[dict[str, int]]:
    """Every ``gemm.cl`` tile worth timing for ``kind``, without repeats: the current choice, the
    table's rows, then the space in a fixed shuffled order (invalid combinations left out)."""
    current = gemm_config(dev, np.float32, kind)
    firsts = [current] + [{**current, **row} for rows in (tuning.TABLE["gemm"], tuning.TABLE["gemm_small"])
                          for row in rows.values()]
    rest = [dict(zip(_KEYS, values)) for values in itertools.product(*(_SPACE[key] for key in _KEYS))]
    rest = [c for c in rest if c["WM"] * c["WN"] <= _MAX_ACC and config_problem(c) is None]
    random.Random(seed).shuffle(rest)
    seen = set()
    for cfg in firsts + rest:
        key = tuple(cfg[k] for k in _KEYS)
        if key not in seen:
            seen.add(key)
            yield cfg


def _relerr(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


class _Problem:
    """Operands and float64 references for one kind: the timed shape and an odd-shaped, transposed,
    batched check that straddles any tile's edges."""

    def __init__(self, dev: Device, shape: tuple[int, int, int], rng: np.random.Generator) -> None:
        self.dev, (self.m, self.n, self.k) = dev, shape
        a = rng.standard_normal((self.m, self.k)).astype(np.float32)
        b = rng.standard_normal((self.k, self.n)).astype(np.float32)
        self.a, self.b = tensor(a, device=dev), tensor(b, device=dev)
        self.ref = a.astype(np.float64) @ b
        self.small = (2, 131, 137, 67)  # batch, m, n, k: primes past a 128 tile, a short last k-slice
        batch, m, n, k = self.small
        sa, sb = rng.standard_normal((batch, k, m)), rng.standard_normal((batch, n, k))
        self.sa, self.sb = tensor(sa.astype(np.float32), device=dev), tensor(sb.astype(np.float32), device=dev)
        sa32, sb32 = sa.astype(np.float32).astype(np.float64), sb.astype(np.float32).astype(np.float64)
        self.small_ref = sa32.transpose(0, 2, 1) @ sb32.transpose(0, 2, 1)

    def run(self, cfg: dict[str, int]) -> Tensor:
        m, n, k = self.m, self.n, self.k
        return gemm_raw(self.a, (0, k, 1), self.b, (0, n, 1), 1, m, n, k, how=tiled_plan(cfg, k))

    def check(self, cfg: dict[str, int]) -> str | None:
        """Why ``cfg`` computes a wrong product (relative error over 1e-5), or None."""
        batch, m, n, k = self.small
        small = gemm_raw(self.sa, (k * m, 1, m), self.sb, (n * k, 1, k), batch, m, n, k, how=tiled_plan(cfg, k))
        for what, out, ref in (("transposed batch", small.numpy(), self.small_ref),
                               ("timed shape", self.run(cfg).numpy()[0], self.ref)):
            err = _relerr(out, ref)
            if not err < 1e-5:
                return f"wrong result on the {what}: relative error {err:.1e}"
        return None

    def seconds(self, cfg: dict[str, int], budget: float) -> float:
        """The best time of a few runs, at most ``budget`` seconds of them (at least two)."""
        best, start = float("inf"), time.perf_counter()
        for rep in range(10):
            t = time.perf_counter()
            self.run(cfg)
            self.dev.synchronize()
            best = min(best, time.perf_counter() - t)
            if rep >= 1 and time.perf_counter() - start > budget:
                break
        return best


def _brief(cfg: dict[str, int]) -> str:
    return " ".join(f"{k}={cfg[k]}" for k in _KEYS)


def tune_gemm(dev: Device, budget: float, path: Path | None, out: Printer) -> dict[str, dict[str, Any]]:
    """Tune the ``gemm`` and ``gemm_small`` tiles within ``budget`` seconds; store and return the winners.

    The current choice is always measured, so each kind gets an entry however small the budget.
    """
    winners = {}
    kinds = ("gemm", "gemm_small")
    rng = np.random.default_rng(0)
    for i, kind in enumerate(kinds):
        deadline = time.perf_counter() + budget / len(kinds)
        shape = _shapes(dev, kind)
        problem = _Problem(dev, shape, rng)
        flops = 2.0 * shape[0] * shape[1] * shape[2]
        out(f"{kind}: timing {shape[0]}x{shape[1]}x{shape[2]} float32 products on {dev}")
        best: tuple[float, dict[str, int]] | None = None
        tried = 0
        for cfg in candidates(dev, kind):
            if best is not None and time.perf_counter() > deadline:
                break
            tried += 1
            problem_text = config_problem(cfg, dev)
            if problem_text is None:
                try:
                    problem_text = problem.check(cfg)
                except kernels.KernelBuildError as err:
                    lines = str(err).splitlines()
                    problem_text = "build failed: " + next((ln.strip() for ln in lines if "error" in ln), lines[0])
                except cl.Error as err:  # e.g. too many registers for the work-group: refused at launch
                    problem_text = f"launch failed: {err}"
            if problem_text is not None:
                out(f"  skip {_brief(cfg)}: {problem_text}")
                continue
            secs = problem.seconds(cfg, max(0.05, deadline - time.perf_counter()) / 4)
            if best is None or secs < best[0]:
                best = (secs, cfg)
            out(f"  [{tried}] {_brief(cfg)}: {flops / secs / 1e9:.1f} GFLOP/s (best {flops / best[0] / 1e9:.1f})")
        if best is None:
            out(f"{kind}: no candidate ran; nothing stored")
            continue
        entry = {"params": best[1], "gflops": round(flops / best[0] / 1e9, 2), "shape": list(shape),
                 "tried": tried, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
        tuning.store(dev, kind, entry, path)
        winners[kind] = entry
        out(f"{kind}: stored {_brief(best[1])} ({entry['gflops']} GFLOP/s, {tried} candidates)"
            f" [{i + 1}/{len(kinds)}]")
    return winners


TUNERS: dict[str, Callable[[Device, float, Path | None, Printer], dict[str, dict[str, Any]]]] = {
    "gemm": tune_gemm,
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``clnn tune``'s options to the command line's subcommands."""
    p = sub.add_parser("tune", help="measure kernel parameters on a device; store the fastest in the tuning database")
    p.add_argument("--device", default=None, help="device spec as for CLNN_DEVICE (default: the default device)")
    p.add_argument("--kernels", default=",".join(TUNERS), help=f"comma-separated families from {sorted(TUNERS)}")
    p.add_argument("--budget", type=float, default=300.0, help="seconds to spend, shared among the families")
    p.add_argument("--show", action="store_true", help="print the stored entries and exit")
    p.add_argument("--reset", action="store_true", help="delete the tuning database and exit")


def main(args: argparse.Namespace, out: Printer = print) -> int:
    """Run ``clnn tune`` with parsed ``args``; the exit status."""
    path = tuning.db_path()
    if args.reset:
        out(f"removed {path}" if tuning.reset(path) else f"no tuning database at {path}")
        return 0
    if args.show:
        stored = tuning.load_db(path)
        out(f"tuning database {path}:" if stored else f"no tuning database at {path}")
        for key, entries in sorted(stored.items()):
            out(f"{key}:")
            for kind, entry in sorted(entries.items()):
                out(f"  {kind}: {json.dumps(entry, sort_keys=True)}")
        return 0
    names = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in names if k not in TUNERS]
    if unknown or not names:
        raise SystemExit(f"clnn tune: --kernels expects names from {sorted(TUNERS)}; got {args.kernels!r}")
    if not args.budget > 0:
        raise SystemExit(f"clnn tune: --budget expects a positive number of seconds; got {args.budget}")
    dev = device(args.device)
    out(f"tuning {', '.join(names)} on {dev} for {args.budget:g} s; database {path}")
    for name in names:
        TUNERS[name](dev, args.budget / len(names), path, out)
    return 0
