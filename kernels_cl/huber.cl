/* huber.cl: the Huber family of pointwise losses of d = x - y, fused with their reduction and backward.
 *
 *   l(d) = w * (|d| < b ? d * d / (2 b) : |d| - b / 2),   l'(d) = w * (|d| < b ? d / b : sign(d))
 * smooth_l1_loss(beta) is b = beta, w = 1 (b = 0 is |d|: the quadratic zone is empty); huber_loss(delta)
 * is b = delta, w = delta. The host folds a mean's 1 / n into w.
 * Layout: x, y (and gx, gy) are n contiguous elements; g is the upstream gradient, one value (g_step 0)
 * or one per element (g_step 1).
 *   huber_none: one work-item per element writes loss[i] = l(d_i).
 *   huber_sum:  work-group e sums l over its chunk [e * chunk, min(n, (e + 1) * chunk)), each work-item a
 *               strided share combined by reduce.h's tree (a fixed order: bit-identical reruns), and writes
 *               part[e] in real (float32 for half storage). One chunk is the whole sum; more are summed by
 *               the host with reduce.cl. Any power-of-two local size <= RED_WG.
 *   huber_bwd:  gx[i] = g l'(d_i), and gy[i] = -gx[i] when grad_target is set.
 * Defines: the element type (clnn_dtype.h); RED_WG (reduce.h).
 */
#include "reduce.h"

/* l(d) / w */
inline real huber(real d, real b) {
    real a = fabs(d);
    return a < b ? d * d / (2 * b) : a - b / 2;
}

__kernel void huber_none(int n, real b, real w, __global const store_t *x, __global const store_t *y,
                         __global store_t *loss) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    STORE(loss, i, w * huber(LOAD(x, i) - LOAD(y, i), b));
}

__kernel void huber_sum(int n, int chunk, real b, real w, __global const store_t *x, __global const store_t *y,
                        __global real *part) {
    __local real scratch[RED_WG];
    int e = get_group_id(0), t = get_local_id(0);
    int end = min(n, (e + 1) * chunk);
    real s = 0;
    for (int i = e * chunk + t; i < end; i += get_local_size(0)) s += huber(LOAD(x, i) - LOAD(y, i), b);
    s = group_sum(scratch, s);
    if (t == 0) part[e] = w * s;
}

__kernel void huber_bwd(int n, real b, real w, int g_step, int grad_target, __global const store_t *x,
                        __global const store_t *y, __global const store_t *g, __global store_t *gx,
                        __global store_t *gy) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    real d = LOAD(x, i) - LOAD(y, i);
    real v = w * LOAD(g, i * g_step) * (fabs(d) < b ? d / b : sign(d));
    STORE(gx, i, v);
    if (grad_target) STORE(gy, i, -v);
}
