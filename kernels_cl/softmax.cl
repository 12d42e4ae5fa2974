/* softmax.cl: softmax / log_softmax over one axis, their backward, and the fused losses built on
 * them (cross-entropy = log_softmax + nll in one pass; nll; a target range check).
 *
 * Layout: a contiguous tensor viewed as (outer, R, inner); the softmax axis has length R and
 * stride inner. Row g = o * inner + j (o < outer, j < inner) starts at o * R * inner + j. For the
 * losses R is the class count C and row g is sample (o, j); targets are int64, one per row.
 * Two launch shapes per op:
 *   *_small: one work-item per row walking it (short rows, or many rows with inner > 1, where
 *            neighbouring work-items read neighbouring addresses);
 *   *_wg:    one work-group per row; each work-item folds a strided share and a tree in local
 *            memory (reduce.h) combines the shares. The local size is any power of two <= RED_WG,
 *            chosen by the host per launch (shorter rows get smaller groups) without a rebuild.
 * Every combination happens in a fixed order, so results are bit-identical run after run.
 * Stability: exponentials are of x - max(row) <= 0 only, so inputs of any finite size are safe.
 * Defines: the element type (clnn_dtype.h); RED_WG (reduce.h).
 */
#include "reduce.h"

inline size_t row_start(int g, int R, int inner) {
    int o = g / inner, j = g - o * inner;
    return (size_t)o * R * inner + j;
}

/* the row's max over the work-item's share r = t, t + n, ... */
inline real share_max(__global const store_t *p, int R, int inner, int t, int n) {
    real m = -BIG;
    for (int r = t; r < R; r += n) m = fmax(m, LOAD(p, (size_t)r * inner));
    return m;
}

inline real share_sum_exp(__global const store_t *p, int R, int inner, int t, int n, real m) {
    real s = 0;
    for (int r = t; r < R; r += n) s += exp(LOAD(p, (size_t)r * inner) - m);
    return s;
}

/* a row whose max is infinite shifts by 0 instead, so +inf gives NaN and all -inf gives NaN, as torch */
inline real shift(real m) { return isinf(m) ? 0 : m; }

inline void write_row(int log_out, __global const store_t *p, __global store_t *q, int R, int inner,
                      int t, int n, real m, real s) {
    real ls = log(s);
    real inv = 1 / s;
    for (int r = t; r < R; r += n) {
        size_t k = (size_t)r * inner;
        real z = LOAD(p, k) - m;
        STORE(q, k, log_out ? z - ls : exp(z) * inv);
    }
}

__kernel void softmax_small(int log_out, int outer, int R, int inner, __global const store_t *x,
                            __global store_t *y) {
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    size_t base = row_start(g, R, inner);
    real m = shift(share_max(x + base, R, inner, 0, 1));
    real s = share_sum_exp(x + base, R, inner, 0, 1, m);
    write_row(log_out, x + base, y + base, R, inner, 0, 1, m, s);
}

__kernel void softmax_wg(int log_out, int outer, int R, int inner, __global const store_t *x,
                         __global store_t *y) {
    __local real scratch[RED_WG];
    int t = get_local_id(0), n = get_local_size(0);
    size_t base = row_start(get_group_id(0), R, inner);
    real m = shift(group_reduce(scratch, share_max(x + base, R, inner, t, n), 1));
    real s = group_reduce(scratch, share_sum_exp(x + base, R, inner, t, n, m), 0);
    write_row(log_out, x + base, y + base, R, inner, t, n, m, s);
}

/* backward: softmax gx = y * (g - sum(g * y)); log_softmax gx = g - exp(y) * sum(g) */
inline real share_dot(int log_out, __global const store_t *y, __global const store_t *g, int R, int inner,
                      int t, int n) {
    real s = 0;
    for (int r = t; r < R; r += n) {
        size_t k = (size_t)r * inner;
        s += log_out ? LOAD(g, k) : LOAD(g, k) * LOAD(y, k);
    }
    return s;
}

inline void write_grad(int log_out, __global const store_t *y, __global const store_t *g, __global store_t *gx,
                       int R, int inner, int t, int n, real dot) {
    for (int r = t; r < R; r += n) {
        size_t k = (size_t)r * inner;
        real yk = LOAD(y, k), gk = LOAD(g, k);
        STORE(gx, k, log_out ? gk - exp(yk) * dot : yk * (gk - dot));
    }
}

__kernel void softmax_bwd_small(int log_out, int outer, int R, int inner, __global const store_t *y,
                                __global const store_t *g, __global store_t *gx) {
    int row = get_global_id(0);
    if (row >= outer * inner) return;
    size_t base = row_start(row, R, inner);
    real dot = share_dot(log_out, y + base, g + base, R, inner, 0, 1);
    write_grad(log_out, y + base, g + base, gx + base, R, inner, 0, 1, dot);
}

__kernel void softmax_bwd_wg(int log_out, int outer, int R, int inner, __global const store_t *y,
                             __global const store_t *g, __global store_t *gx) {
    __local real scratch[RED_WG];
    int t = get_local_id(0), n = get_local_size(0);
    size_t base = row_start(get_group_id(0), R, inner);
    real dot = group_reduce(scratch, share_dot(log_out, y + base, g + base, R, inner, t, n), 0);
    write_grad(log_out, y + base, g + base, gx + base, R, inner, t, n, dot);
}

/* cross-entropy with label smoothing eps, per row, with m = max(x) and ls = log(sum(exp(x - m))):
 *   loss = ls - (1 - eps) * (x[target] - m) - eps * mean(x - m)   (= lse - (1 - eps) x[t] - eps mean(x))
 * Kept relative to m, so logits of 1e4 lose no digits to the size of m + ls. Writes loss[g] and
 * stats[2g] = m, stats[2g + 1] = ls for the backward. */
inline real share_sum_shifted(__global const store_t *p, int R, int inner, int t, int n, real m) {
    real s = 0;
    for (int r = t; r < R; r += n) s += LOAD(p, (size_t)r * inner) - m;
    return s;
}

inline void ce_store(int g, int C, int inner, real eps, __global const store_t *p, __global const long *target,
                     real m, real ls, real centered_sum, __global store_t *loss, __global store_t *stats) {
    STORE(stats, 2 * g, m);
    STORE(stats, 2 * g + 1, ls);
    real xt = LOAD(p, (size_t)target[g] * inner) - m;
    STORE(loss, g, ls - (1 - eps) * xt - eps * centered_sum / C);
}

__kernel void ce_fwd_small(int outer, int C, int inner, real eps, __global const store_t *x,
                           __global const long *target, __global store_t *loss, __global store_t *stats) {
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    __global const store_t *p = x + row_start(g, C, inner);
    real m = shift(share_max(p, C, inner, 0, 1));
    real ls = log(share_sum_exp(p, C, inner, 0, 1, m));
    real cs = eps != 0 ? share_sum_shifted(p, C, inner, 0, 1, m) : 0;
    ce_store(g, C, inner, eps, p, target, m, ls, cs, loss, stats);
}

__kernel void ce_fwd_wg(int outer, int C, int inner, real eps, __global const store_t *x,
                        __global const long *target, __global store_t *loss, __global store_t *stats) {
    __local real scratch[RED_WG];
    int t = get_local_id(0), n = get_local_size(0), g = get_group_id(0);
    __global const store_t *p = x + row_start(g, C, inner);
    real m = shift(group_reduce(scratch, share_max(p, C, inner, t, n), 1));
    real ls = log(group_reduce(scratch, share_sum_exp(p, C, inner, t, n, m), 0));
    real cs = eps != 0 ? group_reduce(scratch, share_sum_shifted(p, C, inner, t, n, m), 0) : 0;
    if (t == 0) ce_store(g, C, inner, eps, p, target, m, ls, cs, loss, stats);
}

/* gx[o, c, j] = gloss[g] * (softmax(x)[c] - (1 - eps) * (c == target[g]) - eps / C), g = o * inner + j */
__kernel void ce_bwd(int outer, int C, int inner, real eps, __global const store_t *x,
                     __global const long *target, __global const store_t *stats, __global const store_t *gloss,
                     __global store_t *gx) {
    int i = get_global_id(0);
    if (i >= outer * C * inner) return;
    int j = i % inner, oc = i / inner, c = oc % C, o = oc / C;
    int g = o * inner + j;
    real p = exp(LOAD(x, i) - LOAD(stats, 2 * g) - LOAD(stats, 2 * g + 1));
    real hit = c == target[g] ? 1 - eps : 0;
    STORE(gx, i, LOAD(gloss, g) * (p - hit - eps / C));
}

/* nll: loss[g] = -logp[o, target[g], j] */
__kernel void nll_fwd(int outer, int C, int inner, __global const store_t *logp, __global const long *target,
                      __global store_t *loss) {
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    STORE(loss, g, -LOAD(logp, row_start(g, C, inner) + (size_t)target[g] * inner));
}

__kernel void nll_bwd(int outer, int C, int inner, __global const long *target, __global const store_t *gloss,
                      __global store_t *gx) {
    int i = get_global_id(0);
    if (i >= outer * C * inner) return;
    int j = i % inner, oc = i / inner, c = oc % C, o = oc / C;
    int g = o * inner + j;
    STORE(gx, i, c == target[g] ? -LOAD(gloss, g) : 0);
}

/* range[0] = min(target), range[1] = max(target): one work-group, checked by the host before a loss */
__kernel void target_range(int n, __global const long *target, __global long *range) {
    __local long lo[RED_WG], hi[RED_WG];
    int t = get_local_id(0);
    long a = LONG_MAX, b = LONG_MIN;
    for (int i = t; i < n; i += get_local_size(0)) {
        a = min(a, target[i]);
        b = max(b, target[i]);
    }
    lo[t] = a;
    hi[t] = b;
#define RANGE_(u, v) { lo[u] = min(lo[u], lo[v]); hi[u] = max(hi[u], hi[v]); }
    GROUP_TREE(RANGE_);
#undef RANGE_
    if (t == 0) {
        range[0] = lo[0];
        range[1] = hi[0];
    }
}
