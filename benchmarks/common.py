"""Helpers the benchmark scripts share: timing, the run's header line and the peer to compare with."""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable

import numpy as np

import clnn
import clnn.functional as F

# Seconds to wait before timing a library: the worker threads of the one timed before it keep spinning after
# its last call (OpenBLAS's for about 100 ms, PyTorch's and Intel's runtime's for about 50) and, on a 2-core
# machine, took half the cores from the next one (clnn's GEMM 1024^3 ran in 10-15 ms right after a NumPy
# product, 6.4 ms alone; PyTorch's in 22 ms right after clnn, 11 ms alone).
SETTLE_S = 0.3


def best_time(fn: Callable[[], object], reps: int) -> float:
    """Seconds of the fastest of ``reps`` calls of ``fn`` (after a pause of ``SETTLE_S`` and one warm-up call)."""
    time.sleep(SETTLE_S)
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def median_time(fn: Callable[[], object], reps: int, warmup: int = 2) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after a pause of ``SETTLE_S`` and ``warmup`` calls (``fn``
    synchronizes itself)."""
    time.sleep(SETTLE_S)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def header(dev: clnn.Device) -> str:
    """The date, device and OpenCL runtime of this run, for BENCHMARKS.md."""
    return f"date: {datetime.date.today()}  device: {dev}  runtime: {dev.platform_version}"


def torch_peer(dev: clnn.Device):
    """The PyTorch device a user of ``dev``'s hardware would pick instead: CUDA (TF32 off, so float32 is
    true float32) when ``dev`` is an NVIDIA device and PyTorch has CUDA, else the CPU."""
    import torch

    if "nvidia" in f"{dev.vendor} {dev.platform_name}".lower() and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return torch.device("cuda")
    return torch.device("cpu")


def torch_sync(device) -> None:
    """Wait for PyTorch's queued work on ``device`` (a no-op on the CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def peer_name(device) -> str:
    import torch

    if device.type == "cuda":
        return f"PyTorch {torch.__version__} CUDA ({torch.cuda.get_device_name()}, TF32 off)"
    return f"PyTorch {torch.__version__} CPU ({torch.get_num_threads()} threads)"


POLICIES = {"float32": None, "mixed_float16": clnn.float16, "mixed_bfloat16": clnn.bfloat16}  # precision policies


def image_step(dev: clnn.Device, model: clnn.nn.Module, shape: tuple[int, ...], batch: int,
               policy: str = "float32") -> Callable[[], None]:
    """One Adam step of ``model`` on a fixed random batch of ``shape`` images and 10 classes under ``policy``, as
    ``compile(precision=...)`` runs it: autocast to the half type, a GradScaler for float16 (not synchronized)."""
    half = POLICIES[policy]
    opt = clnn.optim.Adam(model.parameters(), lr=1e-4)
    scaler = clnn.amp.GradScaler(enabled=half == clnn.float16)
    rng = np.random.default_rng(0)
    x = clnn.tensor(rng.standard_normal((batch, *shape)).astype(np.float32), device=dev)
    y = clnn.tensor(rng.integers(0, 10, batch), device=dev)

    def step() -> None:
        with clnn.autocast(half or clnn.float16, enabled=half is not None):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step
