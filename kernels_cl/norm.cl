/* norm.cl: batch and layer normalization, forward and backward, and the running-stat update.
 *
 * Layout: a contiguous x viewed as (outer, G, inner); group c collects the M = outer * inner elements
 * x[(o * G + c) * inner + j]. Batch norm of (N, C, *): outer = N, G = C, inner = prod(*).
 * Layer norm over the last D elements: outer = 1, G = rows, inner = D.
 * Affine bits (run time): AFF_W has weight, AFF_B has bias, AFF_INNER indexes weight and bias by j
 * (layer norm) instead of by the group c (batch norm).
 * Per-group sums run in two stages across many work-groups: the group's M elements (m = o * inner + j)
 * split into S = ceil(M / chunk) chunks, one work-group per (group, chunk) writes a partial, and one
 * work-item per group combines its S partials in order (bit-identical reruns, no atomics).
 * Kernels:
 *   norm_partial    one work-group per (group, chunk); mode NS_STATS: the chunk's mean and M2 (sum of
 *                   squared deviations about that mean, corrected two passes over the chunk); NS_GRAD:
 *                   sum(g * w') and sum(g * w' * xhat), w' the per-element weight under AFF_INNER and
 *                   1 otherwise; NS_SUM: sum(x) (the conv bias gradient)
 *   norm_partial_cols  norm_partial where inner is 1, a work-item per (COLS_N neighbouring groups, chunk)
 *   norm_finish     one work-item per group: NS_STATS combines (mean, M2) pairs about a shift (Chan's
 *                   parallel formula, in two passes) into the mean and biased variance; the other modes
 *                   add the partial sums
 *   norm_apply      y = (x - mean[c]) * rsqrt(var[c] + eps) * w + b, elementwise (clnn_shape.h's FOR_GROUP_ELEMS)
 *   norm_bwd_input  gx = rstd * (g * w - wc * (s1 + xhat * s2) / M) in training (wc: the group's
 *                   weight when weights are per group), gx = rstd * g * w with fixed statistics (FOR_GROUP_ELEMS)
 *   bn_update       running = (1 - momentum) * running + momentum * batch (variance unbiased)
 *   ln_bwd          layer norm's backward in one pass: a work-group per block of LN_ROWS rows (outer = 1,
 *                   G = rows, inner = D), local size (X, Y): first the block's row sums s1 = sum(g w) and
 *                   s2 = sum(g w xhat), Y rows at a time with X work-items across each; then per column
 *                   (one work-item each) gx as norm_bwd_input's and the block's column sums of g xhat and g
 *                   (the weight's and bias's gradients) in part (blocks, 2, D)
 *   ln_bwd_finish   one work-item per column adds the blocks' column sums in order: gw, gb
 *   ln_fwd          (GPUs) layer norm's forward in one pass, local size (X, Y): Y rows per work-group, X work-items
 *                   across each (X a power of two): the row's mean and M2 by ln_fwd_rows's corrected two-pass
 *                   formula, each sum a fixed tree over the row's X partials in local memory, then y
 *   ln_fwd_rows     (CPUs, ROW_VW defined: rowvec.h) layer norm's forward in one pass, a work-item per row of D in
 *                   explicit vectors: the row's mean and M2 (corrected two-pass, as norm_partial's), then y
 *   ln_bwd_rows     (CPUs, ROW_VW) layer norm's backward, a work-item per block of LN_ROWS rows in explicit
 *                   vectors: per row s1, s2 and gx as ln_bwd's, the block's column sums of g xhat and g added up
 *                   row by row in its part (ln_bwd's layout, so ln_bwd_finish ends both)
 * The gradients' a * b + c are explicit fma, and so are norm_partial's sums of products: a contraction the
 * compiler chose would differ between builds (X_HALF's against float32's) on the values that cancel, and it did in
 * WALK_ROWS's vectorized statistics on Intel's runtime (a half layer norm's output 1-4 ulps off float32's).
 * Partials are (G, S, 2) reals (ln_bwd's: (blocks, 2, D)), and so are the per-group results (mean, variance,
 * the gradient sums) whatever the storage type: a half mean would put 2^-11 of |mean| into every x - mean, and
 * a half variance of a row whose values lie close together is subnormal. norm_partial takes any power-of-two
 * local size <= RED_WG.
 * Defines: the element type (clnn_dtype.h); X_HALF or X_BF16 (x and gx stored as half or bf16, the rest as
 * float32 storage: clnn.autocast's norms read a half input as it is and write its gradient in its type, with
 * no float32 copy of it); Y_AS_X with either: norm_apply's y and the gradient g that norm_partial and
 * norm_bwd_input read are in x's type too (batch norm under autocast returns a half x's type, as cuDNN's batch
 * norm of half data with float32 parameters); RED_WG (reduce.h), ln_bwd's X Y <= RED_WG; LN_ROWS, ln_bwd's rows
 * per block; ROW_VW (rowvec.h) for the *_rows kernels; WALK_ROWS (CPUs, local size 1): norm_partial walks its
 * chunk row by row; COLS_N, norm_partial_cols' groups a work-item.
 */
#include "clnn_shape.h"
#include "reduce.h"

#ifndef X_HALF
#define X_HALF 0
#endif
#ifndef X_BF16
#define X_BF16 0
#endif
#ifndef Y_AS_X
#define Y_AS_X 0
#endif
#if (X_HALF || X_BF16) && (STORE_HALF || STORE_BF16 || USE_FP64 || USE_FP16)
#error "X_HALF and X_BF16 pair a half x with float32 storage only"
#endif
#if X_HALF
typedef half x_t; /* a pointer to half needs no cl_khr_fp16 */
#define LOAD_X HALF_LOAD
#define STORE_X HALF_STORE
#elif X_BF16
typedef bf16 x_t;
#define LOAD_X(p, i) bf16_to_float((p)[i].bits)
#define STORE_X(p, i, v) ((p)[i].bits = float_to_bf16((float)(v)))
#else
typedef store_t x_t;
#define LOAD_X LOAD
#define STORE_X STORE
#endif
#if Y_AS_X
typedef x_t y_t;
#define LOAD_Y LOAD_X
#define STORE_Y STORE_X
#else
typedef store_t y_t;
#define LOAD_Y LOAD
#define STORE_Y STORE
#endif

#define AFF_W 1
#define AFF_B 2
#define AFF_INNER 4

#ifndef LN_ROWS
#define LN_ROWS 64
#endif

#define NS_STATS 0
#define NS_GRAD 1
#define NS_SUM 2

/* a walk over the m-th elements (m = o * inner + j) of one group, dividing only when a row wraps */
typedef struct { int o, j; } pos_t;

inline pos_t pos_at(int m, int inner) {
    pos_t p = {m / inner, m % inner};
    return p;
}

inline pos_t pos_next(pos_t p, int step, int inner) {
    p.j += step;
    if (p.j >= inner) {
        p.o += p.j / inner;
        p.j %= inner;
    }
    return p;
}

inline size_t pos_index(pos_t p, int c, int G, int inner) { return ((size_t)p.o * G + c) * inner + p.j; }

/* the weight at index k (per element under AFF_INNER, else per group), or 1 without AFF_W */
inline real weight_at(int affine, __global const store_t *w, size_t k) { return (affine & AFF_W) ? LOAD(w, k) : 1; }

/* BODY(P) over this work-item's elements, P the parameters' index: e.j under AFF_INNER, else the group e.c. A walk
 * apiece, so that Intel's compiler sees a row's group as uniform (a selected index it gathers per lane: batch norm's
 * apply over 16x96x55x55 2.6 -> 1.5 ms) */
#define FOR_PARAMS(BODY)                                                                                    \
    do {                                                                                                    \
        if (affine & AFF_INNER)                                                                             \
            FOR_GROUP_ELEMS(outer, G, inner, e, BODY(e.j));                                                 \
        else                                                                                                \
            FOR_GROUP_ELEMS(outer, G, inner, e, BODY(e.c));                                                 \
    } while (0)

#ifdef KERNEL_norm_apply
__kernel void norm_apply(int outer, int G, int inner, int affine, real eps, __global const x_t *x,
                         __global const real *mean, __global const real *var, __global const store_t *w,
                         __global const store_t *b, __global y_t *y) {
#define APPLY_AT(P)                                                                                         \
    {                                                                                                       \
        real v = (LOAD_X(x, e.i) - mean[e.c]) * RSQRT(var[e.c] + eps) * weight_at(affine, w, P);             \
        if (affine & AFF_B) v += LOAD(b, P);                                                                \
        STORE_Y(y, e.i, v);                                                                                 \
    }
    FOR_PARAMS(APPLY_AT);
}
#endif

/* CHUNK_FOLD(GK, BODY): BODY for each of the work-item's elements of the chunk (m = lo + t, lo + t + n, .. < hi; xk
 * its x, gk its g where GK is 1 (NS_GRAD's: else 0, and g, which may stand for another buffer, is not read), u in
 * 0 .. FOLDS-1 its partial sum, reduce.h's): CPUs walk a chunk in one work-item, where one serial sum ran a conv's
 * bias gradient (LeNet's conv1, 32 sums of 100352) at about one element per 4 cycles: 1.8 -> 0.9 ms on PoCL */
#if WALK_ROWS
/* FOLDS elements k .. k+FOLDS-1 of x (X_RUN) or g (Y_RUN) into out[], as real: element by element, or where PoCL
 * converts halves by F16C, a half run by one 8-wide vcvtph2ps. Its scalar conversions kept the whole walk scalar
 * (a conv bias gradient of 8x96x56x56 halves 4.6 ms against float32's 0.4) */
#define ELEMENT_RUN(LOADER, out, p, k) \
    _Pragma("unroll") for (int u_ = 0; u_ < FOLDS; ++u_) out[u_] = LOADER(p, (k) + u_)
#if HALF_SOFT && defined(__F16C__) && FOLDS == 8
inline void half_run(real out[FOLDS], __global const ushort *h) {
    const union { float8 v; float s[8]; } w = {half_bits_to_float8((ushort8)(h[0], h[1], h[2], h[3], h[4], h[5], h[6],
                                                                              h[7]))};
#pragma unroll
    for (int u = 0; u < FOLDS; ++u) out[u] = w.s[u];
}
#define HALF_RUN(out, p, k) half_run(out, (__global const ushort *)(p) + (k))
#else
#define HALF_RUN(out, p, k) ELEMENT_RUN(HALF_LOAD, out, p, k)
#endif
#if X_HALF || STORE_HALF
#define X_RUN HALF_RUN
#else
#define X_RUN(out, p, k) ELEMENT_RUN(LOAD_X, out, p, k)
#endif
#if (Y_AS_X && X_HALF) || STORE_HALF
#define Y_RUN HALF_RUN
#else
#define Y_RUN(out, p, k) ELEMENT_RUN(LOAD_Y, out, p, k)
#endif
/* one work-item per chunk (CPUs): the chunk row by row, FOLDS neighbours of a row at a time, so that the compiler
 * forms vectors (BatchNorm2d(64) forward and backward over 8x64x112x112: PoCL 20-22 -> 12 ms, Intel's runtime 20 ->
 * 11), not element by element through the (outer, group, inner) index */
#define CHUNK_FOLD(GK, BODY)                                                                        \
    do {                                                                                            \
        pos_t r = pos_at(lo, inner);                                                                \
        for (int m = lo; m < hi; r.o += 1, r.j = 0) {                                               \
            const int len = min(hi - m, inner - r.j);                                               \
            const size_t k0 = pos_index(r, c, G, inner);                                            \
            int q = 0;                                                                              \
            for (; q + FOLDS <= len; q += FOLDS) {                                                  \
                real xs[FOLDS], gs[FOLDS] = {0};                                                    \
                X_RUN(xs, x, k0 + q);                                                               \
                if (GK) {                                                                           \
                    Y_RUN(gs, g, k0 + q);                                                           \
                }                                                                                   \
                _Pragma("unroll") for (int u = 0; u < FOLDS; ++u) {                                 \
                    const pos_t p = {r.o, r.j + q + u};                                             \
                    const real xk = xs[u], gk = gs[u];                                              \
                    BODY;                                                                           \
                }                                                                                   \
            }                                                                                       \
            for (const int u = 0; q < len; ++q) {                                                   \
                const pos_t p = {r.o, r.j + q};                                                     \
                const real xk = LOAD_X(x, k0 + q), gk = (GK) ? LOAD_Y(g, k0 + q) : 0;               \
                BODY;                                                                               \
            }                                                                                       \
            m += len;                                                                               \
        }                                                                                           \
    } while (0)
#else
#define CHUNK_FOLD(GK, BODY)                                                                        \
    do {                                                                                            \
        pos_t p = pos_at(lo + t, inner);                                                            \
        int m = lo + t;                                                                             \
        for (; m + (FOLDS - 1) * n < hi; m += FOLDS * n)                                            \
            _Pragma("unroll") for (int u = 0; u < FOLDS; ++u) {                                     \
                const size_t k = pos_index(p, c, G, inner);                                         \
                const real xk = LOAD_X(x, k), gk = (GK) ? LOAD_Y(g, k) : 0;                         \
                BODY;                                                                               \
                p = pos_next(p, n, inner);                                                          \
            }                                                                                       \
        for (const int u = 0; m < hi; m += n, p = pos_next(p, n, inner)) {                          \
            const size_t k = pos_index(p, c, G, inner);                                             \
            const real xk = LOAD_X(x, k), gk = (GK) ? LOAD_Y(g, k) : 0;                             \
            BODY;                                                                                   \
        }                                                                                           \
    } while (0)
#endif

#ifdef KERNEL_norm_partial
__kernel void norm_partial(int mode, int outer, int G, int inner, int chunk, int affine, real eps,
                           __global const x_t *x, __global const y_t *g, __global const real *mean,
                           __global const real *var, __global const store_t *w, __global real *part) {
    __local real scratch[RED_WG];
    int M = outer * inner, S = (M + chunk - 1) / chunk;
    int e = get_group_id(0), c = e / S, s = e - c * S;
    int t = get_local_id(0), n = get_local_size(0);
    int lo = s * chunk, hi = min(M, lo + chunk);
    real s1[FOLDS] = {0}, s2[FOLDS] = {0}, a1, a2 = 0;
    if (mode == NS_GRAD) {
        int inner_w = (affine & AFF_INNER) ? affine : 0;  /* per-group weights stay outside the sums */
        real mu = mean[c], rstd = RSQRT(var[c] + eps);
        CHUNK_FOLD(1, {
            real gw = gk * weight_at(inner_w, w, (inner_w & AFF_INNER) ? p.j : c);
            s1[u] += gw;
            s2[u] = FMA(gw * (xk - mu), rstd, s2[u]);
        });
        a2 = group_sum(scratch, fold_sum(s2));
    } else {
        CHUNK_FOLD(0, s1[u] += xk);
    }
    a1 = group_sum(scratch, fold_sum(s1));
    if (mode == NS_STATS) {
        /* the chunk's mean, then its M2 about it by the corrected two-pass formula: with d = x - mean,
         * mean += sum(d) / n and M2 = sum(d^2) - sum(d)^2 / n undo the first pass's rounding (a long serial
         * float32 sum of values far from 0 misses the mean by ~sqrt(n) ulps, which M2 would take squared) */
        real n_chunk = hi - lo, s3[FOLDS] = {0};
        a1 /= n_chunk;
        CHUNK_FOLD(0, {
            real d = xk - a1;
            s2[u] = FMA(d, d, s2[u]);
            s3[u] += d;
        });
        a2 = group_sum(scratch, fold_sum(s2));
        real a3 = group_sum(scratch, fold_sum(s3));
        a1 += a3 / n_chunk;
        a2 -= a3 * a3 / n_chunk;
    }
    if (t == 0) {
        part[2 * e] = a1;
        part[2 * e + 1] = a2;
    }
}
#endif

#ifdef KERNEL_norm_partial_cols
/* COLS_SUMS(C0, N, BODY): BODY for the N groups C0 + u (u < N, a constant: unrolled, a CPU compiler's vectors) of
 * each row o of the chunk; xk, x's element, and k its offset */
#define COLS_SUMS(C0, N, BODY)                                                                              \
    for (int o = lo; o < hi; ++o)                                                                            \
        _Pragma("unroll") for (int u = 0; u < N; ++u) {                                                      \
            const size_t k = (size_t)o * G + (C0) + u;                                                       \
            const real xk = LOAD_X(x, k);                                                                    \
            BODY;                                                                                            \
        }

/* the partials of groups C0 .. C0 + N - 1 */
#define COLS_PARTIALS(C0, N)                                                                                \
    do {                                                                                                    \
        real a1[COLS_N] = {0}, a2[COLS_N] = {0}, a3[COLS_N] = {0};                                          \
        if (mode == NS_GRAD) {                                                                              \
            COLS_SUMS(C0, N, {                                                                              \
                const real gw = LOAD_Y(g, k) * wc;                                                          \
                a1[u] += gw;                                                                                \
                a2[u] = FMA(gw * (xk - mean[(C0) + u]), RSQRT(var[(C0) + u] + eps), a2[u]);                  \
            });                                                                                             \
        } else {                                                                                            \
            COLS_SUMS(C0, N, a1[u] += xk);                                                                  \
        }                                                                                                   \
        if (mode == NS_STATS) { /* norm_partial's corrected two-pass M2 */                                  \
            _Pragma("unroll") for (int u = 0; u < N; ++u) a1[u] /= n_chunk;                                 \
            COLS_SUMS(C0, N, {                                                                              \
                const real d = xk - a1[u];                                                                  \
                a2[u] = FMA(d, d, a2[u]);                                                                   \
                a3[u] += d;                                                                                 \
            });                                                                                             \
            _Pragma("unroll") for (int u = 0; u < N; ++u) {                                                 \
                a1[u] += a3[u] / n_chunk;                                                                   \
                a2[u] -= a3[u] * a3[u] / n_chunk;                                                           \
            }                                                                                               \
        }                                                                                                   \
        _Pragma("unroll") for (int u = 0; u < N; ++u) {                                                     \
            const size_t e = (size_t)((C0) + u) * S + s;                                                    \
            part[2 * e] = a1[u];                                                                            \
            part[2 * e + 1] = a2[u];                                                                        \
        }                                                                                                   \
    } while (0)

/* norm_partial where inner is 1 (batch norm of (N, C)): a work-item per (COLS_N neighbouring groups, chunk) on axes
 * 0 and 1, the groups of each row side by side (vectors on CPUs; GPUs, COLS_N 1: neighbouring work-items on
 * neighbouring groups, coalesced), where norm_partial's work-items walked a column G apart; the same partials by
 * the same formulas, each sum serial over the chunk's rows */
__kernel void norm_partial_cols(int mode, int outer, int G, int chunk, int affine, real eps, __global const x_t *x,
                                __global const y_t *g, __global const real *mean, __global const real *var,
                                __global const store_t *w, __global real *part) {
    const int c0 = get_global_id(0) * COLS_N, s = get_global_id(1);
    if (c0 >= G) return;
    const int lo = s * chunk, hi = min(outer, lo + chunk), S = (outer + chunk - 1) / chunk;
    const real n_chunk = hi - lo;
    /* per-group weights stay outside the sums; AFF_INNER's weight is element 0's (inner 1) */
    const real wc = (affine & AFF_INNER) ? weight_at(affine, w, 0) : 1;
    if (c0 + COLS_N <= G)
        COLS_PARTIALS(c0, COLS_N);
    else
        for (int c = c0; c < G; ++c) COLS_PARTIALS(c, 1);
}
#endif

#ifdef KERNEL_norm_finish
__kernel void norm_finish(int mode, int G, int M, int chunk, __global const real *part, __global real *a,
                          __global real *b) {
    int c = get_global_id(0);
    if (c >= G) return;
    int S = (M + chunk - 1) / chunk;
    __global const real *p = part + 2 * (size_t)c * S;
    if (mode == NS_STATS) {
        /* chunks' (mean_s, M2_s) about a shift K (the first chunk's mean): mean = K + e with
         * e = sum(n_s (mean_s - K)) / M, M2 = sum(M2_s + n_s (mean_s - K - e)^2). Every term is small, so the
         * sums keep their digits where a running mean of values far from 0 would drift by an ulp per chunk. */
        real K = p[0], e = 0, m2 = 0;
        for (int s = 0; s < S; ++s) e += min(chunk, M - s * chunk) * (p[2 * s] - K);
        e /= M;
        for (int s = 0; s < S; ++s) {
            real d = p[2 * s] - K - e;
            m2 += p[2 * s + 1] + min(chunk, M - s * chunk) * d * d;
        }
        a[c] = K + e;
        b[c] = m2 / M;
        return;
    }
    real a1 = 0, a2 = 0;
    for (int s = 0; s < S; ++s) {
        a1 += p[2 * s];
        a2 += p[2 * s + 1];
    }
    a[c] = a1;
    if (mode != NS_SUM) b[c] = a2;  /* NS_GRAD's second sum */
}
#endif

#ifdef KERNEL_norm_bwd_input
__kernel void norm_bwd_input(int outer, int G, int inner, int affine, int training, real eps,
                             __global const x_t *x, __global const y_t *g, __global const real *mean,
                             __global const real *var, __global const store_t *w, __global const real *s1,
                             __global const real *s2, __global x_t *gx) {
    /* a walk apiece with and without training: a test of it inside one kept PoCL from vectorizing (16x96x27x27:
     * 0.35 ms, 0.1 so); the group's weight scales the correction only with weights per group */
#define BWD_TRAINING_AT(P)                                                                                  \
    {                                                                                                       \
        const int c = e.c;                                                                                  \
        const real rstd = RSQRT(var[c] + eps), xhat = (LOAD_X(x, e.i) - mean[c]) * rstd;                    \
        const real wc = (affine & AFF_INNER) ? (real)1 : weight_at(affine, w, c);                           \
        const real v = LOAD_Y(g, e.i) * weight_at(affine, w, P);                                            \
        STORE_X(gx, e.i, rstd * (v - wc * FMA(xhat, s2[c], s1[c]) / (outer * inner)));                     \
    }
#define BWD_FIXED_AT(P) STORE_X(gx, e.i, RSQRT(var[e.c] + eps) * (LOAD_Y(g, e.i) * weight_at(affine, w, P)));
    if (training)
        FOR_PARAMS(BWD_TRAINING_AT);
    else
        FOR_PARAMS(BWD_FIXED_AT);
}
#endif

#ifdef KERNEL_bn_update
__kernel void bn_update(int C, real momentum, real unbias, __global const real *mean,
                        __global const real *var, __global store_t *running_mean, __global store_t *running_var) {
    int c = get_global_id(0);
    if (c >= C) return;
    STORE(running_mean, c, (1 - momentum) * LOAD(running_mean, c) + momentum * mean[c]);
    STORE(running_var, c, (1 - momentum) * LOAD(running_var, c) + momentum * var[c] * unbias);
}
#endif

#ifdef KERNEL_ln_bwd
__kernel void ln_bwd(int rows, int D, int affine, real eps, __global const x_t *x, __global const store_t *g,
                     __global const real *mean, __global const real *var, __global const store_t *w,
                     __global x_t *gx, __global real *part) {
    __local real p1[RED_WG], p2[RED_WG], s1[LN_ROWS], s2[LN_ROWS];
    int X = get_local_size(0), Y = get_local_size(1), x0 = get_local_id(0), y0 = get_local_id(1);
    int t = y0 * X + x0, n = X * Y, blk = get_group_id(0), r0 = blk * LN_ROWS, nr = min(LN_ROWS, rows - r0);
    /* the block's row sums, Y rows at a time: X partials per row, then one work-item adds them in order */
    for (int rb = 0; rb < nr; rb += Y) {
        int r = r0 + rb + y0;
        real a1 = 0, a2 = 0;
        if (rb + y0 < nr) {
            real mu = mean[r], rstd = RSQRT(var[r] + eps);
            for (int j = x0; j < D; j += X) {
                real gw = LOAD(g, (size_t)r * D + j) * weight_at(affine, w, j);
                a1 += gw;
                a2 += gw * (LOAD_X(x, (size_t)r * D + j) - mu) * rstd;
            }
        }
        p1[t] = a1;
        p2[t] = a2;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (x0 == 0 && rb + y0 < nr) {
            a1 = a2 = 0;
            for (int k = 0; k < X; ++k) {
                a1 += p1[t + k];
                a2 += p2[t + k];
            }
            s1[rb + y0] = a1;
            s2[rb + y0] = a2;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    /* per column: gx of the block's rows, and the column sums of g xhat and g */
    for (int j = t; j < D; j += n) {
        real wj = weight_at(affine, w, j), cw = 0, cb = 0;
        for (int k = 0; k < nr; ++k) {
            size_t o = (size_t)(r0 + k) * D + j;
            real rstd = RSQRT(var[r0 + k] + eps), gj = LOAD(g, o), xh = (LOAD_X(x, o) - mean[r0 + k]) * rstd;
            STORE_X(gx, o, rstd * FMA(gj, wj, -FMA(xh, s2[k], s1[k]) / D));
            cw += gj * xh;
            cb += gj;
        }
        part[2 * (size_t)blk * D + j] = cw;
        part[(2 * (size_t)blk + 1) * D + j] = cb;
    }
}
#endif

#ifdef KERNEL_ln_bwd_finish
__kernel void ln_bwd_finish(int D, int blocks, __global const real *part, __global store_t *gw,
                            __global store_t *gb) {
    int j = get_global_id(0);
    if (j >= D) return;
    real a = 0, c = 0;
    for (int s = 0; s < blocks; ++s) {
        a += part[2 * (size_t)s * D + j];
        c += part[(2 * (size_t)s + 1) * D + j];
    }
    STORE(gw, j, a);
    STORE(gb, j, c);
}
#endif

/* the sums over a row's X work-items (X a power of two, t = y0 * X + x0) of a and b, in a fixed tree; every
 * work-item of the group calls it */
inline real2 row_sums(__local real *p1, __local real *p2, real a, real b, int t, int x0, int X) {
    p1[t] = a;
    p2[t] = b;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = X >> 1; s > 0; s >>= 1) {
        if (x0 < s) {
            p1[t] += p1[t + s];
            p2[t] += p2[t + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const real2 total = (real2)(p1[t - x0], p2[t - x0]);
    barrier(CLK_LOCAL_MEM_FENCE);  /* the next call overwrites them */
    return total;
}

#ifdef KERNEL_ln_fwd
__kernel void ln_fwd(int rows, int D, int affine, real eps, __global const x_t *x, __global const store_t *w,
                     __global const store_t *b, __global y_t *y, __global real *mean, __global real *var) {
    __local real p1[RED_WG], p2[RED_WG];
    const int X = get_local_size(0), x0 = get_local_id(0), t = get_local_id(1) * X + x0;
    const int r = get_global_id(1), end = r < rows ? D : 0;
    const size_t o = (size_t)r * D;
    real a = 0, d1 = 0, d2 = 0;
    for (int j = x0; j < end; j += X) a += LOAD_X(x, o + j);
    real mu = row_sums(p1, p2, a, 0, t, x0, X).x / D;
    for (int j = x0; j < end; j += X) {
        const real d = LOAD_X(x, o + j) - mu;
        d1 += d;
        d2 += d * d;
    }
    const real2 ds = row_sums(p1, p2, d1, d2, t, x0, X);
    const real v = (ds.y - ds.x * ds.x / D) / D, rstd = RSQRT(v + eps);
    mu += ds.x / D;
    if (end && x0 == 0) {
        mean[r] = mu;
        var[r] = v;
    }
    for (int j = x0; j < end; j += X) {
        real u = (LOAD_X(x, o + j) - mu) * rstd * weight_at(affine, w, j);
        if (affine & AFF_B) u += LOAD(b, j);
        STORE_Y(y, o + j, u);
    }
}
#endif

#ifdef ROW_VW
#include "rowvec.h"

/* w'[j] as a vector of the row's lanes at vector index i (1 without AFF_W), and b[j] (0 without AFF_B) */
#define W_VEC(i) ((affine & AFF_W) ? RV_LOAD(i, w) : (realrv)1)
#define B_VEC(i) ((affine & AFF_B) ? RV_LOAD(i, b) : (realrv)0)
#define W_AT(k) ((affine & AFF_W) ? w[k] : (real)1)
#define B_AT(k) ((affine & AFF_B) ? b[k] : (real)0)

#ifdef KERNEL_ln_fwd_rows
__kernel void ln_fwd_rows(int rows, int D, int affine, real eps, __global const store_t *x, __global const store_t *w,
                          __global const store_t *b, __global store_t *y, __global real *mean, __global real *var) {
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows) return;
    __global const store_t *p = x + row * D;
    __global store_t *q = y + row * D;
    realrv sv = 0, dv = 0, d2v = 0;
    real mu, ds, d2;
    RV_EACH(D, sv += RV_LOAD(i, p), );
    RV_FOLD(add_, sv, mu);
    RV_EACH(D, , mu += p[r]);
    mu /= D;
    RV_EACH(D, { const realrv t = RV_LOAD(i, p) - mu; dv += t; d2v += t * t; }, );
    RV_FOLD(add_, dv, ds);
    RV_FOLD(add_, d2v, d2);
    RV_EACH(D, , { const real t = p[r] - mu; ds += t; d2 += t * t; });
    const real v = (d2 - ds * ds / D) / D, rstd = RSQRT(v + eps);
    mu += ds / D;
    mean[row] = mu;
    var[row] = v;
    RV_EACH(D, RV_STORE((RV_LOAD(i, p) - mu) * rstd * W_VEC(i) + B_VEC(i), i, q),
            q[r] = (p[r] - mu) * rstd * W_AT(r) + B_AT(r));
}
#endif

#ifdef KERNEL_ln_bwd_rows
__kernel void ln_bwd_rows(int rows, int D, int affine, real eps, __global const store_t *x, __global const store_t *g,
                          __global const real *mean, __global const real *var, __global const store_t *w,
                          __global store_t *gx, __global real *part) {
    const int blk = get_global_id(0), r0 = blk * LN_ROWS;
    if (r0 >= rows) return;
    __global real *cw = part + 2 * (size_t)blk * D, *cb = cw + D;
    RV_EACH(D, { RV_STORE((realrv)0, i, cw); RV_STORE((realrv)0, i, cb); }, cw[r] = cb[r] = 0);
    for (int k = r0; k < min(rows, r0 + LN_ROWS); ++k) {
        __global const store_t *xr = x + (size_t)k * D, *gr = g + (size_t)k * D;
        __global store_t *out = gx + (size_t)k * D;
        const real mu = mean[k], rstd = RSQRT(var[k] + eps);
        realrv s1v = 0, s2v = 0;
        real s1, s2;
        RV_EACH(D, {
            const realrv gw = RV_LOAD(i, gr) * W_VEC(i);
            s1v += gw;
            s2v += gw * (RV_LOAD(i, xr) - mu) * rstd;
        }, );
        RV_FOLD(add_, s1v, s1);
        RV_FOLD(add_, s2v, s2);
        RV_EACH(D, , { const real gw = gr[r] * W_AT(r); s1 += gw; s2 += gw * (xr[r] - mu) * rstd; });
        RV_EACH(D, {
            const realrv gj = RV_LOAD(i, gr);
            const realrv xh = (RV_LOAD(i, xr) - mu) * rstd;
            RV_STORE(rstd * fma(gj, W_VEC(i), -fma(xh, (realrv)s2, (realrv)s1) / D), i, out);
            RV_STORE(RV_LOAD(i, cw) + gj * xh, i, cw);
            RV_STORE(RV_LOAD(i, cb) + gj, i, cb);
        }, {
            const real gj = gr[r];
            const real xh = (xr[r] - mu) * rstd;
            out[r] = rstd * FMA(gj, W_AT(r), -FMA(xh, s2, s1) / D);
            cw[r] += gj * xh;
            cb[r] += gj;
        });
    }
}
#endif
#endif
