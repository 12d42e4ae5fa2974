/* softmax.cl: softmax / log_softmax over one axis, their backward, and the fused losses built on
 * them (cross-entropy = log_softmax + nll + label smoothing + class weights in one pass, for class-index
 * or probability targets; nll; a target range check).
 *
 * Layout: a contiguous tensor viewed as (outer, R, inner); the softmax axis has length R and
 * stride inner. Row g = o * inner + j (o < outer, j < inner) starts at o * R * inner + j. For the
 * losses R is the class count C and row g is sample (o, j); class-index targets are int64, one per
 * row; probability targets have the input's layout; class weights are C values.
 * Two launch shapes per op:
 *   *_small: one work-item per row walking it (short rows, or many rows with inner > 1, where
 *            neighbouring work-items read neighbouring addresses);
 *   *_wg:    one work-group per row; each work-item folds a strided share and a tree in local
 *            memory (reduce.h) combines the shares. The local size is any power of two <= RED_WG,
 *            chosen by the host per launch (shorter rows get smaller groups) without a rebuild.
 *   *_vec:   (softmax, its backward, ce_fwd, ce_bwd, ce_soft_bwd; CPUs, ROW_VW defined) one work-item per
 *            contiguous row (inner 1, float32 or float64 storage), ROW_VW elements at a time in explicit vectors:
 *            a work-group's tree runs through barriers and one scalar walk waits on every exp on CPUs (8000 rows
 *            of 1000: softmax 16.5 -> 2.2 ms on Intel's runtime, 55 -> 4.5 ms on PoCL, whose exp only vectorizes
 *            so; ce_bwd over 4096 x 1000 on PoCL 16.8-23 -> 1.8 ms).
 * Every combination happens in a fixed order, so results are bit-identical run after run.
 * Stability: exponentials are of x - max(row) <= 0 only, so inputs of any finite size are safe.
 * Defines: the element type (clnn_dtype.h); RED_WG (reduce.h); ROW_VW (4, 8 or 16), the *_vec kernels' width.
 */
#include "clnn_shape.h"
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

#ifdef ROW_VW
#include "rowvec.h"

/* the contiguous row p's max (shifted) */
inline real row_max_vec(__global const store_t *p, int R) {
    realrv mv = (realrv)(-BIG);
    real m;
    RV_EACH(R, mv = fmax(mv, RV_LOAD(i, p)), );
    RV_FOLD(fmax, mv, m);
    RV_EACH(R, , m = fmax(m, p[r]));
    return shift(m);
}

/* the contiguous row p's max m (shifted) and sum of exp(x - m) s */
inline void row_stats_vec(__global const store_t *p, int R, real *m_out, real *s_out) {
    realrv sv = 0;
    real s;
    const real m = row_max_vec(p, R);
    RV_EACH(R, sv += exp(RV_LOAD(i, p) - m), );
    RV_FOLD(add_, sv, s);
    RV_EACH(R, , s += exp(p[r] - m));
    *m_out = m;
    *s_out = s;
}

__kernel void softmax_vec(int log_out, int outer, int R, int inner, __global const store_t *x, __global store_t *y) {
    const size_t g = get_global_id(0);
    if (g >= (size_t)outer) return;
    __global const store_t *p = x + g * R;
    __global store_t *q = y + g * R;
    real m, s;
    if (log_out) {
        row_stats_vec(p, R, &m, &s);
        const real ls = log(s);
        RV_EACH(R, RV_STORE(RV_LOAD(i, p) - m - ls, i, q), q[r] = p[r] - m - ls);
        return;
    }
    /* the sum's pass keeps its exponentials in y, scaled in place after: one exp an element, not two */
    m = row_max_vec(p, R);
    realrv sv = 0;
    RV_EACH(R, { const realrv e = exp(RV_LOAD(i, p) - m); sv += e; RV_STORE(e, i, q); }, );
    RV_FOLD(add_, sv, s);
    RV_EACH(R, , { const real e = exp(p[r] - m); s += e; q[r] = e; });
    const real inv = 1 / s;
    RV_EACH(R, RV_STORE(RV_LOAD(i, q) * inv, i, q), q[r] *= inv);
}

__kernel void softmax_bwd_vec(int log_out, int outer, int R, int inner, __global const store_t *y,
                              __global const store_t *g, __global store_t *gx) {
    const size_t row = get_global_id(0);
    if (row >= (size_t)outer) return;
    __global const store_t *yr = y + row * R, *gr = g + row * R;
    __global store_t *out = gx + row * R;
    realrv dv = 0;
    real dot;
    if (log_out)
        RV_EACH(R, dv += RV_LOAD(i, gr), );
    else
        RV_EACH(R, dv += RV_LOAD(i, gr) * RV_LOAD(i, yr), );
    RV_FOLD(add_, dv, dot);
    RV_EACH(R, , dot += log_out ? gr[r] : gr[r] * yr[r]);
    if (log_out)
        RV_EACH(R, RV_STORE(RV_LOAD(i, gr) - exp(RV_LOAD(i, yr)) * dot, i, out), out[r] = gr[r] - exp(yr[r]) * dot);
    else
        RV_EACH(R, RV_STORE(RV_LOAD(i, yr) * (RV_LOAD(i, gr) - dot), i, out), out[r] = yr[r] * (gr[r] - dot));
}
#endif

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

/* ---- losses over class rows ------------------------------------------------------------------------
 * Per row g with m = max(x), ls = log(sum(exp(x - m))), so log p[c] = x[c] - m - ls; w[c] the class
 * weights (all 1 unless `weighted`), eps the label smoothing:
 *   class-index targets t (ce_fwd): a row whose target equals `ignore` has loss 0 and weight 0, else
 *     loss = (1 - eps) w[t] (ls - (x[t] - m)) + eps / C * (ls * sum(w) - sum(w (x - m))),
 *     rowweight[g] = w[t] (the mean's denominator is the sum of rowweight);
 *   probability targets y of the input's shape (ce_soft_fwd), with y' = (1 - eps) y + eps / C:
 *     loss = ls * sum(w y') - sum(w y' (x - m)).
 * Kept relative to m, so logits of 1e4 lose no digits to the size of m + ls. Both write
 * stats[3g] = m, stats[3g + 1] = ls, stats[3g + 2] = S for the backward, which is
 *   gx[c] = gloss[g] * (S p[c] - coef[c]),  S = sum(coef),
 *   coef[c] = (1 - eps) w[t] (c == t) + eps / C w[c], or w[c] y'[c] for probabilities; ignored rows get 0.
 * ce_bwd and nll_bwd read gloss[g] as gscale * gloss[g * gstride]: gstride 0 gives every row a reduced loss's one
 * gradient, gscale its mean's 1/count (what a broadcast and a multiply would have made of it, bit for bit in float32
 * and float64; a half loss's product is no longer rounded to half first).
 * Probability targets get a gradient too when `grad_target` is set: gy[c] = -gloss[g] (1 - eps) w[c] log p[c].
 * Targets are int64, checked by the host (target_range) to lie in [0, C) unless equal to `ignore`. */
inline real class_weight(__global const store_t *w, int weighted, long c) { return weighted ? LOAD(w, c) : 1; }

/* sum over the share of coef[r] * (centered ? x[r] - m : 1), coef[r] = w[r] (y == 0) or w[r] y'[r] */
inline real share_coef_sum(__global const store_t *p, __global const store_t *y, __global const store_t *w,
                           int weighted, real eps, int C, int inner, int t, int n, real m, int centered) {
    real s = 0;
    for (int r = t; r < C; r += n) {
        size_t k = (size_t)r * inner;
        real c = class_weight(w, weighted, r);
        if (y) c *= (1 - eps) * LOAD(y, k) + eps / C;
        s += centered ? c * (LOAD(p, k) - m) : c;
    }
    return s;
}

inline void ce_store(int g, int C, int inner, real eps, int weighted, long ignore, __global const store_t *p,
                     __global const long *target, __global const store_t *w, real m, real ls, real wsum,
                     real wcentered, __global store_t *loss, __global store_t *rowweight, __global store_t *stats) {
    long tg = target[g];
    int valid = tg != ignore;
    real wt = valid ? class_weight(w, weighted, tg) : 0;
    real xt = valid ? LOAD(p, (size_t)tg * inner) - m : 0;
    real smooth = valid ? eps / C * (ls * wsum - wcentered) : 0;
    STORE(loss, g, (1 - eps) * wt * (ls - xt) + smooth);
    STORE(rowweight, g, wt);
    STORE(stats, 3 * g, m);
    STORE(stats, 3 * g + 1, ls);
    STORE(stats, 3 * g + 2, valid ? (1 - eps) * wt + eps / C * wsum : 0);
}

__kernel void ce_fwd_small(int outer, int C, int inner, real eps, int weighted, long ignore,
                           __global const store_t *x, __global const long *target, __global const store_t *w,
                           __global store_t *loss, __global store_t *rowweight, __global store_t *stats) {
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    __global const store_t *p = x + row_start(g, C, inner);
    real m = shift(share_max(p, C, inner, 0, 1));
    real ls = log(share_sum_exp(p, C, inner, 0, 1, m));
    real ws = eps != 0 ? share_coef_sum(p, 0, w, weighted, eps, C, inner, 0, 1, m, 0) : 0;
    real wc = eps != 0 ? share_coef_sum(p, 0, w, weighted, eps, C, inner, 0, 1, m, 1) : 0;
    ce_store(g, C, inner, eps, weighted, ignore, p, target, w, m, ls, ws, wc, loss, rowweight, stats);
}

__kernel void ce_fwd_wg(int outer, int C, int inner, real eps, int weighted, long ignore,
                        __global const store_t *x, __global const long *target, __global const store_t *w,
                        __global store_t *loss, __global store_t *rowweight, __global store_t *stats) {
    __local real scratch[RED_WG];
    int t = get_local_id(0), n = get_local_size(0), g = get_group_id(0);
    __global const store_t *p = x + row_start(g, C, inner);
    real m = shift(group_reduce(scratch, share_max(p, C, inner, t, n), 1));
    real ls = log(group_reduce(scratch, share_sum_exp(p, C, inner, t, n, m), 0));
    real ws = 0, wc = 0;
    if (eps != 0) {
        ws = group_reduce(scratch, share_coef_sum(p, 0, w, weighted, eps, C, inner, t, n, m, 0), 0);
        wc = group_reduce(scratch, share_coef_sum(p, 0, w, weighted, eps, C, inner, t, n, m, 1), 0);
    }
    if (t == 0) ce_store(g, C, inner, eps, weighted, ignore, p, target, w, m, ls, ws, wc, loss, rowweight, stats);
}

#ifdef ROW_VW
/* label smoothing's sums over the contiguous row p: ws = sum(w), wc = sum(w (x - m)), w 1 unless weighted */
inline void smoothing_sums_vec(__global const store_t *p, __global const store_t *w, int weighted, int C, real m,
                               real *ws, real *wc) {
    realrv sv = 0, cv = 0;
    real s, c;
    if (weighted)
        RV_EACH(C, (sv += RV_LOAD(i, w), cv += RV_LOAD(i, w) * (RV_LOAD(i, p) - m)), );
    else
        RV_EACH(C, cv += RV_LOAD(i, p) - m, );
    RV_FOLD(add_, cv, c);
    if (weighted) {
        RV_FOLD(add_, sv, s);
        RV_EACH(C, , (s += w[r], c += w[r] * (p[r] - m)));
    } else {
        s = C;
        RV_EACH(C, , c += p[r] - m);
    }
    *ws = s;
    *wc = c;
}

__kernel void ce_fwd_vec(int outer, int C, int inner, real eps, int weighted, long ignore,
                         __global const store_t *x, __global const long *target, __global const store_t *w,
                         __global store_t *loss, __global store_t *rowweight, __global store_t *stats) {
    const size_t g = get_global_id(0);
    if (g >= (size_t)outer) return;
    __global const store_t *p = x + g * C;
    real m, s, ws = 0, wc = 0;
    row_stats_vec(p, C, &m, &s);
    if (eps != 0) smoothing_sums_vec(p, w, weighted, C, m, &ws, &wc);
    ce_store(g, C, 1, eps, weighted, ignore, p, target, w, m, log(s), ws, wc, loss, rowweight, stats);
}
#endif

inline void ce_soft_store(int g, real m, real ls, real a, real b, __global store_t *loss,
                          __global store_t *stats) {
    STORE(loss, g, ls * a - b);
    STORE(stats, 3 * g, m);
    STORE(stats, 3 * g + 1, ls);
    STORE(stats, 3 * g + 2, a);
}

__kernel void ce_soft_fwd_small(int outer, int C, int inner, real eps, int weighted, __global const store_t *x,
                                __global const store_t *y, __global const store_t *w, __global store_t *loss,
                                __global store_t *stats) {
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    size_t base = row_start(g, C, inner);
    real m = shift(share_max(x + base, C, inner, 0, 1));
    real ls = log(share_sum_exp(x + base, C, inner, 0, 1, m));
    real a = share_coef_sum(x + base, y + base, w, weighted, eps, C, inner, 0, 1, m, 0);
    real b = share_coef_sum(x + base, y + base, w, weighted, eps, C, inner, 0, 1, m, 1);
    ce_soft_store(g, m, ls, a, b, loss, stats);
}

__kernel void ce_soft_fwd_wg(int outer, int C, int inner, real eps, int weighted, __global const store_t *x,
                             __global const store_t *y, __global const store_t *w, __global store_t *loss,
                             __global store_t *stats) {
    __local real scratch[RED_WG];
    int t = get_local_id(0), n = get_local_size(0), g = get_group_id(0);
    size_t base = row_start(g, C, inner);
    real m = shift(group_reduce(scratch, share_max(x + base, C, inner, t, n), 1));
    real ls = log(group_reduce(scratch, share_sum_exp(x + base, C, inner, t, n, m), 0));
    real a = group_reduce(scratch, share_coef_sum(x + base, y + base, w, weighted, eps, C, inner, t, n, m, 0), 0);
    real b = group_reduce(scratch, share_coef_sum(x + base, y + base, w, weighted, eps, C, inner, t, n, m, 1), 0);
    if (t == 0) ce_soft_store(g, m, ls, a, b, loss, stats);
}

/* log p of element i of loss row g, from the forward's stats */
inline real ce_logp(size_t i, int g, __global const store_t *x, __global const store_t *stats) {
    return LOAD(x, i) - LOAD(stats, 3 * g) - LOAD(stats, 3 * g + 1);
}

__kernel void ce_bwd(int outer, int C, int inner, real eps, int weighted, long ignore, real gscale, int gstride,
                     __global const store_t *x, __global const long *target, __global const store_t *w,
                     __global const store_t *stats, __global const store_t *gloss, __global store_t *gx) {
    FOR_GROUP_ELEMS(outer, C, inner, e, {
        const size_t i = e.i;
        const int c = e.c, g = e.o * inner + e.j; /* the loss row */
        const long tg = target[g];
        if (tg == ignore) {  /* 0 whatever the upstream gradient: an all-ignored mean's is NaN, as is its value */
            STORE(gx, i, 0);
        } else {
            real coef = eps / C * class_weight(w, weighted, c);
            if (c == tg) coef += (1 - eps) * class_weight(w, weighted, tg);
            const real gl = gscale * LOAD(gloss, (size_t)g * gstride);
            STORE(gx, i, gl * (LOAD(stats, 3 * g + 2) * exp(ce_logp(i, g, x, stats)) - coef));
        }
    });
}

#ifdef ROW_VW
/* ce_bwd over contiguous rows (inner 1): a work-item per row in ROW_VW-wide vectors, then the target's element
 * (PoCL calls exp out of line for each scalar) */
__kernel void ce_bwd_vec(int outer, int C, int inner, real eps, int weighted, long ignore, real gscale, int gstride,
                         __global const store_t *x, __global const long *target, __global const store_t *w,
                         __global const store_t *stats, __global const store_t *gloss, __global store_t *gx) {
    const size_t g = get_global_id(0);
    if (g >= (size_t)outer) return;
    __global const store_t *p = x + g * C;
    __global store_t *q = gx + g * C;
    const long tg = target[g];
    if (tg == ignore) {
        RV_EACH(C, RV_STORE((realrv)0, i, q), q[r] = 0);
        return;
    }
    const real gl = gscale * gloss[g * gstride], m = stats[3 * g], ls = stats[3 * g + 1], s = stats[3 * g + 2];
    const real e = eps / C;
    if (weighted)
        RV_EACH(C, RV_STORE(gl * (s * exp(RV_LOAD(i, p) - m - ls) - e * RV_LOAD(i, w)), i, q),
                q[r] = gl * (s * exp(p[r] - m - ls) - e * w[r]));
    else
        RV_EACH(C, RV_STORE(gl * (s * exp(RV_LOAD(i, p) - m - ls) - e), i, q),
                q[r] = gl * (s * exp(p[r] - m - ls) - e));
    const real wt = class_weight(w, weighted, tg);
    q[tg] = gl * (s * exp(p[tg] - m - ls) - (e * wt + (1 - eps) * wt));
}
#endif

__kernel void ce_soft_bwd(int outer, int C, int inner, real eps, int weighted, int grad_target,
                          __global const store_t *x, __global const store_t *y, __global const store_t *w,
                          __global const store_t *stats, __global const store_t *gloss, __global store_t *gx,
                          __global store_t *gy) {
    FOR_GROUP_ELEMS(outer, C, inner, e, {
        const size_t i = e.i;
        const int c = e.c, g = e.o * inner + e.j; /* the loss row */
        real logp = ce_logp(i, g, x, stats);
        real wc = class_weight(w, weighted, c), gl = LOAD(gloss, g);
        STORE(gx, i, gl * (LOAD(stats, 3 * g + 2) * exp(logp) - wc * ((1 - eps) * LOAD(y, i) + eps / C)));
        if (grad_target) STORE(gy, i, -gl * (1 - eps) * wc * logp);
    });
}

#ifdef ROW_VW
/* ce_soft_bwd over contiguous rows (inner 1): a work-item per row in ROW_VW-wide vectors */
__kernel void ce_soft_bwd_vec(int outer, int C, int inner, real eps, int weighted, int grad_target,
                              __global const store_t *x, __global const store_t *y, __global const store_t *w,
                              __global const store_t *stats, __global const store_t *gloss, __global store_t *gx,
                              __global store_t *gy) {
    const size_t g = get_global_id(0);
    if (g >= (size_t)outer) return;
    __global const store_t *p = x + g * C, *t = y + g * C;
    __global store_t *q = gx + g * C, *u = gy + g * C;
    const real gl = gloss[g], m = stats[3 * g], ls = stats[3 * g + 1], s = stats[3 * g + 2], a = 1 - eps, e = eps / C;
    RV_EACH(C, {
        const realrv lp = RV_LOAD(i, p) - m - ls;
        const realrv wc = weighted ? RV_LOAD(i, w) : (realrv)1;
        RV_STORE(gl * (s * exp(lp) - wc * (a * RV_LOAD(i, t) + e)), i, q);
        if (grad_target) RV_STORE(-gl * a * wc * lp, i, u);
    }, {
        const real lp = p[r] - m - ls;
        const real wc = weighted ? w[r] : 1;
        q[r] = gl * (s * exp(lp) - wc * (a * t[r] + e));
        if (grad_target) u[r] = -gl * a * wc * lp;
    });
}
#endif

/* nll: loss[g] = -w[t] logp[o, t, j] with t = target[g]; ignored rows have loss 0 and rowweight 0 */
__kernel void nll_fwd(int outer, int C, int inner, int weighted, long ignore, __global const store_t *logp,
                      __global const long *target, __global const store_t *w, __global store_t *loss,
                      __global store_t *rowweight) {
    int g = get_global_id(0);
    if (g >= outer * inner) return;
    long tg = target[g];
    real wt = tg != ignore ? class_weight(w, weighted, tg) : 0;
    STORE(loss, g, tg != ignore ? -wt * LOAD(logp, row_start(g, C, inner) + (size_t)tg * inner) : 0);
    STORE(rowweight, g, wt);
}

__kernel void nll_bwd(int outer, int C, int inner, int weighted, long ignore, real gscale, int gstride,
                      __global const long *target, __global const store_t *w, __global const store_t *gloss,
                      __global store_t *gx) {
    int i = get_global_id(0);
    if (i >= outer * C * inner) return;
    int j = i % inner, oc = i / inner, o = oc / C, c = oc - o * C;
    int g = o * inner + j;
    long tg = target[g];
    const real gl = gscale * LOAD(gloss, (size_t)g * gstride);
    STORE(gx, i, c == tg && tg != ignore ? -class_weight(w, weighted, tg) * gl : 0);
}

/* over the targets other than `ignore`: range[0] = min, range[1] = max, range[2] = how many; one
 * work-group, read by the host before a loss launches */
__kernel void target_range(int n, long ignore, __global const long *target, __global long *range) {
    __local long lo[RED_WG], hi[RED_WG], count[RED_WG];
    int t = get_local_id(0);
    long a = LONG_MAX, b = LONG_MIN, k = 0;
    for (int i = t; i < n; i += get_local_size(0)) {
        long v = target[i];
        if (v == ignore) continue;
        a = min(a, v);
        b = max(b, v);
        k++;
    }
    lo[t] = a;
    hi[t] = b;
    count[t] = k;
#define RANGE_(u, v) { lo[u] = min(lo[u], lo[v]); hi[u] = max(hi[u], hi[v]); count[u] += count[v]; }
    GROUP_TREE(RANGE_);
#undef RANGE_
    if (t == 0) {
        range[0] = lo[0];
        range[1] = hi[0];
        range[2] = count[0];
    }
}
