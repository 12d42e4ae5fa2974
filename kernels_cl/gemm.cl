/* gemm.cl: batched C = alpha * op(A) @ op(B) + beta * C.
 *
 * Layout: A is read as A[b*a_bs + i*a_rs + k*a_cs] (M x K), B as B[b*b_bs + k*b_rs + j*b_cs] (K x N):
 * any transpose is a choice of strides. C is row-major: C[b*M*N + i*N + j].
 * Each work-group computes a TS x TS tile of C, staging TS x TK slices of A and B in local memory;
 * each work-item owns WPT x WPT outputs in registers. Edges are zero-padded in local memory, so
 * every shape is correct.
 * Defines: the element type (clnn_dtype.h); TS (tile edge), TK (k-slice), WPT (outputs per work-item
 * per dimension). The work-group is (TS/WPT, TS/WPT).
 */
#include "clnn_dtype.h"

#ifndef TS
#define TS 32
#endif
#ifndef TK
#define TK 16
#endif
#ifndef WPT
#define WPT 4
#endif
#define RTS (TS / WPT)

__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1)))
void gemm(int M, int N, int K, real alpha, real beta,
          __global const store_t *A, int a_bs, int a_rs, int a_cs,
          __global const store_t *B, int b_bs, int b_rs, int b_cs,
          __global store_t *C) {
    __local real As[TK][TS + 1];
    __local real Bs[TK][TS + 1];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int col0 = get_group_id(0) * TS, row0 = get_group_id(1) * TS;
    const int b = get_global_id(2);
    A += (size_t)b * a_bs;
    B += (size_t)b * b_bs;
    C += (size_t)b * M * N;

    real acc[WPT][WPT];
    for (int i = 0; i < WPT; ++i)
        for (int j = 0; j < WPT; ++j) acc[i][j] = 0;

    const int lid = ty * RTS + tx;
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int e = lid; e < TS * TK; e += RTS * RTS) {
            int r = e / TK, kk = e % TK;           /* A tile: row r, depth kk */
            int gi = row0 + r, gk = k0 + kk;
            As[kk][r] = (gi < M && gk < K) ? LOAD(A, gi * a_rs + gk * a_cs) : 0;
            int kb = e / TS, c = e % TS;           /* B tile: depth kb, column c */
            int gj = col0 + c, gkb = k0 + kb;
            Bs[kb][c] = (gj < N && gkb < K) ? LOAD(B, gkb * b_rs + gj * b_cs) : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; ++kk) {
            real a[WPT], bv[WPT];
            for (int i = 0; i < WPT; ++i) a[i] = As[kk][ty + i * RTS];
            for (int j = 0; j < WPT; ++j) bv[j] = Bs[kk][tx + j * RTS];
            for (int i = 0; i < WPT; ++i)
                for (int j = 0; j < WPT; ++j) acc[i][j] += a[i] * bv[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < WPT; ++i) {
        int gi = row0 + ty + i * RTS;
        if (gi >= M) continue;
        for (int j = 0; j < WPT; ++j) {
            int gj = col0 + tx + j * RTS;
            if (gj >= N) continue;
            real prev = beta != 0 ? LOAD(C, gi * N + gj) : 0;
            STORE(C, gi * N + gj, alpha * acc[i][j] + beta * prev);
        }
    }
}
