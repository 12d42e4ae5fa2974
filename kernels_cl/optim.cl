/* optim.cl: in-place parameter updates for SGD, Adam, AdamW and RMSprop, as torch.optim computes them,
 * and GradScaler's in-place unscale of a gradient (unscale_check).
 *
 * Layout: p (parameter), g (its gradient) and the state buffers s0..s2 are contiguous, n elements each.
 * State buffers an optimizer does not use may alias p; they are never touched then.
 * Defines: the element type (clnn_dtype.h). The optimizer is a run-time code (OPT_*, with F_* flags;
 * the host reads their values from this file) and its hyperparameters are run-time scalars, so one
 * build serves every optimizer and every learning rate. Bias corrections are computed on the host in
 * double precision, as torch does, and passed in.
 *
 * flags: bit 0 nesterov (SGD) / amsgrad (Adam, AdamW) / centered (RMSprop);
 *        bit 1 first step (SGD: the momentum buffer starts as the gradient); bit 2 maximize.
 *
 * Scalars h0..h5 per optimizer:
 *   SGD      h0 momentum, h1 dampening, h2 weight_decay                      s0 momentum buffer
 *   Adam(W)  h0 beta1, h1 beta2, h2 eps, h3 weight_decay, h4 lr / (1 - beta1^t), s0 exp_avg, s1 exp_avg_sq,
 *            h5 sqrt(1 - beta2^t)                                            s2 max_exp_avg_sq
 *   RMSprop  h0 alpha, h1 eps, h2 weight_decay, h3 momentum                  s0 square_avg, s1 momentum
 *                                                                            buffer, s2 grad_avg
 */
#include "clnn_dtype.h"

#define OPT_SGD 0
#define OPT_ADAM 1
#define OPT_ADAMW 2
#define OPT_RMSPROP 3

#define F_OPTION 1
#define F_FIRST 2
#define F_MAXIMIZE 4

/* torch.lerp: start + w * (end - start), written the way that is exact at both ends */
inline real lerp_torch(real start, real end, real w) {
    return w < (real)0.5 ? start + w * (end - start) : end - (end - start) * (1 - w);
}

__kernel void optim_step(int op, int n, int flags, __global store_t *p, __global const store_t *g,
                         __global store_t *s0, __global store_t *s1, __global store_t *s2,
                         real lr, real h0, real h1, real h2, real h3, real h4, real h5) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    real param = LOAD(p, i);
    real grad = LOAD(g, i);
    if (flags & F_MAXIMIZE) grad = -grad;

    if (op == OPT_SGD) {
        if (h2 != 0) grad = grad + h2 * param;
        if (h0 != 0) {
            real buf = (flags & F_FIRST) ? grad : LOAD(s0, i) * h0 + grad * (1 - h1);
            STORE(s0, i, buf);
            grad = (flags & F_OPTION) ? grad + h0 * buf : buf;
        }
        param = param - lr * grad;
    } else if (op == OPT_ADAM || op == OPT_ADAMW) {
        if (op == OPT_ADAMW) param = param * (1 - lr * h3);
        else if (h3 != 0) grad = grad + h3 * param;
        real m = lerp_torch(LOAD(s0, i), grad, 1 - h0);
        real v = LOAD(s1, i) * h1 + grad * grad * (1 - h1);
        STORE(s0, i, m);
        STORE(s1, i, v);
        if (flags & F_OPTION) {
            v = fmax(LOAD(s2, i), v);
            STORE(s2, i, v);
        }
        real denom = sqrt(v) / h5 + h2;
        param = param - h4 * m / denom;
    } else if (op == OPT_RMSPROP) {
        if (h2 != 0) grad = grad + h2 * param;
        real sq = LOAD(s0, i) * h0 + grad * grad * (1 - h0);
        STORE(s0, i, sq);
        real avg;
        if (flags & F_OPTION) {
            real ga = lerp_torch(LOAD(s2, i), grad, 1 - h0);
            STORE(s2, i, ga);
            avg = sqrt(sq - ga * ga) + h1;
        } else {
            avg = sqrt(sq) + h1;
        }
        if (h3 > 0) {
            real buf = LOAD(s1, i) * h3 + grad / avg;
            STORE(s1, i, buf);
            param = param - lr * buf;
        } else {
            param = param - lr * grad / avg;
        }
    }
    STORE(p, i, param);
}

/* g *= inv_scale in place; found[0] |= 1 when an element of g was inf or NaN (checked before the multiply,
 * as torch's _amp_foreach_non_finite_check_and_unscale_). The flag is an integer atomic (order-free, so
 * deterministic) taken only on a non-finite element; the host zeroes it once per step, reads it once. */
__kernel void unscale_check(int n, __global store_t *g, real inv_scale, __global int *found) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    real v = LOAD(g, i);
    if (!isfinite(v)) atomic_or(found, 1);
    STORE(g, i, v * inv_scale);
}
