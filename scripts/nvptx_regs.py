"""Registers, spills and stack of a GEMM or convolution tile, or of every kernel a model's training step builds, as
NVIDIA's compiler would build them, without a GPU.

clang (from the ``ziglang`` wheel: ``pip install ziglang``) compiles the kernel (``gemm.cl``'s gemm, ``conv.cl``'s
conv_fwd or conv_bwd_weight) to PTX for sm_90 with clnn's own build defines for its tile (taken from a device posing
as an NVIDIA GPU, with the PTX warp products and no ``cl_khr_fp16``, as NVIDIA's runtime builds them;
``scripts/nvptx_prelude.cl`` defines the OpenCL built-ins the kernels call), and CUDA's ``ptxas`` (on PATH: ``pip
install nvidia-cuda-nvcc-cu12`` puts it in site-packages/nvidia/cuda_nvcc/bin) assembles it with ``-v``. NVIDIA's
OpenCL compiler is another LLVM front end, so the figures are a proxy: ptxas allocates the registers in both, but
the PTX it is given differs. ``--sass FILE`` writes the machine code ptxas made
(CUDA's ``nvdisasm`` on PATH: ``pip install nvidia-cuda-nvdisasm``) and prints how many of its instructions load
global memory (LDG), store or load local memory (STS, LDS), multiply (HMMA, FFMA) or wait at a barrier (BAR).

    CLNN_DEVICE=intel CLNN_LIMITS="type=gpu,cu=132,wg=1024,local=49152,vendor=NVIDIA Corporation" \\
        python scripts/nvptx_regs.py [--kernel gemm|conv_fwd|conv_bwd_weight] [--dtype float16] [--tile KEY=VALUE ...]
        [--mma KEY=VALUE ...] [--ptxas ARG ...] [--sass FILE]

``--models alexnet,gpt,lenet [--batch N] [--policy mixed_float16]`` instead runs one training step of each model
(``benchmarks/profile_steps.py``'s) on the posing device, records every program it builds, and assembles each:
one line per kernel, those with a stack frame (private arrays in local memory) or spills first, its tiles with
``--tile`` and ``--mma`` laid over them. Pose with ``fp16=0`` there (NVIDIA's runtime has no ``cl_khr_fp16``).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from common import POLICIES, add_mma_option, add_tile_option, override_mma, override_tiles  # noqa: E402
from profile_steps import model_step  # noqa: E402

import clnn  # noqa: E402
from clnn import kernels  # noqa: E402
from clnn.ops.matmul import gemm_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": clnn.bfloat16}
KERNELS = {"gemm": "gemm.cl", "conv_fwd": "conv.cl", "conv_bwd_weight": "conv.cl"}


def nvidia_defines(options: list[str]) -> list[str]:
    """The -D options of a build as NVIDIA's runtime would get them: no cl_khr_fp16 conversions, and a warp-product
    tile's products and an ASYNC tile's copies in inline PTX."""
    ptx = {f"{key}_PTX": 1 for key in ("MMA", "ASYNC") if f"-D{key}=1" in options}
    nvidia = {"HALF_CONVERT": 0, **ptx}
    return [o for o in options if o.startswith("-D") and o[2:].split("=")[0] not in nvidia] + [
        f"-D{k}={v}" for k, v in nvidia.items()]


def assemble(file: str, defines: list[str], ptxas: list[str], cubin: pathlib.Path) -> str:
    """ptxas -v's report of kernels_cl/``file`` built with ``defines`` for sm_90 (clang's PTX), the machine code
    written to ``cubin``. Raises CalledProcessError where clang fails, SystemExit where ptxas does."""
    include = next(pathlib.Path(sys.prefix).rglob("opencl-c.h")).parent
    clang = [sys.executable, "-m", "ziglang", "clang", "-cc1", "-triple", "nvptx64-nvidia-cuda", "-target-cpu", "sm_90",
             "-target-feature", "+ptx80", "-O3"]
    ir, ptx = cubin.with_suffix(".ll"), cubin.with_suffix(".ptx")
    subprocess.run([*clang, "-cl-std=CL1.2", "-cl-ext=+cl_khr_fp16", "-fgnu-keywords", f"-I{include}", "-include",
                    "opencl-c.h", "-include", str(ROOT / "scripts" / "nvptx_prelude.cl"), "-emit-llvm", "-o", str(ir),
                    *defines, f"-I{ROOT / 'kernels_cl'}", str(ROOT / "kernels_cl" / file)], check=True)
    # clang (20 on) builds each kernel as a call to its body, __clang_ocl_kern_imp_<kernel>, kept `noinline`: a call
    # that passes struct arguments through the stack, which NVIDIA's runtime does not make. Inlined, as there.
    ir.write_text(re.sub(r"\bnoinline\b", "", ir.read_text()))
    subprocess.run([*clang, "-x", "ir", "-S", "-o", str(ptx), str(ir)], check=True)
    out = subprocess.run(["ptxas", "-arch=sm_90", "-v", *ptxas, str(ptx), "-o", str(cubin)], capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"ptxas failed on {file} {' '.join(defines)}:\n{out.stderr}")
    return out.stderr


def kernel_stats(report: str) -> dict[str, list[int]]:
    """kernel -> [registers, stack bytes, spill store bytes, spill load bytes] from ptxas -v's report; a kernel's
    body (clang's __clang_ocl_kern_imp_<kernel>) counts as the kernel."""
    stats: dict[str, list[int]] = {}
    name = ""
    for line in report.splitlines():
        if m := re.search(r"Function properties for (\w+)", line):
            name = m.group(1).removeprefix("__clang_ocl_kern_imp_")
            stats.setdefault(name, [0, 0, 0, 0])
        elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            stats[name][1:] = [max(a, int(b)) for a, b in zip(stats[name][1:], m.groups())]
        elif m := re.search(r"Used (\d+) registers", line):
            stats[name][0] = int(m.group(1))
    return stats


def one_tile(args: argparse.Namespace, dev: clnn.Device) -> None:
    """ptxas's report (and with --sass the machine code's counts) of one tile of gemm.cl or conv.cl."""
    cfg = gemm_config(dev, np.dtype(DTYPES[args.dtype]), args.kernel)
    options = kernels.build_options(dev, KERNELS[args.kernel], args.kernel,
                                    {**kernels.defines(np.dtype(DTYPES[args.dtype])), **cfg})
    regs = [f"--maxrregcount={cfg['REGS']}"] if cfg.get("REGS") else []
    print(f"{args.kernel}, {args.dtype}: {cfg}")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp) / "kernel.cubin"
        report = assemble(KERNELS[args.kernel], nvidia_defines(options), [*regs, *args.ptxas], cubin)
        print("\n".join(line for line in report.splitlines() if "registers" in line or "stack" in line))
        if args.sass:
            sass = subprocess.run(["nvdisasm", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
            args.sass.write_text(sass)
            ops = collections.Counter(re.findall(r"\b(LDG|STS|LDS|HMMA|FFMA|BAR)\b", sass))
            print(f"{args.sass}: " + ", ".join(f"{ops[k]} {k}" for k in ("LDG", "STS", "LDS", "HMMA", "FFMA", "BAR")))


def model_kernels(args: argparse.Namespace, dev: clnn.Device) -> None:
    """One line per kernel of every program a training step of each of --models builds: registers, stack, spills
    and the build's defines."""
    built: dict[tuple[str, tuple[str, ...]], None] = {}
    compile_ = kernels._compile

    def record(context, cl_device, file, options, binary, where):  # noqa: ANN001, ANN202
        built[file, tuple(options)] = None
        return compile_(context, cl_device, file, options, binary, where)

    kernels._compile = record
    try:
        clnn.manual_seed(0)
        for name in args.models.split(","):
            model_step(name, dev, args.batch, args.policy)()
        dev.synchronize()
    finally:
        kernels._compile = compile_

    def one(item: tuple[str, tuple[str, ...]]) -> tuple[str, list[str], dict[str, list[int]]]:
        file, options = item
        defines = nvidia_defines(list(options))
        with tempfile.TemporaryDirectory() as tmp:
            return file, defines, kernel_stats(assemble(file, defines, args.ptxas, pathlib.Path(tmp) / "k.cubin"))

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        rows = [(file, kernel, s, defines) for file, defines, stats in pool.map(one, built)
                for kernel, s in stats.items()]
    print(f"{len(built)} programs, {len(rows)} kernels: registers, stack frame, spill stores / loads (bytes)")
    for file, kernel, (regs, stack, stores, loads), defines in sorted(rows, key=lambda r: (-r[2][1] - r[2][2], r[1])):
        shown = " ".join(d[2:] for d in defines if not re.match(r"-D(KERNEL_|ERFC_|HALF_|MATH_|ROLL_|GROUP_)", d))
        print(f"{file:14s} {kernel:26s} {regs:4d} {stack:5d} {stores:5d} / {loads:<5d} {shown}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--kernel", choices=KERNELS, default="gemm", help="the kernel (and its tile's tuning kind)")
    ap.add_argument("--ptxas", nargs="*", default=[], help="more ptxas arguments, e.g. --maxrregcount=128")
    ap.add_argument("--sass", type=pathlib.Path, help="write the machine code here (nvdisasm) and count its kinds")
    ap.add_argument("--models", help="every kernel a training step of these builds (alexnet,gpt,lenet), not a tile")
    ap.add_argument("--batch", type=int, default=8, help="--models: AlexNet's and LeNet's batch")
    ap.add_argument("--policy", choices=sorted(POLICIES), default="float32", help="--models: AlexNet's and LeNet's")
    add_tile_option(ap)
    add_mma_option(ap)
    args = ap.parse_args()
    dev = clnn.default_device()
    override_tiles(dev, args.tile)
    override_mma(dev, args.mma)
    if args.models:
        model_kernels(args, dev)
    else:
        one_tile(args, dev)


if __name__ == "__main__":
    main()
