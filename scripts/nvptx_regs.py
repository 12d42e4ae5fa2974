"""Registers, spills and stack of a GEMM or convolution tile as NVIDIA's compiler would build it, without a GPU.

clang (from the ``ziglang`` wheel: ``pip install ziglang``) compiles the kernel (``gemm.cl``'s gemm, ``conv.cl``'s
conv_fwd or conv_bwd_weight) to PTX for sm_90 with clnn's own build defines for its tile (taken from a device posing
as an NVIDIA GPU, with the PTX warp products and no ``cl_khr_fp16``, as NVIDIA's runtime builds them;
``scripts/nvptx_prelude.cl`` defines the OpenCL built-ins the kernels call), and CUDA's ``ptxas`` (on PATH)
assembles it with ``-v``. NVIDIA's OpenCL compiler is another LLVM front end, so the figures are a proxy: ptxas
allocates the registers in both, but the PTX it is given differs. ``--sass FILE`` writes the machine code ptxas made
(CUDA's ``nvdisasm`` on PATH: ``pip install nvidia-cuda-nvdisasm``) and prints how many of its instructions load
global memory (LDG), store or load local memory (STS, LDS), multiply (HMMA, FFMA) or wait at a barrier (BAR).

    CLNN_DEVICE=intel CLNN_LIMITS="type=gpu,cu=132,wg=1024,local=49152,vendor=NVIDIA Corporation" \\
        python scripts/nvptx_regs.py [--kernel gemm|conv_fwd|conv_bwd_weight] [--dtype float16] [--tile KEY=VALUE ...]
        [--mma KEY=VALUE ...] [--ptxas ARG ...] [--sass FILE]
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from common import add_mma_option, add_tile_option, override_mma, override_tiles  # noqa: E402

import clnn  # noqa: E402
from clnn import kernels  # noqa: E402
from clnn.ops.matmul import gemm_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": clnn.bfloat16}
KERNELS = {"gemm": "gemm.cl", "conv_fwd": "conv.cl", "conv_bwd_weight": "conv.cl"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--kernel", choices=KERNELS, default="gemm", help="the kernel (and its tile's tuning kind)")
    ap.add_argument("--ptxas", nargs="*", default=[], help="more ptxas arguments, e.g. --maxrregcount=128")
    ap.add_argument("--sass", type=pathlib.Path, help="write the machine code here (nvdisasm) and count its kinds")
    add_tile_option(ap)
    add_mma_option(ap)
    args = ap.parse_args()
    dev = clnn.default_device()
    override_tiles(dev, args.tile)
    override_mma(dev, args.mma)
    cfg = gemm_config(dev, np.dtype(DTYPES[args.dtype]), args.kernel)
    options = kernels.build_options(dev, KERNELS[args.kernel], args.kernel,
                                    {**kernels.defines(np.dtype(DTYPES[args.dtype])), **cfg})
    nvidia = {"HALF_CONVERT": 0, **({"MMA_PTX": 1} if cfg.get("MMA") else {})}  # what NVIDIA's runtime would get
    defines = [o for o in options if o.startswith("-D") and o[2:].split("=")[0] not in nvidia]
    defines += [f"-D{k}={v}" for k, v in nvidia.items()]
    regs = [f"--maxrregcount={cfg['REGS']}"] if cfg.get("REGS") else []
    print(f"{args.kernel}, {args.dtype}: {cfg}")
    zig = [sys.executable, "-m", "ziglang", "clang", "-cc1"]
    include = next(pathlib.Path(sys.prefix).rglob("opencl-c.h")).parent
    with tempfile.TemporaryDirectory() as tmp:
        ptx = pathlib.Path(tmp) / "kernel.ptx"
        subprocess.run([*zig, "-triple", "nvptx64-nvidia-cuda", "-cl-std=CL1.2", "-cl-ext=+cl_khr_fp16",
                        "-fgnu-keywords", f"-I{include}", "-include", "opencl-c.h", "-include",
                        str(ROOT / "scripts" / "nvptx_prelude.cl"), "-target-cpu", "sm_90", "-target-feature",
                        "+ptx80", "-O3", "-S", "-o", str(ptx), *defines,
                        f"-I{ROOT / 'kernels_cl'}", str(ROOT / "kernels_cl" / KERNELS[args.kernel])], check=True)
        cubin = pathlib.Path(tmp) / "kernel.cubin"
        out = subprocess.run(["ptxas", "-arch=sm_90", "-v", *regs, *args.ptxas, str(ptx), "-o", str(cubin)],
                             capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"ptxas failed:\n{out.stderr}")
        print("\n".join(line for line in out.stderr.splitlines() if "registers" in line or "stack" in line))
        if args.sass:
            sass = subprocess.run(["nvdisasm", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
            args.sass.write_text(sass)
            ops = collections.Counter(re.findall(r"\b(LDG|STS|LDS|HMMA|FFMA|BAR)\b", sass))
            print(f"{args.sass}: " + ", ".join(f"{ops[k]} {k}" for k in ("LDG", "STS", "LDS", "HMMA", "FFMA", "BAR")))


if __name__ == "__main__":
    main()
