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
/* PoCL vectorizes across work-items only code that does not test its work-item's index (Adam over 16M floats: 14
 * ms with the test, 7.5 without): MT_WHOLE_GROUPS runs CALL untested in the work-groups that lie inside the tensor
 * (a branch uniform across each), and returns */
#if MT_WHOLE_GROUPS
#define MT_WHOLE(n, CALL)                                                                                   \
    if ((get_group_id(0) + 1) * get_local_size(0) <= (size_t)(n).s0) {                                      \
        CALL;                                                                                               \
        return;                                                                                             \
    }
#endif
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
#ifndef MT_WHOLE
#define MT_WHOLE(n, CALL)
#endif

/* the optimizer and its flags: run-time arguments, or built in with STATIC_OP and STATIC_FLAGS defined (tuning's
 * foreach STATIC: PoCL vectorizes the update only so, with MT_WHOLE) */
#ifdef STATIC_OP
#define OP STATIC_OP
#define FLAGS STATIC_FLAGS
#else
#define OP op
#define FLAGS flags
#endif

/* element i of one parameter */
/* always inlined: PoCL left it a call per element and ran the multi-tensor step 2x slower */
__attribute__((always_inline)) inline void update(int op, int flags, size_t i, __global store_t *p,
                                                  __global const store_t *g, __global store_t *s0,
                                                  __global store_t *s1, __global store_t *s2, real unscale,
                                                  real lr, real h0, real h1, real h2, real h3, real h4, real h5) {
    real param = LOAD(p, i);
    real grad = LOAD(g, i) * unscale;
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
        real denom = SQRT(v) / h5 + h2;
        param = param - h4 * m / denom;
    } else if (op == OPT_RMSPROP) {
        if (h2 != 0) grad = grad + h2 * param;
        real sq = LOAD(s0, i) * h0 + grad * grad * (1 - h0);
        STORE(s0, i, sq);
        real avg;
        if (flags & F_OPTION) {
            real ga = lerp_torch(LOAD(s2, i), grad, 1 - h0);
            STORE(s2, i, ga);
            avg = SQRT(sq - ga * ga) + h1;
        } else {
            avg = SQRT(sq) + h1;
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

/* one optimizer step of up to MT_SLOTS parameters sharing their hyperparameters and step count; each gradient
 * is read times `unscale` (GradScaler.step's 1/scale for gradients it did not unscale in place, else 1: exact) */
#define OPTIM_BODY(j)                                                                                       \
    if (i < n.s##j) update(OP, FLAGS, i, p##j, g##j, s0_##j, s1_##j, s2_##j, unscale, lr, h0, h1, h2, h3, h4, h5);
#ifdef KERNEL_optim_multi
__kernel void optim_multi(int op, int flags, int8 n, int8 ends, MT_ARGS(__global store_t *, p),
                          MT_ARGS(__global const store_t *, g), MT_ARGS(__global store_t *, s0_),
                          MT_ARGS(__global store_t *, s1_), MT_ARGS(__global store_t *, s2_), real unscale, real lr,
                          real h0, real h1, real h2, real h3, real h4, real h5) {
    MT_LOCATE(ends, t, i);
    MT_WHOLE(n, update(OP, FLAGS, i, p0, g0, s0_0, s1_0, s2_0, unscale, lr, h0, h1, h2, h3, h4, h5))
    MT_DISPATCH(t, OPTIM_BODY)
}
#endif

/* x *= factor in place for up to MT_SLOTS tensors, and by the device scalar coef[0] too with has_coef
 * (clip_grad_norm_'s coefficient); with check, found[0] |= 1 when an element was inf or NaN before the multiply,
 * as torch's _amp_foreach_non_finite_check_and_unscale_ (GradScaler.unscale_). The flag is an integer atomic
 * (order-free, so deterministic) taken only on a non-finite element; the host zeroes it once per step, reads it
 * once. coef and found are never read without their flags. */
#ifdef KERNEL_scale_multi
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
#endif

/* found[0] |= 1 when an element of up to MT_SLOTS tensors is inf or NaN, reading them only: GradScaler.step's
 * check when the optimizer's update unscales the gradients as it reads them (optim_multi's `unscale`). A work-item
 * tests READ_VW elements (n counts elements, the blocks vectors) as raw words against the exponent's mask, and
 * takes the atomic once: an element per work-item with the atomic in its branch read 20 GB/s on both CPU runtimes,
 * 16 words per work-item 46-51 GB/s. READ_VW: the elements a work-item of the read-only passes (check_multi,
 * norm_multi) takes. */
#ifndef READ_VW
#define READ_VW 16
#endif
#if USE_FP64
#define WORD ulong
#define EXP_BITS 0x7FF0000000000000UL
#elif STORE_HALF || USE_FP16
#define WORD ushort
#define EXP_BITS 0x7C00
#elif STORE_BF16
#define WORD ushort
#define EXP_BITS 0x7F80
#else
#define WORD uint
#define EXP_BITS 0x7F800000u
#endif
typedef WORD word_t;
#if VEC_LANES
/* whether words w[e .. e+READ_VW) hold an inf or NaN, lane by lane (clnn_dtype.h's VEC_LANES): PoCL calls vloadn and
 * any() out of line (AlexNet's 58M gradients checked in 24-36 ms at 6-10 GB/s, 16-18 so) */
inline bool run_nonfinite(__global const word_t *w, size_t e) {
    bool bad = false;
#pragma unroll
    for (int q = 0; q < READ_VW; ++q) bad |= (w[e + q] & EXP_BITS) == EXP_BITS;
    return bad;
}
#else
typedef CLNN_CAT(WORD, READ_VW) wordv_t;
inline bool run_nonfinite(__global const word_t *w, size_t e) {
    return any((CLNN_CAT(vload, READ_VW)(0, w + e) & (wordv_t)EXP_BITS) == (wordv_t)EXP_BITS);
}
#endif
#ifdef KERNEL_check_multi
__kernel void check_multi(int8 n, int8 ends, MT_ARGS(__global const store_t *, x), __global int *found) {
    MT_LOCATE(ends, t, i);
    bool bad = false;
#define CHECK_BODY(j)                                                                                       \
    {                                                                                                       \
        __global const word_t *w = (__global const word_t *)x##j;                                           \
        const size_t e = (size_t)i * READ_VW;                                                               \
        if (e + READ_VW <= n.s##j) {                                                                        \
            bad = run_nonfinite(w, e);                                                                      \
        } else {                                                                                            \
            for (size_t k = e; k < n.s##j; ++k) bad |= (w[k] & EXP_BITS) == EXP_BITS;                       \
        }                                                                                                   \
    }
    MT_DISPATCH(t, CHECK_BODY)
    if (bad) atomic_or(found, 1);
}
#endif

#ifndef MT_WG
#define MT_WG 256
#endif
/* clip_grad_norm_'s first pass: for up to MT_SLOTS tensors, each work-group's sum of |x|^power over its block (x * x
 * when power is 2; power 0 stands for infinity: the largest |x|, a NaN winning, as torch's max) into
 * out[base + get_group_id(0)]; the host reduces the partials. Work-groups of MT_WG work-items, each folding READ_VW
 * neighbouring elements first: on PoCL, whose work-items run a loop per barrier, an element each took the GPT
 * example's 52 gradients 6.1 ms (Intel's runtime 0.7). NaN told by x != x: PoCL calls isnan out of line */
#define NAN_MAX(a, b) ((b) != (b) || (b) > (a) ? (b) : (a))
#define NORM_TERM(a) (power == 1 ? (a) : power == 2 ? (a) * (a) : pow((a), power))
#ifdef KERNEL_norm_multi
__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void norm_multi(int8 n, int8 ends, MT_ARGS(__global const store_t *, x), real power, __global real *out, int base) {
    MT_LOCATE(ends, t, i);
    real v = 0;
/* v folds |x|'s elements [e, e + count) in: their largest, or their terms' sum */
#define NORM_FOLD(xp, e, count)                                                                             \
    do {                                                                                                    \
        if (power == 0) {                                                                                   \
            for (size_t q = 0; q < (count); ++q) v = NAN_MAX(v, fabs(LOAD(xp, (e) + q)));                   \
        } else {                                                                                            \
            for (size_t q = 0; q < (count); ++q) v += NORM_TERM(fabs(LOAD(xp, (e) + q)));                   \
        }                                                                                                   \
    } while (0)
#define NORM_BODY(j)                                                                                        \
    {                                                                                                       \
        const size_t e = (size_t)i * READ_VW;                                                               \
        if (e + READ_VW <= n.s##j)                                                                          \
            NORM_FOLD(x##j, e, READ_VW);                                                                    \
        else if (e < n.s##j)                                                                                \
            NORM_FOLD(x##j, e, n.s##j - e);                                                                 \
    }
    MT_DISPATCH(t, NORM_BODY)
    __local real part[MT_WG];
    const int lid = get_local_id(0);
    part[lid] = v;
    for (int w = MT_WG / 2; w > 0; w /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < w) part[lid] = power == 0 ? NAN_MAX(part[lid], part[lid + w]) : part[lid] + part[lid + w];
    }
    if (lid == 0) out[base + get_group_id(0)] = part[0];
}
#endif
