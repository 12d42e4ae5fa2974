/* attention.h: what attention.cl (the fused kernels) and attention_rows.cl (the CPU path's score rows) share
 * (included, never built alone): the flags, the mask's arguments and lookup, causal hiding and dropout's factor.
 * The mask is read through element strides, 0 where it broadcasts: (b, i, j) is at
 * (b / mnb) msb0 + (b % mnb) msb1 + i msl + j mss. A masked score is -BIG (-inf) and takes no part.
 * Dropout's factor z of score (b, i, j) comes from Philox with counter e = (b L + i) S + j and the host's
 * (seed, offset), so every kernel that needs it regenerates the forward's draw without storing it.
 */
#ifndef CLNN_ATTENTION_H
#define CLNN_ATTENTION_H
#include "clnn_dtype.h"
#include "philox.h"

#define ATT_F_FLOAT_MASK 1
#define ATT_F_BOOL_MASK 2
#define ATT_F_CAUSAL 4
#define ATT_F_DROPOUT 8

#define ATT_ARGS int flags, int L, int S, int E, int Ev, real scale, real p_drop, uint2 seed, uint2 offset
#define ATT_LAYOUT_ARGS int nh, long4 lq, long4 lk, long4 lv, long4 lo
#define ATT_MASK_ARGS int mnb, int msb0, int msb1, int msl, int mss, \
    __global const store_t *fmask, __global const uchar *bmask

/* element offset of row r of batch b in layout lay: lay.w + (b / nh) lay.x + (b % nh) lay.y + r lay.z (q, k, v
 * and out read and written in the projections' layouts, attention.cl's header) */
inline size_t at(long4 lay, int nh, int b, int r) {
    return lay.w + (b / nh) * lay.x + (b % nh) * lay.y + r * lay.z;
}

/* offset of mask element (b, i, 0) */
inline long mask_row(int b, int i, int mnb, int msb0, int msb1, int msl) {
    return (long)(b / mnb) * msb0 + (long)(b % mnb) * msb1 + (long)i * msl;
}

/* the additive mask at offset o: 0, the float value, or -BIG where a boolean mask excludes the key */
inline real mask_at(int flags, __global const store_t *fmask, __global const uchar *bmask, long o) {
    if (flags & ATT_F_FLOAT_MASK) return LOAD(fmask, o);
    if (flags & ATT_F_BOOL_MASK) return bmask[o] ? 0 : -BIG;
    return 0;
}

/* ATT_F_CAUSAL hides key j from query i (top-left aligned, as torch's is_causal) */
inline bool hides(int flags, int i, int j) { return (flags & ATT_F_CAUSAL) && j > i; }

/* dropout's factor for score e = (b L + i) S + j */
inline real keep_scale(int flags, ulong e, uint2 seed, uint2 offset, real p) {
    if (!(flags & ATT_F_DROPOUT)) return 1;
    float u = to_unit(philox((uint4)((uint)e, offset.x, offset.y, (uint)(e >> 32)), seed).x);
    return u >= p ? 1 / (1 - p) : 0;
}

#endif
