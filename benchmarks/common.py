"""Helpers the benchmark scripts share: timing, the run's header line and the peer to compare with."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import time
from collections.abc import Callable

import numpy as np

import clnn
import clnn.functional as F
from clnn import tuning
from clnn.ops.matmul import _KEYS, MMA_EXTRAS, TILE_EXTRAS, gemm_config, warp_product_misfits
from clnn.ops.matmul import TILE_KINDS as GEMM_TILE_KINDS

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


def replayed(step: Callable[[], object], dev: clnn.Device | None = None) -> Callable[[], None]:
    """``step`` captured once as a :func:`clnn.graph` (on ``dev``, default the default device): its replay."""
    g = clnn.Graph()
    with clnn.graph(g, dev):
        step()
    return g.replay


TILE_KINDS = (*GEMM_TILE_KINDS, "winograd")  # tuning kinds holding gemm.h tiles


def add_tile_option(parser: argparse.ArgumentParser) -> None:
    """``--tile KEY=VALUE ...``, for :func:`override_tiles`."""
    parser.add_argument("--tile", nargs="*", default=None, metavar="KEY=VALUE",
                        help="laid over every tuned tile on this device (gemm.h's keys, e.g. VWA=4; NVIDIA's runtime: "
                             "REGS=N caps a work-item's registers, ASYNC=1 stages by cp.async with PF=0): a variant "
                             "timed without storing it")


_OVERRIDES = contextlib.ExitStack()  # tuning.override blocks in force until the process exits


def override(kernel: str, **values: int) -> None:
    """``tuning.override(kernel, **values)`` for the rest of this process (a benchmark's variant)."""
    _OVERRIDES.enter_context(tuning.override(kernel, **values))


def add_mma_option(parser: argparse.ArgumentParser) -> None:
    """``--mma KEY=VALUE ...``: gemm.h's keys laid over the warp-product tiles of half products (tuning's
    ``mma`` row; ``MMA=0`` turns them off; NVIDIA's: ``REGS=N`` caps registers a work-item, ``LDSM=1`` loads fragments
    by ldmatrix, ``ASYNC=1`` stages by cp.async with ``PF=0``)."""
    parser.add_argument("--mma", nargs="*", default=None, metavar="KEY=VALUE",
                        help="laid over half products' warp-product tiles (tuning's mma row, e.g. TK=64, REGS=128, "
                        "PF=0 ASYNC=1 or MMA=0)")


def override_mma(dev: clnn.Device, settings: list[str] | None) -> None:
    """Lay ``--mma``'s settings over tuning's ``mma`` row for the rest of this process. Where the row asks for warp
    products on ``dev``, a kind whose half tile cannot take them (gemm_config falls back to the SIMT tile: local
    memory, say) is named, so that a variant is not timed as another tile unnoticed; gemm's must take them."""
    if not settings:
        return
    override("mma", **_pairs(settings, "--mma", (*_KEYS, "MMA", *MMA_EXTRAS)))
    for kind, dtype, cfg in warp_product_misfits(dev):
        why = f"--mma {' '.join(settings)}: {kind}'s {dtype.name} tile runs without warp products ({dev}) as {cfg}"
        if kind == "gemm":
            raise SystemExit(why)
        print(why)


def _pairs(settings: list[str], option: str, keys: tuple[str, ...]) -> dict[str, int]:
    pairs = {}
    for item in settings:
        key, _, value = item.partition("=")
        if key not in keys or not value.isdigit():
            raise SystemExit(f"{option} expects KEY=INTEGER with KEY one of {list(keys)}; got {item!r}")
        pairs[key] = int(value)
    return pairs


def override_tiles(dev: clnn.Device, settings: list[str] | None) -> None:
    """Lay ``KEY=VALUE`` settings of gemm.h's tile keys over every tile kind for the rest of this process
    (tuning.override): a variant of the tuned tiles timed without storing it (``--tile VWA=4``). A kind whose tile
    cannot take the settings on ``dev`` (gemm_config would shrink it: the convolutions' tiles with DB=1, say) gets
    them only through gemm's, which its row lies over (noted); gemm's must take them."""
    if not settings:
        return
    pairs = _pairs(settings, "--tile", (*_KEYS, *TILE_EXTRAS))
    for kind in TILE_KINDS:
        with tuning.override(kind, **pairs):
            cfg = gemm_config(dev, np.float32, kind)  # shrunk to fit the device where it does not
        if all(cfg.get(key, 0) == value for key, value in pairs.items()):
            override(kind, **pairs)
        elif kind == "gemm":
            raise SystemExit(f"--tile {' '.join(settings)}: gemm's tile would run as {cfg} on {dev}")
        else:
            print(f"--tile {' '.join(settings)}: not laid over {kind}'s own tile, which runs as "
                  f"{gemm_config(dev, np.float32, kind)}")

