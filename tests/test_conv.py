"""conv1d / conv2d / conv_transpose2d against torch.nn.functional in float64: forward and every gradient."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import assert_close, assert_sum_close, set_direct_conv_max_k, set_winograd
from hypothesis import given, settings
from hypothesis import strategies as st

import clnn
import clnn.functional as F
from clnn import kernels, profiler, tuning
from clnn.ops import conv as conv_mod
from clnn.ops import winograd
from clnn.ops.matmul import SHORT_K_MACS, _fewer_cols, gemm_config, plan, plan_options

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")

TORCH = {"conv1d": torch.nn.functional.conv1d, "conv2d": torch.nn.functional.conv2d,
         "conv_transpose2d": torch.nn.functional.conv_transpose2d}


def _magnitudes(op: str, xa, wa, ba, gy, kw) -> list[np.ndarray]:
    """Each gradient element's sum of absolute terms (x, weight, bias): the gradients of the same convolution of
    |x| and |w| for |gy|. A gradient is a signed sum, and a small layer's may cancel to near zero (a bias
    gradient summed 24 gradients to 2e-5 of their size): it is checked against these, not its own size."""
    leaves = [torch.tensor(np.abs(a), requires_grad=True) for a in (xa, wa, ba) if a is not None]
    y = TORCH[op](*leaves[:2], leaves[2] if ba is not None else None, **kw)
    y.backward(torch.tensor(np.abs(gy)))
    return [t.grad.numpy() for t in leaves]


def check(op: str, xs, ws, kw, rng, bias: bool = True, dtype=np.float32, tol: float = 1e-5) -> None:
    """Forward and x/weight/bias gradients of ``F.<op>`` against torch in float64."""
    xa, wa = rng.standard_normal(xs), rng.standard_normal(ws)
    out_ch = ws[1] * kw.get("groups", 1) if op == "conv_transpose2d" else ws[0]
    ba = rng.standard_normal(out_ch) if bias else None
    leaves = [torch.tensor(a, requires_grad=True) for a in (xa, wa, ba) if a is not None]
    ref = TORCH[op](*leaves[:2], leaves[2] if bias else None, **kw)
    gy = rng.standard_normal(tuple(ref.shape))
    ref.backward(torch.tensor(gy))

    ours = [clnn.tensor(a.astype(dtype)) for a in (xa, wa, ba) if a is not None]
    for t in ours:
        t.requires_grad = True
    out = getattr(F, op)(*ours[:2], ours[2] if bias else None, **kw)
    assert_close(out.numpy(), ref.detach().numpy(), tol, f"{op} forward")
    out.backward(clnn.tensor(gy.astype(dtype)))
    magnitudes = _magnitudes(op, xa, wa, ba, gy, kw)
    for name, t, r, m in zip(("x", "weight", "bias"), ours, leaves, magnitudes):
        assert_sum_close(t.grad.numpy(), r.grad.numpy(), m, tol, f"{op} grad {name}")


CASES = [  # (op, x shape, weight shape, kwargs)
    ("conv2d", (2, 5, 7, 7), (3, 5, 1, 1), {}),                                     # 1x1
    ("conv2d", (1, 3, 13, 11), (7, 3, 3, 3), {"padding": 1}),                      # batch 1, primes
    ("conv2d", (2, 3, 17, 19), (4, 3, 3, 2), {"stride": (2, 3)}),
    ("conv2d", (2, 2, 11, 9), (3, 2, 3, 3), {"dilation": (2, 1), "padding": (2, 1)}),
    ("conv2d", (2, 3, 8, 10), (4, 3, 2, 3), {"padding": (0, 2)}),
    ("conv2d", (2, 3, 9, 8), (4, 3, 4, 3), {"padding": "same", "dilation": (1, 2)}),  # even kernel
    ("conv2d", (2, 3, 9, 8), (4, 3, 3, 3), {"padding": "valid"}),
    ("conv2d", (2, 4, 9, 9), (6, 2, 3, 3), {"groups": 2, "stride": 2, "padding": 1}),
    ("conv2d", (2, 5, 10, 9), (5, 1, 3, 3), {"groups": 5, "padding": 1}),         # depthwise
    ("conv2d", (2, 5, 10, 9), (10, 1, 3, 3), {"groups": 5, "padding": (1, 0)}),   # depth multiplier 2
    ("conv2d", (1, 2, 2, 2), (3, 2, 3, 3), {"padding": 1}),                       # kernel > input
    ("conv2d", (3, 33, 5, 7), (65, 33, 3, 1), {"stride": (1, 2)}),                # straddles GEMM tiles
    ("conv2d", (37, 1, 28, 28), (6, 1, 5, 5), {}),  # LeNet's first layer: the bias gradient splits N*P
    # tiled implicit GEMM (more than conv.THIN rows per group): every direction, groups, strides, splits
    ("conv2d", (3, 16, 13, 11), (24, 16, 3, 3), {"padding": 1}),
    ("conv2d", (2, 20, 9, 7), (36, 10, 3, 3), {"groups": 2, "stride": 2, "padding": 1, "dilation": (1, 2)}),
    ("conv2d", (37, 12, 19, 17), (16, 12, 3, 3), {"padding": (1, 0)}),        # long N*P: weight-gradient splits
    ("conv2d", (2, 9, 11, 13), (11, 9, 1, 1), {"stride": (2, 1)}),              # 1x1 strided
    ("conv2d", (1, 3, 31, 29), (17, 3, 5, 5), {"stride": 3, "padding": 2}),     # 5x5 stride 3, batch 1
    # strided rows wider than a CPU's 16-wide load runs: inside the image a run loads x's row at the stride
    ("conv2d", (2, 3, 9, 71), (17, 3, 3, 5), {"stride": (1, 2), "padding": 2}),
    ("conv2d", (1, 4, 7, 100), (9, 4, 3, 3), {"stride": 3, "padding": 1, "dilation": (1, 2)}),
    ("conv1d", (2, 5, 97), (12, 5, 3), {"stride": 2, "padding": 1}),
    # strides and dilations with no common factor: each phase of the input gradient steps over the taps
    ("conv2d", (2, 3, 14, 13), (4, 3, 5, 4), {"stride": (3, 2), "dilation": (2, 3), "padding": (2, 1)}),
    # input-gradient phases: no tap lands on some (stride past the kernel; tiled, then direct); 3 channels of
    # gradient (direct: 4 channels per work-item, one unused), ResNet's stem shape
    ("conv2d", (2, 9, 13, 11), (10, 9, 2, 2), {"stride": 3}),
    ("conv2d", (2, 3, 13, 11), (4, 3, 2, 2), {"stride": (3, 4), "padding": (1, 0)}),
    ("conv2d", (2, 3, 23, 21), (16, 3, 7, 7), {"stride": 2, "padding": 3}),
    ("conv1d", (3, 16, 50), (20, 16, 5), {"padding": 2, "dilation": 2}),
    ("conv2d", (2, 10, 6, 7), (12, 10, 1, 3), {"padding": 1}),  # padding past the kernel
    ("conv_transpose2d", (2, 12, 5, 6), (12, 10, 3, 3), {"dilation": 2, "padding": 1, "output_padding": 1}),
    ("conv_transpose2d", (2, 16, 7, 6), (16, 12, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ("conv_transpose2d", (2, 18, 5, 5), (18, 10, 2, 3), {"groups": 2, "dilation": (2, 1)}),
    ("conv1d", (3, 4, 29), (6, 4, 5), {"stride": 2, "padding": 3, "dilation": 2}),
    ("conv1d", (2, 4, 16), (6, 2, 4), {"groups": 2, "padding": "same"}),
    ("conv1d", (1, 3, 7), (2, 3, 1), {}),
    ("conv_transpose2d", (2, 4, 5, 6), (4, 3, 3, 2),
     {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2), "groups": 2, "dilation": (1, 2)}),
    ("conv_transpose2d", (1, 3, 4, 4), (3, 2, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ("conv_transpose2d", (2, 5, 3, 7), (5, 4, 1, 1), {}),
    ("conv_transpose2d", (2, 4, 6, 5), (4, 1, 3, 3), {"groups": 4, "padding": 1}),  # depthwise
    ("conv_transpose2d", (2, 2, 5, 5), (2, 3, 2, 2), {"dilation": 2, "output_padding": 1}),
    ("conv_transpose2d", (2, 6, 4, 5), (6, 5, 1, 2), {"stride": 3, "output_padding": (2, 1)}),  # bias alone
    ("conv_transpose2d", (2, 10, 4, 5), (10, 12, 3, 3), {"stride": 2, "padding": 2}),  # first pixels' phase odd
]


@pytest.mark.parametrize("op, xs, ws, kw", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_against_torch(op, xs, ws, kw, rng, monkeypatch):
    set_direct_conv_max_k(monkeypatch, 0)  # tiles wherever rows are not thin (Intel: short gradients go direct)
    check(op, xs, ws, kw, rng)


# GPU tile options in every tile kind (64 work-items): A's tile k-major, read in VWA-row vectors (gemm.h), with a
# full slice's k-loop unrolled (KU), slices fetched a slice ahead into registers (PF 2), and a slice's loads all
# before its stores (PF 1). The second is double-buffered where gemm.cl runs it (conv.cl's tiles are
# single-buffered whatever DB says)
GPU_OPTIONS = {
    "vwa2-unrolled": {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 2, "VWG": 2, "VWA": 2, "APAD": 1, "DB": 0,
                      "KU": 4},
    "vwa8-prefetch": {"TM": 64, "TN": 16, "TK": 16, "WM": 8, "WN": 2, "VW": 2, "VWG": 4, "VWA": 8, "APAD": 0, "DB": 1,
                      "PF": 2},
    "loads-first": {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 4, "VWG": 4, "APAD": 1, "DB": 0, "PF": 1},
    # gemm.h's ASYNC copies: the weights' runs whole (rows of 8), or each element (k-major, VWA 2); gemm's B along N
    "async": {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 4, "VWG": 4, "APAD": 0, "DB": 1, "ASYNC": 1},
    "async-k-major": {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 2, "VWG": 4, "VWA": 2, "APAD": 1,
                      "DB": 0, "ASYNC": 1},
}


@pytest.mark.gpu_tiles
@pytest.mark.parametrize("tile", GPU_OPTIONS.values(), ids=list(GPU_OPTIONS))
@pytest.mark.parametrize("op, xs, ws, kw", [CASES[i] for i in (11, 14, 15, 17, 28)],
                         ids=[f"{CASES[i][0]}-{i}" for i in (11, 14, 15, 17, 28)])
def test_gpu_tile_options(op, xs, ws, kw, tile, rng, monkeypatch):
    """The implicit-GEMM kernels and gemm with A's tile k-major (gemm.h's VWA), with slices fetched ahead and
    with a slice's loads before its stores (PF), staged by ASYNC copies: forward, input and weight gradients, groups,
    strides, dilation, a weight gradient split along N*P (its ranges' last slices part empty), and the kernels did
    run."""
    for kind in ("gemm", "gemm_small", "conv_fwd", "conv_bwd_weight"):
        monkeypatch.setitem(tuning.TABLE, kind, {"default": tile})
    monkeypatch.setitem(tuning.TABLE, "gemm_direct", {"default": {"MAX_MACS": 0}})  # tiles at any size (GPUs)
    set_direct_conv_max_k(monkeypatch, 0)
    with profiler.profile() as prof:
        check(op, xs, ws, kw, rng)
    assert {"conv_fwd", "conv_bwd_weight"} <= {k.name for k in prof.kernels}, [k.name for k in prof.kernels]


# a warp-product tile (gemm.h's MMA, in its OpenCL C form here): four warps of 32x16 blocks, k-slices of 32
MMA_TILE = {"TM": 64, "TN": 32, "TK": 32, "WM": 4, "WN": 4, "VW": 2, "VWG": 8, "VWA": 1, "APAD": 1, "DB": 0, "PF": 0}


@pytest.mark.gpu_tiles
@pytest.mark.parametrize("dtype", [clnn.float16, clnn.bfloat16], ids=["float16", "bfloat16"])
def test_half_convolutions_staged_by_async_copies_give_the_same_bits(dtype, rng, monkeypatch):
    """conv_fwd in warp-product tiles with gemm.h's ASYNC: the weights' runs and x's unit-stride runs inside an image
    row (16-byte copies where x's run starts aligned: 16-wide rows, 8-element runs), forward and gradients, give the
    bits of the same tiles staged without it, and the kernels did run."""
    for kind in ("gemm", "gemm_small", "conv_fwd", "conv_bwd_weight"):
        monkeypatch.setitem(tuning.TABLE, kind, {"default": MMA_TILE})
    monkeypatch.setitem(tuning.TABLE, "gemm_direct", {"default": {"MAX_MACS": 0}})
    set_direct_conv_max_k(monkeypatch, 0)
    set_winograd(monkeypatch, 0)
    xa, wa = rng.standard_normal((2, 8, 6, 16)), rng.standard_normal((24, 8, 3, 3))
    gy = rng.standard_normal((2, 24, 6, 16))
    results = []
    for copies in (0, 1):
        with tuning.override("mma", MMA=1, ASYNC=copies), profiler.profile() as prof:
            x, w = (clnn.tensor(a.astype(dtype), requires_grad=True) for a in (xa, wa))
            y = F.conv2d(x, w, padding=1)
            y.backward(clnn.tensor(gy.astype(dtype)))
            results.append([t.astype(clnn.float32).numpy() for t in (y, x.grad, w.grad)])
        assert "conv_fwd" in {k.name for k in prof.kernels}
    for new, old, what in zip(*results, ("y", "x's gradient", "the weight gradient")):
        np.testing.assert_array_equal(new, old, what)
    ref = TORCH["conv2d"](*(torch.tensor(a.astype(dtype).astype(np.float64)) for a in (xa, wa)), None, padding=1)
    assert_close(results[1][0], ref.numpy(), 2**-7, "y")


_QUIET_BUILDS = """
import json, sys
import numpy as np
import clnn, clnn.functional as F
from clnn import profiler, tuning
tile = json.loads(sys.argv[1])
for kind in ("gemm", "gemm_small", "conv_fwd", "conv_bwd_weight"):
    tuning.TABLE[kind] = {"default": tile}
tuning.TABLE["gemm_direct"] = {"default": {"MAX_MACS": 0}}
rng = np.random.default_rng()
x, w = (clnn.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
        for s in ((2, 16, 9, 8), (24, 16, 3, 3)))
with profiler.profile() as prof:
    F.conv2d(x, w, padding=1).sum().backward()
    (x.reshape(32, 72) @ x.reshape(72, 32)).numpy()
print(json.dumps(sorted({k.name for k in prof.kernels})))
"""


@pytest.mark.skipif("Portable" not in clnn.device().platform_name, reason="PoCL's compiler warnings")
def test_tiles_build_on_pocl_without_compiler_warnings():  # not gpu_tiles: run_tests.py's PoCL part leaves those out
    """PoCL builds every kernel a conv and a product run, in a GPU tile with slices fetched ahead into registers
    (PF), without a warning on stderr (LLVM's "loop not unrolled": registers indexed at run time would live in
    memory; users see "N warnings generated." at their first convolution): its kernel cache off, each build new."""
    env = dict(os.environ, POCL_KERNEL_CACHE="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", _QUIET_BUILDS, json.dumps(GPU_OPTIONS["vwa8-prefetch"])],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    assert {"conv_fwd", "conv_bwd_weight", "gemm"} <= set(json.loads(res.stdout)), res.stdout
    assert "warning" not in res.stderr, res.stderr[-4000:]


SHORT = [  # unit-stride products whose input gradient (conv_transpose2d: forward too) MAX_K sends to conv_direct_fwd
    ("conv2d", (3, 16, 13, 11), (24, 16, 3, 3), {"padding": 1}),
    ("conv2d", (2, 20, 9, 7), (36, 10, 3, 3), {"groups": 2, "padding": 1, "dilation": (1, 2)}),
    ("conv2d", (2, 12, 17, 9), (20, 12, 3, 5), {"stride": (2, 1), "padding": 2}),  # four phases along h: two
    ("conv1d", (3, 16, 50), (20, 16, 5), {"padding": 2, "dilation": 2}),
    ("conv_transpose2d", (2, 12, 5, 6), (12, 10, 3, 3), {"dilation": 2, "padding": 1, "output_padding": 1}),
]


@pytest.mark.parametrize("op, xs, ws, kw", SHORT, ids=[f"{c[0]}-{i}" for i, c in enumerate(SHORT)])
def test_short_input_gradients_take_the_direct_kernel_under_max_k(op, xs, ws, kw, rng, monkeypatch):
    """With MAX_K at least a product's channels x taps (Intel's runtime: 576) an input gradient's phases (and
    conv_transpose2d's forward, one) run conv_direct_fwd on every device, with the same results; a conv's own
    forward keeps its tile (fused with an activation or not, it must give the same bits), and products past
    MAX_K keep theirs."""
    set_direct_conv_max_k(monkeypatch, 1 << 20)
    monkeypatch.setitem(tuning.TABLE, "gemm_direct", {"default": {"MAX_MACS": 0}})  # none is tiny either
    with profiler.profile() as prof:
        check(op, xs, ws, kw, rng)
    forward = {k.name for k in prof.kernels if k.op in ("conv1d", "conv2d")}
    gradient = {k.name for k in prof.kernels if k.op.endswith("_backward") and k.name.startswith("conv_")}
    if op == "conv_transpose2d":
        assert {k.name for k in prof.kernels if k.op == op} >= {"conv_direct_fwd"}, prof.kernels
    else:
        assert forward == {"conv_fwd"} and "conv_direct_fwd" in gradient and "conv_fwd" not in gradient, prof.kernels
    set_direct_conv_max_k(monkeypatch, 8)
    x, w = (clnn.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
            for s in ((2, 16, 9, 9), (24, 16, 3, 3)))
    with profiler.profile() as prof:
        F.conv2d(x, w, padding=1).sum().backward()
    assert [k.name for k in prof.kernels if k.name.startswith("conv_")] == ["conv_fwd", "conv_fwd", "conv_bwd_weight"]


DIRECT = [  # cases that run conv_direct_fwd (forward, or input-gradient phases) and conv_direct_bwd_weight
    ("conv2d", (2, 5, 10, 9), (5, 1, 3, 3), {"groups": 5, "padding": 1}),             # depthwise
    ("conv2d", (2, 5, 10, 9), (10, 1, 3, 3), {"groups": 5, "padding": (1, 0)}),
    ("conv2d", (2, 2, 11, 9), (3, 2, 3, 3), {"dilation": (2, 1), "padding": (2, 1)}),
    ("conv2d", (1, 2, 2, 2), (3, 2, 3, 3), {"padding": 1}),                           # kernel > input
    ("conv2d", (2, 3, 23, 21), (16, 3, 7, 7), {"stride": 2, "padding": 3}),           # stem: gx by phases
    ("conv2d", (2, 3, 9, 37), (4, 3, 3, 5), {"padding": (1, 2), "dilation": (1, 3)}),  # rows of 37 > 16
    ("conv1d", (1, 3, 7), (2, 3, 1), {}),
    ("conv_transpose2d", (2, 4, 6, 5), (4, 1, 3, 3), {"groups": 4, "padding": 1}),
    ("conv2d", (2, 3, 5, 41), (3, 1, 3, 3), {"groups": 3, "padding": 1}),             # rows past OV, a tail
    ("conv2d", (2, 3, 7, 45), (3, 1, 3, 3), {"groups": 3, "stride": 2, "padding": 1}),  # strided rows of 23
    ("conv2d", (1, 4, 9, 53), (4, 1, 3, 5), {"groups": 4, "stride": (1, 3), "padding": (1, 4), "dilation": (1, 2)}),
]


@pytest.mark.parametrize("ov", [4, 16])
@pytest.mark.parametrize("op, xs, ws, kw", DIRECT, ids=[f"{c[0]}-{i}" for i, c in enumerate(DIRECT)])
def test_direct_kernel_with_several_outputs_per_work_item(op, xs, ws, kw, ov, rng, monkeypatch):
    """conv_direct_fwd computing OV neighbouring outputs of a row per work-item, and conv_direct_bwd_weight summing
    a row's outputs OV at a time (rows that OV does not divide, strides, edges in the padding), and the kernels did
    run (the weight gradient's where a conv2d's or conv1d's output channels per group are conv.THIN or fewer). On
    devices whose tuning takes OV > 1 (PoCL's row): the others run OV 1, in every convolution test, and Oclgrind's
    conv family checks OV 4's accesses on each of its poses (these builds took 27 s of the cold Intel and H100
    parts, 2026-11-29)."""
    if tuning.params(clnn.default_device(), "conv_direct")["OV"] == 1:
        pytest.skip("this device's tuning takes one output per work-item (OV 1)")
    monkeypatch.setitem(tuning.TABLE, "conv_direct", {"default": {"OV": ov, "MAX_K": 0}})
    with profiler.profile() as prof:
        check(op, xs, ws, kw, rng)
    ran = {k.name for k in prof.kernels}
    assert "conv_direct_fwd" in ran
    if op != "conv_transpose2d" and ws[0] // kw.get("groups", 1) <= conv_mod.THIN:
        assert "conv_direct_bwd_weight" in ran, ran


WINOGRAD = [  # 3x3 stride-1 products that Winograd's kernels compute
    ("conv2d", (2, 5, 7, 9), (4, 5, 3, 3), {"padding": 1}),        # odd outputs: half-empty edge tiles
    ("conv2d", (1, 3, 13, 11), (7, 3, 3, 3), {}),                   # batch 1, primes, no padding
    ("conv2d", (3, 17, 6, 5), (13, 17, 3, 3), {"padding": (2, 0)}),
    ("conv2d", (2, 4, 1, 1), (3, 4, 3, 3), {"padding": 2}),         # a 1x1 image: windows mostly padding
    ("conv2d", (2, 6, 8, 8), (5, 6, 3, 3), {"padding": "same"}),
    ("conv_transpose2d", (2, 6, 5, 7), (6, 4, 3, 3), {"padding": 1}),
    ("conv_transpose2d", (2, 6, 5, 7), (6, 4, 3, 3), {}),           # its forward pads by 2
    ("conv2d", (3, 5, 3, 4), (6, 5, 3, 3), {}),                     # 1x2 outputs: F(2x2) whatever M says
    ("conv2d", (1, 2, 5, 59), (3, 2, 3, 3), {"padding": 1}),        # rows of 30 and 15 tiles: CPUs' 16-tile runs
]                                                                   # end in runs of 14 and 15 (stored 8 + 4 + ...)
WINOGRAD_KERNELS = {"wino_data", "wino_filter", "wino_store", "wino_grad_tiles", "wino_filter_grad"}


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("op, xs, ws, kw", WINOGRAD, ids=[f"{c[0]}-{i}" for i, c in enumerate(WINOGRAD)])
def test_winograd_against_torch(op, xs, ws, kw, m, rng, monkeypatch):
    """Forward and every gradient by Winograd's F(mxm, 3x3) on every device (all 3x3 stride-1 products sent there),
    a row of tiles at a time (the weight gradient summed across chunks; the other tests take all tiles at once),
    against torch; no implicit-GEMM kernel ran."""
    set_winograd(monkeypatch, 1, m)
    rows, width = xs[1] + ws[0] + ws[1], xs[3] + 4  # a chunk's planes: both channel counts; the widest image
    row = max(winograd.positions(k) * -(-width // k) for k in (2, 4))  # suits's one row of tiles
    monkeypatch.setattr(winograd, "WORKSPACE", 2 * row * rows * 4)
    with profiler.profile() as prof:
        check(op, xs, ws, kw, rng)
    names = {k.name for k in prof.kernels}
    assert names >= WINOGRAD_KERNELS and not any(n.startswith("conv_") for n in names), names


def test_winograd_chunks_fill_whole_column_tiles(dev, rng, monkeypatch):
    """Where a layer's tiles take several chunks, a chunk holds the most rows of tiles that fill whole column tiles of
    Winograd's GEMM and divide the rows evenly (32 of 160 rows of 3 tiles: 96 columns in 16-column tiles, where 40
    rows would fit a plane buffer): the forward's and input gradient's products have no ragged column tile; forward
    and gradients as torch's."""
    set_winograd(monkeypatch, 1, 2)
    tile = {"TM": 16, "TN": 16, "TK": 8, "WM": 2, "WN": 4, "VW": 2, "VWG": 2, "APAD": 0, "DB": 0}
    for key in tuning.TABLE["winograd"]:
        monkeypatch.setitem(tuning.TABLE["winograd"], key, {**tuning.TABLE["winograd"][key], **tile})
    xs, ws = (20, 3, 16, 6), (5, 3, 3, 3)  # F(2x2): 8 rows of 3 tiles an image, 16 positions; 5 plane rows
    monkeypatch.setattr(winograd, "WORKSPACE", 2 * 40 * 16 * 5 * 3 * 4)  # 40 rows of tiles in half of it
    columns, product = [], winograd._product

    def noting_columns(a, a_st, b, b_st, m, n, k, into, add=False):
        columns.append(n if b_st[2] == 1 else k)  # a chunk's tiles: the columns, or the weight gradient's k
        product(a, a_st, b, b_st, m, n, k, into, add)

    monkeypatch.setattr(winograd, "_product", noting_columns)
    check("conv2d", xs, ws, {"padding": 1}, rng)
    assert columns and set(columns) == {96}, columns


def test_winograd_filters_of_any_shape_launch_one_work_group_size(dev, rng, monkeypatch):
    """Winograd's filter transforms and their gradient run over flat grids in work-groups of one size, chosen by
    clnn (not left to the runtime, which fits one to each grid), whatever the channel counts: a runtime that compiles
    a kernel for each work-group size (PoCL) compiles each once."""
    set_winograd(monkeypatch, 1)
    with profiler.profile(dev) as prof:
        for c, o in ((1, 1), (5, 3), (2, 37)):
            check("conv2d", (1, c, 5, 6), (o, c, 3, 3), {"padding": 1}, rng)
    groups = {(e.name, e.local_size) for e in prof.kernels if e.name in ("wino_filter", "wino_filter_grad")}
    assert sorted(name for name, _ in groups) == ["wino_filter", "wino_filter_grad"], groups
    assert None not in {size for _, size in groups}, groups


@pytest.mark.usefixtures("fp64")
@pytest.mark.parametrize("m", [2, 4])
def test_winograd_float64(m, rng, monkeypatch):
    set_winograd(monkeypatch, 1, m)
    with profiler.profile() as prof:
        check("conv2d", (2, 7, 6, 9), (5, 7, 3, 3), {"padding": 1}, rng, dtype=np.float64, tol=1e-12)
    assert {k.name for k in prof.kernels} >= WINOGRAD_KERNELS


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("half", [clnn.float16, clnn.bfloat16], ids=str)
def test_winograd_half(half, m, rng, monkeypatch):
    """Half storage by Winograd's kernels (float32 planes, each result rounded once in the store): forward and
    every gradient within a rounding of the half type of torch's float64 convolution of the same half values."""
    set_winograd(monkeypatch, 1, m)
    eps = float(np.finfo(np.float16).eps) if half == clnn.float16 else 2.0**-7
    xa, wa, ba = (rng.standard_normal(s).astype(half).astype(np.float64) for s in ((2, 6, 7, 9), (5, 6, 3, 3), (5,)))
    leaves = [torch.tensor(a, requires_grad=True) for a in (xa, wa, ba)]
    ref = TORCH["conv2d"](*leaves, padding=1)
    gy = rng.standard_normal(tuple(ref.shape)).astype(half).astype(np.float64)
    ref.backward(torch.tensor(gy))
    ours = [clnn.tensor(a.astype(half), requires_grad=True) for a in (xa, wa, ba)]
    with profiler.profile() as prof:
        out = F.conv2d(*ours, padding=1)
        out.backward(clnn.tensor(gy.astype(half)))
    assert {k.name for k in prof.kernels} >= WINOGRAD_KERNELS
    magnitudes = _magnitudes("conv2d", xa, wa, ba, gy, {"padding": 1})
    out_mag = TORCH["conv2d"](*(torch.tensor(np.abs(a)) for a in (xa, wa, ba)), padding=1).numpy()
    assert_sum_close(out.numpy(), ref.detach().numpy(), out_mag, eps, "forward")
    for name, t, r, m in zip(("x", "weight", "bias"), ours, leaves, magnitudes):
        assert t.grad.dtype == half
        assert_sum_close(t.grad.numpy(), r.grad.numpy(), m, eps, f"grad {name}")


@pytest.mark.parametrize("c, o, kw, dtype, takes", [
    (128, 128, {"padding": 1}, np.float32, True),            # C*O/(C+O) = 64
    (128, 127, {"padding": 1}, np.float32, False),           # 63.75
    (128, 128, {"padding": 1}, np.float16, True),            # float32 planes
    (128, 128, {"padding": 1, "stride": 2}, np.float32, False),
    (128, 128, {"padding": 1, "dilation": 2}, np.float32, False),
    (128, 128, {"padding": 3}, np.float32, False),           # the input gradient would pad by -1
    (128, 128, {"padding": 1, "groups": 2}, np.float32, False),
    (512, 512, {"padding": 1}, np.float32, True),            # F(4x4)'s filters: FILTER_BYTES
    (513, 512, {"padding": 1}, np.float32, False),           # past it
    (512, 512, {"padding": 1}, np.float64, False),
])
def test_winograd_route(c, o, kw, dtype, takes, monkeypatch):
    """Which products take Winograd's kernels at MIN_INTENSITY 64, from shapes and dtypes alone."""
    set_winograd(monkeypatch, 64)
    groups = kw.get("groups", 1)
    x = clnn.empty((1, c, 6, 6), dtype=dtype)
    w = clnn.empty((o, c // groups, 3, 3), dtype=dtype)
    g = conv_mod._geometry("conv2d", x, w, groups, 2, kw.get("stride", 1), kw["padding"], kw.get("dilation", 1))
    assert conv_mod._winograd(g, x.device, x.dtype) == takes


def test_winograd_needs_a_row_of_tiles_to_fit_a_plane_buffer():
    """Channels or widths whose filters fit FILTER_BYTES but one row of tiles' planes would not fit a plane buffer
    are not Winograd's: 8 F(4x4) tiles of 36 float32 positions (width 32) in 16 MiB hold 14563 channels, and 64
    channels hold 1820 tiles (width 7280); 512 x 512 channels' filters (36 MiB) leave 8 MiB buffers: 113 tiles."""
    assert winograd.suits(4, 14563, 32, (1, 1), np.float32) and not winograd.suits(4, 14564, 32, (1, 1), np.float32)
    assert winograd.suits(64, 64, 7280, (1, 1), np.float32) and not winograd.suits(64, 64, 7281, (1, 1), np.float32)
    assert winograd.suits(512, 512, 452, (1, 1), np.float32) and not winograd.suits(512, 512, 453, (1, 1), np.float32)
    assert [winograd.plane_bytes(c, c, np.float32) >> 20 for c in (1, 418, 419, 512)] == [16, 16, 8, 8]


@pytest.mark.parametrize("m, oh, ow, takes", [(4, 1, 1, 2), (4, 2, 2, 2), (4, 1, 7, 2), (4, 3, 3, 4), (4, 7, 9, 4),
                                              (4, 56, 56, 4), (2, 56, 56, 2)])
def test_winograd_tile_size(m, oh, ow, takes, dev, monkeypatch):
    """F(4x4) wherever its planes hold fewer elements than F(2x2)'s (36 per 4x4 outputs against 16 per 2x2,
    outputs rounded up to whole tiles): not for outputs of 1 or 2 rows or columns."""
    set_winograd(monkeypatch, 1, m)
    assert winograd.tile_size(oh, ow, dev) == takes


@pytest.mark.parametrize("n, c, s", [(32, 256, 28), (48, 512, 12)])
def test_winograd_memory_bound(n, c, s, rng, monkeypatch):
    """Winograd's layer holds less than 64 MiB beyond its inputs, outputs and gradients at any launch (its peak),
    at a batch whose transformed filters and planes would take more at once: the tiles go in chunks, through 16 MiB
    plane buffers beside 256 x 256 channels' 9 MiB of filters, 8 MiB ones beside 512 x 512's 36."""
    set_winograd(monkeypatch, 1)
    mib = 1 << 20
    assert winograd.positions(4) * c * (c + 2 * n * (s // 4) ** 2) * 4 > 64 * mib
    x, w, b = (clnn.tensor(rng.standard_normal(sh).astype(np.float32), requires_grad=True)
               for sh in ((n, c, s, s), (c, c, 3, 3), (c,)))
    gy = clnn.tensor(rng.standard_normal((n, c, s, s)).astype(np.float32))
    peak, launch = [0], kernels.launch

    def launch_noting_memory(*args, **kwargs):
        peak[0] = max(peak[0], clnn.memory_stats()["bytes_in_use"])
        return launch(*args, **kwargs)

    monkeypatch.setattr(kernels, "launch", launch_noting_memory)
    gc.collect()
    before = clnn.memory_stats()["bytes_in_use"]
    with clnn.profiler.profile() as prof:
        y = F.conv2d(x, w, b, padding=1)
        y.backward(gy)
    assert {k.name for k in prof.kernels} >= WINOGRAD_KERNELS
    assert sum(k.name == "wino_data" for k in prof.kernels) > 3  # forward, input and weight gradients: in chunks
    results = sum(t.size * 4 for t in (y, x.grad, w.grad, b.grad))
    assert 0 < peak[0] - before - results < 64 * mib


@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d"])
def test_no_bias(op, rng):
    check(op, (2, 4, 6, 7), (4, 2, 3, 3), {"groups": 2, "padding": 1}, rng, bias=False)


@pytest.mark.usefixtures("fp64")
def test_float64(rng):
    check("conv2d", (2, 3, 7, 6), (4, 3, 3, 2), {"stride": 2, "padding": (1, 2)}, rng, dtype=np.float64, tol=1e-12)


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 3), groups=st.sampled_from([1, 2, 3]), cg=st.integers(1, 3), og=st.integers(1, 3),
    size=st.tuples(st.integers(1, 9), st.integers(1, 9)), k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)), pad=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    dil=st.tuples(st.integers(1, 3), st.integers(1, 3)), seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis_conv2d(n, groups, cg, og, size, k, stride, pad, dil, seed):
    out = [(s + 2 * p - d * (kk - 1) - 1) // st_ + 1 for s, p, d, kk, st_ in zip(size, pad, dil, k, stride)]
    if min(out) <= 0:
        return
    kw = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
    check("conv2d", (n, cg * groups, *size), (og * groups, cg, *k), kw, np.random.default_rng(seed))


@pytest.mark.parametrize("kw, phases", [
    ({"padding": 1}, 1), ({"padding": (2, 0), "dilation": (2, 1), "groups": 2}, 1), ({"padding": (3, 1)}, 1),
    ({"stride": (1, 2), "padding": 1}, 2), ({"stride": 2, "padding": 1, "dilation": 2}, 4),
    ({"stride": (3, 4)}, 12),
])
def test_input_gradient_runs_the_forward_once_per_phase(kw, phases, rng, monkeypatch):
    """The input gradient is conv_fwd of gy once per phase of the stride (stride 2 with dilation 2: every tap
    lands on one phase of each axis, none on the other; stride 4 past a 3-wide kernel: a phase with no taps),
    each with its landing taps copied once; no other kernel (each case checked against torch)."""
    monkeypatch.setitem(tuning.TABLE, "gemm_direct", {"default": {"MAX_MACS": 0}})  # tiles on every device
    x = clnn.tensor(rng.standard_normal((2, 18, 9, 8)).astype(np.float32), requires_grad=True)
    w = clnn.tensor(rng.standard_normal((20, 18 // kw.get("groups", 1), 3, 3)).astype(np.float32))
    y = F.conv2d(x, w, **kw)
    with clnn.profiler.profile() as prof:
        y.backward(clnn.tensor(rng.standard_normal(y.shape).astype(np.float32)))
    names = [k.name for k in prof.kernels if k.op == "conv2d_backward"]
    convs = [n for n in names if n.startswith("conv")]
    assert len(convs) == phases and set(convs) <= {"conv_fwd", "conv_direct_fwd"}, names
    assert len(names) - len(convs) <= phases, names  # the landing taps' copies
    check("conv2d", (2, 18, 9, 8), w.shape, kw, rng)


def test_deterministic(rng):
    xa, wa = rng.standard_normal((3, 6, 11, 10), np.float32), rng.standard_normal((8, 3, 3, 3), np.float32)
    gy = rng.standard_normal((3, 8, 6, 10), np.float32)

    def run():
        x, w = clnn.tensor(xa), clnn.tensor(wa)
        x.requires_grad = w.requires_grad = True
        y = F.conv2d(x, w, stride=(2, 1), padding=1, groups=2)
        y.backward(clnn.tensor(gy))
        t = F.conv_transpose2d(clnn.tensor(gy), clnn.tensor(wa), stride=(2, 1), padding=1, groups=2)
        return [a.numpy().tobytes() for a in (y, x.grad, w.grad, t)]

    assert run() == run()


def _t(*shape, dtype=np.float32):
    return clnn.tensor(np.zeros(shape, dtype))


ERRORS = [  # (call, exception, message pattern)
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 4, 3, 3)), ValueError,
     r"conv2d: weight expects 3 input channels \(x has 3, groups=1\), got weight of shape \(8, 4, 3, 3\)"),
    (lambda: F.conv2d(_t(3, 5, 5), _t(8, 3, 3, 3)), ValueError, r"x must be 4-D .* got shape \(3, 5, 5\)"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3)), ValueError, r"weight must be 4-D"),
    (lambda: F.conv1d(_t(1, 3, 5, 5), _t(8, 3, 3)), ValueError, r"conv1d: x must be 3-D"),
    (lambda: F.conv2d(_t(1, 4, 5, 5), _t(6, 2, 3, 3), groups=3), ValueError, r"groups=3 must divide x's 4"),
    (lambda: F.conv2d(_t(1, 4, 5, 5), _t(5, 2, 3, 3), groups=2), ValueError, r"must divide weight's 5 output"),
    (lambda: F.conv2d(_t(1, 4, 5, 5), _t(6, 2, 3, 3), groups=0), ValueError, r"groups must be >= 1; got 0"),
    (lambda: F.conv2d(_t(1, 4, 5, 5), _t(6, 4, 3, 3), groups=1.5), TypeError, r"groups must be an int"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), stride=0), ValueError, r"stride expects values >= 1; got 0"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), stride=(1, -2)), ValueError, r"stride expects values >= 1"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), stride=(1, 2, 3)), TypeError, r"stride expects an int"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), padding=-1), ValueError, r"padding expects values >= 0"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), dilation=0), ValueError, r"dilation expects values >= 1"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), padding="full"), ValueError, r"'same', 'valid'"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), padding="same", stride=2), ValueError,
     r"padding='same' needs stride 1"),
    (lambda: F.conv2d(_t(1, 3, 2, 5), _t(8, 3, 3, 3)), ValueError, r"output size would be \(0, 3\)"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), dilation=3), ValueError, r"output size would be"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 0, 3)), ValueError, r"no zero-sized dimension"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3), _t(7)), ValueError, r"bias must have shape \(8,\)"),
    (lambda: F.conv2d(_t(1, 3, 5, 5), _t(8, 3, 3, 3, dtype=np.float64)), TypeError,
     r"x has dtype float32 but weight has dtype float64"),
    (lambda: F.conv2d(_t(1, 3, 5, 5, dtype=np.int32), _t(8, 3, 3, 3, dtype=np.int32)), TypeError,
     r"expects a floating tensor"),
    (lambda: F.conv2d(np.zeros((1, 3, 5, 5)), _t(8, 3, 3, 3)), TypeError, r"x expects a clnn.Tensor"),
    (lambda: F.conv_transpose2d(_t(1, 3, 5, 5), _t(4, 2, 3, 3)), ValueError,
     r"weight expects 3 input channels \(x has 3\) in dim 0"),
    (lambda: F.conv_transpose2d(_t(1, 3, 5, 5), _t(3, 2, 3, 3), stride=2, output_padding=2), ValueError,
     r"output_padding must be smaller than stride or dilation"),
    (lambda: F.conv_transpose2d(_t(1, 3, 1, 1), _t(3, 2, 1, 1), padding=1), ValueError, r"output size would be"),
    (lambda: F.conv_transpose2d(_t(1, 3, 5, 5), _t(3, 2, 3, 3), _t(3)), ValueError, r"bias must have shape \(2,\)"),
]


@pytest.mark.parametrize("call, exc, pattern", ERRORS, ids=[f"err-{i}" for i in range(len(ERRORS))])
def test_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_device_mismatch():
    x, w = _t(1, 3, 5, 5), _t(8, 3, 3, 3)
    other = clnn.Tensor(w.data, w.shape, w.dtype, dataclasses.replace(w.device))  # a distinct device object
    with pytest.raises(ValueError, match=r"conv2d: x is on .* but weight is on"):
        F.conv2d(x, other)


def test_narrow_weight_gradient_takes_a_tile_of_its_columns(dev, rng):
    """LeNet's conv1 shape (1 channel, 32 outputs, 3x3): its weight gradient is a 32 x 9 product over N*P pixels,
    from SHORT_K_MACS up weighed in gemm_small's tile cut to 16 columns (or its vector), taken on CPUs; the
    gradients match torch."""
    f32 = np.dtype("float32")
    n, hw = 19, 29
    assert 32 * 9 * n * hw * hw >= SHORT_K_MACS
    small = gemm_config(dev, f32, "gemm_small")
    narrow = _fewer_cols(small, 9)
    options = [o.how.cfg["TN"] for o in plan_options(dev, f32, 1, 32, 9, n * hw * hw, big="conv_bwd_weight")]
    assert all(c["TN"] in options for c in narrow)
    if dev.type == "cpu" and small["TN"] > 16:
        assert plan(dev, f32, 1, 32, 9, n * hw * hw, big="conv_bwd_weight").cfg["TN"] == narrow[0]["TN"] == 16
    check("conv2d", (n, 1, hw, hw), (32, 1, 3, 3), {"padding": 1}, rng)


def test_memory_bound(rng):
    """Beyond its inputs, outputs and gradients, a convolution allocates less than 64 MiB at a batch whose
    column matrix (im2col) would take 155 MiB; the forward keeps nothing but its output."""
    mib = 1 << 20
    n, c, o, s, k = 64, 3, 12, 96, 5
    assert c * k * k * n * (s - k + 1) ** 2 * 4 > 2 * 64 * mib  # the shape would need a big column matrix
    x, w, b = (clnn.tensor(rng.standard_normal(sh).astype(np.float32)) for sh in ((n, c, s, s), (o, c, k, k), (o,)))
    for t in (x, w, b):
        t.requires_grad = True
    gy = clnn.tensor(rng.standard_normal((n, o, s - k + 1, s - k + 1)).astype(np.float32))
    gc.collect()  # garbage from earlier tests, freed mid-forward, once made the count 616 bytes short on PoCL
    gc.disable()
    try:
        before = clnn.memory_stats()["bytes_in_use"]
        with clnn.profiler.profile() as prof:
            y = F.conv2d(x, w, b)
            assert clnn.memory_stats()["bytes_in_use"] - before == y.size * 4  # nothing saved besides y
            y.backward(gy)
    finally:
        gc.enable()
    results = sum(t.size * 4 for t in (y, x.grad, w.grad, b.grad))
    assert prof.bytes_allocated - results < 64 * mib
    assert 32 * mib >= conv_mod.PARTIAL_BYTES


FUSED_LAYERS = [
    (lambda: clnn.nn.Conv2d(6, 20, 3, padding=1, stride=(1, 2)), (3, 6, 11, 13), False),  # tiled
    (lambda: clnn.nn.Conv2d(4, 4, 3, groups=4), (2, 4, 9, 8), False),                      # depthwise: direct
    (lambda: clnn.nn.Conv1d(5, 12, 4, dilation=2), (3, 5, 23), False),
    (lambda: clnn.nn.Conv2d(6, 10, 3, padding=1), (2, 6, 7, 5), True),                     # Winograd's store
]


# relu and gelu in every kernel that stores, tanh and silu in the tiled one's (on GPUs each activation is a program of
# its own: gemm.h's ACT_CODE)
@pytest.mark.parametrize("act, layer, xs, wino", [(act, *case) for act in ("relu", "gelu", "tanh", "silu")
                                                  for case in (FUSED_LAYERS if act in ("relu", "gelu") else
                                                               FUSED_LAYERS[:1])])
def test_fused_activation(layer, xs, wino, act, rng, monkeypatch):
    """Sequential(conv, activation) runs as one kernel; its gradients (and relu's output) match the unfused
    layers bit for bit (the others' output is computed by another kernel's math), and torch."""
    set_winograd(monkeypatch, 1 if wino else 0)
    conv = layer()
    module = {"relu": clnn.nn.ReLU, "gelu": clnn.nn.GELU, "tanh": clnn.nn.Tanh, "silu": clnn.nn.SiLU}[act]
    tw, tb = (torch.tensor(p.numpy().astype(np.float64), requires_grad=True) for p in (conv.weight, conv.bias))
    op = TORCH["conv1d" if len(xs) == 3 else "conv2d"]

    def pre(x):  # the pre-activation in float64
        return op(x, tw, tb, stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)

    xa = rng.standard_normal(xs).astype(np.float32)
    while act == "relu" and pre(torch.tensor(xa, dtype=torch.float64)).abs().min() < 1e-5:
        xa = rng.standard_normal(xs).astype(np.float32)  # none within float32's error of the kink (the masks differ)
    runs = []
    for fused in (True, False):
        x = clnn.tensor(xa)
        x.requires_grad = True
        for p in conv.parameters():
            p.grad = None
        with clnn.profiler.profile() as prof:
            y = clnn.nn.Sequential(conv, module())(x) if fused else module()(conv(x))
        names = [k.name for k in prof.kernels]
        assert ("unary" not in names) == fused and ("wino_store" in names) == wino, names
        gy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
        y.backward(clnn.tensor(gy))
        runs.append([a.numpy() for a in (y, x.grad, conv.weight.grad, conv.bias.grad)])
    for i, (a, b) in enumerate(zip(*runs)):
        if i or act == "relu":
            assert a.tobytes() == b.tobytes()
        else:
            assert_close(a, b, 1e-6, "fused vs unfused output")
    tx = torch.tensor(xa.astype(np.float64), requires_grad=True)
    f = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "tanh": torch.tanh,
         "silu": torch.nn.functional.silu}[act]
    ref = f(pre(tx))
    ref.backward(torch.tensor(gy.astype(np.float64)))
    for got, want in zip(runs[0], (ref, tx.grad, tw.grad, tb.grad)):
        assert_close(got, want.detach().numpy(), 1e-5, f"fused conv + {act}")
