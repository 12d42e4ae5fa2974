/* norm.cl: batch and layer normalization, forward and backward, and the running-stat update.
 *
 * Layout: a contiguous x viewed as (outer, G, inner); group c collects the M = outer * inner elements
 * x[(o * G + c) * inner + j]. Batch norm of (N, C, *): outer = N, G = C, inner = prod(*).
 * Layer norm over the last D elements: outer = 1, G = rows, inner = D.
 * Affine bits (run time): AFF_W has weight, AFF_B has bias, AFF_INNER indexes weight and bias by j
 * (layer norm) instead of by the group c (batch norm).
 * Kernels:
 *   norm_stats      one work-group per group: mean and biased variance (two passes, fixed-order tree)
 *   norm_apply      y = (x - mean[c]) * rsqrt(var[c] + eps) * w + b, elementwise
 *   norm_bwd_stats  one work-group per group: s1 = sum(g * w'), s2 = sum(g * w' * xhat), where w' is
 *                   the per-element weight under AFF_INNER and 1 otherwise
 *   norm_bwd_input  gx = rstd * (g * w - wc * (s1 + xhat * s2) / M) in training (wc: the group's
 *                   weight when weights are per group), gx = rstd * g * w with fixed statistics
 *   bn_update       running = (1 - momentum) * running + momentum * batch (variance unbiased)
 * The stats kernels take any power-of-two local size <= NORM_WG, chosen by the host per launch.
 * Defines: the element type (clnn_dtype.h); NORM_WG, the largest local size (a power of two).
 */
#include "clnn_dtype.h"

#ifndef NORM_WG
#define NORM_WG 256
#endif

#define AFF_W 1
#define AFF_B 2
#define AFF_INNER 4

inline real group_sum(__local real *s, real v) {
    int t = get_local_id(0);
    s[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = get_local_size(0) / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    real r = s[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* index of the m-th element (m < outer * inner) of group c */
inline size_t at(int m, int c, int G, int inner) {
    int o = m / inner, j = m - o * inner;
    return ((size_t)o * G + c) * inner + j;
}

__kernel void norm_stats(int outer, int G, int inner, __global const store_t *x, __global store_t *mean,
                         __global store_t *var) {
    __local real scratch[NORM_WG];
    int c = get_group_id(0), t = get_local_id(0), n = get_local_size(0);
    int M = outer * inner;
    real acc = 0;
    for (int m = t; m < M; m += n) acc += LOAD(x, at(m, c, G, inner));
    real mu = group_sum(scratch, acc) / M;
    acc = 0;
    for (int m = t; m < M; m += n) {
        real d = LOAD(x, at(m, c, G, inner)) - mu;
        acc += d * d;
    }
    real v = group_sum(scratch, acc) / M;
    if (t == 0) {
        STORE(mean, c, mu);
        STORE(var, c, v);
    }
}

inline real weight_at(int affine, __global const store_t *w, int c, int j) {
    return (affine & AFF_W) ? LOAD(w, (affine & AFF_INNER) ? j : c) : 1;
}

__kernel void norm_apply(int outer, int G, int inner, int affine, real eps, __global const store_t *x,
                         __global const store_t *mean, __global const store_t *var, __global const store_t *w,
                         __global const store_t *b, __global store_t *y) {
    int i = get_global_id(0);
    if (i >= outer * G * inner) return;
    int j = i % inner, c = (i / inner) % G;
    real v = (LOAD(x, i) - LOAD(mean, c)) * rsqrt(LOAD(var, c) + eps) * weight_at(affine, w, c, j);
    if (affine & AFF_B) v += LOAD(b, (affine & AFF_INNER) ? j : c);
    STORE(y, i, v);
}

__kernel void norm_bwd_stats(int outer, int G, int inner, int affine, real eps, __global const store_t *x,
                             __global const store_t *g, __global const store_t *mean,
                             __global const store_t *var, __global const store_t *w, __global store_t *s1,
                             __global store_t *s2) {
    __local real scratch[NORM_WG];
    int c = get_group_id(0), t = get_local_id(0), n = get_local_size(0);
    int M = outer * inner;
    int inner_w = (affine & AFF_INNER) ? affine : 0;  /* per-group weights stay outside the sums */
    real mu = LOAD(mean, c), rstd = rsqrt(LOAD(var, c) + eps);
    real a1 = 0, a2 = 0;
    for (int m = t; m < M; m += n) {
        size_t k = at(m, c, G, inner);
        real gw = LOAD(g, k) * weight_at(inner_w, w, c, m % inner);
        a1 += gw;
        a2 += gw * (LOAD(x, k) - mu) * rstd;
    }
    a1 = group_sum(scratch, a1);
    a2 = group_sum(scratch, a2);
    if (t == 0) {
        STORE(s1, c, a1);
        STORE(s2, c, a2);
    }
}

__kernel void norm_bwd_input(int outer, int G, int inner, int affine, int training, real eps,
                             __global const store_t *x, __global const store_t *g, __global const store_t *mean,
                             __global const store_t *var, __global const store_t *w, __global const store_t *s1,
                             __global const store_t *s2, __global store_t *gx) {
    int i = get_global_id(0);
    if (i >= outer * G * inner) return;
    int j = i % inner, c = (i / inner) % G;
    real rstd = rsqrt(LOAD(var, c) + eps);
    real v = LOAD(g, i) * weight_at(affine, w, c, j);
    if (training) {
        real xhat = (LOAD(x, i) - LOAD(mean, c)) * rstd;
        real wc = (affine & AFF_INNER) ? 1 : weight_at(affine, w, c, j);
        v -= wc * (LOAD(s1, c) + xhat * LOAD(s2, c)) / (outer * inner);
    }
    STORE(gx, i, rstd * v);
}

__kernel void bn_update(int C, real momentum, real unbias, __global const store_t *mean,
                        __global const store_t *var, __global store_t *running_mean, __global store_t *running_var) {
    int c = get_global_id(0);
    if (c >= C) return;
    STORE(running_mean, c, (1 - momentum) * LOAD(running_mean, c) + momentum * LOAD(mean, c));
    STORE(running_var, c, (1 - momentum) * LOAD(running_var, c) + momentum * LOAD(var, c) * unbias);
}
