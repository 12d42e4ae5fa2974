/* gemm.cl: batched C = alpha * op(A) @ op(B) + beta * C, optionally split along k.
 *
 * Layout: A is read as A[b*a_bs + i*a_rs + k*a_cs] (M x K), B as B[b*b_bs + k*b_rs + j*b_cs] (K x N):
 * any transpose is a choice of strides. C is row-major and contiguous: C[b*M*N + i*N + j]; when
 * beta != 0 it holds the addend on entry.
 *
 * Blocking: each work-group computes a TM x TN tile of C. Per TK-deep slice of the k axis it stages
 * op(A)'s TM x TK block (As[m][k], rows padded by APAD) and op(B)'s TK x TN block (Bs[k][n]) in local
 * memory, zero-padded past the matrix edges, so every shape is correct. Each work-item then
 * accumulates a WM x WN block of C in registers: rows ty + i*RTM, and VW-wide vectors at columns
 * (tx + v*RTN)*VW, so neighbouring work-items read neighbouring local vectors (no bank conflicts on
 * GPUs) and a CPU compiler emits whole-vector FMAs. Staging walks each operand's contiguous axis
 * fastest; blocks of a row- or column-contiguous operand that lie inside its rows (A) or columns (B)
 * (a run-time uniform branch) copy VW-element runs, which CPU compilers turn into vector moves, also
 * in a short last k-slice; other blocks load guarded scalars.
 * The k order of the accumulation is fixed, so reruns are bit-identical. Arithmetic is in `real`
 * (float for half storage).
 *
 * Split k: the grid's third axis runs over batch * S; group z computes matrix b = z / S over the
 * k range [s*KS, min(K, (s+1)*KS)), s = z % S, into C[z]. The operands are offset to the range's
 * start and the k loop runs to the argument KS (a last, shorter range stages zeros): loop bounds
 * derived from the group id instead cost ~25 % on PoCL. With S > 1 the host points C at a
 * (batch, S, M, N) buffer of `real` partials (alpha 1, beta 0) and `gemm_sum` adds them up in order
 * of s: more work-groups for small-M*N, long-k products (a convolution's weight gradient), still
 * without atomics. The last k-slice of a range loops only over its kn <= TK valid columns.
 *
 * Defines: the element type (clnn_dtype.h); TM, TN (tile of C), TK (k-slice), WM, WN (outputs per
 * work-item), VW (vector width 1, 2, 4, 8 or 16), APAD (As row padding, against bank conflicts).
 * Requires TM % WM == TN % WN == WN % VW == TM % VW == TK % VW == 0 and KS % TK == 0. Launch:
 * work-group (TN/WN, TM/WM, 1), global (ceil(N/TN)*TN/WN, ceil(M/TM)*TM/WM, batch*S);
 * gemm_sum: one work-item per element of the (batch, M, N) result.
 */
#include "clnn_dtype.h"

#ifndef TM
#define TM 64
#endif
#ifndef TN
#define TN 64
#endif
#ifndef TK
#define TK 32
#endif
#ifndef WM
#define WM 4
#endif
#ifndef WN
#define WN 16
#endif
#ifndef VW
#define VW 8
#endif
#ifndef APAD
#define APAD 0
#endif

#define RTM (TM / WM) /* work-group height */
#define RTN (TN / WN) /* work-group width */
#define NV (WN / VW)  /* vectors per work-item row */
#define WG (RTM * RTN)

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#if VW == 1
typedef real realv;
#else
typedef CAT(REAL_T, VW) realv;
#endif
/* Built-ins such as vloadN and mad are out-of-line calls on some CPU runtimes (PoCL), so the hot
 * paths use plain loads and `a * b + c`, which the compiler contracts to an FMA where it has one. */
#pragma OPENCL FP_CONTRACT ON

/* acc += As[rows][kk] * Bs[kk][columns] for the work-item's WM x WN block */
#define MAC_STEP(kk)                                                          \
    do {                                                                      \
        realv b[NV];                                                          \
        _Pragma("unroll") for (int v = 0; v < NV; ++v) b[v] = Bs[kk][tx + v * RTN]; \
        _Pragma("unroll") for (int i = 0; i < WM; ++i) {                      \
            const realv a = (realv)As[ty + i * RTM][kk];                      \
            _Pragma("unroll") for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v]; \
        }                                                                     \
    } while (0)

__kernel __attribute__((reqd_work_group_size(RTN, RTM, 1)))
void gemm(int M, int N, int K, int KS, int S, real alpha, real beta,
          __global const store_t *restrict A, int a_bs, int a_rs, int a_cs,
          __global const store_t *restrict B, int b_bs, int b_rs, int b_cs,
          __global store_t *restrict C) {
    __local real As[TM][TK + APAD]; /* op(A) block, row-major */
    __local realv Bs[TK][TN / VW];  /* op(B) block, row-major; realv keeps it vector-aligned */
    __local real *bs = (__local real *)Bs;
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * RTN + tx;
    const int row0 = get_group_id(1) * TM, col0 = get_group_id(0) * TN;
    const int z = get_group_id(2), kbeg = z % S * KS, kend = min(KS, K - kbeg); /* range length */
    A += (size_t)(z / S) * a_bs + (size_t)kbeg * a_cs;
    B += (size_t)(z / S) * b_bs + (size_t)kbeg * b_rs;
    C += (size_t)z * M * N;

    realv acc[WM][NV];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[i][v] = (realv)0;

    const bool rows_in = row0 + TM <= M, cols_in = col0 + TN <= N;
    for (int k0 = 0; k0 < KS; k0 += TK) {
        const bool k_in = k0 + TK <= kend;
        const int kn = max(0, min(TK, kend - k0)); /* valid columns of this slice; the rest is not read */
        /* Stage op(A) into As[m][k] and op(B) into Bs[k][n], walking each operand's contiguous
         * axis fastest; blocks inside the matrix's rows (A) or columns (B) copy VW-element runs
         * through pointers so a CPU compiler emits vector moves, also in a short last k-slice
         * (its first kn columns; runs along k need kn % VW == 0). */
        if (a_cs == 1 && rows_in && kn % VW == 0) {
            for (int e = lid; e < TM * TK / VW; e += WG) {
                const int r = e / (TK / VW), kk = e % (TK / VW) * VW;
                if (kk >= kn) continue;
                __global const store_t *src = A + (size_t)(row0 + r) * a_rs + k0 + kk;
                __local real *dst = &As[r][kk];
                real t[VW];
#pragma unroll
                for (int q = 0; q < VW; ++q) t[q] = LOAD(src, q);
#pragma unroll
                for (int q = 0; q < VW; ++q) dst[q] = t[q];
            }
        } else if (a_rs == 1 && rows_in) {
            for (int e = lid; e < kn * (TM / VW); e += WG) {
                const int kk = e / (TM / VW), r = e % (TM / VW) * VW;
                __global const store_t *src = A + (size_t)(k0 + kk) * a_cs + row0 + r;
#pragma unroll
                for (int q = 0; q < VW; ++q) As[r + q][kk] = LOAD(src, q);
            }
        } else if (a_cs == 1) {
            for (int e = lid; e < TM * TK; e += WG) {
                const int r = e / TK, kk = e % TK, gi = row0 + r, gk = k0 + kk;
                As[r][kk] = (gi < M && gk < kend) ? LOAD(A, gi * a_rs + gk) : (real)0;
            }
        } else {
            for (int e = lid; e < TM * kn; e += WG) {
                const int kk = e / TM, r = e % TM, gi = row0 + r, gk = k0 + kk;
                As[r][kk] = gi < M ? LOAD(A, gi * a_rs + gk * a_cs) : (real)0;
            }
        }
        if (b_cs == 1 && cols_in) {
            for (int e = lid; e < kn * (TN / VW); e += WG) {
                const int kk = e / (TN / VW), c = e % (TN / VW) * VW;
                __global const store_t *src = B + (size_t)(k0 + kk) * b_rs + col0 + c;
                __local real *dst = bs + kk * TN + c;
                real t[VW];
#pragma unroll
                for (int q = 0; q < VW; ++q) t[q] = LOAD(src, q);
#pragma unroll
                for (int q = 0; q < VW; ++q) dst[q] = t[q];
            }
        } else if (b_rs == 1 && cols_in && kn % VW == 0) {
            for (int e = lid; e < TK * TN / VW; e += WG) {
                const int c = e / (TK / VW), kk = e % (TK / VW) * VW;
                if (kk >= kn) continue;
                __global const store_t *src = B + (size_t)(col0 + c) * b_cs + k0 + kk;
#pragma unroll
                for (int q = 0; q < VW; ++q) bs[(kk + q) * TN + c] = LOAD(src, q);
            }
        } else if (b_cs == 1) {
            for (int e = lid; e < kn * TN; e += WG) {
                const int kk = e / TN, c = e % TN, gj = col0 + c, gk = k0 + kk;
                bs[kk * TN + c] = gj < N ? LOAD(B, gk * b_rs + gj) : (real)0;
            }
        } else {
            for (int e = lid; e < TK * TN; e += WG) {
                const int c = e / TK, kk = e % TK, gj = col0 + c, gk = k0 + kk;
                bs[kk * TN + c] = (gj < N && gk < kend) ? LOAD(B, gk * b_rs + gj * b_cs) : (real)0;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* a constant trip count for full slices: a run-time one costs ~20 % on PoCL */
        if (k_in)
            for (int kk = 0; kk < TK; ++kk) MAC_STEP(kk);
        else
            for (int kk = 0; kk < kn; ++kk) MAC_STEP(kk);
        barrier(CLK_LOCAL_MEM_FENCE);
    }

#pragma unroll
    for (int i = 0; i < WM; ++i) {
        const int gi = row0 + ty + i * RTM;
        if (gi >= M) break;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            const real *t = (const real *)&acc[i][v];
            const int gj = col0 + (tx + v * RTN) * VW;
#pragma unroll
            for (int q = 0; q < VW; ++q) {
                if (gj + q < N) {
                    const int o = gi * N + gj + q;
                    STORE(C, o, beta != 0 ? alpha * t[q] + beta * LOAD(C, o) : alpha * t[q]);
                }
            }
        }
    }
}

/* out[i] = alpha * (sum over s of part[b][s][i]) + beta * out[i] for the (batch, M, N) result,
 * i = b*MN + j: the partials of a k-split gemm, added in order of s. */
__kernel void gemm_sum(int total, int MN, int S, real alpha, real beta, __global const real *restrict part,
                       __global store_t *restrict out) {
    const int i = get_global_id(0);
    if (i >= total) return;
    __global const real *p = part + (size_t)(i / MN) * S * MN + i % MN;
    real acc = 0;
    for (int s = 0; s < S; ++s) acc += p[(size_t)s * MN];
    STORE(out, i, beta != 0 ? alpha * acc + beta * LOAD(out, i) : alpha * acc);
}
