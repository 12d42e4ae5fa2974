/* reduce.cl: reductions over one axis of a contiguous tensor viewed as (outer, R, inner).
 *
 * out[o * inner + j] = reduce_{r < R} x[(o * R + r) * inner + j]
 * A launch may reduce chunks of the axis only: with S = ceil(R / chunk) it writes, for each output and
 * each chunk s, the reduction of r in [s * chunk, (s + 1) * chunk) to element (o * S + s) * inner + j
 * of an (outer, S, inner) result. The host reduces that result again (the same kernels, RF_IN_PART) until
 * S == 1: a long axis is spread over many work-groups, and every combination happens in a fixed order,
 * so the result is bit-identical run after run.
 *   reduce_item:  one work-item per (output, chunk), walking its chunk; consecutive work-items take
 *                 consecutive j (coalesced when inner > 1), and many short rows share a work-group.
 *   reduce_group: one work-group per (output, chunk); each work-item folds a strided share, and the
 *                 tree of reduce.h combines the shares. Any power-of-two local size <= RED_WG.
 * Ops (run-time code; the host reads the values from this file): R_SUM, R_MAX, R_MIN, R_LOGSUMEXP, R_ARGMAX,
 * R_ARGMIN. Arg ops write the index of the first extreme (as NumPy; NaN counts as the extreme) to idx.
 * A chunk of logsumexp yields its own logsumexp, which the next stage reduces with logsumexp again.
 * Flags (run time): RF_IN_PART reads an earlier stage's partial results (xp, and xi for arg ops, with
 * real and long elements) instead of x; RF_OUT_PART writes partial results to outp (and idx) instead of
 * out (and idx), so float16 partials keep float32 precision.
 *   reduce_sum_rows: (CPUs, ROW_VW defined: rowvec.h) R_SUM with inner 1, a work-item per (output, chunk) in
 *                 explicit vectors; reduce_sum_cols: R_SUM with inner > 1, a work-item per (output row, chunk,
 *                 COL_VECS x ROW_VW neighbouring columns).
 * Defines: the element type (clnn_dtype.h); RED_WG (reduce.h); ROW_VW and COL_VECS for the *_rows and *_cols
 * kernels.
 */
#include "reduce.h"

#define R_SUM 0
#define R_MAX 1
#define R_MIN 2
#define R_LOGSUMEXP 3
#define R_ARGMAX 4
#define R_ARGMIN 5

#define RF_IN_PART 1
#define RF_OUT_PART 2

inline int is_arg(int op) { return op == R_ARGMAX || op == R_ARGMIN; }

/* whether op looks for the largest value (logsumexp does too: its shift), or for the smallest */
inline int seeks_max(int op) { return op == R_MAX || op == R_ARGMAX || op == R_LOGSUMEXP; }
inline int seeks_min(int op) { return op == R_MIN || op == R_ARGMIN; }

/* does (v, i) beat (best, bi)? NaN wins, as in NumPy; ties go to the lower index. NaN told by x != x: PoCL calls
 * isnan out of line (argmax over 4096 rows of 2048: 26 -> 10 ms; Intel's runtime 5.0 -> 3.6) */
inline int better(int op, real v, long i, real best, long bi) {
    if (best != best) return v != v && i < bi;
    if (v != v) return 1;
    if (v == best) return i < bi;
    return seeks_max(op) ? v > best : v < best;
}

typedef struct {
    __global const store_t *x;
    __global const real *xp;
    __global const long *xi;
    int flags;
} src_t;

inline real value_at(src_t in, size_t k) { return (in.flags & RF_IN_PART) ? in.xp[k] : LOAD(in.x, k); }

/* the index element k stands for: its position r on the axis, or the index an earlier stage found */
inline long index_at(int op, src_t in, size_t k, int r) { return (in.flags & RF_IN_PART) && is_arg(op) ? in.xi[k] : r; }

/* the best (value, index) among r = r0, r0 + step, ... < r1 of the row at base (stride inner) */
inline void share_best(int op, src_t in, size_t base, int inner, int r0, int r1, int step, real *best,
                       long *bi) {
    *best = seeks_min(op) ? BIG : -BIG;
    *bi = LONG_MAX;
    for (int r = r0; r < r1; r += step) {
        size_t k = base + (size_t)r * inner;
        real v = value_at(in, k);
        long i = index_at(op, in, k, r);
        if (better(op, v, i, *best, *bi)) { *best = v; *bi = i; }
    }
}

/* sum of x (R_SUM) or of exp(x - m) (R_LOGSUMEXP) over the same share, in reduce.h's FOLDS partial sums. The
 * source and the op are chosen once, outside the loops: a choice per element kept CPU compilers from vectorizing
 * them */
#define SHARE_SUM(AT, TERM)                                                                  \
    do {                                                                                     \
        for (; r + (FOLDS - 1) * step < r1; r += FOLDS * step)                               \
            _Pragma("unroll") for (int u = 0; u < FOLDS; ++u) {                              \
                const real v = AT(base + (size_t)(r + u * step) * inner);                    \
                acc[u] += TERM;                                                              \
            }                                                                                \
        for (; r < r1; r += step) {                                                          \
            const real v = AT(base + (size_t)r * inner);                                     \
            acc[0] += TERM;                                                                  \
        }                                                                                    \
    } while (0)
#define AT_PART(k) in.xp[k]
#define AT_X(k) LOAD(in.x, k)

#if VEC_LANES
/* logsumexp's terms exp(v - m) over the same share, a run of FOLDS elements as one vector (lane u: partial sum u, as
 * SHARE_SUM's acc[u]): PoCL calls exp out of line for each scalar and vectorizes it for vectors (4096 rows of 2048:
 * 38-44 -> 10-12 ms; columns of 2048 x 4096: 120-155 -> 46). Intel's runtime, which vectorizes across work-items,
 * ran the whole kernel 2x slower so, max too (it shares the program) */
VEC_LANE_IO(folds, CLNN_CAT(REAL_T, FOLDS), real, FOLDS)
#define SHARE_EXP_SUM(AT)                                                                    \
    do {                                                                                     \
        folds_lanes run, sums = {0};                                                         \
        for (; r + (FOLDS - 1) * step < r1; r += FOLDS * step) {                             \
            _Pragma("unroll") for (int u = 0; u < FOLDS; ++u)                                \
                run.s[u] = AT(base + (size_t)(r + u * step) * inner);                        \
            sums.v += exp(run.v - m);                                                        \
        }                                                                                    \
        _Pragma("unroll") for (int u = 0; u < FOLDS; ++u) acc[u] = sums.s[u];                \
        for (; r < r1; r += step) acc[0] += exp(AT(base + (size_t)r * inner) - m);           \
    } while (0)
#else
#define SHARE_EXP_SUM(AT) SHARE_SUM(AT, exp(v - m))
#endif

inline real share_sum(int op, src_t in, size_t base, int inner, int r0, int r1, int step, real m) {
    real acc[FOLDS] = {0};
    int r = r0;
    if (in.flags & RF_IN_PART) {
        if (op == R_LOGSUMEXP) SHARE_EXP_SUM(AT_PART);
        else SHARE_SUM(AT_PART, v);
    } else {
        if (op == R_LOGSUMEXP) SHARE_EXP_SUM(AT_X);
        else SHARE_SUM(AT_X, v);
    }
    return fold_sum(acc);
}

/* an all -inf (or +inf) chunk shifts by 0, so its logsumexp is -inf (+inf) */
inline real shift(real m) { return isinf(m) ? 0 : m; }

inline real lse(real m, real acc) { return isinf(m) ? m : m + log(acc); }

inline void put(int op, int flags, __global store_t *out, __global real *outp, __global long *idx, size_t k,
                real v, long i) {
    if (flags & RF_OUT_PART) outp[k] = v;
    else STORE(out, k, v);
    if (is_arg(op)) idx[k] = i;
}

/* the number of chunks S (an empty axis is one empty chunk) */
inline int chunks(int R, int chunk) { return max(1, (R + chunk - 1) / chunk); }

/* element (o, s, j) of the (outer, S, inner) result: its chunk [r0, r1) and where its row starts */
#define CHUNK_GEOMETRY(e)                                        \
    int S = chunks(R, chunk);                                    \
    int j = (e) % inner, os = (e) / inner;                       \
    int s = os % S, o = os / S;                                  \
    int r0 = s * chunk, r1 = min(R, r0 + chunk);                 \
    size_t base = (size_t)o * R * inner + j

__kernel void reduce_item(int op, int flags, int outer, int R, int inner, int chunk, __global const store_t *x,
                          __global const real *xp, __global const long *xi, __global store_t *out,
                          __global real *outp, __global long *idx) {
    int e = get_global_id(0);
    if (e >= outer * chunks(R, chunk) * inner) return;
    CHUNK_GEOMETRY(e);
    src_t in = {x, xp, xi, flags};
    real best = 0, acc = 0;
    long bi = 0;
    if (op != R_SUM) share_best(op, in, base, inner, r0, r1, 1, &best, &bi);
    if (op == R_SUM || op == R_LOGSUMEXP) acc = share_sum(op, in, base, inner, r0, r1, 1, shift(best));
    real v = op == R_SUM ? acc : op == R_LOGSUMEXP ? lse(best, acc) : best;
    put(op, flags, out, outp, idx, e, v, bi);
}

__kernel void reduce_group(int op, int flags, int outer, int R, int inner, int chunk, __global const store_t *x,
                           __global const real *xp, __global const long *xi, __global store_t *out,
                           __global real *outp, __global long *idx) {
    __local real sv[RED_WG];
    __local long si[RED_WG];
    int e = get_group_id(0), t = get_local_id(0), n = get_local_size(0);
    CHUNK_GEOMETRY(e);
    src_t in = {x, xp, xi, flags};
    real best = 0, acc = 0;
    long bi = 0;
    if (op != R_SUM) {
        share_best(op, in, base, inner, r0 + t, r1, n, &best, &bi);
        sv[t] = best;
        si[t] = bi;
#define BEST_(a, b) if (better(op, sv[b], si[b], sv[a], si[a])) { sv[a] = sv[b]; si[a] = si[b]; }
        GROUP_TREE(BEST_);
#undef BEST_
        best = sv[0];
        bi = si[0];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (op == R_SUM || op == R_LOGSUMEXP)
        acc = group_sum(sv, share_sum(op, in, base, inner, r0 + t, r1, n, shift(best)));
    real v = op == R_SUM ? acc : op == R_LOGSUMEXP ? lse(best, acc) : best;
    if (t == 0) put(op, flags, out, outp, idx, e, v, bi);
}

#ifdef ROW_VW
#include "rowvec.h"

/* the sum of the n contiguous elements at p, in two ROW_VW-wide accumulators (one waits on the adder) */
#define ROW_SUM(p, n, out)                                                                 \
    do {                                                                                   \
        realrv a0 = 0, a1 = 0;                                                             \
        int i = 0;                                                                         \
        for (; i + 2 * ROW_VW <= (n); i += 2 * ROW_VW) {                                   \
            a0 += RV_LOAD(0, (p) + i);                                                     \
            a1 += RV_LOAD(0, (p) + i + ROW_VW);                                            \
        }                                                                                  \
        for (; i + ROW_VW <= (n); i += ROW_VW) a0 += RV_LOAD(0, (p) + i);                  \
        RV_FOLD(add_, a0 + a1, out);                                                       \
        for (; i < (n); ++i) out += (p)[i];                                                \
    } while (0)

/* R_SUM where inner == 1 (CPUs): a work-item per (output, chunk) of a contiguous row, in explicit vectors, where
 * reduce_item's work-items, one per row, gathered across rows (8000 sums of 1000: 2.0 -> 0.35 ms on Intel's runtime) */
__kernel void reduce_sum_rows(int op, int flags, int outer, int R, int inner, int chunk, __global const store_t *x,
                              __global const real *xp, __global const long *xi, __global store_t *out,
                              __global real *outp, __global long *idx) {
    const int e = get_global_id(0);
    if (e >= outer * chunks(R, chunk)) return;
    CHUNK_GEOMETRY(e);
    real acc;
    if (flags & RF_IN_PART) ROW_SUM(xp + base + r0, r1 - r0, acc);
    else ROW_SUM(x + base + r0, r1 - r0, acc);
    put(op, flags, out, outp, idx, e, acc, 0);
}

/* acc[v] = the sum of rows r0 .. r1 - 1 (stride inner) of the v-th ROW_VW columns at p, v < NV: each row's NV
 * vectors are one contiguous run */
#define COL_SUMS(p, NV, acc)                                                               \
    do {                                                                                   \
        _Pragma("unroll") for (int v = 0; v < (NV); ++v) acc[v] = 0;                       \
        for (int r = r0; r < r1; ++r)                                                      \
            _Pragma("unroll") for (int v = 0; v < (NV); ++v) acc[v] += RV_LOAD(v, (p) + (size_t)r * inner); \
    } while (0)

/* R_SUM where inner > 1 (CPUs): a work-item per (output row o, chunk s, COL_VECS x ROW_VW columns from j0) adds
 * the chunk's rows in explicit vectors, a contiguous run of each row at a time, where reduce_item's work-items, a
 * column each, rely on the compiler to vectorize across them; a last block narrower than that a vector at a time,
 * then its columns past the last whole vector one by one */
__kernel void reduce_sum_cols(int op, int flags, int outer, int R, int inner, int chunk, __global const store_t *x,
                              __global const real *xp, __global const long *xi, __global store_t *out,
                              __global real *outp, __global long *idx) {
    const int width = COL_VECS * ROW_VW, nb = (inner + width - 1) / width, S = chunks(R, chunk);
    const int e = get_global_id(0);
    if (e >= outer * S * nb) return;
    const int jb = e % nb, os = e / nb, s = os % S, o = os / S, j0 = jb * width;
    const int r0 = s * chunk, r1 = min(R, r0 + chunk);
    const size_t base = (size_t)o * R * inner + j0, at = (size_t)os * inner + j0;
    __global real *to = (flags & RF_OUT_PART ? outp : out) + at; /* store_t is real: rowvec.h */
    const int whole = min(COL_VECS, (inner - j0) / ROW_VW);
    if (whole == COL_VECS) {
        realrv acc[COL_VECS];
        if (flags & RF_IN_PART) COL_SUMS(xp + base, COL_VECS, acc);
        else COL_SUMS(x + base, COL_VECS, acc);
        _Pragma("unroll") for (int v = 0; v < COL_VECS; ++v) RV_STORE(acc[v], v, to);
        return;
    }
    for (int w = 0; w < whole; ++w) {
        realrv acc[1];
        if (flags & RF_IN_PART) COL_SUMS(xp + base + w * ROW_VW, 1, acc);
        else COL_SUMS(x + base + w * ROW_VW, 1, acc);
        RV_STORE(acc[0], w, to);
    }
    for (int j = whole * ROW_VW; j < inner - j0; ++j) {
        real acc = 0;
        for (int r = r0; r < r1; ++r) acc += value_at((src_t){x, xp, xi, flags}, base + (size_t)r * inner + j);
        put(op, flags, out, outp, idx, at + j, acc, 0);
    }
}
#endif
