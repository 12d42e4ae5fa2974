// NVIDIA's warp-level tensor-core instructions (PTX mma.sync, mma.h) reached from OpenCL C through inline assembly:
// benchmarks/bench_mma.py checks each fragment layout (mma.h's, for one 16x8 output tile a warp, lane =
// get_local_id(0) % 32) against NumPy and times each type's peak rate; tf32 holds one k in place of each pair (t, and
// t + 4). Built for NVIDIA's OpenCL only: PTX is its assembly.

#include "mma.h"

// d = a b + d for a 16x8x8 product of tf32 values (float32 bits rounded to 10 mantissa bits)
#define MMA_1688_TF32(d, a, b)                                                                          \
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "                                   \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                   \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

uint to_tf32(float x) {  // round to nearest, ties away (cvt.rna), as the tensor cores' inputs
  uint r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// a: A (16 x 16 halves, row-major) as uint pairs; bt: B transposed (8 x 16, row-major) as pairs; c, d: 16 x 8
__kernel void mma_half(__global const uint *a, __global const uint *bt, __global const float *c,
                       __global float *d) {
  const int lane = get_local_id(0) % 32, g = lane / 4, t = lane % 4;
  uint fa[4] = {a[g * 8 + t], a[(g + 8) * 8 + t], a[g * 8 + t + 4], a[(g + 8) * 8 + t + 4]};
  uint fb[2] = {bt[g * 8 + t], bt[g * 8 + t + 4]};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
#ifdef BF16
  MMA_16816("bf16", acc, fa, fb);
#else
  MMA_16816("f16", acc, fa, fb);
#endif
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// a: A (16 x 8, row-major); b: B (8 x 8, row-major); c, d: 16 x 8; all float32, A and B rounded to tf32.
// With SPLIT, each operand is a sum big + small of two tf32 values and D = A B + C takes three products
// (big big, big small, small big): about float32's accuracy from tf32 instructions.
__kernel void mma_tf32(__global const float *a, __global const float *b, __global const float *c,
                       __global float *d) {
  const int lane = get_local_id(0) % 32, g = lane / 4, t = lane % 4;
  float xa[4] = {a[g * 8 + t], a[(g + 8) * 8 + t], a[g * 8 + t + 4], a[(g + 8) * 8 + t + 4]};
  float xb[2] = {b[t * 8 + g], b[(t + 4) * 8 + g]};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  uint fa[4], fb[2];
  for (int i = 0; i < 4; i++) fa[i] = to_tf32(xa[i]);
  for (int i = 0; i < 2; i++) fb[i] = to_tf32(xb[i]);
#ifdef SPLIT
  uint sa[4], sb[2];
  for (int i = 0; i < 4; i++) sa[i] = to_tf32(xa[i] - as_float(fa[i]));
  for (int i = 0; i < 2; i++) sb[i] = to_tf32(xb[i] - as_float(fb[i]));
  MMA_1688_TF32(acc, sa, fb);
  MMA_1688_TF32(acc, fa, sb);
#endif
  MMA_1688_TF32(acc, fa, fb);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// The peak rate: each warp runs `iters` rounds of CHAINS independent products on registers (no memory), then
// writes one sum so that nothing is left out. A work-item's operands come from `seed` (zeros in practice).
#ifndef CHAINS
#define CHAINS 8
#endif
__kernel void mma_rate(__global const uint *seed, __global float *out, const int iters) {
  const int lane = get_local_id(0) % 32;
  uint fa[4] = {seed[lane], seed[lane + 1], seed[lane + 2], seed[lane + 3]};
  uint fb[2] = {seed[lane + 4], seed[lane + 5]};
  float acc[CHAINS][4];
  for (int c = 0; c < CHAINS; c++)
    for (int i = 0; i < 4; i++) acc[c][i] = 0.0f;
  for (int it = 0; it < iters; it++) {
#pragma unroll
    for (int c = 0; c < CHAINS; c++) {
#if defined(TF32)
      MMA_1688_TF32(acc[c], fa, fb);
#elif defined(BF16)
      MMA_16816("bf16", acc[c], fa, fb);
#else
      MMA_16816("f16", acc[c], fa, fb);
#endif
    }
  }
  float s = 0.0f;
  for (int c = 0; c < CHAINS; c++) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[get_global_id(0)] = s;
}
