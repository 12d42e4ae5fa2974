/* gemm.cl: batched C = act(alpha * op(A) @ op(B) + beta * D): a tiled kernel, optionally split along k,
 * and a direct kernel for small products.
 *
 * Layout: A is read as A[b*a_bs + i*a_rs + k*a_cs] (M x K), B as B[b*b_bs + k*b_rs + j*b_cs] (K x N):
 * any transpose is a choice of strides. C is row-major and contiguous: C[b*M*N + i*N + j]. The addend
 * D (read only when beta != 0) is D[b*d_bs + i*d_rs + j*d_cs]: a zero stride broadcasts it, so a
 * Linear layer's bias row is added in the store, with no copy of it into C first. The store then applies
 * the activation act, a unary.h code (negative: none), and with keep also writes the value before it to
 * P (laid out as C): nn.Sequential's Linear -> activation in one launch (gemm.h's store_act, in programs built
 * with FUSED_ACT; the others ignore act and keep). A split gemm's partials take act < 0, keep 0; gemm_sum
 * applies them.
 *
 * gemm (tiled): each work-group computes a TM x TN tile of C. Per TK-deep slice of the k axis it
 * stages op(A)'s TM x TK block (As: row-major As[m][k], rows padded by APAD against bank conflicts, or with
 * VWA > 1 k-major in VWA-row vectors, gemm.h's a_tile) and op(B)'s TK x TN block (Bs[k][n]) in local memory,
 * zero-padded past the matrix edges, so every shape is correct. Each work-item accumulates a WM x WN block of
 * C in registers: rows ty + i*RTM (VWA > 1: VWA-row runs at (ty + u*RTM)*VWA, gemm.h's ACC_ROW), and VW-wide
 * vectors at columns (tx + v*RTN)*VW, so neighbouring work-items read neighbouring local vectors (no
 * bank conflicts on GPUs) and a CPU compiler emits whole-vector FMAs. Staging walks each operand's
 * contiguous axis fastest; blocks of a row- or column-contiguous operand that lie inside its rows (A)
 * or columns (B) (a run-time uniform branch) copy VWG-element runs, also in a short last k-slice;
 * a run is one vector load where the operand is aligned to it (base and non-unit stride, checked at
 * run time), else VWG scalar loads, which CPU compilers turn into vector moves. Other blocks load
 * guarded scalars. With DB=1 the local tiles are double-buffered: the next k-slice is staged into
 * the other buffer before the current one is multiplied, one barrier per slice, so global loads of
 * one slice overlap the arithmetic of the other (GPUs); DB=0 stages, waits, multiplies, waits (CPUs). With
 * PF=1 a slice's loads all go to registers before any goes to local memory (gemm.h's FETCH and PUT), so they are
 * in flight together; with PF=2 before the multiply of the slice before and to local memory after it, so a
 * work-item's own loads are in flight while it computes. With ASYNC=1 (PF 0) the runs that are plain copies go
 * from global to local memory by NVIDIA's cp.async, without registers (gemm.h; elsewhere as without it).
 * A tile whose columns all lie inside C, with beta 0 or an addend whose rows are contiguous, is stored as whole
 * VW-vectors (activation applied lane by lane, pre-activation too) where C's (and D's, P's) rows are vector-aligned
 * (checked at run time; gemm.h's store_act_vec, in any storage), else lane by lane (STORE_ACT_LANES).
 * The k order of the accumulation is fixed, so reruns are bit-identical. Arithmetic is in `real`
 * (float for half storage).
 *
 * Split k: the grid's third axis runs over batch * S; group z computes matrix b = z / S over the
 * k range [s*KS, min(K, (s+1)*KS)), s = z % S, into C[z]. The operands are offset to the range's
 * start and the k loop runs to the argument KS (a last, shorter range stages zeros): loop bounds
 * derived from the group id instead cost ~25 % on PoCL. With S > 1 the host points C at a
 * (batch, S, M, N) buffer of `real` partials (alpha 1, beta 0) and `gemm_sum` adds them up in order
 * of s, then alpha and beta * D: more work-groups for small-M*N, long-k products (a convolution's weight gradient),
 * still without atomics. The last k-slice of a range loops only over its kn <= TK valid columns.
 *
 * gemm_direct: one work-item per element of C (a flat grid, C's rows one after another), k in order, no local
 * memory and no padding: for products so small that the launch, not the arithmetic, should bound them (127x253x61).
 *
 * Defines: the element type (clnn_dtype.h), A_F32, B_F32, D_F32 (gemm.h: a float32 operand rounded to the
 * element type as it is loaded), C_F32 (gemm.h: C and P float32, holding results rounded to the element
 * type); TM, TN (tile of C), TK (k-slice), WM, WN (outputs per work-item), VW (vector width 1, 2, 4, 8
 * or 16), VWG (global load run 1, 2, 4, 8 or 16), VWA (A's local vectors: 1, 2, 4, 8 or 16 rows), APAD (As
 * row padding, in VWA-vectors), DB (0 or 1: double-buffered local tiles), PF (0: run by run, 1: a slice's
 * loads before its stores, 2: loads fetched a slice ahead into registers), KU (a full slice's k-loop unrolled KU
 * steps at a time; 0: the compiler's choice), ASYNC (0 or 1: cp.async copies; ASYNC_PTX from the host).
 * Requires TM % WM == TN % WN == WN % VW == WM % VWA == 0, TM % VWG == TN % VWG == TK % VWG == 0 and
 * KS % TK == 0. Launch: work-group (TN/WN, TM/WM, 1), global (ceil(N/TN)*TN/WN, ceil(M/TM)*TM/WM,
 * batch*S); gemm_sum: one work-item per element of the (batch, M, N) result; gemm_direct: global
 * (batch*M*N), any work-group.
 */
#include "gemm.h"

/* the `mode` half (gemm.h's FETCH, PUT or STAGE) of staging both operands' k-slice at k0 */
inline void stage(__local local_t *as, __local local_t *bs, stage_run *ra, stage_run *rb, int mode, int k0, int kend,
                  int M, int N, int row0, int col0, __global const a_t *A, int a_rs, int a_cs, bool a_vec,
                  __global const b_t *B, int b_rs, int b_cs, bool b_vec, int lid) {
    stage_a(as, ra, mode, k0, kend, M, row0, A, a_rs, a_cs, a_vec, lid);
    stage_b(bs, rb, mode, k0, kend, N, col0, B, b_rs, b_cs, b_vec, lid);
}

/* STORE_BLOCK(ROW, COL, INSIDE): the store of a work-item's block acc[WM][NV] (rows ROW(i), increasing, columns
 * COL(v) .. + VW: expressions of i and v), C = act(alpha * acc + beta * D) (with keep, P the value before act): whole
 * VW-vectors where INSIDE (every column of the block lies inside C) and C's (D's, P's) rows are vector-aligned,
 * else lane by lane; rows past M store nothing. Uses the kernel's M, N, alpha, beta, D, d_rs, d_cs, act, keep, P, C */
#if VW > 1
#define WHOLE_STORES(INSIDE)                                                                                \
    ((INSIDE) && stores_aligned(C, N) && (!keep || stores_aligned(P, N)) &&                                  \
     (beta == 0 || (d_cs == 1 && stores_aligned(D, d_rs))))
#define STORE_WHOLE(at, gi, gj)                                                                             \
    if (whole) {                                                                                            \
        const realv d = beta != 0 ? beta * LOAD_D_VEC(D + (size_t)(gi) * d_rs + (gj)) : (realv)0;          \
        store_act_vec(C + (at), P + (at), alpha * acc[i][v] + d, act, keep);                                \
        continue;                                                                                           \
    }
#else
#define WHOLE_STORES(INSIDE) false
#define STORE_WHOLE(at, gi, gj)
#endif
#define STORE_BLOCK(ROW, COL, INSIDE)                                                                       \
    const bool whole = WHOLE_STORES(INSIDE);                                                                \
    _Pragma("unroll") for (int i = 0; i < WM; ++i) {                                                        \
        const int gi = (ROW);                                                                               \
        if (gi >= M) break;                                                                                 \
        _Pragma("unroll") for (int v = 0; v < NV; ++v) {                                                    \
            const int gj = (COL);                                                                           \
            const size_t at = (size_t)gi * N + gj;                                                          \
            STORE_WHOLE(at, gi, gj)                                                                         \
            union { realv v; real s[VW]; } d = {(realv)0};                                                  \
            if (beta != 0) {                                                                                \
                LANES_UNROLL for (int q = 0; q < VW; ++q)                                                   \
                    if (gj + q < N) d.s[q] = beta * LOAD_D(D, (size_t)gi * d_rs + (size_t)(gj + q) * d_cs); \
            }                                                                                               \
            STORE_ACT_LANES(C, P, alpha * acc[i][v] + d.v, act, keep, at + q, gj + q < N);                  \
        }                                                                                                   \
    }

#ifdef KERNEL_gemm
TILED_KERNEL
void gemm(int M, int N, int K, int KS, int S, real alpha, real beta,
          __global const a_t *restrict A, int a_bs, int a_rs, int a_cs,
          __global const b_t *restrict B, int b_bs, int b_rs, int b_cs,
          __global const d_t *restrict D, int d_bs, int d_rs, int d_cs, int act, int keep,
          __global c_t *P, __global c_t *C) {
    __local a_tile As[DB + 1] TILE_ALIGNED; /* op(A) blocks (gemm.h's a_tile) */
    __local b_tile Bs[DB + 1] TILE_ALIGNED; /* op(B) blocks (gemm.h's b_tile) */
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * RTN + tx;
    const int row0 = GROUP_ID(1) * TM, col0 = get_group_id(0) * TN;
    const int z = GROUP_ID(2), kbeg = z % S * KS, kend = min(KS, K - kbeg); /* range length */
    A += (size_t)(z / S) * a_bs + (size_t)kbeg * a_cs;
    B += (size_t)(z / S) * b_bs + (size_t)kbeg * b_rs;
    C += (size_t)z * M * N;
    P += (size_t)z * M * N;
    D += (size_t)(z / S) * d_bs;
    const bool a_vec = runs_aligned(A, a_cs == 1 ? a_rs : a_cs), b_vec = runs_aligned(B, b_cs == 1 ? b_rs : b_cs);

    realv acc[WM][NV];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[i][v] = (realv)0;

    FETCH_REGISTERS(ra, rb);
/* STAGE_AT(buf, mode, k0): the `mode` half of staging slice k0 into local buffer buf */
#define STAGE_AT(buf, mode, k0)                                                                                     \
    stage((__local local_t *)As[buf], (__local local_t *)Bs[buf], ra, rb, mode, k0, kend, M, N, row0, col0, A, a_rs, \
          a_cs, a_vec, B, b_rs, b_cs, b_vec, lid)
#if DB /* one barrier per slice: the next slice goes into the other buffer */
    if (FETCH_HERE(1)) STAGE_AT(0, FETCH, 0);
    STAGE_AT(0, PUT_HALF, 0);
    STAGED_BARRIER();
    for (int k0 = 0; k0 < KS; k0 += TK) {
        const int cur = (k0 / TK) & 1, next = k0 + TK < KS;
        if (PF && next) STAGE_AT(cur ^ 1, FETCH, k0 + TK);
        if (PF < 2 && next) STAGE_AT(cur ^ 1, PUT_HALF, k0 + TK); /* read after this slice's barrier */
        MULTIPLY(As[cur], Bs[cur], k0);
        if (PF == 2 && next) STAGE_AT(cur ^ 1, PUT, k0 + TK);
        STAGED_BARRIER();
    }
#else
    for (int k0 = 0; k0 < KS; k0 += TK) {
        if (FETCH_HERE(k0 == 0)) STAGE_AT(0, FETCH, k0);
        STAGE_AT(0, PUT_HALF, k0);
        STAGED_BARRIER();
        if (PF == 2 && k0 + TK < KS) STAGE_AT(0, FETCH, k0 + TK); /* in flight during the multiply */
        MULTIPLY(As[0], Bs[0], k0);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
#undef STAGE_AT

    STORE_BLOCK(row0 + ACC_ROW(i), col0 + ACC_COL(v), col0 + TN <= N);
}
#endif

/* gemm_rows (CPUs): a work-item computes WM rows x WN columns of C (NV vectors of VW) from global memory over the
 * k range [k0, K): per k, WM elements of A broadcast and NV vectors of B's row (B's columns contiguous: b_cs = 1;
 * unaligned vector loads, widened or rounded as gemm.h's staging does: half and bf16 storage, A_F32, B_F32), WM * NV
 * vector FMAs. No local memory and no barrier: PoCL keeps a barrier-free kernel's accumulators in registers across
 * the whole k loop (a tile's went to per-work-item arrays and back at each k-slice's barrier), and the caches
 * tile: a work-group's RTM work-items share their columns, run one after another on one core, and so find B's
 * panel in its cache. The host runs a long k in chunks (tuning's gemm_rows SPAN: a panel over more pages than the
 * TLB holds ran 2048^3 at half speed): a chunk with k0 > 0 starts from the partial sums in S (`real`), every chunk
 * but the last (last = 0) stores its sums there, unscaled, and the last stores C through STORE_BLOCK. Rows past M
 * read row M - 1 and store nothing; a block reaching past N reads its vectors lane by lane (a block-uniform
 * branch). Defines: WM, WN, VW as gemm's, TN = WN, TM = WM * LY (the work-items a group: RTM). Launch: work-group
 * (1, RTM, 1), global (ceil(N/WN), ceil(M/WM) rounded up to RTM, batch). */
#ifdef KERNEL_gemm_rows
typedef CAT(B_RAW_T, VW) b_run_u __attribute__((aligned(sizeof(B_RAW_T)))); /* VW of B's at any element's address */
typedef realv realv_u __attribute__((aligned(sizeof(real))));
#define B_WHOLE(b, v) B_STAGE_RAW(*(__global const b_run_u *)((b) + (v) * VW))
/* the vector of B's first n elements at p (all of them from VW on), zeros after */
inline realv b_lanes(__global const b_t *p, int n) {
    if (n >= VW) return B_WHOLE(p, 0);
    union { realv v; real s[VW]; } t = {(realv)0};
    for (int q = 0; q < n; ++q) t.s[q] = LOAD_B(p, q);
    return t.v;
}
/* likewise of the partial sums at p */
inline realv sum_lanes(__global const real *p, int n) {
    if (n >= VW) return *(__global const realv_u *)p;
    union { realv v; real s[VW]; } t = {(realv)0};
    for (int q = 0; q < n; ++q) t.s[q] = p[q];
    return t.v;
}
#define B_EDGE(b, v) b_lanes((b) + (v) * VW, N - c0 - (v) * VW)
/* the k loop, B's vector v of row p loaded by LOAD_BV(B, v) */
#define ROWS_LOOP(LOAD_BV)                                                                                  \
    for (int p = k0; p < K; ++p) {                                                                          \
        realv bv[NV];                                                                                       \
        _Pragma("unroll") for (int v = 0; v < NV; ++v) bv[v] = LOAD_BV(B, v);                              \
        _Pragma("unroll") for (int i = 0; i < WM; ++i) {                                                    \
            const real av = LOAD_A(a[i], 0);                                                                \
            _Pragma("unroll") for (int v = 0; v < NV; ++v) acc[i][v] += av * bv[v];                         \
        }                                                                                                   \
        B += b_rs;                                                                                          \
        _Pragma("unroll") for (int i = 0; i < WM; ++i) a[i] += a_cs;                                        \
    }
TILED_KERNEL
void gemm_rows(int M, int N, int K, int k0, int last, real alpha, real beta,
               __global const a_t *restrict A, int a_bs, int a_rs, int a_cs,
               __global const b_t *restrict B, int b_bs, int b_rs,
               __global const d_t *restrict D, int d_bs, int d_rs, int d_cs, int act, int keep,
               __global c_t *P, __global real *S, __global c_t *C) {
    const int c0 = get_global_id(0) * WN, r0 = get_global_id(1) * WM, z = get_global_id(2);
    if (r0 >= M) return;
    const size_t mn = (size_t)M * N;
    A += (size_t)z * a_bs;
    B += (size_t)z * b_bs + c0 + (size_t)k0 * b_rs;
    D += (size_t)z * d_bs;
    C += z * mn;
    P += z * mn;
    S += z * mn;
    __global const a_t *a[WM];
    realv acc[WM][NV];
    _Pragma("unroll") for (int i = 0; i < WM; ++i) {
        const int row = min(r0 + i, M - 1);
        a[i] = A + (size_t)row * a_rs + (size_t)k0 * a_cs;
        _Pragma("unroll") for (int v = 0; v < NV; ++v)
            acc[i][v] = k0 > 0 ? sum_lanes(S + (size_t)row * N + c0 + v * VW, N - c0 - v * VW) : (realv)0;
    }
    if (c0 + WN <= N) {
        ROWS_LOOP(B_WHOLE)
    } else {
        ROWS_LOOP(B_EDGE)
    }
    if (!last) { /* a chunk's partial sums, unscaled */
        _Pragma("unroll") for (int i = 0; i < WM; ++i) {
            if (r0 + i >= M) break;
            _Pragma("unroll") for (int v = 0; v < NV; ++v) {
                union { realv v; real s[VW]; } t = {acc[i][v]};
                const size_t at = (size_t)(r0 + i) * N + c0 + v * VW;
                for (int q = 0; q < VW && c0 + v * VW + q < N; ++q) S[at + q] = t.s[q];
            }
        }
        return;
    }
    STORE_BLOCK(r0 + i, c0 + v * VW, c0 + WN <= N);
}
#undef ROWS_LOOP
#endif

/* out[b][r][c] = alpha * (sum over s of part[b][s][r][c]) + beta * D[b*d_bs + r*d_rs + c*d_cs] for the
 * (batch, M, N) result, one work-item per element: the partials of a k-split gemm, added in order of s. */
#ifdef KERNEL_gemm_sum
__kernel void gemm_sum(int total, int M, int N, int S, real alpha, real beta, __global const real *restrict part,
                       __global const d_t *restrict D, int d_bs, int d_rs, int d_cs, int act, int keep,
                       __global c_t *P, __global c_t *out) {
    const int i = get_global_id(0);
    if (i >= total) return;
    const int MN = M * N, b = i / MN, r = (i - b * MN) / N, c = i % N;
    __global const real *p = part + (size_t)b * S * MN + (i - b * MN);
    real acc = 0;
    for (int s = 0; s < S; ++s) acc += p[(size_t)s * MN];
    const real d = beta != 0 ? beta * LOAD_D(D, (size_t)b * d_bs + (size_t)r * d_rs + (size_t)c * d_cs) : 0;
    store_act(out, P, i, alpha * acc + d, act, keep);
}
#endif

/* C[b][i][j] = alpha * sum over k (in order) of A[b][i][k] * B[b][k][j] + beta * D[b][i][j] */
#ifdef KERNEL_gemm_direct
__kernel void gemm_direct(int M, int N, int K, int batch, real alpha, real beta,
                          __global const a_t *restrict A, int a_bs, int a_rs, int a_cs,
                          __global const b_t *restrict B, int b_bs, int b_rs, int b_cs,
                          __global const d_t *restrict D, int d_bs, int d_rs, int d_cs, int act, int keep,
                          __global c_t *P, __global c_t *C) {
    const size_t e = get_global_id(0), mn = (size_t)M * N;
    if (e >= mn * batch) return;
    const int b = e / mn, i = e % mn / N, j = e % N;
    A += (size_t)b * a_bs + (size_t)i * a_rs;
    B += (size_t)b * b_bs + (size_t)j * b_cs;
    real acc = 0;
    for (int p = 0; p < K; ++p) acc += LOAD_A(A, (size_t)p * a_cs) * LOAD_B(B, (size_t)p * b_rs);
    const real d = beta != 0 ? beta * LOAD_D(D, (size_t)b * d_bs + (size_t)i * d_rs + (size_t)j * d_cs) : 0;
    store_act(C, P, ((size_t)b * M + i) * N + j, alpha * acc + d, act, keep);
}
#endif
