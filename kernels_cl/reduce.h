/* reduce.h: the one work-group reduction tree every kernel file shares (included, never built alone).
 *
 * Each work-item of a work-group of any power-of-two size n <= RED_WG puts one value in local memory;
 * GROUP_TREE(COMBINE) then folds slot t + k into slot t for k = n/2, n/4, ..., 1, leaving the result in
 * slot 0. The order is fixed, so results are bit-identical run after run (no atomics anywhere).
 * Provides: RED_WG, GROUP_TREE for any slot type and combine, group_sum and group_max over reals, FOLDS
 * and fold_sum.
 * Defines: RED_WG, the largest local size (a power of two, at most the device's max work-group
 * size); the element type (clnn_dtype.h).
 */
#ifndef CLNN_REDUCE_H
#define CLNN_REDUCE_H

#include "clnn_dtype.h"

#ifndef RED_WG
#define RED_WG 256
#endif

/* A work-item's sum kept as FOLDS independent partial sums (element u of a run of FOLDS goes to sum u), which
 * fold_sum adds in a fixed tree: one serial sum waits on the adder's latency at every element, and CPUs walk
 * long runs in one work-item */
#define FOLDS 8
inline real fold_sum(const real s[FOLDS]) {
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* COMBINE(t, u) folds slot u into slot t; every work-item of the group must reach this */
#define GROUP_TREE(COMBINE)                                                   \
    do {                                                                      \
        int t_ = get_local_id(0);                                             \
        barrier(CLK_LOCAL_MEM_FENCE);                                         \
        for (int k_ = get_local_size(0) / 2; k_ > 0; k_ >>= 1) {              \
            if (t_ < k_) COMBINE(t_, t_ + k_);                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                     \
        }                                                                     \
    } while (0)

/* the work-group's sum (is_max == 0) or maximum of v; s holds RED_WG reals and is free again on return */
inline real group_reduce(__local real *s, real v, int is_max) {
    s[get_local_id(0)] = v;
#define FOLD_(t, u) s[t] = is_max ? fmax(s[t], s[u]) : s[t] + s[u]
    GROUP_TREE(FOLD_);
#undef FOLD_
    real r = s[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline real group_sum(__local real *s, real v) { return group_reduce(s, v, 0); }

#endif
