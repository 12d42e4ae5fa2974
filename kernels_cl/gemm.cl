/* gemm.cl: batched C = alpha * op(A) @ op(B) + beta * C.
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
 * fastest; interior blocks of a row- or column-contiguous operand (a run-time uniform branch) copy
 * VW-element runs, which CPU compilers turn into vector moves, other blocks load guarded scalars.
 * The k order of the accumulation is fixed, so reruns are bit-identical. Arithmetic is in `real`
 * (float for half storage).
 *
 * Defines: the element type (clnn_dtype.h); TM, TN (tile of C), TK (k-slice), WM, WN (outputs per
 * work-item), VW (vector width 1, 2, 4, 8 or 16), APAD (As row padding, against bank conflicts).
 * Requires TM % WM == TN % WN == WN % VW == TM % VW == TK % VW == 0. Launch: work-group
 * (TN/WN, TM/WM, 1), global (ceil(N/TN)*TN/WN, ceil(M/TM)*TM/WM, batch).
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

__kernel __attribute__((reqd_work_group_size(RTN, RTM, 1)))
void gemm(int M, int N, int K, real alpha, real beta,
          __global const store_t *restrict A, int a_bs, int a_rs, int a_cs,
          __global const store_t *restrict B, int b_bs, int b_rs, int b_cs,
          __global store_t *restrict C) {
    __local real As[TM][TK + APAD]; /* op(A) block, row-major */
    __local realv Bs[TK][TN / VW];  /* op(B) block, row-major; realv keeps it vector-aligned */
    __local real *bs = (__local real *)Bs;
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * RTN + tx;
    const int row0 = get_group_id(1) * TM, col0 = get_group_id(0) * TN;
    A += (size_t)get_group_id(2) * a_bs;
    B += (size_t)get_group_id(2) * b_bs;
    C += (size_t)get_group_id(2) * M * N;

    realv acc[WM][NV];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[i][v] = (realv)0;

    const bool rows_in = row0 + TM <= M, cols_in = col0 + TN <= N;
    for (int k0 = 0; k0 < K; k0 += TK) {
        const bool k_in = k0 + TK <= K;
        /* Stage op(A) into As[m][k] and op(B) into Bs[k][n], walking each operand's contiguous
         * axis fastest; interior blocks copy VW-element runs through pointers so a CPU compiler
         * emits vector moves. */
        if (a_cs == 1 && rows_in && k_in) {
            for (int e = lid; e < TM * TK / VW; e += WG) {
                const int r = e / (TK / VW), kk = e % (TK / VW) * VW;
                __global const store_t *src = A + (size_t)(row0 + r) * a_rs + k0 + kk;
                __local real *dst = &As[r][kk];
                real t[VW];
#pragma unroll
                for (int q = 0; q < VW; ++q) t[q] = LOAD(src, q);
#pragma unroll
                for (int q = 0; q < VW; ++q) dst[q] = t[q];
            }
        } else if (a_rs == 1 && rows_in && k_in) {
            for (int e = lid; e < TM * TK / VW; e += WG) {
                const int kk = e / (TM / VW), r = e % (TM / VW) * VW;
                __global const store_t *src = A + (size_t)(k0 + kk) * a_cs + row0 + r;
#pragma unroll
                for (int q = 0; q < VW; ++q) As[r + q][kk] = LOAD(src, q);
            }
        } else if (a_cs == 1) {
            for (int e = lid; e < TM * TK; e += WG) {
                const int r = e / TK, kk = e % TK, gi = row0 + r, gk = k0 + kk;
                As[r][kk] = (gi < M && gk < K) ? LOAD(A, gi * a_rs + gk) : (real)0;
            }
        } else {
            for (int e = lid; e < TM * TK; e += WG) {
                const int kk = e / TM, r = e % TM, gi = row0 + r, gk = k0 + kk;
                As[r][kk] = (gi < M && gk < K) ? LOAD(A, gi * a_rs + gk * a_cs) : (real)0;
            }
        }
        if (b_cs == 1 && cols_in && k_in) {
            for (int e = lid; e < TK * TN / VW; e += WG) {
                const int kk = e / (TN / VW), c = e % (TN / VW) * VW;
                __global const store_t *src = B + (size_t)(k0 + kk) * b_rs + col0 + c;
                __local real *dst = bs + kk * TN + c;
                real t[VW];
#pragma unroll
                for (int q = 0; q < VW; ++q) t[q] = LOAD(src, q);
#pragma unroll
                for (int q = 0; q < VW; ++q) dst[q] = t[q];
            }
        } else if (b_rs == 1 && cols_in && k_in) {
            for (int e = lid; e < TK * TN / VW; e += WG) {
                const int c = e / (TK / VW), kk = e % (TK / VW) * VW;
                __global const store_t *src = B + (size_t)(col0 + c) * b_cs + k0 + kk;
#pragma unroll
                for (int q = 0; q < VW; ++q) bs[(kk + q) * TN + c] = LOAD(src, q);
            }
        } else if (b_cs == 1) {
            for (int e = lid; e < TK * TN; e += WG) {
                const int kk = e / TN, c = e % TN, gj = col0 + c, gk = k0 + kk;
                bs[kk * TN + c] = (gj < N && gk < K) ? LOAD(B, gk * b_rs + gj) : (real)0;
            }
        } else {
            for (int e = lid; e < TK * TN; e += WG) {
                const int c = e / TK, kk = e % TK, gj = col0 + c, gk = k0 + kk;
                bs[kk * TN + c] = (gj < N && gk < K) ? LOAD(B, gk * b_rs + gj * b_cs) : (real)0;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; ++kk) {
            realv b[NV];
#pragma unroll
            for (int v = 0; v < NV; ++v) b[v] = Bs[kk][tx + v * RTN];
#pragma unroll
            for (int i = 0; i < WM; ++i) {
                const realv a = (realv)As[ty + i * RTM][kk];
#pragma unroll
                for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
            }
        }
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
