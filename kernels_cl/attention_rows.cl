/* attention_rows.cl: the passes over score rows of scaled dot-product attention's CPU path
 * (clnn/ops/attention.py), which runs a block of query rows at a time as batched GEMMs with these between them.
 *
 * Layout: a block holds query rows i = i0 .. i0 + rows of each of the B batch elements; sc and dp are
 * (B, rows, n) contiguous in `real`, row (b, i - i0) holding query i against keys j < n (n <= S: a causal
 * forward stops at the block's last visible key). lse is (B, L). The mask and dropout are attention.h's.
 *   attn_rows_fwd: sc holds the scores scale q_i . k_j; adds the mask, then the row's softmax p times dropout's
 *                  z: sc = p z, lse[b L + i] = m + log(l) (+BIG for a row where no key takes part: p = 0).
 *   attn_rows_bwd: sc holds the scores again, dp the products dO_i . v_j; with p = exp(s - lse) and
 *                  D_i = sum_j p z dp (= dO_i . out_i), writes sc = p z (dv's weights) and dp = dS = p (z dp - D)
 *                  (z taken into dp first, then into sc).
 * One work-item per row in ROW_VW-wide vectors (rowvec.h), its sums in a fixed order: reruns are bit-identical.
 * Causal rows walk only the keys they see (the rest are zeroed); a mask is added in a scalar pass (its strides),
 * dropout's factors likewise. PoCL, 8 x 8 heads of 64, 512 keys, both kernels' time in a forward and backward:
 * 141 -> 15 ms against a work-group per row (reduced through local memory: PoCL runs each barrier as a loop over
 * the work-items, and called exp once an element), Intel's runtime 20 -> 13 (causal 14 -> 7).
 * Launch: global B x rows, exactly (no range guard). Defines: the element type (clnn_dtype.h); ROW_VW.
 */
#include "attention.h"
#include "rowvec.h"

#define ROWS_ARGS int flags, int L, int S, int i0, int rows, int n, real p_drop, uint2 seed, uint2 offset

/* the keys j < n that row i may see (causality hides those past i), their scores with the mask added (-BIG where
 * it hides one: scalar, through the mask's strides) in place; the rest of the row is the caller's to zero */
inline int shown_scores(int flags, int i, int n, long mo, int mss, __global const store_t *fmask,
                        __global const uchar *bmask, __global real *s) {
    const int shown = flags & ATT_F_CAUSAL ? min(n, i + 1) : n;
    if (flags & (ATT_F_FLOAT_MASK | ATT_F_BOOL_MASK))
        for (int j = 0; j < shown; ++j) s[j] += mask_at(flags, fmask, bmask, mo + (long)j * mss);
    return shown;
}

/* exp(x - m), 0 where x is a hidden score (-BIG: also a row that hides every key, m -BIG too) */
#define EXP_SHOWN(x, m) select(exp((x) - (m)), (realrv)0, (x) == (realrv)(-BIG))
#define EXP_SHOWN1(x, m) ((x) == -BIG ? 0 : exp((x) - (m)))

__kernel void attn_rows_fwd(ROWS_ARGS, ATT_MASK_ARGS, __global real *sc, __global real *lse) {
    const int g = get_global_id(0), b = g / rows, qi = i0 + g % rows;
    __global real *s = sc + (size_t)g * n;
    const int shown = shown_scores(flags, qi, n, mask_row(b, qi, mnb, msb0, msb1, msl), mss, fmask, bmask, s);
    realrv mv = -BIG, lv = 0;
    real m, l;
    RV_EACH(shown, mv = fmax(mv, RV_LOAD(i, s)), );
    RV_FOLD(fmax, mv, m);
    RV_EACH(shown, , m = fmax(m, s[r]));
    RV_EACH(shown, { const realrv p = EXP_SHOWN(RV_LOAD(i, s), m); lv += p; RV_STORE(p, i, s); }, );
    RV_FOLD(add_, lv, l);
    RV_EACH(shown, , { const real p = EXP_SHOWN1(s[r], m); l += p; s[r] = p; });
    const real inv = l > 0 ? 1 / l : 0;
    RV_EACH(shown, RV_STORE(RV_LOAD(i, s) * inv, i, s), s[r] *= inv);
    for (int j = shown; j < n; ++j) s[j] = 0;
    const size_t e0 = ((size_t)b * L + qi) * S;
    if (flags & ATT_F_DROPOUT)
        for (int j = 0; j < shown; ++j) s[j] *= keep_scale(flags, e0 + j, seed, offset, p_drop);
    lse[(size_t)b * L + qi] = l > 0 ? m + log(l) : BIG;
}

__kernel void attn_rows_bwd(ROWS_ARGS, ATT_MASK_ARGS, __global real *sc, __global real *dp,
                            __global const real *lse) {
    const int g = get_global_id(0), b = g / rows, qi = i0 + g % rows;
    __global real *s = sc + (size_t)g * n, *d = dp + (size_t)g * n;
    const int shown = shown_scores(flags, qi, n, mask_row(b, qi, mnb, msb0, msb1, msl), mss, fmask, bmask, s);
    const size_t e0 = ((size_t)b * L + qi) * S;
    const bool drop = flags & ATT_F_DROPOUT;
    if (drop)
        for (int j = 0; j < shown; ++j) d[j] *= keep_scale(flags, e0 + j, seed, offset, p_drop);
    const real ls = lse[(size_t)b * L + qi];
    realrv dv = 0;
    real dsum;
    RV_EACH(shown, { const realrv p = EXP_SHOWN(RV_LOAD(i, s), ls); RV_STORE(p, i, s); dv += p * RV_LOAD(i, d); }, );
    RV_FOLD(add_, dv, dsum);
    RV_EACH(shown, , { const real p = EXP_SHOWN1(s[r], ls); s[r] = p; dsum += p * d[r]; });
    RV_EACH(shown, RV_STORE(RV_LOAD(i, s) * (RV_LOAD(i, d) - dsum), i, d), d[r] = s[r] * (d[r] - dsum));
    for (int j = shown; j < n; ++j) s[j] = d[j] = 0;
    if (drop)
        for (int j = 0; j < shown; ++j) s[j] *= keep_scale(flags, e0 + j, seed, offset, p_drop);
}
