/* reduce.cl: reductions over one axis of a contiguous tensor viewed as (outer, R, inner).
 *
 * out[o * inner + j] = reduce_{r < R} x[(o * R + r) * inner + j]
 * reduce_wg:    one work-group of RED_WG work-items per output; each work-item folds a strided share
 *               of the axis, then a tree in local memory combines the shares in a fixed order, so the
 *               result is bit-identical run after run.
 * reduce_small: one work-item per output, walking a short axis (the host picks it when R is small).
 * Ops (run-time code, mirrored in clnn/ops/reduce.py): R_SUM, R_MAX, R_MIN, R_LOGSUMEXP, R_ARGMAX,
 * R_ARGMIN, R_SUMSQ (sum of squares). Arg ops write the index of the first extreme (as NumPy) to idx.
 * Defines: the element type (clnn_dtype.h); RED_WG, a power of two no larger than the device's
 * max work-group size.
 */
#include "clnn_dtype.h"

#ifndef RED_WG
#define RED_WG 256
#endif

#define R_SUM 0
#define R_MAX 1
#define R_MIN 2
#define R_LOGSUMEXP 3
#define R_ARGMAX 4
#define R_ARGMIN 5
#define R_SUMSQ 6

#if USE_FP64
#define BIG HUGE_VAL
#else
#define BIG INFINITY
#endif

inline real identity(int op) {
    return (op == R_MAX || op == R_ARGMAX || op == R_LOGSUMEXP) ? -BIG
         : (op == R_MIN || op == R_ARGMIN) ? BIG : 0;
}

/* does (v, i) beat (best, bi)? NaN wins, as in NumPy; ties go to the lower index */
inline int better(int op, real v, int i, real best, int bi) {
    if (isnan(best)) return isnan(v) && i < bi;
    if (isnan(v)) return 1;
    if (v == best) return i < bi;
    return (op == R_MAX || op == R_ARGMAX || op == R_LOGSUMEXP) ? v > best : v < best;
}

inline int is_arg_like(int op) {
    return op == R_MAX || op == R_MIN || op == R_ARGMAX || op == R_ARGMIN || op == R_LOGSUMEXP;
}

inline real finish(int op, real acc, real m) {
    return op == R_LOGSUMEXP ? (isinf(m) ? m : m + log(acc)) : acc;
}

__kernel void reduce_small(int op, int outer, int R, int inner, __global const store_t *x,
                           __global store_t *out, __global long *idx) {
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    int o = g / inner, j = g - o * inner;
    __global const store_t *p = x + (size_t)o * R * inner + j;
    real best = identity(op);
    int bi = R;
    real acc = 0;
    if (is_arg_like(op)) {
        for (int r = 0; r < R; ++r) {
            real v = LOAD(p, r * inner);
            if (better(op, v, r, best, bi)) { best = v; bi = r; }
        }
    }
    if (op == R_LOGSUMEXP) {
        real m = isinf(best) ? 0 : best;
        for (int r = 0; r < R; ++r) acc += exp(LOAD(p, r * inner) - m);
        STORE(out, g, finish(op, acc, best));
    } else if (op == R_SUM || op == R_SUMSQ) {
        for (int r = 0; r < R; ++r) {
            real v = LOAD(p, r * inner);
            acc += op == R_SUMSQ ? v * v : v;
        }
        STORE(out, g, acc);
    } else {
        STORE(out, g, best);
        if (op == R_ARGMAX || op == R_ARGMIN) idx[g] = bi;
    }
}

__kernel __attribute__((reqd_work_group_size(RED_WG, 1, 1)))
void reduce_wg(int op, int outer, int R, int inner, __global const store_t *x, __global store_t *out,
               __global long *idx) {
    __local real sval[RED_WG];
    __local int sidx[RED_WG];
    int t = get_local_id(0);
    int g = get_group_id(0);
    int o = g / inner, j = g - o * inner;
    __global const store_t *p = x + (size_t)o * R * inner + j;

    real best = identity(op);
    int bi = R;
    if (is_arg_like(op)) {
        for (int r = t; r < R; r += RED_WG) {
            real v = LOAD(p, r * inner);
            if (better(op, v, r, best, bi)) { best = v; bi = r; }
        }
        sval[t] = best;
        sidx[t] = bi;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = RED_WG / 2; s > 0; s >>= 1) {
            if (t < s && better(op, sval[t + s], sidx[t + s], sval[t], sidx[t])) {
                sval[t] = sval[t + s];
                sidx[t] = sidx[t + s];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        best = sval[0];
        bi = sidx[0];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (op == R_MAX || op == R_MIN || op == R_ARGMAX || op == R_ARGMIN) {
        if (t == 0) {
            STORE(out, g, best);
            if (op == R_ARGMAX || op == R_ARGMIN) idx[g] = bi;
        }
        return;
    }
    real m = (op == R_LOGSUMEXP && !isinf(best)) ? best : 0;
    real acc = 0;
    for (int r = t; r < R; r += RED_WG) {
        real v = LOAD(p, r * inner);
        acc += op == R_SUMSQ ? v * v : (op == R_LOGSUMEXP ? exp(v - m) : v);
    }
    sval[t] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = RED_WG / 2; s > 0; s >>= 1) {
        if (t < s) sval[t] += sval[t + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) STORE(out, g, finish(op, sval[0], best));
}
