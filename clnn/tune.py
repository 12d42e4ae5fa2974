"""``clnn tune``: measure tunable kernels' parameters on a device and store the winners.

For each tunable kernel family the tuner walks a parameter space (the current choice first, then
the built-in table's rows for other device types, then the rest in a fixed shuffled order), skips
candidates that are invalid or exceed the device's limits or fail to build, saying why, checks every
remaining candidate against NumPy in float64 before timing it, re-times the fastest few against the current
choice in interleaved rounds (a timing slowed by other load on the machine is not the last word), and stores
the fastest correct one in the database of :mod:`clnn.tuning`, which the planners then consult before the
built-in table. Families: ``gemm`` (the ``gemm`` and ``gemm_small`` tiles), ``rows`` (CPUs' ``gemm_rows`` block,
which takes their float32 and float64 products), ``conv`` (the implicit-GEMM convolution kernels' tiles,
``conv_fwd`` (which also runs the input gradients) and ``conv_bwd_weight``, each timed at a representative layer,
and ``winograd``, the tile of Winograd's batched product of that layer's planes, then whether Winograd pays at all:
3x3 layers timed with and without it decide its ``MIN_INTENSITY``), and ``plan`` (``matmul.plan``'s costs, fitted
to every tile and k-split it weighs, timed on a few products).
"""

from __future__ import annotations

import abc
import argparse
import collections
import contextlib
import functools
import itertools
import json
import math
import multiprocessing
import multiprocessing.pool
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

from . import kernels, tuning
from .device import Device, device
from .ops import conv, winograd
from .ops.creation import tensor
from .ops.matmul import (
    _KEYS,
    OPTIONAL_KEYS,
    ROWS_KEYS,
    TILE_EXTRAS,
    GemmPlan,
    PlanOption,
    choose,
    config_problem,
    gemm_config,
    gemm_raw,
    plan_options,
    rows_config,
    rows_defines,
    tiled_plan,
)
from .tensor import Tensor

Printer = Callable[[str], None]

_SPACE = {  # gemm.cl's tunables; config_problem() rejects invalid combinations (TK 256: PoCL's GEMM on AVX2)
    "TM": (16, 32, 64, 128, 256), "TN": (16, 32, 48, 64, 96, 128, 192), "TK": (8, 16, 32, 64, 128, 256),
    "WM": (1, 2, 4, 8), "WN": (1, 2, 4, 8, 16, 24, 32, 48, 64), "VW": (1, 2, 4, 8, 16), "VWG": (1, 2, 4, 8, 16),
    "VWA": (1, 2, 4, 8), "APAD": (0, 1), "DB": (0, 1), "PF": (0, 1, 2),
}
_LEVELS = ("APAD", "DB", "PF")  # keys whose values are levels (on/off, or PF's 0-2): |a - b| steps apart
_SPACE_KEYS = tuple(k for k in _KEYS if k in _SPACE)  # the keys of _space()'s tuples
_UNROLLED = 16  # the KU tried against the current choice's, on it alone (NVIDIA's registers follow it: gemm.h)
_MAX_ACC = 128  # a GPU work-item's accumulators; more spill its registers
# The search's fastest candidates re-timed against the current choice, in rounds that interleave them, within the
# budget's last fifth: a shared host or a laptop's clock slows some timings by tens of percent for seconds at a time
# (a 2-core VM, PoCL: the current choice timed 66 GFLOP/s in the search and 150 re-timed, 2026-11-28), which one
# timing each cannot tell from a slower tile.
_FINALISTS = 3
_ROUNDS = 3
_CONFIRM_SHARE = 0.2


def _shapes(dev: Device, kind: str) -> tuple[int, int, int]:
    """The (M, N, K) a ``kind`` tile is timed at: square for ``gemm``, a convolution's few-row
    product for ``gemm_small``; smaller on CPUs so that a candidate takes milliseconds."""
    big = dev.type != "cpu"
    if kind == "gemm":
        return (2048, 2048, 2048) if big else (512, 512, 512)
    return (64, 25088, 288) if big else (64, 4096, 288)


def _conv_shape(dev: Device) -> tuple[int, int, int, int, int]:
    """The (N, C, H, W, O) of the 3x3, padding 1 layer the conv kinds are timed at: the issue's
    b32 64->128 56x56 on GPUs, smaller on CPUs."""
    return (32, 64, 56, 56, 128) if dev.type != "cpu" else (8, 32, 28, 28, 64)


def _registers(dev: Device) -> int | None:
    """A CPU's vector registers (AVX-512 has 32, AVX2 16), which hold a work-item's block of accumulators; None for
    other devices."""
    return (32 if dev.vector_width >= 16 else 16) if dev.type == "cpu" else None


@functools.cache
def _space(registers: int | None) -> np.ndarray:
    """The tiles of _SPACE (a row each, values in _SPACE_KEYS' order) whose rows and columns divide into the
    work-items' blocks and vectors, whose sides hold whole load runs, and whose work-items' accumulators fit: at
    most _MAX_ACC, or with a CPU's ``registers`` its vectors of them, B's and a broadcast (8x48 blocks of 16-wide
    vectors ran PoCL's GEMM 15 % faster than 4x32 on an AVX-512 Xeon, 4x64 10-15 %): 1.2-2.4 * 10^6 rows, built
    with NumPy (config_problem still checks each one yielded)."""
    def grid(*keys: str) -> np.ndarray:
        return np.array(list(itertools.product(*(_SPACE[k] for k in keys))), np.int16)  # values <= 256

    rows, cols, rest = grid("TM", "WM", "VWA"), grid("TN", "WN", "VW"), grid("TK", "VWG", "APAD", "DB", "PF")
    rows = rows[(rows[:, 0] % rows[:, 1] == 0) & (rows[:, 1] % rows[:, 2] == 0)]
    cols = cols[(cols[:, 0] % cols[:, 1] == 0) & (cols[:, 1] % cols[:, 2] == 0)]
    rest = rest[rest[:, 0] % rest[:, 1] == 0]
    if registers is None:
        r, c = np.nonzero(rows[:, None, 1] * cols[None, :, 1] <= _MAX_ACC)
    else:
        nv = cols[None, :, 1] // cols[None, :, 2]  # B's vectors per work-item row
        r, c = np.nonzero(rows[:, None, 1] * nv + nv + 1 <= registers)
    (tm, wm, vwa), (tn, wn, vw) = rows[r].T, cols[c].T
    pair, k = np.nonzero((tm[:, None] % rest[None, :, 1] == 0) & (tn[:, None] % rest[None, :, 1] == 0))
    tk, vwg, apad, db, pf = rest[k].T
    columns = {"TM": tm[pair], "TN": tn[pair], "WM": wm[pair], "WN": wn[pair], "VW": vw[pair], "VWA": vwa[pair],
               "TK": tk, "VWG": vwg, "APAD": apad, "DB": db, "PF": pf}
    return np.stack([columns[key] for key in _SPACE_KEYS], axis=1)


def _step(key: str, a: int, b: int) -> float:
    """How far apart two values of ``key`` are: |log2 of their ratio| (one per doubling), or for levels (APAD, DB,
    PF) |a - b|."""
    return float(abs(a - b)) if key in _LEVELS else abs(math.log2(a / b))


def _distance(cfg: dict[str, int], to: dict[str, int]) -> float:
    """How far apart two tiles are: the sum of their keys' steps."""
    return sum(_step(k, cfg[k], to[k]) for k in _SPACE_KEYS)


@functools.lru_cache(maxsize=4)
def _nearest_first(current: tuple[int, ...], seed: int, registers: int | None) -> np.ndarray:
    """The rows of _space(registers), nearest ``current`` (values in _SPACE_KEYS' order) first, each distance's tiles
    in a fixed shuffled order. Summed a key at a time in _distance's order, so equal distances tie exactly."""
    space, distance = _space(registers), 0.0
    for i, (key, c) in enumerate(zip(_SPACE_KEYS, current)):
        values = np.array(_SPACE[key])  # ascending
        steps = np.array([_step(key, int(v), c) for v in values])
        distance = distance + steps[np.searchsorted(values, space[:, i])]
    shuffled = np.random.default_rng(seed).permutation(len(space))
    order = shuffled[np.argsort(distance[shuffled], kind="stable")]  # stable: the shuffle orders each distance's
    return order.astype(np.int32)


def candidates(dev: Device, kind: str, seed: int = 0) -> Iterator[dict[str, int]]:
    """Every ``gemm.cl`` tile worth timing for ``kind``, without repeats: the current choice, the same with its
    slice's k-loop unrolled by _UNROLLED or left to the compiler (KU), on NVIDIA's runtime from compute capability 8.0
    the same staged by cp.async (gemm.h's ASYNC, PF 0), the table's rows, then the space nearest the
    current choice first (each distance's tiles in a fixed shuffled order, with the current KU; invalid
    combinations left out). On an H200 a 1.55x faster GEMM tile was the current choice's nearest neighbour
    (single-buffered), where in the shuffled space each of ~10^5 tiles came as likely first. The convolution
    kernels are single-buffered, so their candidates all have DB=0."""
    current = gemm_config(dev, np.float32, kind)
    firsts = [current, current | {"KU": 0 if current["KU"] else _UNROLLED}]
    if kernels.runs_ptx(dev) and kernels.sm80(dev):
        firsts.append(current | {"PF": 0, "ASYNC": 1})
    firsts += [{**current, **row} for kinds in ("gemm", "gemm_small") for row in tuning.TABLE[kinds].values()]

    def rest() -> Iterator[dict[str, int]]:  # ordered only when the firsts are spent
        registers = _registers(dev)
        space = _space(registers)
        for row in _nearest_first(tuple(current[k] for k in _SPACE_KEYS), seed, registers):
            yield dict(zip(_SPACE_KEYS, map(int, space[row])), KU=current["KU"])

    seen = set()
    for cfg in itertools.chain(firsts, rest()):
        cfg = {**cfg, "DB": 0} if kind in conv.TUNED else cfg
        key = tuple(cfg.get(k, 0) for k in (*_KEYS, *TILE_EXTRAS))
        if key not in seen and config_problem(cfg) is None:
            seen.add(key)
            yield cfg


def _relerr(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


class _Problem(abc.ABC):
    """A kind's timed run and its float64 checks; subclasses set ``shape``, ``flops`` and ``refs`` and
    define ``run(cfg, which)`` (``which``: 0 the timed shape, 1 an odd-shaped check that straddles any tile)."""

    dev: Device
    shape: tuple[int, ...]
    flops: float
    refs: tuple[np.ndarray, np.ndarray]

    @abc.abstractmethod
    def run(self, cfg: dict[str, int], which: int = 0) -> Tensor:
        """The kernel with tile ``cfg`` on the timed (0) or the odd (1) shape's operands."""

    @abc.abstractmethod
    def program_of(self, cfg: dict[str, int]) -> tuple[str, str, dict[str, object]]:
        """The (file, kernel, defines) :meth:`run` builds with tile ``cfg``: what a builder process builds ahead."""

    def check(self, cfg: dict[str, int]) -> str | None:
        """Why ``cfg`` computes a wrong result (relative error over 1e-5), or None."""
        for which, what in ((1, "odd shape"), (0, "timed shape")):
            err = _relerr(self.run(cfg, which).numpy().reshape(self.refs[which].shape), self.refs[which])
            if not err < 1e-5:
                return f"wrong result on the {what}: relative error {err:.1e}"
        return None

    def seconds(self, cfg: dict[str, int], budget: float) -> float:
        """The best time of a few runs, at most ``budget`` seconds of them (at least two, at most ten)."""
        return _best_seconds(lambda: (self.run(cfg), self.dev.synchronize()), budget, 10)


class _GemmProblem(_Problem):
    """``batch`` products of the kind's shape, and a transposed, batched odd-shaped one."""

    def __init__(self, dev: Device, shape: tuple[int, int, int], rng: np.random.Generator, batch: int = 1) -> None:
        self.dev, self.shape, self.batch, (m, n, k) = dev, shape, batch, shape
        self.flops = 2.0 * batch * m * n * k
        a = rng.standard_normal((batch, m, k)).astype(np.float32)
        b = rng.standard_normal((batch, k, n)).astype(np.float32)
        self.a, self.b = tensor(a, device=dev), tensor(b, device=dev)
        self.small = (2, 131, 137, 67)  # batch, m, n, k: primes past a 128 tile, a short last k-slice
        batch, sm, sn, sk = self.small
        sa, sb = rng.standard_normal((batch, sk, sm)), rng.standard_normal((batch, sn, sk))
        self.sa, self.sb = tensor(sa.astype(np.float32), device=dev), tensor(sb.astype(np.float32), device=dev)
        sa32, sb32 = sa.astype(np.float32).astype(np.float64), sb.astype(np.float32).astype(np.float64)
        self.refs = (a.astype(np.float64) @ b, sa32.transpose(0, 2, 1) @ sb32.transpose(0, 2, 1))

    def program_of(self, cfg: dict[str, int]) -> tuple[str, str, dict[str, object]]:
        return "gemm.cl", "gemm", kernels.defines(np.float32, **cfg)

    def run(self, cfg: dict[str, int], which: int = 0) -> Tensor:
        if which:
            batch, m, n, k = self.small
            return gemm_raw(self.sa, (k * m, 1, m), self.sb, (n * k, 1, k), batch, m, n, k, how=tiled_plan(cfg, k))
        m, n, k = self.shape
        return gemm_raw(self.a, (m * k, k, 1), self.b, (k * n, n, 1), self.batch, m, n, k, how=tiled_plan(cfg, k))


class _ConvProblem(_Problem):
    """One convolution kernel (``kind``) of a 3x3, padding-1 conv2d at the representative layer, and at
    an odd shape (131 -> 137 channels, 7x9 pixels) past every tile."""

    def __init__(self, dev: Device, kind: str, shape: tuple[int, int, int, int, int],
                 rng: np.random.Generator) -> None:
        self.dev, self.kind, self.shape = dev, kind, shape
        n, c, h, w, o = shape
        self.flops = 2.0 * n * c * o * 9 * h * w
        self.operands, refs = [], []
        for n, c, h, w, o in (shape, (2, 131, 7, 9, 137)):
            x, wt, gy = (rng.standard_normal(s).astype(np.float32) for s in ((n, c, h, w), (o, c, 3, 3), (n, o, h, w)))
            self.operands.append(tuple(tensor(v, device=dev) for v in (x, wt, gy)))
            refs.append(_conv_ref(kind, *(v.astype(np.float64) for v in (x, wt, gy))))
        self.refs = (refs[0], refs[1])

    def program_of(self, cfg: dict[str, int]) -> tuple[str, str, dict[str, object]]:
        return "conv.cl", self.kind, kernels.defines(np.float32, **cfg)

    def run(self, cfg: dict[str, int], which: int = 0) -> Tensor:
        return conv.run_tile(self.kind, *self.operands[which], 1, cfg)


def _winograd_shape(dev: Device) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of F(4x4, 3x3)'s product of planes for :func:`_conv_shape`'s layer: 36 positions, the
    output channels, the tiles, the input channels."""
    n, c, h, w, o = _conv_shape(dev)
    return winograd.positions(4), o, n * -(-h // 4) * -(-w // 4), c


def _conv_ref(kind: str, x: np.ndarray, w: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """conv2d(x, w, padding=1)'s (3x3 w) ``kind`` result in NumPy: y or the weight gradient."""
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    if kind == "conv_fwd":
        return np.einsum("nchwij,ocij->nohw", win, w, optimize=True)
    return np.einsum("nohw,nchwij->ocij", gy, win, optimize=True)


def _brief(cfg: dict[str, int]) -> str:
    """A tile's (or gemm_rows block's) keys and values, in gemm.h's order of tile keys, extras only where set."""
    order = (*_KEYS, *TILE_EXTRAS, *ROWS_KEYS)
    return " ".join(f"{k}={cfg[k]}" for k in dict.fromkeys(order) if k in cfg and (k not in TILE_EXTRAS or cfg[k]))


def builders(dev: Device) -> int:
    """Processes that build the next candidates' programs while one is timed: one per host core, none when the
    device is the host's own CPU (they would take the cores its timings run on). NVIDIA's OpenCL builds a GEMM
    tile in seconds."""
    return 0 if dev.real.get("type", dev.type) == "cpu" else os.cpu_count() or 1


def _build_failure(err: kernels.KernelBuildError) -> str:
    lines = str(err).splitlines()
    return "build failed: " + next((ln.strip() for ln in lines if "error" in ln), lines[0])


@contextlib.contextmanager
def _builder_pool(count: int) -> Iterator[multiprocessing.pool.Pool | None]:
    """``count`` builder processes (None for none), spawned with PyOpenCL's disk cache off (each builds from
    source and sends its binary back), ended on exit without waiting for the builds under way. Processes, not
    threads: an H200's tuner, with 16 builder threads, timed one GEMM tile in its 37 s and then waited minutes
    for the builds in flight."""
    if not count:
        yield None
        return
    was = os.environ.get("PYOPENCL_NO_CACHE")
    os.environ["PYOPENCL_NO_CACHE"] = "1"  # what the spawned processes inherit
    try:
        pool = multiprocessing.get_context("spawn").Pool(count)
    finally:
        if was is None:
            del os.environ["PYOPENCL_NO_CACHE"]
        else:
            os.environ["PYOPENCL_NO_CACHE"] = was
    try:
        yield pool
    finally:
        pool.terminate()


def _built_ahead(dev: Device, kind: str, problem: _Problem,
                 deadline: float) -> Iterator[tuple[dict[str, int], str | None]]:
    """``kind``'s candidates in order, each with why it cannot run (None: it may), their programs built ahead by
    :func:`builders` processes. Once one may run, it waits for a later one's build only until ``deadline``, and
    ends there."""
    source, count = iter(candidates(dev, kind)), builders(dev)
    with _builder_pool(count) as pool:
        ahead: collections.deque[tuple[dict[str, int], str | None, Any]] = collections.deque()
        runnable = False
        while True:
            while len(ahead) < max(1, count) and (cfg := next(source, None)) is not None:
                cfg = {**OPTIONAL_KEYS, **cfg}
                why = config_problem(cfg, dev)
                build = None
                if pool is not None and why is None:
                    file, name, defines = problem.program_of(cfg)
                    build = pool.apply_async(kernels.build_binary,
                                             (dev.index, file, kernels.build_options(dev, file, name, defines)))
                ahead.append((cfg, why, build))
            if not ahead:
                return
            cfg, why, build = ahead.popleft()
            if build is not None:
                try:
                    binary = build.get(max(0.0, deadline - time.perf_counter()) if runnable else None)
                    file, name, defines = problem.program_of(cfg)
                    kernels.kernel(dev, file, name, defines, binary)  # the program, from the binary
                except multiprocessing.TimeoutError:
                    return
                except kernels.KernelBuildError as err:
                    why = _build_failure(err)
            runnable = runnable or why is None
            yield cfg, why


def _search(dev: Device, kind: str, problem: _Problem, budget: float, path: Path | None, out: Printer,
            step: str) -> dict[str, Any] | None:
    """Time ``kind``'s candidates on ``problem`` within ``budget`` seconds (the current choice always), their
    programs built ahead by :func:`builders` processes; store and return the fastest correct one's entry, or None
    when none ran."""
    end = time.perf_counter() + budget
    deadline = end - _CONFIRM_SHARE * budget
    out(f"{kind}: timing {'x'.join(map(str, problem.shape))} float32 on {dev}")
    timed: list[tuple[float, dict[str, int]]] = []
    tried = 0
    with contextlib.closing(_built_ahead(dev, kind, problem, deadline)) as ready:
        for cfg, problem_text in ready:
            if timed and time.perf_counter() > deadline:
                break
            tried += 1
            if problem_text is None:
                try:
                    problem_text = problem.check(cfg)
                except kernels.KernelBuildError as err:
                    problem_text = _build_failure(err)
                except cl.Error as err:  # e.g. too many registers for the work-group: refused at launch
                    problem_text = f"launch failed: {err}"
            if problem_text is not None:
                out(f"  skip {_brief(cfg)}: {problem_text}")
                continue
            secs = problem.seconds(cfg, max(0.05, deadline - time.perf_counter()) / 4)
            timed.append((secs, cfg))
            out(f"  [{tried}] {_brief(cfg)}: {problem.flops / secs / 1e9:.1f} GFLOP/s "
                f"(best {problem.flops / min(t for t, _ in timed) / 1e9:.1f})")
    if not timed:
        out(f"{kind}: no candidate ran; nothing stored")
        return None
    best = _confirm(problem, timed, end, out)
    entry = {"params": best[1], "gflops": round(problem.flops / best[0] / 1e9, 2), "shape": list(problem.shape),
             "tried": tried, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    tuning.store(dev, kind, entry, path)
    out(f"{kind}: stored {_brief(best[1])} ({entry['gflops']} GFLOP/s, {tried} candidates) [{step}]")
    return entry


def _confirm(problem: _Problem, timed: list[tuple[float, dict[str, int]]], end: float,
             out: Printer) -> tuple[float, dict[str, int]]:
    """The fastest of the first candidate timed (the current choice, unless it could not run) and the _FINALISTS
    fastest others, each re-timed in _ROUNDS interleaved rounds until ``end``: each keeps its best time."""
    finalists = [timed[0], *sorted(timed[1:], key=lambda t: t[0])[:_FINALISTS]]
    best = [secs for secs, _ in finalists]
    if len(finalists) > 1:
        share = (end - time.perf_counter()) / (_ROUNDS * len(finalists))
        for _, i in itertools.product(range(_ROUNDS), range(len(finalists))):
            if time.perf_counter() >= end:
                break
            best[i] = min(best[i], problem.seconds(finalists[i][1], share))
        out("  re-timed: " + ", ".join(f"{problem.flops / secs / 1e9:.1f}" for secs in best) + " GFLOP/s (the "
            "current choice first)")
    win = min(range(len(finalists)), key=best.__getitem__)
    return best[win], finalists[win][1]


def tune_gemm(dev: Device, budget: float, path: Path | None, out: Printer) -> dict[str, dict[str, Any]]:
    """Tune the ``gemm`` and ``gemm_small`` tiles within ``budget`` seconds; store and return the winners.

    The current choice is always measured, so each kind gets an entry however small the budget.
    """
    kinds, rng, winners = ("gemm", "gemm_small"), np.random.default_rng(0), {}
    for i, kind in enumerate(kinds):
        entry = _search(dev, kind, _GemmProblem(dev, _shapes(dev, kind), rng), budget / len(kinds), path, out,
                        f"{i + 1}/{len(kinds)}")
        if entry is not None:
            winners[kind] = entry
    return winners


def _conv_step(x: Tensor, w: Tensor, gy: Tensor) -> list[Tensor]:
    """conv2d(x, w, padding=1) and its backward from ``gy``, finished: the output and w's gradient."""
    x.grad = w.grad = None
    y = conv.conv2d(x, w, padding=1)
    y.backward(gy)
    x.device.synchronize()
    return [y, w.grad]


def _best_seconds(fn: Callable[[], object], budget: float, most: int = 1000) -> float:
    """The best time of runs of ``fn`` (which finishes its work) within about ``budget`` seconds: at least two,
    at most ``most``."""
    best, start = float("inf"), time.perf_counter()
    for rep in range(most):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        if rep >= 1 and time.perf_counter() - start > budget:
            break
    return best


def _winograd_layers(dev: Device) -> list[tuple[int, int, int, int, int]]:
    """(N, C, H, W, O) of the 3x3, padding-1 layers at which Winograd is timed against the implicit GEMM: C = O, so
    intensities C*O / (C + O) of 32, 64 and 128 on GPUs (16, 32 and 64 on CPUs, with smaller images)."""
    if dev.type == "cpu":
        return [(8, c, 14, 14, c) for c in (32, 64, 128)]
    return [(32, c, 28, 28, c) for c in (64, 128, 256)]


def least_winning(wins: list[tuple[float, bool]]) -> float:
    """Winograd's MIN_INTENSITY from (intensity, whether Winograd won) per layer timed: the least intensity from
    which it won at every more intense layer too, or 0 (never) when it lost at the most intense one."""
    least = 0.0
    for intensity, won in sorted(wins, reverse=True):
        if not won:
            break
        least = intensity
    return least


def tune_winograd_choice(dev: Device, budget: float, path: Path | None, out: Printer) -> dict[str, Any] | None:
    """Whether Winograd's kernels beat the implicit GEMM on ``dev``: conv2d's forward and both gradients at each
    layer of :func:`_winograd_layers`, timed both ways (tuning.override) within ``budget`` seconds and checked
    against NumPy in float64; stores winograd's MIN_INTENSITY (:func:`least_winning`) beside its tile."""
    rng, per_layer, wins = np.random.default_rng(0), budget / len(_winograd_layers(dev)) / 2, []
    out(f"winograd: timing 3x3 layers with and without it on {dev}")
    for n, c, h, w, o in _winograd_layers(dev):
        xa, wa, gya = (rng.standard_normal(s).astype(np.float32) for s in ((n, c, h, w), (o, c, 3, 3), (n, o, h, w)))
        refs = [_conv_ref(kind, *(v.astype(np.float64) for v in (xa, wa, gya))) for kind in conv.TUNED]
        x, wt = tensor(xa, device=dev, requires_grad=True), tensor(wa, device=dev, requires_grad=True)
        gy = tensor(gya, device=dev)
        secs = {}
        for least in (0, 1):  # 1: Winograd wherever it computes the layer
            with tuning.override("winograd", MIN_INTENSITY=least):
                for got, ref in zip(_conv_step(x, wt, gy), refs):
                    err = _relerr(got.numpy(), ref)
                    if not err < 1e-5:
                        out(f"winograd: {'with' if least else 'without'} it, relative error {err:.1e}; nothing stored")
                        return None
                secs[least] = _best_seconds(functools.partial(_conv_step, x, wt, gy), per_layer)
        intensity = c * o / (c + o)
        wins.append((intensity, secs[1] < secs[0]))
        out(f"  {n}x{c}->{o} {h}x{w} (intensity {intensity:g}): Winograd {secs[1] * 1e3:.2f} ms, implicit GEMM "
            f"{secs[0] * 1e3:.2f} ms")
    entry = tuning.load_db(path).get(tuning.device_key(dev), {}).get("winograd", {"params": {}})
    entry = {**entry, "params": {**entry["params"], "MIN_INTENSITY": least_winning(wins)}}
    tuning.store(dev, "winograd", entry, path)
    out(f"winograd: stored MIN_INTENSITY {entry['params']['MIN_INTENSITY']:g} (0: never)")
    return entry


def tune_conv(dev: Device, budget: float, path: Path | None, out: Printer) -> dict[str, dict[str, Any]]:
    """Tune the tiles of the convolution kernels (``conv_fwd``, ``conv_bwd_weight``) and of Winograd's batched
    product (``winograd``) within ``budget`` seconds, as :func:`tune_gemm` (the planners weigh each stored tile
    against ``gemm_small``'s), then whether Winograd pays on the device (:func:`tune_winograd_choice`)."""
    rng, winners, kinds = np.random.default_rng(0), {}, (*conv.TUNED, "winograd")
    for i, kind in enumerate(kinds):
        if kind == "winograd":
            batch, *shape = _winograd_shape(dev)
            problem: _Problem = _GemmProblem(dev, tuple(shape), rng, batch)
        else:
            problem = _ConvProblem(dev, kind, _conv_shape(dev), rng)
        entry = _search(dev, kind, problem, budget / (len(kinds) + 1), path, out, f"{i + 1}/{len(kinds)}")
        if entry is not None:
            winners[kind] = entry
    entry = tune_winograd_choice(dev, budget / (len(kinds) + 1), path, out)
    if entry is not None:
        winners["winograd"] = entry
    return winners


def _plan_shapes(dev: Device) -> list[tuple[int, int, int, int]]:
    """(batch, M, N, K) of the products the planner's costs are fitted at: square ones, a convolution's few-row
    product, a short k, and a weight gradient's long k over few outputs (smaller on CPUs)."""
    if dev.type == "cpu":
        return [(1, 512, 512, 512), (1, 64, 4096, 288), (1, 1024, 1024, 64), (1, 64, 576, 16384)]
    return [(1, 1024, 1024, 1024), (1, 2048, 2048, 2048), (1, 64, 100352, 288), (1, 4096, 4096, 256),
            (1, 256, 2304, 50176)]


_COSTS = {"STAGE": (0.25, 0.5, 1.0, 1.5, 2.0, 4.0), "SPLIT": (0.25, 1.0, 4.0, 16.0, 64.0), "FILL": (0, 1, 2, 4)}


def fit_costs(timed: list[list[tuple[PlanOption, float]]], current: dict[str, float], compute_units: int,
              points: list[dict[str, float]] | None = None) -> tuple[dict[str, float], float]:
    """The plan costs (of ``points``, by default every point of _COSTS) whose choices among each product's timed
    options lose least against its fastest, as the sum of log(chosen time / fastest time), and that loss; a tie
    keeps the point nearest ``current`` (a change needs a measured gain)."""
    def loss(costs: dict[str, float]) -> float:
        total = 0.0
        for options in timed:
            times = {id(opt.how): secs for opt, secs in options}
            chosen = choose([opt for opt, _ in options], costs, compute_units)
            total += math.log(times[id(chosen)] / min(times.values()))
        return total

    def distance(costs: dict[str, float]) -> float:
        return sum(abs(math.log2((costs[k] + 1) / (float(current[k]) + 1))) for k in _COSTS)

    points = points or [dict(zip(_COSTS, values)) for values in itertools.product(*_COSTS.values())]
    best = min(points, key=lambda costs: (round(loss(costs), 9), distance(costs)))
    return best, loss(best)


def tune_plan(dev: Device, budget: float, path: Path | None, out: Printer) -> dict[str, dict[str, Any]]:
    """Fit ``matmul.plan``'s costs (STAGE, SPLIT, FILL) on ``dev``: time every plan it weighs (tile, k-splits) for
    the products of :func:`_plan_shapes`, each checked against NumPy in float64, within ``budget`` seconds, and
    store the costs whose choices come closest to the fastest plans (:func:`fit_costs`)."""
    rng, deadline, timed = np.random.default_rng(0), time.perf_counter() + budget, []
    current = tuning.params(dev, "plan")
    out(f"plan: timing the planner's options on {dev}")
    for batch, m, n, k in _plan_shapes(dev):
        if timed and time.perf_counter() > deadline:
            break
        a, b = (rng.standard_normal(s).astype(np.float32) for s in ((batch, m, k), (batch, k, n)))
        ref, ta, tb = a.astype(np.float64) @ b, tensor(a, device=dev), tensor(b, device=dev)
        options, results = plan_options(dev, np.dtype(np.float32), batch, m, n, k), []
        for opt in options:
            run = functools.partial(gemm_raw, ta, (m * k, k, 1), tb, (k * n, n, 1), batch, m, n, k, how=opt.how)
            err = _relerr(run().numpy(), ref)
            if not err < 1e-5:
                out(f"plan: {_brief(opt.how.cfg)}, {opt.how.splits} k-ranges: relative error {err:.1e}; nothing stored")
                return {}
            results.append((opt, _best_seconds(lambda run=run: (run(), dev.synchronize()), budget / 200, 5)))
        timed.append(results)
        fastest = min(results, key=lambda r: r[1])
        chosen = choose(options, current, dev.compute_units)
        out(f"  {batch}x{m}x{n}x{k}: {len(options)} plans; fastest {_brief(fastest[0].how.cfg)}, "
            f"{fastest[0].how.splits} k-ranges, {fastest[1] * 1e3:.3f} ms; the current costs' choice "
            f"{next(secs for o, secs in results if o.how is chosen) * 1e3:.3f} ms")
    costs, loss = fit_costs(timed, current, dev.compute_units)
    entry = {"params": costs, "loss": round(loss, 4), "shapes": len(timed), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    tuning.store(dev, "plan", entry, path)
    was = fit_costs(timed, current, dev.compute_units, [current])[1]
    out(f"plan: stored {costs}: its choices' total log loss against the fastest plans {loss:.3f} (was {was:.3f})")
    return {"plan": entry}


class _RowsProblem(_Problem):
    """gemm_rows (CPUs' float32 products) at a square product and at a GPT layer's, summed; an odd-shaped check
    (a transposed B, copied to rows) past any block."""

    def __init__(self, dev: Device, rng: np.random.Generator) -> None:
        self.dev, self.products = dev, ((512, 512, 512), (1024, 256, 64))
        self.shape, self.flops = self.products[0], 2.0 * sum(m * n * k for m, n, k in self.products)
        self.operands = [tuple(tensor(rng.standard_normal(s).astype(np.float32), device=dev) for s in ((m, k), (k, n)))
                         for m, n, k in self.products]
        sa, sb = rng.standard_normal((131, 67)), rng.standard_normal((137, 67))
        self.sa, self.sb = (tensor(x.astype(np.float32), device=dev) for x in (sa, sb))
        self.refs = (self.operands[0][0].numpy().astype(np.float64) @ self.operands[0][1].numpy(),
                     sa.astype(np.float32).astype(np.float64) @ sb.astype(np.float32).astype(np.float64).T)

    def program_of(self, cfg: dict[str, int]) -> tuple[str, str, dict[str, object]]:
        return "gemm.cl", "gemm_rows", kernels.defines(np.float32, **rows_defines(cfg))

    def run(self, cfg: dict[str, int], which: int = 0) -> Tensor:
        how = GemmPlan("rows", cfg)
        if which:
            return gemm_raw(self.sa, (0, 67, 1), self.sb, (0, 1, 67), 1, 131, 137, 67, how=how)
        for (m, n, k), (a, b) in zip(self.products[1:], self.operands[1:]):
            gemm_raw(a, (0, k, 1), b, (0, n, 1), 1, m, n, k, how=how)
        (m, n, k), (a, b) = self.products[0], self.operands[0]
        return gemm_raw(a, (0, k, 1), b, (0, n, 1), 1, m, n, k, how=how)


def rows_candidates(dev: Device) -> list[dict[str, int]]:
    """gemm_rows blocks worth timing on ``dev``: the current one first, then WM rows x NV of its VW-wide vectors whose
    accumulators, B's NV vectors and a broadcast fit the CPU's vector registers, with LY work-items a group and
    SPAN bytes of B's rows a chunk, nearest the current first; none where gemm_rows is not used."""
    current = rows_config(dev, np.float32)
    if current is None:
        return []
    registers, vw = _registers(dev) or 16, current["VW"]
    blocks = [{"WM": wm, "WN": nv * vw, "VW": vw, "LY": ly, "SPAN": span}
              for wm, nv, ly, span in itertools.product((2, 3, 4, 6, 8), (1, 2, 3, 4, 6), (4, 8, 16),
                                                        (1 << 21, 1 << 22, 1 << 23))
              if wm * nv + nv + 1 <= registers]

    def distance(cfg: dict[str, int]) -> float:
        return sum(abs(math.log2(cfg[key] / current[key])) for key in ROWS_KEYS)

    return [current, *sorted((b for b in blocks if b != current), key=distance)]


def tune_rows(dev: Device, budget: float, path: Path | None, out: Printer) -> dict[str, dict[str, Any]]:
    """Tune gemm_rows' block (WM, WN, LY, SPAN) within ``budget`` seconds on a CPU: each candidate checked against
    NumPy in float64, timed, the fastest re-timed against the current choice; store and return the winner."""
    candidates = rows_candidates(dev)
    if not candidates:
        out(f"rows: {dev} takes no gemm_rows (tuning's gemm_rows LY 0); nothing to tune")
        return {}
    problem, end = _RowsProblem(dev, np.random.default_rng(0)), time.perf_counter() + budget
    deadline = end - _CONFIRM_SHARE * budget
    out(f"rows: timing {' + '.join('x'.join(map(str, p)) for p in problem.products)} float32 on {dev}")
    timed: list[tuple[float, dict[str, int]]] = []
    for tried, cfg in enumerate(candidates, 1):
        if timed and time.perf_counter() > deadline:
            break
        try:
            problem_text = problem.check(cfg)
        except kernels.KernelBuildError as err:
            problem_text = _build_failure(err)
        if problem_text is not None:
            out(f"  skip {_brief(cfg)}: {problem_text}")
            continue
        timed.append((problem.seconds(cfg, max(0.05, deadline - time.perf_counter()) / 8), cfg))
        out(f"  [{tried}] {_brief(cfg)}: {problem.flops / timed[-1][0] / 1e9:.1f} GFLOP/s "
            f"(best {problem.flops / min(t for t, _ in timed) / 1e9:.1f})")
    if not timed:
        out("rows: no candidate ran; nothing stored")
        return {}
    secs, best = _confirm(problem, timed, end, out)
    entry = {"params": best, "gflops": round(problem.flops / secs / 1e9, 2), "tried": len(timed),
             "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    tuning.store(dev, "gemm_rows", entry, path)
    out(f"rows: stored {_brief(best)} ({entry['gflops']} GFLOP/s, {len(timed)} candidates)")
    return {"gemm_rows": entry}


TUNERS: dict[str, Callable[[Device, float, Path | None, Printer], dict[str, dict[str, Any]]]] = {
    "gemm": tune_gemm,
    "rows": tune_rows,
    "conv": tune_conv,
    "plan": tune_plan,  # after gemm: it weighs the stored tiles
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
