/* optim.cl: in-place parameter updates for SGD, Adam, AdamW and RMSprop, as torch.optim computes them,
 * and the multi-tensor passes over gradients: GradScaler's unscale and inf/NaN check, clip_grad_norm_'s
 * norm and scale.
 *
 * Multi-tensor launches (torch's _foreach_ ops): each kernel takes up to MT_SLOTS tensors, their sizes in the
 * int8 `n` (0 for an unused slot, whose pointers repeat slot 0's) and the running totals of their blocks (one
 * element per work-item of a work-group) in the int8 `ends`: work-group g works on block g - ends[t-1] of the
 * tensor t whose blocks hold it. One launch so updates a whole group of parameters (an optimizer step of a
 * 52-parameter model is 7 launches, not 52) with no idle work-groups. Each tensor's code is a case of a switch
 * on t (MT_DISPATCH), so that every pointer it uses is uniform (Intel's CPU compiler vectorized none of it when
 * the pointers were chosen by selects). CPUs, whose launches are cheap, build MT_TENSORS 1: a tensor per launch,
 * one element per work-item, which their compilers vectorize across work-items (see tuning's "foreach" row).
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

#define MT_SLOTS 8 /* the most tensors a multi-tensor launch takes: MT_ARGS and MT_DISPATCH have as many */
#ifndef MT_TENSORS
#define MT_TENSORS MT_SLOTS /* tensors per launch (an argument per role each): MT_SLOTS, or 1 (tuning's foreach) */
#endif
#if MT_TENSORS == 1
#define MT_ARGS(T, x) T x##0
#define MT_LOCATE(ends, t, i) const int t = 0; const size_t i = get_global_id(0)
#define MT_DISPATCH(t, BODY) BODY(0)
#else
#define MT_ARGS(T, x) T x##0, T x##1, T x##2, T x##3, T x##4, T x##5, T x##6, T x##7
/* the tensor t this work-group works on, and the index i of this work-item's element in it */
#define MT_LOCATE(ends, t, i)                                                                               \
    const int g_ = get_group_id(0);                                                                         \
    const int t = (g_ >= ends.s0) + (g_ >= ends.s1) + (g_ >= ends.s2) + (g_ >= ends.s3) + (g_ >= ends.s4) +  \
                  (g_ >= ends.s5) + (g_ >= ends.s6);                                                        \
    const int first_ = t == 0 ? 0 : t == 1 ? ends.s0 : t == 2 ? ends.s1 : t == 3 ? ends.s2 : t == 4 ? ends.s3    \
                       : t == 5 ? ends.s4 : t == 6 ? ends.s5 : ends.s6;                                     \
    const int i = (g_ - first_) * (int)get_local_size(0) + (int)get_local_id(0)
/* BODY(j), the code for tensor slot j, for the tensor t of this work-group */
#define MT_CASE(BODY, j)                                                                                    \
    case j:                                                                                                 \
        BODY(j) break;
#define MT_DISPATCH(t, BODY)                                                                                \
    switch (t) {                                                                                            \
        MT_CASE(BODY, 0) MT_CASE(BODY, 1) MT_CASE(BODY, 2) MT_CASE(BODY, 3) MT_CASE(BODY, 4) MT_CASE(BODY, 5) \
        MT_CASE(BODY, 6) MT_CASE(BODY, 7)                                                                   \
    }
#endif

/* element i of one parameter */
/* always inlined: PoCL left it a call per element and ran the multi-tensor step 2x slower */
__attribute__((always_inline)) inline void update(int op, int flags, size_t i, __global store_t *p,
                                                  __global const store_t *g, __global store_t *s0,
                                                  __global store_t *s1, __global store_t *s2, real lr, real h0,
                                                  real h1, real h2, real h3, real h4, real h5) {
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

/* one optimizer step of up to MT_SLOTS parameters sharing their hyperparameters and step count */
#define OPTIM_BODY(j) \
    if (i < n.s##j) update(op, flags, i, p##j, g##j, s0_##j, s1_##j, s2_##j, lr, h0, h1, h2, h3, h4, h5);
__kernel void optim_multi(int op, int flags, int8 n, int8 ends, MT_ARGS(__global store_t *, p),
                          MT_ARGS(__global const store_t *, g), MT_ARGS(__global store_t *, s0_),
                          MT_ARGS(__global store_t *, s1_), MT_ARGS(__global store_t *, s2_), real lr, real h0, real h1,
                          real h2, real h3, real h4, real h5) {
    MT_LOCATE(ends, t, i);
    MT_DISPATCH(t, OPTIM_BODY)
}

/* x *= factor in place for up to MT_SLOTS tensors, and by the device scalar coef[0] too with has_coef
 * (clip_grad_norm_'s coefficient); with check, found[0] |= 1 when an element was inf or NaN before the multiply,
 * as torch's _amp_foreach_non_finite_check_and_unscale_ (GradScaler.unscale_). The flag is an integer atomic
 * (order-free, so deterministic) taken only on a non-finite element; the host zeroes it once per step, reads it
 * once. coef and found are never read without their flags. */
__kernel void scale_multi(int8 n, int8 ends, MT_ARGS(__global store_t *, x), real factor, int has_coef,
                          __global const real *coef, int check, __global int *found) {
    MT_LOCATE(ends, t, i);
    const real f = has_coef ? factor * coef[0] : factor;
#define SCALE_BODY(j)                                                                                       \
    if (i < n.s##j) {                                                                                       \
        const real v = LOAD(x##j, i);                                                                       \
        if (check && !FINITE(v)) atomic_or(found, 1);                                                       \
        STORE(x##j, i, v * f);                                                                              \
    }
    MT_DISPATCH(t, SCALE_BODY)
}

#ifndef MT_WG
#define MT_WG 256
#endif
/* clip_grad_norm_'s first pass: for up to MT_SLOTS tensors, each work-group's sum of |x|^power over its block (x * x
 * when power is 2; power 0 stands for infinity: the largest |x|) into out[base + get_group_id(0)]; the host
 * reduces the partials. Work-groups of MT_WG work-items. */
#define NAN_MAX(a, b) (isnan(b) || (b) > (a) ? (b) : (a)) /* a NaN wins, as torch's max */
__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void norm_multi(int8 n, int8 ends, MT_ARGS(__global const store_t *, x), real power, __global real *out, int base) {
    MT_LOCATE(ends, t, i);
    real v = 0;
#define NORM_BODY(j) \
    if (i < n.s##j) v = fabs(LOAD(x##j, i));
    MT_DISPATCH(t, NORM_BODY)
    __local real part[MT_WG];
    const int lid = get_local_id(0);
    part[lid] = power == 0 || power == 1 ? v : power == 2 ? v * v : pow(v, power);
    for (int w = MT_WG / 2; w > 0; w /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < w) part[lid] = power == 0 ? NAN_MAX(part[lid], part[lid + w]) : part[lid] + part[lid + w];
    }
    if (lid == 0) out[base + get_group_id(0)] = part[0];
}
