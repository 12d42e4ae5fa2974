/* attention_rows.cl: the passes over score rows of scaled dot-product attention's CPU path
 * (clnn/ops/attention.py), which runs a block of query rows at a time as batched GEMMs with these between them.
 *
 * Layout: a block holds query rows i = i0 .. i0 + rows of each of the B batch elements; sc and dp are
 * (B, rows, n) contiguous in `real`, row (b, i - i0) holding query i against keys j < n (n <= S: a causal
 * forward stops at the block's last visible key). lse is (B, L). The mask and dropout are attention.h's.
 *   attn_rows_fwd: sc holds the scores scale q_i . k_j; adds the mask, then the row's softmax p times dropout's
 *                  z: sc = p z, lse[b L + i] = m + log(l) (+BIG for a row where no key takes part: p = 0).
 *   attn_rows_bwd: sc holds the scores again, dp the products dO_i . v_j; with p = exp(s - lse) and
 *                  D_i = sum_j p z dp (= dO_i . out_i), writes sc = p z (dv's weights) and dp = dS = p (z dp - D).
 * One work-group per row; each work-item walks a strided share (consecutive work-items, consecutive addresses:
 * vectors on CPUs, whose compilers vectorize across work-items) and reduce.h's tree combines the shares in a
 * fixed order: reruns are bit-identical.
 * Launch: global (B rows x the work-group), work-group a power of two <= RED_WG.
 * Defines: the element type (clnn_dtype.h); RED_WG (reduce.h), the largest work-group.
 */
#include "attention.h"
#include "reduce.h"

#define ROWS_ARGS int flags, int L, int S, int i0, int rows, int n, real p_drop, uint2 seed, uint2 offset

/* score x of (b, i, j) with its mask added, -BIG where hidden */
#define MASKED(x, j) (hides(flags, i, j) ? -BIG : (x) + mask_at(flags, fmask, bmask, mo + (long)(j) * mss))

__kernel void attn_rows_fwd(ROWS_ARGS, ATT_MASK_ARGS, __global real *sc, __global real *lse) {
    __local real scratch[RED_WG];
    int g = get_group_id(0), b = g / rows, i = i0 + g % rows, t = get_local_id(0), nt = get_local_size(0);
    __global real *s = sc + (size_t)g * n;
    long mo = mask_row(b, i, mnb, msb0, msb1, msl);
    size_t e0 = ((size_t)b * L + i) * S;
    real m = -BIG;
    for (int j = t; j < n; j += nt) {
        real x = MASKED(s[j], j);
        s[j] = x;
        m = fmax(m, x);
    }
    m = group_reduce(scratch, m, 1);
    real l = 0;
    for (int j = t; j < n; j += nt) {
        real x = s[j], p = x == -BIG ? 0 : exp(x - m);
        s[j] = p;
        l += p;
    }
    l = group_reduce(scratch, l, 0);
    real inv = l > 0 ? 1 / l : 0;
    for (int j = t; j < n; j += nt) s[j] *= inv * keep_scale(flags, e0 + j, seed, offset, p_drop);
    if (t == 0) lse[(size_t)b * L + i] = l > 0 ? m + log(l) : BIG;
}

__kernel void attn_rows_bwd(ROWS_ARGS, ATT_MASK_ARGS, __global real *sc, __global real *dp,
                            __global const real *lse) {
    __local real scratch[RED_WG];
    int g = get_group_id(0), b = g / rows, i = i0 + g % rows, t = get_local_id(0), nt = get_local_size(0);
    __global real *s = sc + (size_t)g * n, *d = dp + (size_t)g * n;
    long mo = mask_row(b, i, mnb, msb0, msb1, msl);
    size_t e0 = ((size_t)b * L + i) * S;
    real ls = lse[(size_t)b * L + i], dsum = 0;
    for (int j = t; j < n; j += nt) {
        real x = MASKED(s[j], j), p = x == -BIG ? 0 : exp(x - ls);
        s[j] = p;
        dsum += p * keep_scale(flags, e0 + j, seed, offset, p_drop) * d[j];
    }
    dsum = group_reduce(scratch, dsum, 0);
    for (int j = t; j < n; j += nt) {
        real p = s[j], z = keep_scale(flags, e0 + j, seed, offset, p_drop);
        s[j] = p * z;
        d[j] = p * (z * d[j] - dsum);
    }
}
