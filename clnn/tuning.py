"""Tunable kernel parameters: a per-device database written by ``clnn tune``, then a built-in table.

The table's keys go from general to specific: ``"default"``, the device type (``"cpu"``, ``"gpu"``,
``"accelerator"``), the type and the width of its native float vectors (``"cpu simd16"``: AVX-512), a vendor
substring (``"nvidia"``, ``"amd"``, ``"intel"``), the type and a vendor substring
together (``"cpu intel"``: Intel's CPU runtime, whatever the processor), then with the vector width too
(``"cpu simd8 intel"``: Intel's runtime on an AVX2 processor), a platform substring (``"portable
computing language"``), then a device-name substring; the most specific entry wins. A tuner
adds rows without code changes. A device posing as another vendor (``CLNN_LIMITS=vendor=...``) is looked up
by its posed keys only: its real platform, and its real name unless that is posed too, would select rows of
the runtime it really runs on. The database (JSON, ``platformdirs.user_cache_dir("clnn")/tuning.json`` or
``$CLNN_TUNING_DB``) holds measured winners keyed by device name, driver version and clnn version, and
overrides the table for that exact device; :func:`override` has the last word within a block (the tuner's and
the benchmarks' variants). Each kernel's launcher then checks the choice against the device's real limits.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import platformdirs

from . import __version__
from .device import Device
from .files import atomic_write


class _Watched(dict):
    """A dict that reports every change to itself or to the dicts inside it, so that :func:`params` may keep its
    merged rows until ``TABLE`` changes (a tuner adds rows; tests patch them, in place too)."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__()
        for key, value in dict(items).items():
            super().__setitem__(key, _watched(value))

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, _watched(value))
        _forget()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        _forget()

    def __ior__(self, other: Any) -> _Watched:
        self.update(other)
        return self

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, *args: Any) -> Any:
        _forget()
        return super().pop(*args)

    def popitem(self) -> Any:
        _forget()
        return super().popitem()

    def clear(self) -> None:
        _forget()
        super().clear()


def _watched(value: Any) -> Any:
    return _Watched(value) if isinstance(value, dict) and not isinstance(value, _Watched) else value


TABLE: dict[str, dict[str, dict[str, Any]]] = {
    "storage": {  # defined for every program on the device: clnn_dtype.h's conversions and builtins, unary.h's erfc,
        # clnn_shape.h's walks
        "default": {"HALF_SOFT": 0, "ERFC_SOFT": 0, "MATH_BUILTIN": 0, "GROUP_WALK": 0, "PREFETCH": 0, "ROLL_LANES": 0,
                    "VEC_LANES": 0},
        # ROLL_LANES: gemm.h's stores lane by lane (a tile's columns past the edge, conv_fwd's scattered outputs) in
        # loops, not unrolled. Zen 3, a CPU GEMM tile (64x128, 4x16 per item, 8-wide): PoCL built it in 7.4-9.1 ->
        # 3.7-4.1 s, Intel's runtime in 4.2 -> 0.9 s; GFLOP/s unrolled -> loops at 1024x1023x1024 and 512x500x512
        # (every store lane by lane): Intel's runtime 80-88 -> 74-78 and 45-69 -> 55-70, PoCL 59-61 -> 55-56 and
        # 30-32 -> 33-36, within the noise of the 2 shared cores (BENCHMARKS.md, eleventh session). VEC_LANES:
        # clnn_dtype.h's (PoCL, us, sums over rows: 8000 of 1000 3042 -> 1780 in rowvec.h's vectors with it, 64 of
        # 100352 2871 -> 1216, the sum of 4M 1665 -> 778; Intel's runtime's rows with it 1050 -> 2701, 864 -> 2315,
        # 527 -> 1562: not there)
        "cpu": {"ROLL_LANES": 1, "VEC_LANES": 1},
        # PoCL calls vload_half / vstore_half out of line: a float16 conv ran 2x float32's time with them; its erfc
        # took 26 ns per element (GELU over 4.2M: 109 ms forward, 119 backward in the GPT example's step); its
        # sqrt, rsqrt and fma calls stop its vectorizing (MATH_BUILTIN; Adam over AlexNet's 58M parameters: 102 ms
        # of a 750 ms step). GROUP_WALK: clnn_shape.h's FOR_GROUP_ELEMS walks runs of rows (batch norm's apply,
        # 16x96x27x27: 2.1 -> 0.13 ms on PoCL; Intel's runtime, which vectorizes across work-items, 0.3 -> 0.66)
        # PREFETCH: clnn_dtype.h's PREFETCH_AT in gemm.h's staging (the next k-slice of each run), on the CPU runtimes
        # (Oclgrind has no llvm.prefetch). Intel's runtime on Zen 3, best of 12: GEMM 1024^3 94 -> 108 GFLOP/s,
        # 2048^3 103 -> 113; a 16x96->256 27x27 5x5 layer's forward and input gradient 541 -> 473 ms. PoCL on Zen 3:
        # no faster (83 against 76-82); on an AVX-512 Xeon, where its staging waited on loads half the kernel's time
        # (perf), medians of 10 interleaved: 84 / 71 -> 104 / 100 at 1024^3 / 2048^3 (two slices ahead: 113 / 116
        # against one's 115 / 122)
        "portable computing language": {"HALF_SOFT": 1, "ERFC_SOFT": 1, "MATH_BUILTIN": 1, "GROUP_WALK": 4096,
                                        "PREFETCH": 1},
        # Intel's runtime takes the soft erfc too: GELU over 4M, forward / backward 2.76 / 3.6 -> 1.83 / 2.73 ms (Zen 4)
        "cpu intel": {"PREFETCH": 1, "VEC_LANES": 0, "ERFC_SOFT": 1},
    },
    "softmax": {  # VW: softmax.cl's *_vec kernels (one work-item per contiguous row, VW-wide vectors), 0: none
        "default": {"VW": 0},
        # CPUs: 8000 rows of 1000, VW 4 / 8 / 16: 6.1 / 3.3 / 2.2 ms on Intel's runtime, 12 / 7.9 / 4.5 on PoCL
        "cpu": {"VW": 16},
    },
    "norm_rows": {  # VW: layer norm's forward and backward as norm.cl's *_rows kernels (a work-item per row in
        # VW-wide vectors), 0: none. Forward / backward, us, float32, Zen 5, (rows, D) (2048, 128), (512, 1024),
        # (8192, 96): Intel's runtime 447 / 123, 793 / 206, 1181 / 426 -> 62 / 63, 146 / 116, 200 / 223; PoCL 578 /
        # 865, 1313 / 1636, 1680 / 2337 -> 251 / 308, 560 / 564, 1023 / 930; PyTorch's forward 71, 66, 187
        "default": {"VW": 0},
        "cpu": {"VW": 16},
    },
    "norm_cols": {  # COLS_N: norm.cl's norm_partial_cols' groups a work-item (batch norm of (N, C)). Zen 4, (2048,
        # 1024), forward and backward, its ms (norm_partial's, walking columns, in brackets): PoCL, 16 1.8-2.7, 1 16.5
        # (24.7); Intel's runtime, 16 8.0, 1 5.0 (24.1)
        "default": {"COLS_N": 1},
        "portable computing language": {"COLS_N": 16},
    },
    "reduce": {  # VW: sums over contiguous rows (inner 1) by reduce.cl's reduce_sum_rows in VW-wide vectors, 0: none
        "default": {"VW": 0, "VW_COLS": 0, "COL_VECS": 1},
        # Intel's runtime, us, reduce_item against VW 16: 8000 sums of 1000 2001 / 354, 64 of 100352 1365 / 222,
        # the sum of 4M 971 / 121 (PyTorch 413, -, 117); PoCL, which vectorizes reduce_item across its chunks: 1138 /
        # 1354, 833 / 1107, 543 / 700 while it called vload16 out of line, 3042 / 1780, 2871 / 1216, 1665 / 778 with
        # storage VEC_LANES (AVX-512 Xeon). VW_COLS: sums over columns (inner > 1, a bias gradient) by
        # reduce_sum_cols: (2048, 512) over rows 212 -> 74 us on Intel's runtime (PyTorch 57), 1233 -> 215 on PoCL;
        # (2048, 128) 74 -> 18, 117 -> 51. COL_VECS: reduce_sum_cols' vectors a work-item (a contiguous run of each
        # row: one vector a row fetched a page a row); with the split counting its work-items, not columns (one
        # work-group had taken 4096 columns), Zen 4, (1024, 4096) over rows, us: Intel's runtime 1781 -> 572-1015 at
        # 1, 263-345 at 4 (PyTorch 330-520); PoCL 2599 -> 443-786 at 1, 315-722 at 4; (2048, 512) 96-123 -> 55-73
        "cpu": {"VW": 16, "VW_COLS": 16, "COL_VECS": 4},
    },
    "elementwise": {  # elementwise.cl: elements per work-item in the contiguous maps (1, 4, 8 or 16; bfloat16 takes at
        # most 4); EW_STATIC, the op built in
        "default": {"EW_VEC": 4, "EW_STATIC": 0},
        # CPUs: 4 per item, each called lane by lane, ran unary maps 5x slower on Intel's runtime (its own vectorizer).
        # The op built in: CPUs walk runs of a row in the broadcasting maps (kernels.launch_runs), which Intel's
        # compiler vectorizes only without the switch: 1.6M floats, x + bias 0.30 ms (0.68 with the switch, 3.9 by
        # elements), x * a 0-d tensor 0.34 (3.8, 1.3), 262K x + pos 0.07 (1.1, 0.41); unary maps alike
        "cpu": {"EW_VEC": 1, "EW_STATIC": 1},
        # PoCL vectorizes a map only when its op's switch folds (7M floats, x * 2 7.3 -> 1.6 ms, relu 7.3 -> 1.9),
        # and calls its exp, erfc, tanh.. once per element unless given vectors: 16-wide groups, 1M floats, GELU
        # forward / backward 7.5 / 10.6 -> 0.42 / 0.58 ms (4-wide 1.7 / 2.2, 8-wide 1.0 / 1.2), sigmoid 3.7 / 6.3 ->
        # 0.26 / 0.52; 4M floats, a + b 1.31 -> 0.89 ms, relu 0.87 -> 0.58. Intel's runtime: the same at 1 and 16
        "portable computing language": {"EW_VEC": 16},
    },
    # a copy that swaps the last two axes (ops/shape.py's _transposed): TB, copy.cl's transpose_blocks, a work-item per
    # TB x TB block (0: none); else transpose's tiles through local memory for planes of TILE_PLANE elements or more,
    # smaller ones the strided copy's runs. Zen 4, 2026-12-06, us, (32, 3, 224, 224) to channels last / (64, 3136,
    # 24) over its last two axes / 2048^2 / 1024^2 / 768^2 / 512x1000: PoCL, tiles 100720 / 18974 / 17873 / - / - /
    # 1458, runs 3260 / 2314 / 25969 / - / - / 361, blocks of 16 1929 / 1661 / 4062 / - / - / 188 (32: 1717, -, 5852;
    # 64: 1585, -, 7077); Intel's runtime, tiles 30032 / 8457 / 5871 / 808-922 / 421 / 363, runs 2074-2547 / 2279 /
    # 12792 / 1720-1846 / 290-316 / 194 (blocks of 16: 4705, -, 8241). PyTorch 1630-1770 / - / 4730-5500
    "transpose": {
        "default": {"TB": 0, "TILE_PLANE": 0},
        "cpu": {"TILE_PLANE": 1 << 20},
        "portable computing language": {"TB": 16},
    },
    "gemm": {  # gemm.cl: C tile TM x TN, k-slice TK, WM x WN outputs per work-item in VW-wide vectors,
        # VWG-wide global load runs, APAD padding of A's local rows, DB double-buffered local tiles
        "default": {"TM": 64, "TN": 64, "TK": 16, "WM": 4, "WN": 4, "VW": 4, "VWG": 4, "APAD": 1, "DB": 0},
        # PoCL, the kernel's GFLOP/s at 1024^3 / 2048^3: AVX2 (Zen 3, medians of 10, variants interleaved) k-slices of
        # 256 74 / 76, of 128 69 / 71, of 64 60 / 61; AVX-512 (Zen 4, 2026-12-06, four interleaved rounds) 256:
        # 149-151 / 148-150, 128: 117-128 / 141-144, 64: 106-116 / 108-119 (NumPy 183-206 / 194-211). Each slice costs
        # PoCL a loop over its work-items per barrier. Intel's runtime ran 128 and 256 no faster on either: its
        # row keeps 64. Winograd's product takes 256 too; conv_fwd keeps 64 (mixed there)
        "cpu": {"TM": 128, "TN": 128, "TK": 256, "WM": 4, "WN": 16, "VW": 8, "VWG": 8, "APAD": 0, "DB": 0},
        # vectors as wide as the device's own: with AVX-512, Intel's runtime ran 1024^3 at 180 GFLOP/s in float16
        # blocks against 145 in float8 (Zen 4); PoCL, given AVX-512 (clnn/pocl_target.py), at 300 against 159
        # (Zen 5). On Zen 4 PoCL's LLVM targeted AVX2 (native width 8): there 16-wide ones ran at 80 against 108
        # AVX-512, 4x64 blocks (16 accumulators, four B vectors and four broadcasts to 16 FMAs) against 4x32 (8: an
        # FMA's latency apart), GFLOP/s at 1024^3 / 2048^3, bests of 8-12 interleaved rounds (Xeon, 2026-11-29): PoCL
        # 152-169 / 162-163 against 140-157 / 146, Intel's runtime 221 against 196 at 1024^3. PoCL builds the tile
        # in 2.9-3.3 s against 1.9-2.0
        "cpu simd16": {"WN": 64, "VW": 16, "VWG": 16},
        # Intel's CPU runtime, Zen 5 (two 512-bit FMA pipes): 256x128 tiles, 362 / 338 GFLOP/s at 1024^3 / 2048^3
        # against 346 / 345 for 128x128 (NumPy 260). 8x32 blocks ran 5 % faster but take twice as long to build
        # (2.4 s against 1.0 for gemm.cl), which the test suite, with its hundreds of programs, could not afford
        "cpu intel": {"TM": 256, "TK": 64},
        # AVX2 (Zen 3, 16 vector registers), Intel's runtime: 12 accumulators in 4x24 blocks, 256x96 tiles, 90 / 90
        # GFLOP/s at 1024^3 / 2048^3 against 81 / 79 in 4x16 (8 accumulators: an FMA's latency in a row). PoCL there
        # ran 4x24 no faster than 4x16, and 6x16 at 62 against 93 (its multiply alone)
        "cpu simd8 intel": {"TN": 96, "WN": 24},
        # a 128x128 tile of 8x8 blocks (256 work-items), as the fast CUDA/OpenCL SGEMMs use on big GPUs. NVIDIA H200
        # (OpenCL 3.0 CUDA 13.0, 2026-11-26), 4096^3 float32: 31.8 TFLOP/s single-buffered against 20.4 with DB 1
        # (twice the local memory: fewer resident work-groups), 30.3 in 8-wide vectors; cuBLAS 50.8. A later H200
        # (2026-11-27; kernels' TFLOP/s at 4096^3 / 4096x4096x256 / 1024^3, two calls agreeing within 3 %): A's tile
        # k-major in fours (VWA 4) with 8-wide global loads 32.6 / 32.0 / 26.8, where the row-major tile with 4-wide
        # loads now ran 25.8 / 26.4 / 22.4; VWA 1, 2, 8 with VWG 8: 30.0 / 31.9 / 32.3 at 4096^3; VWA 4 with 4-wide
        # loads 20.3, with slices fetched ahead (PF 2) 29.6. A third H200 (2026-11-27, fifteenth session) ran that row
        # at 24.5 in 158 registers a work-item (one work-group an SM): NVIDIA's compiler had left the slice's k-loop
        # rolled. Unrolled by 16 (KU), 123 registers (two work-groups an SM): 37.3 / 35.6 / 29.3; with k-slices of 32,
        # 126 registers: 40.1 / 36.6 / 30.5 (cuBLAS's whole call 50.7 / 37.9 / 28.9); KU 32 39.6, KU 8 25.6 (164
        # registers), DB with PF 2 37.2 (207). Only NVIDIA has been measured: `clnn tune` stores a device's own winner
        "gpu": {"TM": 128, "TN": 128, "TK": 32, "WM": 8, "WN": 8, "VW": 4, "VWG": 8, "VWA": 4, "APAD": 1, "DB": 0,
                "KU": 16},
    },
    "gemm_small": {  # the same kernel with a smaller tile, for products with few rows or columns
        "default": {"TM": 32, "TN": 32, "TK": 16, "WM": 4, "WN": 4, "VW": 4, "VWG": 4, "APAD": 1, "DB": 0},
        "cpu": {"TM": 32, "TN": 64, "TK": 64, "WM": 4, "WN": 16, "VW": 8, "VWG": 8, "APAD": 0, "DB": 0},
        "cpu simd16": {"WN": 32, "VW": 16, "VWG": 16},
        # H200, 64x100352x288 (a convolution's few-row product): 8x8 blocks 15.6 TFLOP/s against 13.7 in 4x4, 14.3
        # single-buffered, 14.0 for 32x128. Winograd's products of the 256->256 28^2 layer at batch 64 (36 x
        # 256x448x256 a chunk, which the planner gives this tile), its forward and gradients in ms: this row (with
        # gemm's KU 16) 3.32, 64x128 single-buffered 3.51, 64x64 single-buffered 4.06, 128x128 4.30-4.31
        "gpu": {"TM": 64, "TN": 64, "TK": 16, "WM": 8, "WN": 8, "VW": 4, "VWG": 4, "APAD": 1, "DB": 1},
    },
    # laid over gemm_small's tile for float16 and bfloat16 storage. PoCL builds a 16-wide half tile in about twice
    # an 8-wide one's time (7-8 s against 4), once per rounding variant of a product under autocast (test_amp, cold:
    # 467 s against 329): its small products, most of the tests' and few of a model's, keep 8-wide tiles
    "half_small": {"default": {}, "portable computing language": {"WN": 16, "VW": 8, "VWG": 8}},
    # conv.cl's implicit-GEMM kernels: the big tile each weighs against gemm_small (gemm.h's keys, laid over
    # gemm's tile; DB is ignored). `clnn tune --kernels conv` stores measured ones per device.
    "conv_fwd": {
        "default": {},
        # not gemm's AVX2 PoCL slices of 256: AlexNet's conv2 -11 %, 8x128->256 3x3 stride 2 -20 %, ResNet's stem
        # +13 % (PoCL, forward and input gradient)
        "cpu": {"TK": 64},
        # Intel's CPU runtime, Zen 5 (GFLOP/s, 8x256->256 28x28): 256 rows (all of its channels: the image is
        # staged once per k-slice) 307 against 282 for 128; a 128-channel layer keeps 128 rows (the planner's
        # fewer-rows candidate), in 4-row blocks: 298 against 262 in 8-row ones
        # PoCL, Zen 5: 256 rows, 256 against 241 GFLOP/s on 8x256->256 28x28
        "cpu simd16": {"TM": 256},
        "cpu intel": {"TM": 256, "WM": 4},
        # H200, 32x64->128 56x56 (TFLOP/s): 32-deep k-slices 17.5 against 16.3 for 16, 14.5 for 8
        "gpu": {"TK": 32},
    },
    "conv_bwd_weight": {
        "default": {},
        # CPUs, forced tiles (ms, PoCL): 8x64->128 56x56 128x128 75, 64x64 64; LeNet's conv2 (128x32->64 14x14)
        # 27 against 13
        "cpu": {"TM": 64, "TN": 64, "TK": 64, "WM": 4, "WN": 16, "VW": 8, "VWG": 8, "APAD": 0, "DB": 0},
        # AVX2, PoCL (Zen 3, ms, two runs each, variants interleaved): 128 rows in 128-deep slices (half the
        # slices, each with its table of pixels and two barriers) against 64 in 64: AlexNet's conv2 (8x96->256 5x5
        # 27^2) 97 / 90 against 114 / 111, its conv1 (11x11 stride 4) 27 / 22 against 39 / 32, ResNet's stem 32 / 31
        # against 33 / 35, 8x128->256 3x3 stride 2 28^2 17 / 13 against 22 / 16; LeNet's conv2 and a 1x1 alike
        "cpu simd8": {"TM": 128, "TK": 128},
        # AVX-512 (GFLOP/s, 8x64->128 56x56): PoCL 193 for 64x64 in 4x32 blocks of 16-wide vectors, 134 in 4x16
        # of 8-wide ones, 256 for 128x96 in 8x32 (left out: blocks of 8 rows build too slowly for the test suite)
        # PoCL, Zen 5: a 256x64 tile (the planner weighs 128 and 64 rows too) 245 against 178 for 64x64 on 8x256->256
        # 28x28; 8x64->128 56x56 takes the 128-row half, 218 against 191
        "cpu simd16": {"TM": 256, "WN": 32, "VW": 16, "VWG": 16},
        # Intel's runtime: 141 for 128x96 in 8x32 blocks against 108 for 64x64 (78 with 8-wide vectors; LeNet's
        # conv2 89 against 75); Zen 5, 8x256->256 28x28: 256x96 331 against 287 for 128x96
        # (its 64-deep slices: 128 ran AlexNet's conv2 alike, its conv1 faster, 8x128->256 3x3 stride 2 slower)
        "cpu intel": {"TM": 256, "TN": 96, "TK": 64},
        # 8x32 blocks are 16 accumulators of 16 lanes: AVX-512 has 32 registers, AVX2 16 (Zen 3, 16x96->256 27x27
        # 5x5, the layer's training pass: 755 ms in 8x16 blocks, 533-608 in 4x16)
        "cpu simd16 intel": {"WM": 8},
        # H200, 32x64->128 56x56 (TFLOP/s, 62 tiles timed): 128x64 in 8x8 blocks, k-slices of 32: 20.5 against 16.0
        # for gemm's 128x128 of 16, 17.4 for 128x128 of 32, 11.7 for 64x64. Its neighbours (a later H200, 34 timed):
        # 8-wide global loads 20.7 against 18.0, k-slices of 16 19.1, A's tile k-major in pairs (VWA 2) 19.4
        "gpu": {"TM": 128, "TN": 64, "TK": 32, "VWG": 8},
    },
    # conv_direct_fwd's outputs per work-item along a row, and conv_direct_bwd_weight's a row at a time: OV
    # neighbours as one vector (1, 2, 4, 8 or 16), for runtimes that vectorize a kernel across work-items only when
    # it has no loops (PoCL; depthwise 8x144 3x3 56^2, step: 174 -> 69 ms with both kernels so). MAX_K: an input
    # gradient's phase (conv{1,2}d's, conv_transpose2d's; the latter's forward is one) at a unit stride with at
    # most MAX_K multiply-adds per output takes the direct kernel, not a tile (0: only thin or tiny products do)
    "conv_direct": {
        "default": {"OV": 1, "MAX_K": 0},
        "portable computing language": {"OV": 16},  # its direct kernel ran 2-3x slower than its tiles
        # Intel's runtime vectorizes the direct kernel across work-items (Zen 5, ms, tiled against direct): LeNet's
        # conv2 input gradient (128x64->32 14^2, K 576) 7.0 / 3.2, 64x64->64 14^2 4.8 / 3.2, 32x64->128 28^2 15.1 /
        # 13.0, 8x128->64 56^2 (K 1152) 15.5 / 16.2, 8x256->128 28^2 14.4 / 18.7; strided, it gathers (7x7 stride 2
        # 12.0 / 99). A conv's own forward keeps its tile: nn.Sequential fuses an activation into it, which the
        # direct kernel stored lane by lane (LeNet's conv1 + ReLU 1.5 -> 10 ms), and fused and unfused must agree
        "cpu intel": {"MAX_K": 576},
    },
    # Winograd's F(MxM, 3x3) (ops/winograd.py) for 3x3 stride-1 convolutions with C*O / (C + O) >= MIN_INTENSITY
    # (0: never; the transforms move C + O plane elements per C*O multiply-adds), M 2 or 4 (4: 4x fewer
    # multiply-adds and fewer plane elements, 7x F(2x2)'s rounding error, still a few 1e-6), VT tiles per
    # work-item of the transforms (winograd.cl's TILES: 1 on GPUs, a tile each; CPUs 16, explicit vectors: 8x128
    # channels at 56^2, wino_data at VT 1 / 8 / 16 ran 6.2 / 6.0 / 4.7 ms on PoCL, 6.5 / 3.6 / 2.8 on Intel's
    # runtime), and the tile of the batched GEMM (gemm.h's keys, laid over gemm's). Zen 5, ms, forward / input
    # gradient / weight gradient, implicit-GEMM tiles against F(4x4) at VT 16, batch 8: Intel's runtime 64->128
    # 56^2 14.4 / 17.5 / 16.2 against 15.4 / 12.2 / 10.3, 64->64 56^2 8.7 / 7.3 / 8.4 against 6.1 / 6.2 / 5.6, but
    # 32->64 56^2 4.7 / 3.6 / 4.0 against 4.5 / 4.3 / 4.5 and LeNet's conv2 (128x32->64 14^2) 5.6 / 3.6 / 4.8
    # against 5.1 / 4.6 / 5.3; PoCL 64->128 56^2 17.7 / 19.8 / 20.5 against 15.9 / 15.5 / 15.6, 64->64 56^2 10.2 /
    # 10.3 / 10.0 against 6.6 / 6.5 / 7.9, 32->64 56^2 5.7 / 7.0 / 5.3 against 4.2 / 4.6 / 5.8, LeNet's conv2 6.8 /
    # 9.4 / 6.6 against 8.2 / 7.8 / 8.6
    "winograd": {
        "default": {"MIN_INTENSITY": 0, "M": 4, "VT": 1, "VT_STORE": 1},
        # its product takes gemm's k-slices: 256 on AVX2 with PoCL (ms, the layer's kernels for forward and
        # gradients, medians of 5-7, three runs: 8x64->128 56^2 113 / 118 / 100 against 146 / 117 / 98, 8x256->256
        # 28^2 155 / 128 / 116 against 178 / 134 / 130, 16x384->384 13^2 184 / 184 / 165 against 222 / 219 / 161)
        "cpu": {"MIN_INTENSITY": 32, "VT": 16, "VT_STORE": 16},
        # H200 (clnn tune, 2026-11-26), a 3x3 layer's forward and both gradients, batch 32 at 28^2, Winograd against
        # the implicit GEMM: 64->64 (intensity 32) 0.72 / 0.50 ms, 128->128 (64) 1.20 / 1.34, 256->256 (128) 2.26 /
        # 4.08. Its batched product (36 x 128x6272x64): A's tile k-major in pairs 18.5 TFLOP/s against 17.5. It keeps
        # k-slices of 16, rolled (gemm's KU 16 and TK 32: the 256->256 28^2 layer's forward 0.35x cuDNN against 0.42).
        # In 16 MiB plane buffers (winograd.plane_bytes) the planner gives that layer's and AlexNet's products
        # gemm_small's tile, so this one's variants timed alike there (2026-11-27, sixteenth session)
        "gpu": {"MIN_INTENSITY": 64, "VWA": 2, "TK": 16, "KU": 0},
        # Intel's runtime: GEMM tiles of 256x128 in 8x16 blocks: 249 against 205 GFLOP/s (16 x 256x256x1568); its
        # wino_store at VT 16 / 8 / 4: 5.4 / 4.2 / 2.9 ms at 8x128 56^2 (PoCL: 3.4 / 3.3 / 5.5), 7.9 / - / 2.2 at
        # 32x384 13^2
        "cpu intel": {"WM": 8, "VT_STORE": 4},
        "cpu simd16 intel": {"WN": 32},  # 8x32 blocks: 16 accumulators (gemm's 4x64 would make them 32)
    },
    "rnn": {  # VW: rnn.cl's units a work-item takes in vectors (where the hidden size is a multiple). Zen 4, LSTM / GRU
        # of 2 layers, 64 steps, batch 32, 128 -> 256, the gate kernels' ms in a training step, VW 1 -> 16: PoCL 48.7
        # / 30.7 -> 8.3 / 6.7 (PoCL called exp and tanh once an element), Intel's runtime 23.2 / 21.0 -> 12.4 / 12.0
        "default": {"VW": 1},
        "cpu": {"VW": 16},
    },
    # attention on CPUs (ops/attention.py's _attend_rows, attention_rows.cl) from MIN_KEYS keys on (0: never), else
    # the fused kernels; VW, its vectors; RB, query rows a work-item at most (4 / 8 / 16, forward and backward, Zen 4,
    # ms: causal (32, 4, 64, 32) PoCL 2.6 / 2.6 / 2.8, Intel's runtime 2.1 / 2.1 / 2.2; (8, 8, 512, 64) PoCL 139 / 135
    # / 152, Intel's 132 / 120 / 154); ACC, the output accumulators' vectors a work-item at most (rows x a row's
    # vectors: heads of 64, (8, 8, 128, 64), forward / dq at 8 rows PoCL 2.9 / 2.9 ms, at 4 rows 2.5 / 2.5; Intel's
    # 2.2 / 2.4, 2.1 / 2.2). The fused kernels ran 4-5x slower than the blocked GEMMs this path replaced (PoCL)
    "attention_rows": {
        "default": {"MIN_KEYS": 0, "VW": 16, "RB": 8, "ACC": 16},
        "cpu": {"MIN_KEYS": 1},
    },
    # COLS_VW: a float32/64 scatter with one index list walks it per chunk of COLS_VW columns (index.cl's
    # scatter_cols; 0: never). Zen 4, embedding forward and backward of 2048 tokens into 128 rows of 128, sorted
    # path -> COLS_VW 16: PoCL 0.91-1.26 -> 0.32-0.47 ms, Intel's runtime 0.61 -> 0.25; 4096 into 50,000 rows
    # of 256: 37 -> 4-8 and 36 -> 4-5 ms (PyTorch CPU 15-17)
    "scatter": {
        "default": {"COLS_VW": 0},
        "cpu": {"COLS_VW": 16},
    },
    "plan": {  # matmul.plan's cost model, in vector FMAs: STAGE, staging a tile's row or column per k; SPLIT,
        # writing, reading and summing one element of a k-split's partial product; FILL, work-groups per compute
        # unit a plan must give to count as full (0: any). `clnn tune --kernels plan` fits them to measured plans
        "default": {"STAGE": 0.5, "SPLIT": 1.0, "FILL": 0},
        # H200 (clnn tune --kernels plan, 2026-11-26), every plan of 5 products timed: FILL 1 fits their fastest
        # plans best (total log loss 0.033, FILL 2's 0.173). FILL 2 had chosen 0.135 ms for 1024^3 against the
        # fastest's 0.124 (4 k-ranges), 0.612 for 2048^3 against 0.580 (one)
        "gpu": {"FILL": 1},
        # Intel's CPU runtime: 128x128, 64x128 and 32x64 tiles ran at 150, 129 and 101 GFLOP/s (8x64->128 56x56),
        # costs per multiply-add of 1 : 1.16 : 1.49, which 1.5 models (1 : 1.14 : 1.55; 0.5 gives 1 : 1.06 : 1.22).
        # PoCL alike: AlexNet's 96x11664x6400 input gradient (conv2's) took 110 ms in the 32x64 tile STAGE 0.5
        # chose, 84 in 128x128 (float16: 130-148 against 89); its step at batch 16 595-602 -> 560 ms (float32),
        # 666-675 -> 597 (mixed_float16), LeNet's unchanged
        "cpu": {"STAGE": 1.5},
        # SPLIT: 256x6272x2304 (Zen 5) ran at 265 GFLOP/s in 2 splits, 307 in one: a loss of about 16 per element
        "cpu intel": {"SPLIT": 16.0},
    },
    # multi-tensor launches (ops/foreach.py: optimizer steps, GradScaler's unscale, clip_grad_norm_): TENSORS per
    # launch, at most optim.cl's MT_SLOTS. GPUs: a launch costs the host 30-45 us through NVIDIA's OpenCL (H200),
    # where the GPT example's step made 553 launches for 5.5 ms of kernels. CPUs vectorize the one-tensor kernel
    # only (ms, one tensor per launch / 8): AdamW over 49 tensors of 1.8M floats, Intel's runtime 1.0 / 1.8, PoCL
    # 3.6 / 3.2; an in-place scale of AlexNet's 57M gradient floats, PoCL 15 / 38. READ_VW: the elements a
    # work-item of the read-only passes takes (GradScaler.step's inf/NaN check, check_multi, and clip_grad_norm_'s
    # norm_multi): on CPUs an element each read 20 GB/s (both runtimes), 16 at once 46-51; GPUs take 4 (16-byte
    # loads, neighbours coalesced), unmeasured.
    # STATIC (one tensor per launch only): the optimizer and its flags built in, and whole work-groups updating
    # without a test of their index (optim.cl's STATIC_OP, MT_WHOLE): PoCL vectorizes the update across work-items
    # only so (Adam over 16M floats 22 ms, 17.5 with the op built in, 7.4 with both); Intel's runtime vectorizes it
    # as it is, and lost by the untested groups (7.6 -> 9.9 ms)
    # SMALL: the most elements a tensor may have to share a launch of MT_SLOTS where TENSORS is 1: the time of an
    # update of a few thousand elements is its launch's. AdamW over 8 tensors, us a step, one per launch / eight:
    # 32 elements each PoCL 317 / 76, Intel's runtime 193 / 48; 4096: 299 / 133, 190 / 57; 16384: 293 / 306,
    # 191 / 144; 65536: 371 / 1027, 240 / 499
    "foreach": {"default": {"TENSORS": 8, "READ_VW": 4, "STATIC": 0, "SMALL": 0},
                "cpu": {"TENSORS": 1, "READ_VW": 16, "SMALL": 8192},
                "portable computing language": {"STATIC": 1}},
    # MMA 1: float16 and bfloat16 products (matmul, convolutions, Winograd's) multiply in gemm.h's warp-wide 16x8x16
    # products, laid over each tile kind where its tile allows (matmul.gemm_config), with the row's tile keys
    # (gemm.h's) over the kind's: on NVIDIA's own runtime its tensor cores through inline PTX (mma.sync; float32
    # accumulation, as everywhere), elsewhere (a device posing as an NVIDIA GPU) the same products in OpenCL C.
    # NVIDIA's OpenCL has no half arithmetic of its own. H200 (2026-11-28), float16 GEMM kernels' TFLOP/s at 4096^3 /
    # 8192^3 / 4096x4096x256 in gemm's 128x128 tile: k-slices of 64 52.0 / 53.3 / 47.4, of 32 46.0 / 46.2 / 40.7;
    # fetched ahead 47.8 / 47.6 / 39.5 (cuBLAS 658 / 749 / 209: the tile is far from the instructions' 647,
    # BENCHMARKS.md). Its staging waited on global memory once a run: in clang's NVPTX build (scripts/nvptx_regs.py
    # --sass) each of a work-item's 8 runs a slice was a global load, then the local store waiting on it, in one work-
    # group an SM with no other to cover the waits. So this row stages k-slices of 32 double-buffered, fetched a slice
    # ahead (PF 2: the loads in flight during the multiply, stored to the other buffer after it): 222 registers in
    # that build, no spills (k-slices of 64 fetched ahead spill; PF 1, a slice's loads before its stores, 255 at 64).
    # Chosen from the SASS, untimed: gpu_check.sh's halfgemm times it against the row before (TK=64 PF=0 DB=0).
    # REGS (0: the compiler's choice): at most that many registers a work-item, NVIDIA's -cl-nv-maxrregcount
    # (kernels._options). In clang's NVPTX build (ptxas 13, sm_90) the row before took 164 registers, one 256-item
    # work-group an SM, and capped at 128 (two) spilled nothing; this row capped at 128 spills 164 bytes. LDSM 1: a
    # full k-step's fragments by ldmatrix (gemm.h's ldsm_fragments; NVIDIA's runtime only), 6 loads a warp for this
    # row's 64x32 warp blocks where its lanes' own take 32 (215 registers). ASYNC 1 with PF 0 (gemm.h's cp.async
    # staging, any tile row too): 158 registers, 128 capped without spills. All three unmeasured on a GPU
    "mma": {"default": {"MMA": 0}, "gpu nvidia": {"MMA": 1, "TK": 32, "DB": 1, "PF": 2}},
    # gemm.cl's gemm_rows, the CPUs' kernel for matrix products (matmul.rows_config): WM x WN outputs a work-item in
    # VW-wide vectors, LY work-items a group sharing their columns, k in chunks whose rows of B span at most SPAN
    # bytes; MIN_M_COPY: the fewest rows for which a B of non-contiguous columns (x @ W^T) is copied to rows for it
    # (matmul.copies_b_rows: not the CPU attention's blocks of 128 query rows, each of which would copy the same
    # keys); FLOAT16 0: float16 products take the tiles; LY 0: every product does. Kernel GFLOP/s, tile -> gemm_rows
    # (Zen 4, 2026-12-06, alternated in one process), PoCL / Intel's runtime: 2048x512x128 129-136 -> 203-211 /
    # 184 -> 221; 128x512x2048 (A transposed) 147-155 -> 166-218 / 175 -> 228; 1024^3 158-160 -> 214-217 / 184-186
    # -> 220-224 (NumPy 180-210); 2048^3 153 -> 197-199 / 184 -> 202 in chunks of 512 rows (4 MiB), 99-104 in one
    # (16 MiB). Half storage widened in the loop: bfloat16 (shifts) 2048x512x128 / 1024^3 PoCL 141 / 167 -> 195 /
    # 206, Intel's runtime 185 / 190 -> 206 / 213; float16 PoCL 139-141 -> 192, Intel's runtime 189 -> 141
    "gemm_rows": {
        "default": {"WM": 4, "WN": 16, "VW": 8, "LY": 0, "SPAN": 1 << 22, "MIN_M_COPY": 256, "FLOAT16": 1},
        "cpu": {"LY": 8},
        "cpu simd16": {"WN": 64, "VW": 16},
        "cpu intel": {"FLOAT16": 0},
    },
    "gemm_direct": {  # products of at most MAX_MACS multiply-adds take gemm.cl's direct kernel
        "default": {"MAX_MACS": 1 << 21},
        "cpu": {"MAX_MACS": 1 << 12},  # measured: tiles win from 64x64x64 up on CPUs (vectors across the tile)
    },
}
TABLE = _Watched(TABLE)

_cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}  # database path -> (file stamp, devices)
_read_last: str | None = None  # the database load_db read last
_checked: dict[str, float] = {}  # database path -> when its stamp was last read (time.monotonic)
RECHECK_S = 0.25  # a database written by another process is seen within this long; this one's stores at once
_merged: dict[tuple[str, int], tuple[Device, int, dict[str, Any]]] = {}  # params' results while nothing changes
memo: dict[tuple, Any] = {}  # what planners derive from params (keyed by their arguments), dropped with them
_memo_checked = -RECHECK_S  # when memoized last looked at the database (time.monotonic)


_derived: list[Callable[[], None]] = []  # clears of caches elsewhere that hold what params gave (on_change)


def on_change(clear: Callable[[], None]) -> None:
    """Call ``clear`` whenever the table, the database or an override changes (kernels.py's kernel lookup keys
    on the defines a caller gives, not on the storage row every program also takes)."""
    _derived.append(clear)


def _forget() -> None:
    """Drop :func:`params`' kept results, :data:`memo` and what :func:`on_change` registered: the table or the
    database changed."""
    _merged.clear()
    memo.clear()
    for clear in _derived:
        clear()


@functools.lru_cache(maxsize=16)
def _db_at(env: str | None) -> Path:
    return Path(env) if env else Path(platformdirs.user_cache_dir("clnn")) / "tuning.json"


def db_path() -> Path:
    """The tuning database: ``$CLNN_TUNING_DB`` if set, else ``tuning.json`` in the user's cache directory."""
    return _db_at(os.environ.get("CLNN_TUNING_DB"))


@functools.cache
def _driver_version(cl_device: object) -> str:
    return cl_device.driver_version  # a driver query: ~1 µs, asked for on every op while a database exists


def device_key(dev: Device) -> str:
    """The database key of ``dev``: its name, driver version and the clnn version."""
    return f"{dev.name} | driver {_driver_version(dev.cl_device)} | clnn {__version__}"


def load_db(path: Path | None = None) -> dict[str, Any]:
    """The database's ``{device key: {kernel: entry}}`` (empty when there is none); re-read when it changes (its
    stamp is read at most every ``RECHECK_S`` seconds: it is asked for on every op)."""
    global _read_last
    path = path or db_path()
    key, now = str(path), time.monotonic()
    if key != _read_last:  # another database ($CLNN_TUNING_DB changed): what was kept came from the last one
        _read_last = key
        _forget()
    hit = _cache.get(key)
    if now - _checked.get(key, -RECHECK_S) < RECHECK_S:
        return hit[1] if hit is not None else {}
    _checked[key] = now
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if _cache.pop(key, None) is not None:
            _forget()
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    if hit is None or hit[0] != stamp:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            del _checked[key]
            raise ValueError(f"tuning database {path} is unreadable ({err}); `clnn tune --reset` clears it") from None
        hit = _cache[key] = (stamp, data.get("devices", {}))
        _forget()
    return hit[1]


def store(dev: Device, kernel: str, entry: dict[str, Any], path: Path | None = None) -> None:
    """Record ``entry`` (``{"params": {...}, ...}``) for ``kernel`` on ``dev``, writing the file atomically."""
    path = path or db_path()
    devices = {key: dict(kernels) for key, kernels in load_db(path).items()}
    devices.setdefault(device_key(dev), {})[kernel] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, text=True) as f:
        json.dump({"format": 1, "devices": devices}, f, indent=1, sort_keys=True)
    _checked.pop(str(path), None)  # read again at the next op
    _forget()  # and what ops kept from the old one is gone now, not at memoized's next look


def reset(path: Path | None = None) -> bool:
    """Delete the database; whether there was one."""
    path = path or db_path()
    _cache.pop(str(path), None)
    _checked.pop(str(path), None)
    _forget()
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


_overrides: dict[str, dict[str, Any]] = {}  # kernel -> values laid over every device's parameters (override)


@contextlib.contextmanager
def override(kernel: str, **values: Any) -> Iterator[None]:
    """Within the block, ``kernel``'s parameters on every device take ``values`` over the table and the database
    (e.g. ``override("winograd", MIN_INTENSITY=0)``: the tuner times a choice against another so)."""
    if kernel not in TABLE:
        raise ValueError(f"override: kernel must be one of {sorted(TABLE)}; got {kernel!r}")
    before = _overrides.get(kernel)
    _overrides[kernel] = {**(before or {}), **values}
    _forget()
    try:
        yield
    finally:
        if before is None:
            del _overrides[kernel]
        else:
            _overrides[kernel] = before
        _forget()


T = TypeVar("T")


def memoized(dev: Device, key: tuple, build: Callable[[], T]) -> T:
    """``build()`` for ``dev``, kept under ``key`` in :data:`memo` until the table, the database, an override or
    one of the device's sizing attributes (``Device.revision``: a pose, a lowered limit) changes: what an op
    derives from its parameters (a plan, a kernel and its vector width), found again in a dict lookup instead of
    rebuilt from :func:`params` on every call (the host's cost per op is what bounds a model of short kernels).
    The database is looked for at most every ``RECHECK_S`` here (its path is an environment lookup): another
    process's writes, or another ``$CLNN_TUNING_DB``, reach ops within that time; this process's stores, resets,
    overrides and table edits drop the memo at once."""
    global _memo_checked
    now = time.monotonic()
    if now - _memo_checked >= RECHECK_S:
        _memo_checked = now
        load_db()  # drops the memo if the database changed
    hit = memo.get(key)
    if hit is not None and hit[0] is dev and hit[1] == dev.revision:
        return hit[2]
    value = build()
    memo[key] = (dev, dev.revision, value)
    return value


def params(dev: Device, kernel: str) -> dict[str, Any]:
    """The parameters for ``kernel`` on ``dev``: the table's merged rows, overridden by a database entry, then by
    :func:`override` (kept until any of them changes: planners ask on every op)."""
    db = load_db()
    key = (kernel, id(dev))  # a pose or a lowered limit moves dev.revision
    hit = _merged.get(key)
    if hit is not None and hit[0] is dev and hit[1] == dev.revision:
        return dict(hit[2])
    out = _params(dev, kernel, db)
    _merged[key] = (dev, dev.revision, out)
    return dict(out)


def _params(dev: Device, kernel: str, db: dict[str, Any]) -> dict[str, Any]:
    rows = TABLE[kernel]
    out = dict(rows["default"])
    vendor = dev.vendor.lower()
    simd = f"{dev.type} simd{dev.vector_width}"
    keys = [dev.type, simd, vendor, f"{dev.type} {vendor}", f"{simd} {vendor}"]
    if "vendor" not in dev.real:
        keys.append(dev.platform_name.lower())
    if "vendor" not in dev.real or "name" in dev.real:
        keys.append(dev.name.lower())
    applied = {"default"}
    for key in keys:  # each row once, at the first key it names: "cpu" must not come back with "cpu intel"
        for name, row in rows.items():
            if name not in applied and name in key:
                out.update(row)
                applied.add(name)
    entry = db.get(device_key(dev), {}).get(kernel) if db else None  # the key costs a driver query
    if entry is not None:
        out.update(entry["params"])
    return out | _overrides.get(kernel, {})
