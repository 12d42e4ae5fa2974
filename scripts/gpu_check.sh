#!/bin/bash
# The GPU checks of one lease of a lent NVIDIA machine, in one command (DEVELOPERS.md, "On a lent GPU"): installs
# the PyOpenCL wheels carried in .whl, points OpenCL at NVIDIA's driver, then runs the steps named in $STEPS in
# order, each cut off so that all of them end within $LIMIT seconds; logs go to $OUT (the device tool's folder).
#
#   STEPS="tests tune gemm conv steps precision gpt profile" LIMIT=500 bash scripts/gpu_check.sh
#
# "host" times what the host spends per small op and per step of a small MLP against PyTorch CUDA, and the same
# launches replayed raw through PyOpenCL (run_all.py's host rows): whether NVIDIA's enqueue or clnn's Python bounds
# the models of short kernels; then clnn's Python per launch of two training steps with the enqueue stubbed
# (bench_host.py, comparable with the CPU sessions' figures).
#
# $PROFILE_ARGS adds profile_steps.py options to "profile" (--models alexnet --launches 24, say).
#
# "mma" checks and times NVIDIA's tensor-core instructions reached through inline PTX (bench_mma.py); "halfgemm"
# times $HALF_DTYPES GEMMs (float16 and bfloat16; gemm.h's MMA products there) at $HALF_SIZES against PyTorch
# CUDA's in the same types, then once per variant of the warp-product tile in $MMA_VARIANTS (bench_gemm's --mma
# settings, variants separated by ";"; by default the row's slices staged by cp.async (ASYNC, PF 0), the same with
# registers capped at 128, the row before (k-slices of 64 staged run by run), k-slices of 64 with a slice's loads
# before its stores (PF 1), the same in the row's double-buffered slices of 32, ldmatrix fragments (LDSM), and
# k-slices of 64 fetched ahead, single-buffered).
#
# "regs" builds GEMM's tile once per variant in $VARIANTS with NVIDIA's -cl-nv-verbose and keeps ptxas's lines:
# registers, spills, stack and local memory per kernel (what a variant's occupancy and speed follow from);
# $REGS_ARGS adds bench_gemm.py options (--dtype float16 for the warp-product tile, --mma TK=64, say).
#
# "variants" times GEMM and two convolution layers once per tile variant in $VARIANTS (gemm.h's keys laid over
# every tuned tile, the benchmarks' --tile; commas join a variant's keys; default: A's tile row-major or k-major,
# a slice's loads before its stores, slices fetched ahead into registers, staged by cp.async (ASYNC) with and
# without a cap of 128 registers), then the two layers by Winograd's
# kernels (bench_conv --algorithm).
# $VARIANT_LAYERS names the convolution layers timed (default "0 1"; empty: GEMM alone, no Winograd).
#
# $TESTS names the test files or ids the "tests" step runs (default: all of tests/), verbosely: each line names the
# worker that ran the test, so a worker's order can be replayed; $TUNE_BUDGET the seconds "tune" spends (default: a
# third of the time left).
#
# A step a later one depends on comes first: "tune" stores its winners in $OUT/tuning.json, which the benchmarks
# after it use (CLNN_TUNING_DB). NVIDIA builds OpenCL slowly (seconds per GEMM tile): the first step that builds
# a program pays for it, later processes read pyopencl's cache.
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
START=$(date +%s)
LIMIT=${LIMIT:-500}
left() { echo $((LIMIT - ($(date +%s) - START))); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so > /tmp/icd/nvidia.icd
export PYTHONPATH=/tmp/site:$PWD OCL_ICD_VENDORS=/tmp/icd CLNN_DEVICE=${CLNN_DEVICE:-nvidia} PYTHONUNBUFFERED=1
export CLNN_TUNING_DB=$OUT/tuning.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/bench.log"
python3 -m clnn devices | tee -a "$OUT/bench.log"
for step in ${STEPS:-tests gemm conv steps precision gpt}; do
  t=$(left)
  if [ "$t" -lt 20 ]; then echo "skipped $step: $t s left" | tee -a "$OUT/bench.log"; continue; fi
  echo "=== $step ($t s left)" | tee -a "$OUT/bench.log"
  run() { timeout $(($(left) > 10 ? $(left) - 5 : 5)) "$@" 2>&1 | tee -a "$OUT/bench.log"; }
  case $step in
    tests) timeout $((t - 5)) python3 -m pytest -n 8 -v -o addopts= -p no:cacheprovider ${TESTS:-tests} > "$OUT/tests.log" 2>&1
           tail -15 "$OUT/tests.log" ;;
    tune) run python3 -m clnn tune --budget ${TUNE_BUDGET:-$((t / 3))} ;;
    gemm) run python3 benchmarks/bench_gemm.py ;;
    halfgemm) IFS=';' read -ra variants <<< "${MMA_VARIANTS-PF=0 ASYNC=1;PF=0 ASYNC=1 REGS=128;TK=64 PF=0 DB=0;TK=64 PF=1 DB=0;PF=1;LDSM=1;TK=64 PF=2 DB=0}"
              for dt in ${HALF_DTYPES:-float16 bfloat16}; do
                sizes=${HALF_SIZES:-1024 4096 8192 4096x4096x256 64x100352x288}
                run python3 benchmarks/bench_gemm.py --dtype $dt --sizes $sizes --reps 3
                for v in "${variants[@]}"; do
                  echo "--mma $v" | tee -a "$OUT/bench.log"
                  run python3 benchmarks/bench_gemm.py --dtype $dt --sizes $sizes --reps 3 --mma $v
                done
              done ;;
    conv) for layer in 0 1 2; do run python3 benchmarks/bench_conv.py --layer $layer; done ;;
    steps) run python3 benchmarks/run_all.py --only alexnet,lenet --reps 5
           run python3 benchmarks/run_all.py --only lenet --reps 5 --graph ;;
    precision) run python3 benchmarks/bench_precision.py --batch 64 ;;
    gpt) run python3 benchmarks/bench_gpt.py --steps 100
         run python3 benchmarks/bench_gpt.py --steps 100 --graph ;;
    host) run python3 benchmarks/run_all.py --only host
          run python3 benchmarks/bench_host.py ;;
    profile) run python3 benchmarks/profile_steps.py --batch 128 ${PROFILE_ARGS:-} ;;
    mma) run python3 benchmarks/bench_mma.py ;;
    regs) for v in ${VARIANTS:-VWA=1 VWA=4 PF=1 PF=2 VWA=4,PF=2}; do
            echo "--tile ${v//,/ }" | tee -a "$OUT/bench.log"
            PYOPENCL_BUILD_OPTIONS=-cl-nv-verbose PYOPENCL_COMPILER_OUTPUT=1 run python3 benchmarks/bench_gemm.py \
              --sizes 1024 --reps 1 --tile ${v//,/ } ${REGS_ARGS:-} | grep -E "ptxas|Used [0-9]+ registers|spill|stack"
          done ;;
    variants) for v in ${VARIANTS:-VWA=1 VWA=4 PF=1 PF=2 VWA=4,PF=2 ASYNC=1 ASYNC=1,REGS=128}; do
                run python3 benchmarks/bench_gemm.py --sizes 4096 4096x4096x256 1024 --reps 3 --tile ${v//,/ }
                for layer in ${VARIANT_LAYERS-0 1}; do run python3 benchmarks/bench_conv.py --layer $layer --tile ${v//,/ }; done
              done
              for layer in ${VARIANT_LAYERS-0 1}; do run python3 benchmarks/bench_conv.py --layer $layer --algorithm winograd; done
              if [ -n "${VARIANT_LAYERS-0 1}" ]; then
                for a in gemm winograd; do run python3 benchmarks/bench_conv.py --layer 1 --backward --algorithm $a; done
              fi ;;
    *) echo "unknown step $step: expected tests tune gemm conv steps precision gpt host profile mma halfgemm variants regs" ;;
  esac
done
echo "done, $(left) s left"
