"""Matrix products: ``gemm`` and NumPy-style ``matmul`` (``kernels_cl/gemm.cl``), and the fused epilogue
that GEMM and convolution stores share: the bias added and an activation applied in the store."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import kernels, profiler, tuning
from ..device import Device
from ..kernels import broadcast_strides, defines, group_size, real_scalar
from ..profiler import profiled
from ..tensor import HALF_DTYPES, Tensor, is_grad_enabled
from ..validation import broadcast_shapes, require_float, require_tensor, same_device, same_dtype
from ._core import autocast_loads, empty, record, view_as
from .creation import tensor
from .elementwise import UNARY, unary_grad
from .reduce import broadcast_to, sum_to_shape
from .shape import reshape, strided_copy

FUSED_ACTS = ("relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "silu")  # activations a GEMM or conv store applies
_KEYS = ("TM", "TN", "TK", "WM", "WN", "VW", "VWG", "VWA", "APAD", "DB", "PF", "KU")
_FALLBACK = {  # 16 work-items
    "TM": 4, "TN": 4, "TK": 4, "WM": 1, "WN": 1, "VW": 1, "VWG": 1, "VWA": 1, "APAD": 0, "DB": 0, "PF": 0, "KU": 0}


TILE_KINDS = ("gemm", "gemm_small", "conv_fwd", "conv_bwd_weight")  # the tuning kinds gemm_config gives tiles of
OPTIONAL_KEYS = {"VWA": 1, "PF": 0, "KU": 0}  # keys a table row or stored entry may leave out: the kernels' defaults
# keys a tuning row may add to a tile, kept only where set (default 0): REGS, a cap on a work-item's registers (NVIDIA's
# -cl-nv-maxrregcount), and ASYNC, plain runs staged by cp.async (gemm.h), both for NVIDIA's runtime; a warp-product
# tile takes the mma row's, with its LDSM (fragments by ldmatrix)
TILE_EXTRAS = ("REGS", "ASYNC")
MMA_EXTRAS = (*TILE_EXTRAS, "LDSM")
MMA_K = 16  # the k-depth of gemm.h's warp products (MMA = 1, a tile key of half products only: gemm_config)
MMA_PAD = 8  # gemm.h's padding of an MMA tile's rows, in 16-bit elements
# most elements of A's and B's slices one work-item holds in registers fetched ahead (PF) of a warp-product tile:
# in clang's NVPTX build (scripts/nvptx_regs.py, ptxas 12.9, sm_90) of tuning's mma row (k-slices of 32, PF 2) laid
# over 128x128 / 64x128 / 128x64 / 64x64 tiles of 8x8 blocks in 8-wide loads (32 / 48 / 48 / 64 elements a
# work-item), 220 / 203 / 204 / 254 registers (138 / 140 / 162 / 136 without PF); gemm_small's 64x64 in its 4-wide
# loads took all 255 and spilled 152 bytes (134 registers without)
PF_MAX_FETCHED = 48


def work_items(cfg: dict[str, int]) -> int:
    """A ``gemm.cl`` tile's work-group size: one work-item per WM x WN block."""
    return (cfg["TM"] // cfg["WM"]) * (cfg["TN"] // cfg["WN"])


def config_problem(cfg: dict[str, int], dev: Device | None = None, itemsize: int = 4) -> str | None:
    """Why ``cfg`` is not a valid ``gemm.cl`` tile, or does not fit ``dev``'s work-group and local memory
    (for ``itemsize``-byte arithmetic; limits unchecked without ``dev``); None when it is fine."""
    cfg = {**OPTIONAL_KEYS, **cfg}  # tiles written before these keys existed (tests, stored entries)
    tm, tn, tk, wm, wn, vw, vwg, vwa, apad, db, pf, ku = (cfg[key] for key in _KEYS)
    if min(tm, tn, tk, wm, wn, vw, vwg, vwa) <= 0 or min(apad, ku) < 0 or db not in (0, 1) or pf not in (0, 1, 2):
        return "parameters must be positive (APAD and KU >= 0, DB 0 or 1, PF 0, 1 or 2)"
    if cfg.get("ASYNC", 0) not in (0, 1) or (cfg.get("ASYNC") and pf):
        return "ASYNC must be 0 or 1, and 1 stages run by run (PF 0)"
    if tm % wm or tn % wn or wn % vw or wm % vwa or tm % vwg or tn % vwg or tk % vwg:
        return "needs TM % WM == TN % WN == WN % VW == WM % VWA == 0 and TM, TN, TK multiples of VWG"
    if any(v not in (1, 2, 4, 8, 16) for v in (vw, vwg, vwa)):
        return "VW, VWG and VWA must be 1, 2, 4, 8 or 16"
    if cfg.get("MMA") and (vw != 2 or vwa != 1 or wm % 2 or tm % (8 * wm) or tn % (4 * wn) or tk % MMA_K):
        return f"MMA needs VW 2, VWA 1, an even WM and TM % (8*WM) == TN % (4*WN) == TK % {MMA_K} == 0"
    if dev is None:
        return None
    wg = work_items(cfg)
    if wg > dev.max_work_group_size:
        return f"work-group of {wg} exceeds the device's {dev.max_work_group_size}"
    if cfg.get("MMA"):  # gemm.h keeps MMA tiles in 16 bits, rows padded by MMA_PAD
        local = (1 + db) * (tm * (tk + MMA_PAD) + tk * (tn + MMA_PAD)) * 2
    else:
        local = (1 + db) * (a_tile_elements(cfg) + tk * tn) * itemsize
    if local > dev.local_mem_size:
        return f"{local} bytes of local memory exceed the device's {dev.local_mem_size}"
    return None


def a_tile_elements(cfg: dict[str, int]) -> int:
    """Elements of ``gemm.h``'s local A tile: TM rows of TK + APAD, or with VWA > 1, TK k-rows of TM + APAD * VWA."""
    if cfg["VWA"] > 1:
        return cfg["TK"] * (cfg["TM"] + cfg["APAD"] * cfg["VWA"])
    return cfg["TM"] * (cfg["TK"] + cfg["APAD"])


def gemm_config(dev: Device, dtype: np.dtype, kind: str = "gemm") -> dict[str, int]:
    """The ``gemm.cl`` tile ``kind`` (``"gemm"``, or ``"gemm_small"`` for products with few rows or
    columns, or a convolution kernel's ``"conv_fwd"``, ``"conv_bwd_weight"``) for ``dev``: the tuning
    choice (database, then table; a kind's entries are laid over ``"gemm"``'s, and for half storage
    ``"half_small"``'s over gemm_small's), halved until it fits the device.

    Halving TM, TN and TK together keeps the per-work-item block (WM, WN, VW; cut to what still divides the
    tile), divides the work-group by about 4 and local memory by about 8; a minimal scalar tile is the last
    resort.

    Raises:
        ValueError: the device cannot run even the minimal tile.
    """
    p = tuning.params(dev, "gemm") | tuning.params(dev, kind)
    if kind == "gemm_small" and np.dtype(dtype) in HALF_DTYPES:
        p |= tuning.params(dev, "half_small")
    cfg = {key: int(p.get(key, 0)) for key in _KEYS}
    if "VWG" not in p:
        cfg["VWG"] = cfg["VW"]
    cfg |= {key: int(p.get(key, default)) for key, default in OPTIONAL_KEYS.items()}
    itemsize = 8 if np.dtype(dtype) == np.float64 else 4  # local memory holds `real`
    while config_problem(cfg, dev, itemsize) and min(cfg["TM"], cfg["TN"], cfg["TK"]) >= 2 * _FALLBACK["TM"]:
        tm, tn, tk = cfg["TM"] // 2, cfg["TN"] // 2, cfg["TK"] // 2
        wn = math.gcd(tn, cfg["WN"])  # a 96-column tile halves to 48: blocks of 32 columns become 16
        wm = math.gcd(tm, cfg["WM"])
        cfg = {**cfg, "TM": tm, "TN": tn, "TK": tk, "WM": wm, "WN": wn, "VW": math.gcd(wn, cfg["VW"]),
               "VWG": max(1, math.gcd(tm, tn, tk, cfg["VWG"])), "VWA": math.gcd(wm, cfg["VWA"])}
    if config_problem(cfg, dev, itemsize):
        cfg = dict(_FALLBACK)
    if config_problem(cfg, dev, itemsize):
        raise ValueError(
            f"gemm: {dev} allows work-groups of {dev.max_work_group_size} and {dev.local_mem_size} bytes of "
            f"local memory; the smallest gemm tile needs 16 work-items and {32 * itemsize} bytes"
        )
    warp = tuning.params(dev, "mma") if np.dtype(dtype) in HALF_DTYPES else {"MMA": 0}
    if warp["MMA"] and kernels.warp_products(dev):  # the row's tile keys lie over every kind's
        mma = {**cfg, **{key: int(v) for key, v in warp.items() if key in _KEYS}, "MMA": 1, "VW": 2, "VWA": 1}
        mma |= {key: int(warp[key]) for key in MMA_EXTRAS if warp.get(key)}
        if config_problem(mma, dev, itemsize) is None:
            return _fit_prefetch(mma)
    return cfg | {key: int(p[key]) for key in TILE_EXTRAS if p.get(key)}


def warp_product_misfits(dev: Device) -> list[tuple[str, np.dtype, dict[str, int]]]:
    """(kind, half dtype, the tile it runs) for each kind of :data:`TILE_KINDS` whose half tile runs without the warp
    products tuning's ``mma`` row asks for on ``dev``: gemm_config drops a row that does not fit the device (local
    memory, work-groups) for the SIMT tile. Empty where the row asks for none."""
    if not (tuning.params(dev, "mma")["MMA"] and kernels.warp_products(dev)):
        return []
    tiles = ((kind, np.dtype(dt), gemm_config(dev, dt, kind)) for kind in TILE_KINDS for dt in HALF_DTYPES)
    return [(kind, dt, cfg) for kind, dt, cfg in tiles if not cfg.get("MMA")]


@dataclass(frozen=True)
class GemmPlan:
    """How one product runs: ``kernel`` ``"direct"`` (one work-item per output), ``"tiled"`` with
    tile ``cfg`` (its defines also build the direct kernel), ``splits`` k-ranges of ``ks`` each, or ``"rows"``
    (CPUs' gemm_rows) with its block ``cfg`` (:func:`rows_config`)."""

    kernel: str
    cfg: dict[str, int]
    splits: int = 1
    ks: int = 0


_SPLITS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ROW_FIT = 32  # plan weighs the big tile cut to a product's rows rounded up to this (_fewer_rows)
SHORT_K_MACS = 1 << 22  # products from this many multiply-adds get a k-slice cut to their short k (_short_k)


def plan(dev: Device, dtype: np.dtype, batch: int, m: int, n: int, k: int, max_splits: int = _SPLITS[-1],
         big: str = "gemm", cfgs: Sequence[dict[str, int]] | None = None, rows: bool = True) -> GemmPlan:
    """The kernel, tile and k-splits (at most ``max_splits``) for one product; depends only on shapes and the device.

    The tiles weighed are ``big``'s (a convolution passes its kernel's tuning kind), the same with a half and a
    quarter of its rows, at least ``gemm_small``'s (for products that would fill only part of them), and
    ``gemm_small``'s,
    or ``cfgs`` (a tuner's candidate: then the tiled kernel, whatever the size). Products of at most
    ``gemm_direct``'s ``MAX_MACS`` multiply-adds take the direct kernel: their time is the launch's, and
    tiles would be mostly padding. On CPUs the others take gemm_rows (:func:`rows_config`; with ``rows`` and
    ``big`` gemm's) where it makes a work-group for each compute unit. Otherwise a rough cost model in
    cycles:
    each work-group costs ``KS * (TM*TN/16 + STAGE*(TM+TN))`` (vector FMAs and staging; ``tuning``'s
    ``plan`` row), groups run in
    waves of ``compute_units``, and split partials cost ``SPLIT`` per element and split. Few output tiles over a
    long k (a convolution's weight gradient) then get a smaller tile or splits, big products keep the big
    tile. GPUs hide memory latency with several resident work-groups per compute unit: there (``plan``'s FILL,
    work-groups per unit), plans that give each unit FILL are taken whenever one exists, and among the rest fewer
    groups count as proportionally slower. A split's partials are kept in ``real`` (float32 for half storage:
    :func:`partials`), so half products split too. ``clnn tune --kernels plan`` fits STAGE, SPLIT and FILL to
    measured plans (:func:`plan_options`, :func:`choose`).
    """
    if cfgs is None:  # a product's plan depends on its shape, the device (memoized follows its limits) and tuning
        key = ("plan", id(dev), np.dtype(dtype).str, batch, m, n, k, max_splits, big, rows)
        return tuning.memoized(dev, key, lambda: _plan(dev, dtype, batch, m, n, k, max_splits, big, None, rows))
    return _plan(dev, dtype, batch, m, n, k, max_splits, big, cfgs, rows)


def _plan(dev: Device, dtype: np.dtype, batch: int, m: int, n: int, k: int, max_splits: int, big: str,
          cfgs: Sequence[dict[str, int]] | None, rows: bool) -> GemmPlan:
    if cfgs is None and batch * m * n * k <= int(tuning.params(dev, "gemm_direct")["MAX_MACS"]):
        return GemmPlan("direct", gemm_config(dev, dtype, "gemm"))
    if cfgs is None and rows and big == "gemm" and (block := rows_config(dev, dtype)):
        if n < block["WN"]:  # narrower blocks of more rows (as many accumulators): no lanes past n to walk
            wn = kernels.round_up(n, block["VW"])
            block = {**block, "WN": wn, "WM": min(ROWS_MOST_WM, block["WM"] * block["WN"] // wn)}
        groups = batch * _ceil(n, block["WN"]) * _ceil(_ceil(m, block["WM"]), block["LY"])
        if groups >= dev.compute_units:  # else a tile over k-splits keeps every unit busy
            return GemmPlan("rows", block)
    return choose(plan_options(dev, dtype, batch, m, n, k, max_splits, big, cfgs), tuning.params(dev, "plan"),
                  dev.compute_units)


@dataclass(frozen=True)
class PlanOption:
    """A tiled plan :func:`plan` weighs, and the terms of its cost: ``groups`` work-groups, their multiply-adds
    (``macs``: waves of compute units times k times TM*TN/16 vector FMAs), staging (``staged``, times STAGE) and a
    split's partials (``partial``, times SPLIT)."""

    how: GemmPlan
    groups: int
    macs: float
    staged: float
    partial: float


ROWS_KEYS = ("WM", "WN", "VW", "LY", "SPAN")
ROWS_MOST_WM = 8  # the most rows plan gives a narrow product's gemm_rows block


def rows_config(dev: Device, dtype: np.dtype) -> dict[str, int] | None:
    """gemm.cl's gemm_rows block for ``dtype`` products on ``dev`` (tuning's ``gemm_rows``: WM x WN outputs a
    work-item in VW-wide vectors, LY work-items a group, k in chunks whose rows of B span at most SPAN bytes;
    float64 in half the columns, the same registers), or None where the row has none (LY 0: GPUs) or leaves
    float16 to the tiles (FLOAT16 0)."""
    p = tuning.params(dev, "gemm_rows")
    if not p["LY"] or (np.dtype(dtype) == np.float16 and not p["FLOAT16"]):
        return None
    cfg = {key: int(p[key]) for key in ROWS_KEYS}
    if np.dtype(dtype) == np.float64:
        cfg["WN"] //= 2
        cfg["VW"] = min(cfg["VW"], cfg["WN"])
    return cfg


def rows_defines(cfg: dict[str, int]) -> dict[str, int]:
    """gemm.cl's defines for gemm_rows' block ``cfg`` (:func:`rows_config`'s keys): TILED_KERNEL's work-group is
    TN = WN columns by TM = WM x LY rows."""
    return {"WM": cfg["WM"], "WN": cfg["WN"], "VW": cfg["VW"], "TN": cfg["WN"], "TM": cfg["WM"] * cfg["LY"]}


def copies_b_rows(dev: Device, m: int, b_cs: int) -> bool:
    """Whether gemm_rows may take a product of ``m`` rows whose B's columns lie ``b_cs`` apart on ``dev``: it reads
    B's rows as vectors, so a B of non-contiguous columns is copied to rows first, which products of fewer than
    tuning's gemm_rows MIN_M_COPY rows do not pay back."""
    return b_cs == 1 or m >= int(tuning.params(dev, "gemm_rows")["MIN_M_COPY"])


def plan_options(dev: Device, dtype: np.dtype, batch: int, m: int, n: int, k: int, max_splits: int = _SPLITS[-1],
                 big: str = "gemm", cfgs: Sequence[dict[str, int]] | None = None) -> list[PlanOption]:
    """Every tiled plan :func:`plan` weighs for one product (its tiles, or ``cfgs``; each with 1, 2, 4, ..
    k-ranges, at most ``max_splits`` and as many as k-slices), in the order ties go to."""
    if cfgs is None:
        tile, small = gemm_config(dev, dtype, big), gemm_config(dev, dtype, "gemm_small")
        cfgs = [tile, *_fewer_rows(tile, small["TM"], m), small]
        if batch * m * n * k >= SHORT_K_MACS:
            cfgs = [_short_k(cfg, k) for cfg in cfgs + _fewer_cols(small, n)]
        cfgs = [_fit_prefetch(cfg) for cfg in cfgs]
    options, units = [], dev.compute_units
    for cfg in cfgs:
        tm, tn, tk = cfg["TM"], cfg["TN"], cfg["TK"]
        tiles = batch * _ceil(m, tm) * _ceil(n, tn)
        for s in _SPLITS:
            ks = max(tk, kernels.round_up(_ceil(k, s), tk))
            splits = max(1, _ceil(k, ks))
            if s > max_splits or (ks == tk and splits < s):  # more splits than asked for, or than k-slices
                break
            groups = tiles * splits
            steps = _ceil(groups, units) * min(ks, max(k, 1))
            partial = splits * batch * m * n / units if splits > 1 else 0.0
            options.append(PlanOption(GemmPlan("tiled", cfg, splits, ks), groups, steps * tm * tn / 16,
                                      steps * (tm + tn), partial))
    return options


def choose(options: Sequence[PlanOption], costs: dict[str, float], compute_units: int) -> GemmPlan:
    """The plan of ``options`` that ``plan``'s cost row ``costs`` (STAGE, SPLIT, FILL) prices lowest."""
    stage, split, fill = float(costs["STAGE"]), float(costs["SPLIT"]), float(costs["FILL"]) * compute_units

    def price(option: PlanOption) -> tuple[bool, float]:
        cost = (option.macs + stage * option.staged) * (max(1.0, fill / option.groups) if fill else 1.0)
        return (bool(fill) and option.groups < fill, cost + split * option.partial)

    return min(options, key=price).how


def _fit_prefetch(cfg: dict[str, int]) -> dict[str, int]:
    """A warp-product tile ``cfg`` without its slices fetched ahead (PF 0) where they would be more than
    PF_MAX_FETCHED elements a work-item: tuning's mma row lays its PF over every kind's tile, and the planner cuts
    rows and columns from them, which leaves fewer work-items to hold the same slices."""
    if cfg.get("MMA") and cfg["PF"] and (cfg["TM"] + cfg["TN"]) * cfg["TK"] > PF_MAX_FETCHED * work_items(cfg):
        return {**cfg, "PF": 0}
    return cfg


def _short_k(cfg: dict[str, int], k: int) -> dict[str, int]:
    """``cfg`` with its k-slice TK cut to the least power of two holding ``k`` (at least VWG) for a product shorter
    than TK: staging and the k-slice's tables take TK rows whatever k is (LeNet's conv1, k = 9: TK 64 -> 16 took
    its forward from 6.8 to 5.1 ms on PoCL, 4.1 to 3.2 on Intel's runtime). Only for products of SHORT_K_MACS
    multiply-adds or more: each k-slice is one more program to build, which a small product never pays back."""
    tk = max(cfg["VWG"], MMA_K if cfg.get("MMA") else 1, 1 << (max(k, 1) - 1).bit_length())
    return {**cfg, "TK": tk} if tk < cfg["TK"] else cfg


def _fewer_cols(cfg: dict[str, int], n: int) -> list[dict[str, int]]:
    """``cfg`` (gemm_small's tile) cut to the least power of two of columns holding ``n`` (at least a vector) for a
    product narrower than it, where that is a valid tile: its padding columns cost the multiply as much as the real
    ones (LeNet's conv1 weight gradient, 9 columns: 64 -> 16, PoCL 8.6 -> 3.4 ms). Like :func:`_short_k`, only for
    products of SHORT_K_MACS multiply-adds or more."""
    tn = max(cfg["VW"], 1 << (max(n, 1) - 1).bit_length())
    narrow = {**cfg, "TN": tn, "WN": min(cfg["WN"], tn), "VWG": min(cfg["VWG"], tn)}
    return [narrow] if tn < cfg["TN"] and config_problem(narrow) is None else []


def _fewer_rows(cfg: dict[str, int], least: int, m: int) -> list[dict[str, int]]:
    """``cfg`` with a half and a quarter of its rows (at least ``least``), and between them and the tile's own the
    product's ``m`` rows rounded up to ROW_FIT, each with the same work per item where that is a valid tile: a
    product with fewer rows than the tile fills one of these instead (64-row products ran 1.3x faster on Intel's
    runtime in a 64 x 128 tile than in 32 x 64 or half-empty 128 x 128; AlexNet's conv2 input gradient, 96 rows,
    70 ms in a forced 96 x 64 tile against 84 in 128 x 128 on both CPU runtimes, Zen 5; with this fit the layer's
    training pass at batch 16 went 582-650 -> 467-573 ms on Intel's runtime, 899-971 -> 865-875 on PoCL, Zen 3).
    No more: each tile is one more program to build."""
    tm = cfg["TM"]
    fit = kernels.round_up(m, ROW_FIT)
    rows = [tm // 2, tm // 4] + ([fit] if tm // 4 < fit < tm else [])
    return [{**cfg, "TM": r} for r in sorted(set(rows), reverse=True)
            if r >= least and config_problem({**cfg, "TM": r}) is None]


def tiled_plan(cfg: dict[str, int], k: int) -> GemmPlan:
    """The tiled kernel with tile ``cfg`` over the whole k range (no split): a tuner's candidate."""
    return GemmPlan("tiled", cfg, 1, max(cfg["TK"], kernels.round_up(k, cfg["TK"])))


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def check_act(op: str, act: str) -> None:
    """Raise unless ``act`` is ``"none"`` or one of ``FUSED_ACTS``."""
    if act != "none" and act not in FUSED_ACTS:
        raise ValueError(f"{op}: activation must be 'none' or one of {FUSED_ACTS}; got {act!r}")


def keeps_pre(act: str, *inputs: Tensor | None) -> bool:
    """Whether a fused ``act`` must also store its pre-activation: for a backward through an activation
    other than relu (whose mask its output gives)."""
    return act not in ("none", "relu") and is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)


def epilogue(act: str, out: Tensor, pre: Tensor | None) -> tuple[Any, ...]:
    """The store's (act code, keep, pre buffer) kernel arguments (gemm.h's ``store_act``) for ``act``."""
    return np.int32(-1 if act == "none" else UNARY[act]), np.int32(pre is not None), (out if pre is None else pre).data


def act_defines(dev: Device, act: str, pre: Tensor | None) -> dict[str, int]:
    """The defines that build a store's activation into a kernel on ``dev`` (gemm.h's ``FUSED_ACT``) where ``act`` or
    ``pre`` needs it: kernels without them ignore :func:`epilogue`'s arguments. Off CPUs also ``ACT_CODE``, that
    activation alone: a switch over all of them cost a GPU tile registers (NVIDIA's, in clang's NVPTX build: AlexNet's
    conv + ReLU 153 against 122), where a CPU program serving every activation is compiled once (PoCL compiles each
    program's work-group function at its first launch, seconds a GEMM tile: test_matmul's fused tests on PoCL, cold,
    27 -> 78 s with a program per activation)."""
    if act == "none" and pre is None:
        return {}
    return {"FUSED_ACT": 1} if dev.type == "cpu" else {"FUSED_ACT": 1, "ACT_CODE": -1 if act == "none" else UNARY[act]}


def act_backward(act: str, y: Tensor, pre: Tensor | None, g: Tensor) -> Tensor:
    """``g`` through a fused ``act`` with output ``y``: relu's mask from ``y``, the others at ``pre``; the
    same ``unary_grad`` an unfused activation runs, so the gradients are identical."""
    return unary_grad(act, y if pre is None else pre, y, g)


def partials(dtype: np.dtype, shape: tuple[int, ...], dev: Device) -> tuple[Tensor, dict[str, int]]:
    """A k-split's buffer of partial products for ``dtype`` results, in ``real`` (float64 for float64, else
    float32: half partials would round before their sum), and the tiled kernels' define that stores into it."""
    return empty(shape, kernels.real_dtype(dtype), dev), _partials_defines(dtype)


def _partials_defines(dtype: np.dtype) -> dict[str, int]:
    """The tiled kernels' define that stores into :func:`partials`' buffer."""
    return {"C_REAL": 1} if np.dtype(dtype) in HALF_DTYPES else {}


def rounding(dtype: np.dtype, **operands: Tensor) -> dict[str, int]:
    """gemm.h's ``<name>_F32`` define for each operand (A, B, C, D) stored as float32 where the kernel computes
    in the half ``dtype``: an input rounded to it as it is loaded, a result widened as it is stored."""
    return {f"{name}_F32": 1 for name, t in operands.items() if t.dtype != dtype}


def gemm_raw(
    a: Tensor, a_strides: tuple[int, int, int],
    b: Tensor, b_strides: tuple[int, int, int],
    batch: int, m: int, n: int, k: int,
    alpha: float = 1.0, beta: float = 0.0, c: Tensor | None = None, c_strides: tuple[int, int, int] | None = None,
    how: GemmPlan | None = None, dtype: np.dtype | None = None, act: str = "none", pre: Tensor | None = None,
    store: np.dtype | None = None, into: Tensor | None = None,
) -> Tensor:
    """``out[b] = act(alpha * A[b] @ B[b] + beta * C[b])`` with A, B and C read through (batch, row, col) strides.

    ``A[b][i, p] = a.flat[b*a_strides[0] + i*a_strides[1] + p*a_strides[2]]`` (M x K), likewise B (K x N);
    a transpose is a swap of the last two strides, a shared operand a batch stride of 0. ``c`` (read
    when ``beta != 0``, never modified) likewise through ``c_strides``, by default those of a contiguous
    (batch, m, n): zero strides broadcast a bias into the GEMM's store. ``how`` overrides :func:`plan`
    (tests and the tuner force a kernel or tile with it). ``dtype`` is the result's (``a``'s by default): a
    half type where an operand is float32 rounds that operand to it in the kernel's loads, the same as
    casting it first (``clnn.autocast``'s products, without a cast launch). ``act``: ``"none"`` or one of
    ``FUSED_ACTS``, applied in the store, which also writes the value before it to ``pre`` (a (batch, m, n)
    tensor) when given. ``store``: the result's storage, ``dtype`` by default; float32 with a half ``dtype``
    holds the half result widened, bit for bit, without a half tensor (a float32 parameter's gradient under
    autocast; gemm.h's C_F32; ``pre`` then float32 too). ``into``: a contiguous (batch, m, n) tensor of that
    storage to write instead of a new one; it may be ``c`` (every kernel reads each element of C in the
    work-item that writes it): an accumulation in place. No autograd.

    Returns:
        ``into``, or a new contiguous (batch, m, n) tensor.
    """
    dev, dtype = a.device, a.dtype if dtype is None else np.dtype(dtype)
    store = dtype if store is None else np.dtype(store)
    out = empty((batch, m, n), store, dev) if into is None else into
    if out.size == 0:
        return out
    if c is None or beta == 0:
        c, c_strides, beta = out, (0, 0, 0), 0.0
    addend = (c, c_strides or (m * n, n, 1))
    d_args = (c.data, *(np.int32(s) for s in addend[1]))
    flags = {**rounding(dtype, A=a, B=b, D=c, C=out), **act_defines(dev, act, pre)}  # the program's, beside its tile
    if how is None:  # planned here (plan keeps its plans): the launch's kernel and geometry are kept with the plan
        how = plan(dev, dtype, batch, m, n, k)
        if how.kernel == "rows" and not copies_b_rows(dev, m, b_strides[2]):
            how = plan(dev, dtype, batch, m, n, k, rows=False)
        launch = tuning.memoized(dev, ("gemm_raw", id(dev), dtype, tuple(flags.items()), batch, m, n, id(how)),
                                 lambda: _launch_plan(dev, dtype, flags, a, b, batch, m, n, how))
        if launch[3] is not how:  # another plan that had the same id
            launch = _launch_plan(dev, dtype, flags, a, b, batch, m, n, how)
    else:
        launch = _launch_plan(dev, dtype, flags, a, b, batch, m, n, how)
    kernel, global_size, local_size, _ = launch
    fused = epilogue(act, out, pre)
    if how.kernel == "rows":
        _rows(kernel, global_size, local_size, how.cfg["SPAN"], a, a_strides, b, b_strides, batch, m, n, k,
              dtype, alpha, beta, d_args, fused, out)
        return out
    strides = (*(np.int32(s) for s in a_strides), b.data, *(np.int32(s) for s in b_strides), *d_args)
    if how.kernel == "direct":
        kernels.launch(dev, kernel, global_size, local_size, np.int32(m), np.int32(n), np.int32(k), np.int32(batch),
                       real_scalar(dtype, alpha), real_scalar(dtype, beta), a.data, *strides, *fused, out.data)
        return out
    splits = how.splits
    part = out if splits == 1 else partials(dtype, (batch, splits, m, n), dev)[0]
    kernels.launch(
        dev, kernel, global_size, local_size, np.int32(m), np.int32(n), np.int32(k), np.int32(how.ks),
        np.int32(splits), real_scalar(dtype, alpha if splits == 1 else 1.0),
        real_scalar(dtype, beta if splits == 1 else 0.0), a.data, *strides,
        *(fused if splits == 1 else epilogue("none", part, None)), part.data,
    )
    if splits > 1:
        summed = defines(dtype, **rounding(dtype, D=c, C=out), **act_defines(dev, act, pre))  # gemm_sum reads no A or B
        sum_partials(part, out, splits, m, n, summed, alpha, beta, addend, act, pre)
    return out


def _launch_plan(dev: Device, dtype: np.dtype, flags: dict[str, int], a: Tensor, b: Tensor, batch: int, m: int,
                 n: int, how: GemmPlan) -> tuple[Any, tuple[int, ...], tuple[int, ...], GemmPlan]:
    """gemm_raw's kernel, global and local size for the plan ``how`` of one product of ``a`` and ``b`` whose
    float32 operands and result a half ``dtype`` rounds in its loads and stores, and whose store may apply an activation
    (``flags``: :func:`rounding`'s and :func:`act_defines`' defines)."""
    if how.kernel == "direct":
        untiled = defines(dtype, **flags)  # gemm_direct's: no tile
        return kernels.kernel(dev, "gemm.cl", "gemm_direct", untiled), (batch * m * n,), (group_size(dev),), how
    if how.kernel == "rows":
        cfg = how.cfg
        k_rows = kernels.kernel(dev, "gemm.cl", "gemm_rows", defines(dtype, **rows_defines(cfg), **flags))
        items = kernels.round_up(-(-m // cfg["WM"]), cfg["LY"])
        return k_rows, (-(-n // cfg["WN"]), items, batch), (1, cfg["LY"], 1), how
    cfg, splits = how.cfg, how.splits
    rtm, rtn = cfg["TM"] // cfg["WM"], cfg["TN"] // cfg["WN"]
    groups_n, groups_m = -(-n // cfg["TN"]), -(-m // cfg["TM"])
    # the partials: no addend, no rounded C (partials' own define), no activation
    into_part = flags if splits == 1 else {**rounding(dtype, A=a, B=b), **_partials_defines(dtype)}
    k_tiled = kernels.kernel(dev, "gemm.cl", "gemm", defines(dtype, **cfg, **into_part))
    return k_tiled, (groups_n * rtn, groups_m * rtm, batch * splits), (rtn, rtm, 1), how


ROWS_LEAST_CHUNK = 64  # gemm_rows' shortest k chunk, whatever B's row stride


def b_as_rows(b: Tensor, b_strides: tuple[int, int, int], batch: int, k: int, n: int
              ) -> tuple[Tensor, tuple[int, int, int]]:
    """B (``batch`` K x N matrices read through ``b_strides``) copied to contiguous rows, as gemm_rows reads it, and
    its strides: one matrix where the batch shares it (batch stride 0)."""
    shared = b_strides[0] == 0
    rows = empty((1 if shared else batch, k, n), b.dtype, b.device)
    strided_copy(b, rows, rows.shape, b_strides, (k * n, n, 1))
    return rows, (0 if shared else k * n, n, 1)


def _rows(kernel: Any, global_size: tuple[int, ...], local_size: tuple[int, ...], span: int, a: Tensor,
          a_strides: tuple[int, int, int], b: Tensor, b_strides: tuple[int, int, int], batch: int, m: int, n: int,
          k: int, dtype: np.dtype, alpha: float, beta: float, d_args: tuple[Any, ...], fused: tuple[Any, ...],
          out: Tensor) -> None:
    """gemm_raw's ``dtype`` product by gemm_rows into ``out``: B copied to rows first where its columns are not
    contiguous, k in chunks whose rows of B span at most ``span`` bytes (at least ROWS_LEAST_CHUNK rows), their
    partial sums kept in a buffer of ``real`` between them (the same sums in the same order)."""
    dev = out.device
    if b_strides[2] != 1:
        b, b_strides = b_as_rows(b, b_strides, batch, k, n)
    chunk = max(ROWS_LEAST_CHUNK, span // (max(b_strides[1], 1) * b.dtype.itemsize))
    sums = out if k <= chunk else empty((batch, m, n), kernels.real_dtype(dtype), dev)
    for k0 in range(0, max(k, 1), chunk):
        last = k0 + chunk >= k
        kernels.launch(dev, kernel, global_size, local_size, np.int32(m), np.int32(n), np.int32(min(k, k0 + chunk)),
                       np.int32(k0), np.int32(last), real_scalar(dtype, alpha), real_scalar(dtype, beta), a.data,
                       *(np.int32(s) for s in a_strides), b.data, np.int32(b_strides[0]), np.int32(b_strides[1]),
                       *d_args, *fused, sums.data, out.data)


def sum_partials(part: Tensor, out: Tensor, splits: int, m: int, n: int, defs: dict[str, object], alpha: float = 1.0,
                 beta: float = 0.0, addend: tuple[Tensor, tuple[int, int, int]] | None = None, act: str = "none",
                 pre: Tensor | None = None) -> None:
    """``out[b] = act(alpha * sum_s part[b, s] + beta * C[b])`` for a k-split's (batch, splits, m, n) partials, summed
    in order of s (``gemm_sum``); ``addend``, ``act`` and ``pre`` as in :func:`gemm_raw`. Each work-item adds
    ``splits`` values, so the work-groups shrink until every compute unit gets two."""
    dev = out.device
    c, c_strides = addend if addend is not None and beta != 0 else (out, (0, 0, 0))
    local = max(32, min(group_size(dev), 1 << max(out.size // (2 * dev.compute_units), 1).bit_length() - 1))
    kernels.launch(
        dev, kernels.kernel(dev, "gemm.cl", "gemm_sum", defs), (out.size,), (min(local, group_size(dev)),),
        np.int32(out.size), np.int32(m), np.int32(n), np.int32(splits), real_scalar(out.dtype, alpha),
        real_scalar(out.dtype, beta if addend is not None else 0.0), part.data, c.data,
        *(np.int32(s) for s in c_strides), *epilogue(act, out, pre), out.data,
    )


def _check_pair(op: str, a: Any, b: Any, half: np.dtype | None) -> np.dtype:
    """Validate the operands; the product's dtype: theirs, or autocast's ``half`` (float32 ones rounded to it)."""
    require_tensor(f"{op}: a", a)
    require_tensor(f"{op}: b", b)
    same_device(op, a=a, b=b)
    if half is None:
        same_dtype(op, a=a, b=b)
    require_float(f"{op}: a", a)
    return a.dtype if half is None else half


def _strides(t: Tensor, trans: bool) -> tuple[int, int, int]:
    """gemm_raw's (batch, row, col) strides of 2-D ``t``, or of its transpose with ``trans``."""
    return (0, 1, t.shape[1]) if trans else (0, t.shape[1], 1)


def _product(x: Tensor, tx: bool, y: Tensor, ty: bool, alpha: float, dtype: np.dtype, store: np.dtype) -> Tensor:
    """``alpha * op(x) @ op(y)`` for 2-D ``x``, ``y`` (``op`` transposes with ``tx``, ``ty``) in ``dtype``, stored
    as ``store`` (:func:`gemm_raw`): a gradient's product, recorded nowhere."""
    m, k = (x.shape[1], x.shape[0]) if tx else x.shape
    n = y.shape[0] if ty else y.shape[1]
    out = gemm_raw(x, _strides(x, tx), y, _strides(y, ty), 1, m, n, k, alpha, dtype=dtype, store=store)
    return view_as(out, (m, n))


def _as(dtype: np.dtype, g: Tensor) -> Tensor:
    """``g`` in ``dtype``: an operand's gradient from a product that rounded it (autocast) to a half type."""
    return g if g.dtype == dtype else g.astype(dtype)


@profiled
def gemm(
    a: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 0.0,
    trans_a: bool = False, trans_b: bool = False,
) -> Tensor:
    """``alpha * op(a) @ op(b) + beta * c`` for 2-D ``a``, ``b``; ``op`` transposes when asked (BLAS GEMM).

    Args:
        a: (M, K), or (K, M) with ``trans_a``.
        b: (K, N), or (N, K) with ``trans_b``.
        c: broadcastable to (M, N); read only when ``beta != 0``, never modified.
    Returns:
        A new (M, N) tensor; differentiable in ``a``, ``b`` and ``c``.
    Raises:
        TypeError: an operand is not a floating clnn.Tensor, or dtypes differ.
        ValueError: operands are not 2-D, inner dimensions differ, ``c`` does not broadcast, or devices differ.

    Example:
        >>> y = clnn.gemm(x, w, bias, beta=1.0, trans_b=True)  # x @ w.T + bias
    """
    return _gemm(a, b, c, alpha, beta, trans_a, trans_b)


def linear_act(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str = "none") -> Tensor:
    """``activation(x @ weight.T + bias)`` over the last dim of ``x`` (any leading dims, its rows the product's)
    as one GEMM launch (``nn.Sequential``'s fusion of ``Linear`` and an activation module); the backward runs
    through the activation exactly as unfused. ``activation``: ``"none"`` or one of ``FUSED_ACTS``."""
    check_act("linear_act", activation)
    with profiler.scope("gemm"):  # profiled as the product it is
        return _gemm(x, weight, bias, 1.0, 0.0 if bias is None else 1.0, False, True, activation, rows=True)


def _gemm(x: Tensor, b: Tensor, c: Tensor | None, alpha: float, beta: float, trans_a: bool, trans_b: bool,
          act: str = "none", rows: bool = False) -> Tensor:
    """:func:`gemm`'s product of ``op(x)`` and ``op(b)``, recorded; with ``rows`` (a Linear's), ``x`` may have any
    leading dims, its rows taken as the product's M and kept in the result's shape, with no reshapes recorded."""
    half, (x, b, c) = autocast_loads(x, b, c)
    dtype = _check_pair("gemm", x, b, half)
    a = view_as(x, (math.prod(x.shape[:-1]), x.shape[-1])) if rows and x.ndim >= 1 else x
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gemm: a and b must be 2-D; got shapes {a.shape} and {b.shape}")
    m, ka = (a.shape[1], a.shape[0]) if trans_a else a.shape
    kb, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if ka != kb:
        raise ValueError(
            f"gemm: op(a) is {m}x{ka} but op(b) is {kb}x{n}: inner dimensions differ "
            f"(a {a.shape}, trans_a={trans_a}; b {b.shape}, trans_b={trans_b})"
        )
    cc = None
    if c is not None and beta != 0:
        require_tensor("gemm: c", c)
        same_device("gemm", a=a, c=c)
        if half is None:
            same_dtype("gemm", a=a, c=c)
        try:
            fits = c.ndim <= 2 and broadcast_shapes("gemm", c.shape, (m, n)) == (m, n)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"gemm: c must broadcast to the output shape {(m, n)}; got shape {c.shape}")
        cc = c
    c_strides = (0, *broadcast_strides(cc.shape, (m, n))) if cc is not None else None
    pre = empty((m, n), dtype, a.device) if keeps_pre(act, x, b, cc) else None
    out = gemm_raw(a, _strides(a, trans_a), b, _strides(b, trans_b), 1, m, n, ka, alpha, beta, cc, c_strides,
                   dtype=dtype, act=act, pre=pre)
    y = view_as(out, (m, n)) if act != "none" else None

    def backward(g: Tensor) -> tuple[Tensor | None, ...]:
        g = view_as(g, (m, n))
        if y is not None:
            g = act_backward(act, y, pre, g)
        ga = gb = gc = None
        # in the forward's dtype (rounding float32 operands as it did), each stored in its operand's dtype
        if x.requires_grad:  # d op(a) = alpha g op(b)^T; with trans_a, da = alpha op(b) g^T
            ga = view_as(_product(b, trans_b, g, True, alpha, dtype, a.dtype) if trans_a else
                       _product(g, False, b, not trans_b, alpha, dtype, a.dtype), x.shape)
        if b.requires_grad:  # d op(b) = alpha op(a)^T g; with trans_b, db = alpha g^T op(a)
            gb = (_product(g, True, a, trans_a, alpha, dtype, b.dtype) if trans_b else
                  _product(a, not trans_a, g, False, alpha, dtype, b.dtype))
        if cc is not None and c.requires_grad:
            gc = sum_to_shape(g, c.shape)  # scaled after the sum: c's size, not g's
            gc = _as(c.dtype, gc if beta == 1 else gc * beta)
        return (ga, gb) if cc is None else (ga, gb, gc)

    out = view_as(out, (*x.shape[:-1], n) if rows else (m, n))
    return record(out, (x, b) if cc is None else (x, b, c), backward, "gemm")


@profiled
def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product with NumPy's rules: 1-D operands are promoted, batch dimensions broadcast.

    Shapes: (..., M, K) @ (..., K, N) -> (...,  M, N); a 1-D ``a`` is a row (its M axis is dropped from
    the result), a 1-D ``b`` a column (N dropped). One operand may be an array-like, taken in the
    other's dtype and device.

    Raises:
        TypeError: neither operand is a clnn.Tensor, dtypes differ or are not floating.
        ValueError: an operand is 0-d, inner dimensions differ, batch dimensions do not broadcast,
            or devices differ.

    Example:
        >>> clnn.matmul(clnn.ones((2, 1, 5, 7)), clnn.ones((3, 7, 4))).shape
        (2, 3, 5, 4)
    """
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"matmul: expected a clnn.Tensor operand; got {type(a).__name__} and {type(b).__name__}")
    if not isinstance(a, Tensor):
        a = tensor(np.asarray(a), dtype=b.dtype, device=b.device)
    if not isinstance(b, Tensor):
        b = tensor(np.asarray(b), dtype=a.dtype, device=a.device)
    half, (a, b) = autocast_loads(a, b)
    dtype = _check_pair("matmul", a, b, half)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must have at least 1 dimension; got shapes {a.shape} and {b.shape}")
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    kb, n = b2.shape[-2:]
    if k != kb:
        raise ValueError(f"matmul: a has shape {a.shape} and b has shape {b.shape}: inner dimensions {k} != {kb}")
    try:
        batch_shape = broadcast_shapes("matmul", a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(
            f"matmul: batch dimensions of a {a.shape} and b {b.shape} cannot be broadcast together"
        ) from None
    batch = math.prod(batch_shape)

    def operand(t: Tensor, rows: int, cols: int) -> tuple[Tensor, int]:
        """``t`` over the whole batch, and its batch stride (0 when one matrix serves every batch)."""
        if math.prod(t.shape[:-2]) == 1:
            return t, 0
        return broadcast_to(t, batch_shape + (rows, cols)), rows * cols

    a3, a_bs = operand(a2, m, k)
    b3, b_bs = operand(b2, k, n)
    out = gemm_raw(a3, (a_bs, k, 1), b3, (b_bs, n, 1), batch, m, n, k, dtype=dtype)
    final = batch_shape + (() if a.ndim == 1 else (m,)) + (() if b.ndim == 1 else (n,))
    result = reshape(out, final)

    def backward(g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        g3 = reshape(g, (batch, m, n))
        ga = gb = None
        # stored in the operand's dtype where no sum over broadcast batches follows (it sums in the product's)
        if a.requires_grad:  # g @ b^T, summed over the batches a was broadcast along
            ga = gemm_raw(g3, (m * n, n, 1), b3, (b_bs, 1, n), batch, m, k, n, dtype=dtype,
                          store=a.dtype if a_bs or batch == 1 else dtype)
            ga = _as(a.dtype, reshape(sum_to_shape(reshape(ga, batch_shape + (m, k)), a2.shape), a.shape))
        if b.requires_grad and not b_bs and a_bs:  # one b for every batch: a^T @ g over the batches' rows at once
            gb = reshape(gemm_raw(a3, (0, 1, k), g3, (0, n, 1), 1, k, n, batch * m, dtype=dtype, store=b.dtype),
                         b.shape)
        elif b.requires_grad:  # a^T @ g
            gb = gemm_raw(a3, (a_bs, 1, k), g3, (m * n, n, 1), batch, k, n, m, dtype=dtype,
                          store=b.dtype if b_bs or batch == 1 else dtype)
            gb = _as(b.dtype, reshape(sum_to_shape(reshape(gb, batch_shape + (k, n)), b2.shape), b.shape))
        return ga, gb

    return record(result.detach(), (a, b), backward, "matmul")
