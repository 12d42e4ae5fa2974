"""NVIDIA tensor cores from OpenCL: whether PTX mma.sync runs through NVIDIA's OpenCL, and how fast.

Usage: ``python benchmarks/bench_mma.py [--device SPEC] [--ms 50]``

NVIDIA's OpenCL offers no half arithmetic (no ``cl_khr_fp16``) and no matrix instructions, but its compiler
takes inline PTX. This checks each warp-level product ``kernels_cl/mma_probe.cl`` issues (float16 and bfloat16
16x8x16, tf32 16x8x8, and float32 as three tf32 products of split operands) against NumPy in float64, then
times each type's peak rate on registers alone, beside PyTorch CUDA's GEMM at 4096^3 in the same types (float32
with TF32 off). NVIDIA devices only.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyopencl as cl
from common import header

import clnn
from clnn import kernels


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16 (to nearest, ties to even), as the bfloat16 bits (uint16)."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def tf32_round(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to tf32 (10 mantissa bits; to nearest, ties away from zero: cvt.rna)."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def relerr(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def check_products(dev: clnn.Device, rng: np.random.Generator) -> list[tuple[str, float, float]]:
    """(product, relative error against float64 of its rounded inputs, against float64 of the float32 inputs)."""
    q, rows = dev.queue, []
    mf = cl.mem_flags

    def run(name: str, defines: dict[str, int], *arrays: np.ndarray) -> np.ndarray:
        k = kernels.kernel(dev, "mma_probe.cl", name, defines)
        bufs = [cl.Buffer(dev.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))
                for a in arrays]
        out = np.full((16, 8), np.nan, np.float32)
        dout = cl.Buffer(dev.context, mf.WRITE_ONLY | mf.COPY_HOST_PTR, hostbuf=out)
        k(q, (32,), (32,), *bufs, dout)
        cl.enqueue_copy(q, out, dout)
        return out

    a = rng.standard_normal((16, 16), dtype=np.float32)
    b = rng.standard_normal((16, 8), dtype=np.float32)
    c = rng.standard_normal((16, 8), dtype=np.float32)
    exact = a.astype(np.float64) @ b + c
    ah, bh = a.astype(np.float16), b.astype(np.float16)
    out = run("mma_half", {}, ah.view(np.uint32), np.ascontiguousarray(bh.T).view(np.uint32), c)
    rows.append(("float16 16x8x16", relerr(out, ah.astype(np.float64) @ bh.astype(np.float64) + c),
                 relerr(out, exact)))
    ab, bb = bf16_round(a), bf16_round(b)
    widen = lambda h: (h.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # noqa: E731
    out = run("mma_half", {"BF16": 1}, ab.view(np.uint32), np.ascontiguousarray(bb.T).view(np.uint32), c)
    rows.append(("bfloat16 16x8x16", relerr(out, widen(ab) @ widen(bb) + c), relerr(out, exact)))
    a8, b8 = a[:, :8].copy(), b[:8].copy()
    exact8 = a8.astype(np.float64) @ b8 + c
    rounded = tf32_round(a8).astype(np.float64) @ tf32_round(b8) + c
    out = run("mma_tf32", {}, a8, b8, c)
    rows.append(("tf32 16x8x8", relerr(out, rounded), relerr(out, exact8)))
    out = run("mma_tf32", {"SPLIT": 1}, a8, b8, c)
    rows.append(("float32 as 3 tf32 16x8x8", relerr(out, exact8), relerr(out, exact8)))
    return rows


def peak_rate(dev: clnn.Device, kind: str, ms: float) -> float:
    """TFLOP/s of ``kind``'s products on registers alone, over about ``ms`` milliseconds."""
    chains, flops = 8, {"tf32": 2 * 16 * 8 * 8}.get(kind, 2 * 16 * 8 * 16)  # mma_probe.cl's CHAINS
    defines = {"TF32": 1} if kind == "tf32" else {"BF16": 1} if kind == "bfloat16" else {}
    k = kernels.kernel(dev, "mma_probe.cl", "mma_rate", defines)
    local, groups = 128, dev.compute_units * 16
    seed = cl.Buffer(dev.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=np.zeros(64, np.uint32))
    out = cl.Buffer(dev.context, cl.mem_flags.WRITE_ONLY, groups * local * 4)
    warps = groups * local // 32

    def seconds(iters: int) -> float:
        t0 = time.perf_counter()
        k(dev.queue, (groups * local,), (local,), seed, out, np.int32(iters))
        dev.queue.finish()
        return time.perf_counter() - t0

    seconds(16)
    iters = max(16, int(256 * ms / 1e3 / max(seconds(256), 1e-6)))
    best = min(seconds(iters) for _ in range(3))
    return warps * iters * chains * flops / best / 1e12


def torch_rates(size: int = 4096) -> dict[str, float]:
    """PyTorch CUDA's GEMM TFLOP/s at ``size``^3 per type (float32 with TF32 off), or {} without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    rates = {}
    for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        a = torch.randn(size, size, device="cuda").to(dt)
        b = torch.randn(size, size, device="cuda").to(dt)
        a @ b
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            a @ b
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        rates[name] = 2 * size**3 / best / 1e12
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--ms", type=float, default=50.0, help="milliseconds each rate is timed over")
    args = ap.parse_args()
    dev = clnn.device(args.device)
    if "nvidia" not in dev.vendor.lower():
        raise SystemExit(f"bench_mma.py needs an NVIDIA device (PTX); got {dev}")
    print(header(dev))
    print(f"{'product':>26}  {'err (rounded inputs)':>20}  {'err (float32 inputs)':>20}")
    for name, rounded, exact in check_products(dev, np.random.default_rng(0)):
        print(f"{name:>26}  {rounded:>20.2e}  {exact:>20.2e}")
    peers = torch_rates()
    print(f"{'type':>10}  {'mma TFLOP/s':>12}  {'torch 4096^3':>12}")
    for kind in ("float16", "bfloat16", "tf32"):
        peer = peers.get("float32" if kind == "tf32" else kind, float("nan"))
        print(f"{kind:>10}  {peak_rate(dev, kind, args.ms):>12.1f}  {peer:>12.1f}")


if __name__ == "__main__":
    main()
