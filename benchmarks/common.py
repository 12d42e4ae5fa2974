"""Helpers the benchmark scripts share: best-of-N timing and the run's header line."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import clnn


def best_time(fn: Callable[[], object], reps: int) -> float:
    """Seconds of the fastest of ``reps`` calls of ``fn`` (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def header(dev: clnn.Device) -> str:
    """The date, device and OpenCL runtime of this run, for BENCHMARKS.md."""
    return f"date: {datetime.date.today()}  device: {dev}  runtime: {dev.platform_version}"
