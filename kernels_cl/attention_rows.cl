/* attention_rows.cl: scaled dot-product attention on CPUs (clnn/ops/attention.py's rows path): attention.cl's
 * computation (its header: the formulas, the layouts, masks and dropout), fused as there (the L x S scores are never
 * stored), but each work-item alone, in explicit vectors of ROW_VW reals (rowvec.h) that CPU compilers keep in SIMD
 * registers: no local memory and no barrier (PoCL runs a barrier as a loop over the work-items).
 * Scores are computed ROW_VW keys at a time from k transposed, kt (B, E, SP) in `real` (SP: S rounded up to ROW_VW,
 * zeros past S; vt likewise from v): a row's scores for a key block are E vector FMAs of q's broadcast elements. A
 * block's weights then scale whole rows of v's (k's, q's, dO's) features, read in their layouts.
 *   attn_rows_t:      xt[b, d, j] = x[b, j, d] (x in layout lay), zeros for j >= S; a work-item per key block.
 *   attn_rows_fwd:    a work-item per block of ATT_RB query rows, the key blocks in turn: online softmax (a running
 *                     max m and sum l per row, the output rescaled where m grows); writes out and lse = m + log(l)
 *                     (+BIG for a row where no key takes part: out 0, and p = exp(s - lse) = 0 in the backward).
 *   attn_rows_dot:    D_i = dO_i . out_i, a work-item per row.
 *   attn_rows_bwd_q:  the forward's grid: dq_i = scale sum_j dS_ij k_j, dS_ij = p_ij (z_ij dO_i . v_j - D_i).
 *   attn_rows_bwd_kv: a work-item per block of ROW_VW keys, over the query rows that see them:
 *                     dv_j = sum_i p_ij z_ij dO_i, dk_j = sum_i dS_ij (scale q_i), ATT_RB query rows at a time, kept
 *                     transposed (a vector of the block's keys per feature, which q's and dO's elements
 *                     scale), stored element by element.
 * Every sum runs in a fixed order (reruns are bit-identical), and each kernel computes a score as the forward does:
 * (scale q_i) . k_j over d in order, plus the mask. Causal blocks stop at the last key their last row sees, the kv
 * kernel starts at its first key's row. A mask is added and dropout's factors taken lane by lane. Rows past L in a
 * block compute row L - 1 again and store nothing (the kv kernel's: zeros for q and dO, weighing nothing).
 * Defines: the element type (clnn_dtype.h); ROW_VW; ATT_RB, query rows a work-item (2, 4, 8 or 16: one vector of
 * their running maxima); ATT_NE and ATT_NEV, vectors in a row of q or k and of v (E and Ev over ROW_VW, rounded up).
 */
#include "attention.h"
#include "rowvec.h"

#ifdef cl_intel_vec_len_hint /* explicit vectors: Intel's compiler must not vectorize across work-items as well */
#define ROWS_KERNEL __kernel __attribute__((intel_vec_len_hint(1)))
#else
#define ROWS_KERNEL __kernel
#endif

#if USE_FP64 /* lane indices, as wide as the reals (a vector comparison's result that select takes) */
#define LANE_T long
#else
#define LANE_T int
#endif
typedef CLNN_CAT(LANE_T, ROW_VW) lane_idx;
typedef CLNN_CAT(REAL_T, ATT_RB) realrb; /* a value per row of a block */
typedef union { realrv v; real s[ROW_VW]; } lanes_u;
typedef union { realrb v; real s[ATT_RB]; } rows_u;
#define ATT_E (ATT_NE * ROW_VW)
#define ATT_EV (ATT_NEV * ROW_VW)

/* the largest and the sum of v's lanes, halves folded into halves (a fixed order in log2(ROW_VW) vector steps), the
 * halves taken through unions: taken by `.lo` and `.hi`, they drew reports from Oclgrind's uninitialized-value
 * checker (even of a constant vector) */
typedef CLNN_CAT(REAL_T, 8) real8;
typedef union { real8 v; real4 h[2]; } halves8;
typedef union { real4 v; real2 h[2]; } halves4;
typedef union { real2 v; real h[2]; } halves2;
#if ROW_VW == 16
typedef union { realrv v; real8 h[2]; } halves16;
#define FOLD_TO_4(OP, x, out)                                  \
    const halves16 x16_ = {x};                                 \
    const halves8 x8_ = {OP(x16_.h[0], x16_.h[1])};            \
    const real4 out = OP(x8_.h[0], x8_.h[1])
#elif ROW_VW == 8
#define FOLD_TO_4(OP, x, out)                                  \
    const halves8 x8_ = {x};                                   \
    const real4 out = OP(x8_.h[0], x8_.h[1])
#else
#define FOLD_TO_4(OP, x, out) const real4 out = (x)
#endif
#define PLUS(a, b) ((a) + (b))
#define FOLD(OP, x)                                            \
    FOLD_TO_4(OP, x, x4_);                                     \
    const halves4 h4_ = {x4_};                                 \
    const halves2 h2_ = {OP(h4_.h[0], h4_.h[1])};              \
    return OP(h2_.h[0], h2_.h[1])
inline real lanes_max(realrv v) { FOLD(fmax, v); }
inline real lanes_sum(realrv v) { FOLD(PLUS, v); }

/* 0, 1, .. ROW_VW - 1 */
#if ROW_VW == 16
#define LANE_INDEX ((lane_idx)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#elif ROW_VW == 8
#define LANE_INDEX ((lane_idx)(0, 1, 2, 3, 4, 5, 6, 7))
#else
#define LANE_INDEX ((lane_idx)(0, 1, 2, 3))
#endif

/* the first n elements at p (all ROW_VW of them from ROW_VW on) as a vector, zeros after */
inline realrv row_vec(__global const store_t *p, int n) {
#if !STORE_HALF && !STORE_BF16
    if (n >= ROW_VW) return RV_LOAD(0, p);
#endif
    lanes_u t = {(realrv)0};
    for (int q = 0; q < n && q < ROW_VW; ++q) t.s[q] = LOAD(p, q);
    return t.v;
}

/* v's first n lanes (all from ROW_VW on) to p */
inline void row_put(realrv v, __global store_t *p, int n) {
#if !STORE_HALF && !STORE_BF16
    if (n >= ROW_VW) {
        RV_STORE(v, 0, p);
        return;
    }
#endif
    const lanes_u t = {v};
    for (int q = 0; q < n && q < ROW_VW; ++q) STORE(p, q, t.s[q]);
}

/* query i's scores s for keys j0 .. j0 + ROW_VW with the mask added, -BIG at the keys it does not see (past S, and
 * past i when causal) */
inline realrv shown(realrv s, lane_idx lane, int flags, int b, int i, int j0, int S, int mnb, int msb0, int msb1,
                    int msl, int mss, __global const store_t *fmask, __global const uchar *bmask) {
    const int seen = flags & ATT_F_CAUSAL ? min(S, i + 1) : S;
    if (flags & (ATT_F_FLOAT_MASK | ATT_F_BOOL_MASK)) {
        lanes_u t = {s};
        const long mo = mask_row(b, i, mnb, msb0, msb1, msl);
        for (int q = 0; q < ROW_VW && j0 + q < seen; ++q)
            t.s[q] += mask_at(flags, fmask, bmask, mo + (long)(j0 + q) * mss);
        s = t.v;
    }
    return select(s, (realrv)(-BIG), lane >= (lane_idx)(seen - j0));
}
#define SHOWN(s, i, j0) shown(s, lane, flags, b, i, j0, S, mnb, msb0, msb1, msl, mss, fmask, bmask)

/* exp(x - m), 0 where x is a hidden score (-BIG: also a row that hides every key, m -BIG too) */
#define EXP_SHOWN(x, m) select(exp((x) - (m)), (realrv)0, (x) == (realrv)(-BIG))

/* p's lanes times dropout's factors of query i's keys j0 .. */
inline realrv dropped(realrv p, int flags, ulong e0, uint2 seed, uint2 offset, real p_drop) {
    lanes_u t = {p};
    for (int q = 0; q < ROW_VW; ++q) t.s[q] *= keep_scale(flags, e0 + q, seed, offset, p_drop);
    return t.v;
}

/* s[r] = sum over d < n in order of x[r][d] * xt[d SP ..]: the scores (dO . v) of a block's rows for one key block */
#define KEY_DOTS(s, x, xt, n)                                                             \
    do {                                                                                  \
        _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) s[r] = 0;                      \
        for (int d = 0; d < (n); ++d) {                                                   \
            const realrv kv_ = RV_LOAD(0, (xt) + (size_t)d * SP);                         \
            _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) s[r] += x[r][d] * kv_;     \
        }                                                                                 \
    } while (0)

/* w[0..ATT_RB)[0..nk) weigh rows j0 .. j0 + nk of x (rows rs apart, width n, ATT_N vectors) into acc */
#define WEIGH_ROWS(acc, w, x, rs, n, ATT_N)                                               \
    for (int t = 0; t < nk; ++t) {                                                        \
        __global const store_t *xr_ = (x) + (size_t)(j0 + t) * (rs);                      \
        realrv xv_[ATT_N];                                                                \
        _Pragma("unroll") for (int e = 0; e < ATT_N; ++e) xv_[e] = row_vec(xr_ + e * ROW_VW, (n) - e * ROW_VW); \
        _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r)                                \
            _Pragma("unroll") for (int e = 0; e < ATT_N; ++e) acc[r][e] += w[r].s[t] * xv_[e]; \
    }

ROWS_KERNEL void attn_rows_t(int S, int SP, int width, int nh, long4 lay, __global const store_t *x,
                             __global real *xt) {
    const int blocks = SP / ROW_VW, g = get_global_id(0), b = g / blocks, j0 = g % blocks * ROW_VW;
    __global const store_t *rows[ROW_VW];
    const size_t x0 = at(lay, nh, b, 0);
    for (int q = 0; q < ROW_VW; ++q) rows[q] = x + x0 + (size_t)min(j0 + q, S - 1) * lay.z;
    __global real *o = xt + (size_t)b * width * SP + j0;
    for (int d = 0; d < width; ++d) {
        lanes_u t = {(realrv)0};
        for (int q = 0; q < ROW_VW; ++q) t.s[q] = j0 + q < S ? LOAD(rows[q], d) : 0;
        RV_STORE(t.v, 0, o + (size_t)d * SP);
    }
}

ROWS_KERNEL void attn_rows_fwd(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, int SP, __global const store_t *q,
                               __global const real *kt, __global const store_t *v, __global store_t *out,
                               __global real *lse) {
    const int blocks = (L + ATT_RB - 1) / ATT_RB, g = get_global_id(0), b = g / blocks, i0 = g % blocks * ATT_RB;
    const int seen = flags & ATT_F_CAUSAL ? min(S, i0 + ATT_RB) : S; /* the keys the block's rows see */
    const lane_idx lane = LANE_INDEX;
    real qs[ATT_RB][ATT_E];
    realrv acc[ATT_RB][ATT_NEV];
    rows_u m, l;
    _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
        __global const store_t *qr = q + at(lq, nh, b, min(i0 + r, L - 1));
        for (int d = 0; d < E; ++d) qs[r][d] = scale * LOAD(qr, d);
        m.s[r] = -BIG;
        l.s[r] = 0;
        _Pragma("unroll") for (int e = 0; e < ATT_NEV; ++e) acc[r][e] = 0;
    }
    __global const real *kb = kt + (size_t)b * E * SP;
    __global const store_t *vr = v + at(lv, nh, b, 0);
    for (int j0 = 0; j0 < seen; j0 += ROW_VW) {
        realrv s[ATT_RB];
        KEY_DOTS(s, qs, kb + j0, E);
        rows_u top, sum;
        _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
            s[r] = SHOWN(s[r], min(i0 + r, L - 1), j0);
            top.s[r] = fmax(m.s[r], lanes_max(s[r]));
        }
        /* the rows' rescaling factors in one vector exp: 0 where nothing was summed yet (m -BIG) */
        const realrb grow = select(exp(m.v - top.v), (realrb)0, m.v == (realrb)(-BIG));
        const rows_u f = {grow};
        lanes_u w[ATT_RB];
        _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
            const int i = min(i0 + r, L - 1);
            const realrv p = EXP_SHOWN(s[r], top.s[r]);
            sum.s[r] = lanes_sum(p);
            w[r].v = flags & ATT_F_DROPOUT ? dropped(p, flags, ((ulong)b * L + i) * S + j0, seed, offset, p_drop) : p;
            _Pragma("unroll") for (int e = 0; e < ATT_NEV; ++e) acc[r][e] *= f.s[r];
        }
        l.v = l.v * grow + sum.v;
        m.v = top.v;
        const int nk = min(ROW_VW, seen - j0);
        WEIGH_ROWS(acc, w, vr, lv.z, Ev, ATT_NEV)
    }
    const realrb logs = select(m.v + log(l.v), (realrb)BIG, l.v == (realrb)0);
    const rows_u lse_r = {logs};
    _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
        if (i0 + r >= L) break;
        const real inv = l.s[r] > 0 ? 1 / l.s[r] : 0;
        __global store_t *o = out + at(lo, nh, b, i0 + r);
        _Pragma("unroll") for (int e = 0; e < ATT_NEV; ++e) row_put(acc[r][e] * inv, o + e * ROW_VW, Ev - e * ROW_VW);
        lse[(size_t)b * L + i0 + r] = lse_r.s[r];
    }
}

ROWS_KERNEL void attn_rows_dot(int L, int Ev, int nh, long4 lo, __global const store_t *out,
                               __global const store_t *gout, __global real *dsum) {
    const int g = get_global_id(0);
    const size_t o = at(lo, nh, g / L, g % L);
    realrv acc = 0;
    _Pragma("unroll") for (int e = 0; e < ATT_NEV; ++e)
        acc += row_vec(gout + o + e * ROW_VW, Ev - e * ROW_VW) * row_vec(out + o + e * ROW_VW, Ev - e * ROW_VW);
    dsum[g] = lanes_sum(acc);
}

ROWS_KERNEL void attn_rows_bwd_q(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, int SP, __global const store_t *q,
                                 __global const real *kt, __global const real *vt, __global const store_t *k,
                                 __global const real *lse, __global const real *dsum, __global const store_t *gout,
                                 __global store_t *gq) {
    const int blocks = (L + ATT_RB - 1) / ATT_RB, g = get_global_id(0), b = g / blocks, i0 = g % blocks * ATT_RB;
    const int seen = flags & ATT_F_CAUSAL ? min(S, i0 + ATT_RB) : S;
    const lane_idx lane = LANE_INDEX;
    real qs[ATT_RB][ATT_E], gs[ATT_RB][ATT_EV], ls[ATT_RB], dd[ATT_RB];
    realrv acc[ATT_RB][ATT_NE];
    _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
        const int i = min(i0 + r, L - 1);
        __global const store_t *qr = q + at(lq, nh, b, i), *gr = gout + at(lo, nh, b, i);
        for (int d = 0; d < E; ++d) qs[r][d] = scale * LOAD(qr, d);
        for (int d = 0; d < Ev; ++d) gs[r][d] = LOAD(gr, d);
        ls[r] = lse[(size_t)b * L + i];
        dd[r] = dsum[(size_t)b * L + i];
        _Pragma("unroll") for (int e = 0; e < ATT_NE; ++e) acc[r][e] = 0;
    }
    __global const real *kb = kt + (size_t)b * E * SP, *vb = vt + (size_t)b * Ev * SP;
    __global const store_t *kr = k + at(lk, nh, b, 0);
    for (int j0 = 0; j0 < seen; j0 += ROW_VW) {
        realrv s[ATT_RB], dp[ATT_RB];
        KEY_DOTS(s, qs, kb + j0, E);
        KEY_DOTS(dp, gs, vb + j0, Ev);
        lanes_u w[ATT_RB];
        _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
            const int i = min(i0 + r, L - 1);
            const realrv p = EXP_SHOWN(SHOWN(s[r], i, j0), ls[r]);
            const ulong e0 = ((ulong)b * L + i) * S + j0;
            const realrv dpz = flags & ATT_F_DROPOUT ? dropped(dp[r], flags, e0, seed, offset, p_drop) : dp[r];
            w[r].v = p * (dpz - dd[r]);
        }
        const int nk = min(ROW_VW, seen - j0);
        WEIGH_ROWS(acc, w, kr, lk.z, E, ATT_NE)
    }
    _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
        if (i0 + r >= L) break;
        __global store_t *o = gq + at(lq, nh, b, i0 + r);
        _Pragma("unroll") for (int e = 0; e < ATT_NE; ++e) row_put(acc[r][e] * scale, o + e * ROW_VW, E - e * ROW_VW);
    }
}

ROWS_KERNEL void attn_rows_bwd_kv(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, int SP, __global const store_t *q,
                                  __global const real *kt, __global const real *vt, __global const real *lse,
                                  __global const real *dsum, __global const store_t *gout, __global store_t *gk,
                                  __global store_t *gv) {
    const int blocks = SP / ROW_VW, g = get_global_id(0), b = g / blocks, j0 = g % blocks * ROW_VW;
    const lane_idx lane = LANE_INDEX;
    realrv dkt[ATT_E], dvt[ATT_EV]; /* dk and dv transposed: a vector of the block's keys per feature */
    for (int d = 0; d < E; ++d) dkt[d] = 0;
    for (int d = 0; d < Ev; ++d) dvt[d] = 0;
    __global const real *kb = kt + (size_t)b * E * SP + j0, *vb = vt + (size_t)b * Ev * SP + j0;
    __global const store_t *qb = q + at(lq, nh, b, 0), *gb = gout + at(lo, nh, b, 0);
    for (int i0 = flags & ATT_F_CAUSAL ? j0 : 0; i0 < L; i0 += ATT_RB) {
        real qs[ATT_RB][ATT_E], gs[ATT_RB][ATT_EV]; /* q scaled and dO; zeros past L */
        _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
            const bool in = i0 + r < L;
            __global const store_t *qr = qb + (size_t)(i0 + r) * lq.z, *gr = gb + (size_t)(i0 + r) * lo.z;
            for (int d = 0; d < E; ++d) qs[r][d] = in ? scale * LOAD(qr, d) : 0;
            for (int d = 0; d < Ev; ++d) gs[r][d] = in ? LOAD(gr, d) : 0;
        }
        realrv s[ATT_RB], dp[ATT_RB], w[ATT_RB], pz[ATT_RB];
        KEY_DOTS(s, qs, kb, E);
        KEY_DOTS(dp, gs, vb, Ev);
        _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) {
            const int i = min(i0 + r, L - 1);
            const realrv p = EXP_SHOWN(SHOWN(s[r], i, j0), lse[(size_t)b * L + i]);
            realrv dpz = dp[r];
            pz[r] = p;
            if (flags & ATT_F_DROPOUT) {
                const ulong e0 = ((ulong)b * L + i) * S + j0;
                pz[r] = dropped(p, flags, e0, seed, offset, p_drop);
                dpz = dropped(dpz, flags, e0, seed, offset, p_drop);
            }
            const bool out = i0 + r >= L; /* rows past L weigh nothing */
            w[r] = out ? (realrv)0 : p * (dpz - dsum[(size_t)b * L + i]);
            pz[r] = out ? (realrv)0 : pz[r];
        }
        for (int d = 0; d < E; ++d) {
            realrv a = dkt[d];
            _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) a += w[r] * qs[r][d];
            dkt[d] = a;
        }
        for (int d = 0; d < Ev; ++d) {
            realrv a = dvt[d];
            _Pragma("unroll") for (int r = 0; r < ATT_RB; ++r) a += pz[r] * gs[r][d];
            dvt[d] = a;
        }
    }
    const int nk = min(ROW_VW, S - j0);
    __global store_t *kr = gk + at(lk, nh, b, j0), *vr = gv + at(lv, nh, b, j0);
    for (int d = 0; d < E; ++d) {
        const lanes_u t = {dkt[d]};
        for (int c = 0; c < nk; ++c) STORE(kr + (size_t)c * lk.z, d, t.s[c]);
    }
    for (int d = 0; d < Ev; ++d) {
        const lanes_u t = {dvt[d]};
        for (int c = 0; c < nk; ++c) STORE(vr + (size_t)c * lv.z, d, t.s[c]);
    }
}
