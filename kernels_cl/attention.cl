/* attention.cl: fused scaled dot-product attention in the FlashAttention manner, forward and backward.
 *
 * out[b, i] = sum_j softmax_j(s[b, i, :]) z[b, i, j] v[b, j],  s[b, i, j] = scale q[b, i] . k[b, j] + mask
 * where the mask is additive (ATT_F_FLOAT_MASK, float values) or boolean (ATT_F_BOOL_MASK: key j takes part
 * where the byte is nonzero), and ATT_F_CAUSAL lets query i see keys j <= i only (top-left aligned, as
 * torch's is_causal). z is dropout's keep / (1 - p) with ATT_F_DROPOUT, else 1. A score of -inf (a masked
 * key) takes no part; a row where no key takes part has output 0 and gradient 0, as torch's.
 *
 * Layout: q (B, L, E), k (B, S, E), v (B, S, Ev), out (B, L, Ev), each gradient as its tensor; B is the
 * product of the batch dimensions. A row's features are contiguous; row r of batch b starts at element
 * lay.w + (b / nh) lay.x + (b % nh) lay.y + r lay.z of the tensor's layout lay (a long4), so q, k and v can be
 * read straight from the projections' (N, L, H E) or (L, N, H E) output, even one packed [q | k | v] buffer,
 * and out written in the same form: multi-head attention needs no head split or merge copies. The mask is read
 * through element strides, 0 where it broadcasts:
 * (b, i, j) is at (b / mnb) msb0 + (b % mnb) msb1 + i msl + j mss. lse and D are (B, L) in `real`.
 * The L x S scores are never stored: each kernel recomputes them tile by tile.
 *
 * Kernels, in tiles as a GEMM: a work-group owns a block of ATT_T rows of one side (its batch b, rows
 * r0 .. r0 + ATT_T) and streams tiles of ATT_T rows of the other side through local memory. Work-groups are
 * ATT_X x ATT_Y: local id x runs along a row (a score row's keys, a feature row's columns), y across rows, so
 * a row index depends on y alone and every work-item of an x run (one SIMD vector on CPUs) reads one
 * broadcast value and consecutive addresses. Each tile's ATT_T x ATT_T scores go to local memory; a
 * work-item owns the accumulator elements (y + ATT_Y a, x + ATT_X c) of the block's rows, so private state
 * stays small whatever the head dimension. Rows are zero-padded to ATT_D and tiles to ATT_T rows, so every
 * inner loop has a fixed length; a key tile is also kept transposed (kt[d][c]) for the scores.
 *   attn_fwd:    a group per (b, query block), tiles of k and v; online softmax (a running max m and sum l
 *                per row, the accumulator rescaled when m grows). Writes out and lse[b, i] = m + log(l)
 *                (+inf for a row with no key, so the backward's exp(s - lse) is 0).
 *   attn_bwd_dot: D_r = dO_r . out_r, one work-item per row.
 *   attn_bwd_q:  the forward's grid: dq_i = sum_j dS_ij k_j scale with p = exp(s - lse),
 *                dS_ij = p_ij (z_ij dO_i . v_j - D_i).
 *   attn_bwd_kv: a group per (b, key block), tiles of q and dO:
 *                dv_j = sum_i p_ij z_ij dO_i, dk_j = sum_i dS_ij q_i scale.
 * The backward is two kernels after D, not one: a single pass over (query block, key block) pairs would
 * have to add every block's share of dq (or of dk, dv) into one row from many work-groups, that is float
 * atomics or an extra pass over per-block partials. Here every output element is summed by one work-item
 * in a fixed order, so results are bit-identical run after run.
 * Causal blocks skip the tiles that lie wholly above the diagonal.
 * Dropout: z_ij comes from Philox (philox.h) with counter (b L + i) S + j and the host's (seed, offset), so
 * the backward regenerates the forward's mask without storing it.
 * Defines: the element type (clnn_dtype.h); ATT_D, the padded row width (a power of two >= E and Ev);
 * ATT_T, rows per block and tile (the host picks it from the device's local memory); ATT_X <= 16 and
 * ATT_Y <= ATT_T, the work-group's shape (all powers of two); ATT_COLS_BY_ROW 1 loads transposed tiles
 * with consecutive local writes (CPUs) instead of coalesced global reads (GPUs); ATT_UNROLL (PRIVATE_LOOP).
 */
#include "attention.h"

#ifndef ATT_D
#define ATT_D 64
#endif
#ifndef ATT_T
#define ATT_T 16
#endif
#ifndef ATT_COLS_BY_ROW
#define ATT_COLS_BY_ROW 0
#endif
#ifndef ATT_UNROLL
#define ATT_UNROLL 0
#endif
#ifndef ATT_X
#define ATT_X 16
#endif
#ifndef ATT_Y
#define ATT_Y 4
#endif
#define ATT_NR (ATT_T / ATT_Y)                /* block rows per work-item */
#define ATT_NC ((ATT_T + ATT_X - 1) / ATT_X)  /* score columns per work-item */
#define ATT_NA (ATT_NR * (ATT_D / ATT_X))    /* accumulator elements per work-item */

/* PRIVATE_LOOP: a loop over a work-item's scores or accumulators, unrolled with ATT_UNROLL (GPUs: indexed at run
 * time, the arrays would live in each work-item's stack, 32-64 bytes in clang's NVPTX build); Intel's runtime, which
 * vectorizes across work-items, ran the unrolled kernels 4-5x slower. WIDTH_LOOP: dots' loop over the row width,
 * kept rolled there: unrolled by the compiler with its loads hoisted, it took 216-255 registers and, in float64,
 * spilled up to 3 KB a work-item (64-130 rolled, in every tile and width the tests build) */
#if ATT_UNROLL
#define PRIVATE_LOOP _Pragma("unroll")
#define WIDTH_LOOP _Pragma("unroll 1")
#else
#define PRIVATE_LOOP
#define WIDTH_LOOP
#endif
/* the work-item's rows r = y + ATT_Y i of a block, its columns c = x + ATT_X j of a row of n */
#define FOR_ROWS(r) for (int r = get_local_id(1); r < ATT_T; r += ATT_Y)
#define FOR_COLS(c, n) for (int c = get_local_id(0); c < (n); c += ATT_X)
/* the tile row and column of the work-item's score e < ATT_NR ATT_NC (a column past the tile where ATT_T < ATT_X) */
#define SC_ROW(e) ((int)get_local_id(1) + (e) / ATT_NC * ATT_Y)
#define SC_COL(e) ((int)get_local_id(0) + (e) % ATT_NC * ATT_X)
/* column c clamped to the tile; a whole-tile column needs no clamp (consecutive addresses, not a gather on CPUs) */
#if ATT_T % ATT_X == 0
#define SC_COL_IN(c) (c)
#else
#define SC_COL_IN(c) min(c, ATT_T - 1)
#endif
/* the block row and column of the work-item's accumulator element a < ATT_NA */
#define ACC_ROW(a) ((int)get_local_id(1) + (a) / (ATT_D / ATT_X) * ATT_Y)
#define ACC_COL(a) ((int)get_local_id(0) + (a) % (ATT_D / ATT_X) * ATT_X)

/* the work-item's scores out[e] = a[r] . bt[:, c] over its entries (r, c) (a row-major, bt transposed), all
 * at once: independent sums for the pipeline; columns past the tile read column ATT_T - 1 */
inline void dots(real *out, __local const real *a, __local const real *bt) {
    int y = get_local_id(1), x = get_local_id(0);
    PRIVATE_LOOP for (int e = 0; e < ATT_NR * ATT_NC; ++e) out[e] = 0;
    WIDTH_LOOP for (int d = 0; d < ATT_D; ++d)
        PRIVATE_LOOP for (int i = 0; i < ATT_NR; ++i) {
            real av = a[(y + ATT_Y * i) * ATT_D + d];
            PRIVATE_LOOP for (int k = 0; k < ATT_NC; ++k)
                out[i * ATT_NC + k] += av * bt[d * ATT_T + SC_COL_IN(x + ATT_X * k)];
        }
}

/* nt rows, rs elements apart, of width values times f into tile[r][d] (row-major), zero-padded to ATT_T x ATT_D */
inline void load_rows(__local real *tile, __global const store_t *src, long rs, int nt, int width, real f) {
    FOR_ROWS(r) FOR_COLS(d, ATT_D) tile[r * ATT_D + d] = r < nt && d < width ? f * LOAD(src, r * rs + d) : 0;
}

/* the same into tile[d][r] (transposed). On GPUs x runs along d: coalesced global reads. With ATT_COLS_BY_ROW
 * (the host's choice on CPUs) x runs along r, so the local writes are consecutive: scattered writes cost
 * CPUs far more than the gathered reads */
inline void load_cols(__local real *tile, __global const store_t *src, long rs, int nt, int width) {
#if ATT_COLS_BY_ROW
    for (int d = get_local_id(1); d < ATT_D; d += ATT_Y)
        FOR_COLS(r, ATT_T) tile[d * ATT_T + r] = r < nt && d < width ? LOAD(src, r * rs + d) : 0;
#else
    FOR_ROWS(r) FOR_COLS(d, ATT_D) tile[d * ATT_T + r] = r < nt && d < width ? LOAD(src, r * rs + d) : 0;
#endif
}

/* the work-item's accumulator elements of rows < nt and columns < width, times f[r] (f[r] = 0: row without key) */
inline void store_acc(__global store_t *dst, long4 lay, int nh, int b, int r0, int nt, int width, const real *acc,
                      __local const real *f) {
    PRIVATE_LOOP for (int a = 0; a < ATT_NA; ++a) {
        int r = ACC_ROW(a), d = ACC_COL(a);
        if (r < nt && d < width) STORE(dst, at(lay, nh, b, r0 + r) + d, acc[a] * f[r]);
    }
}

/* acc[(r, d)] = acc * f[r] (f null: 1) + sum_c p[r][c] x[c][d] over c < n; p[r][c] is p[r pr + c pc] */
inline void acc_update(real *acc, __local const real *f, __local const real *p, int pr, int pc,
                       __local const real *x, int n) {
    PRIVATE_LOOP for (int a = 0; a < ATT_NA; ++a) {
        int r = ACC_ROW(a), d = ACC_COL(a);
        real v = f ? acc[a] * f[r] : acc[a];
        for (int c = 0; c < n; ++c) v += p[r * pr + c * pc] * x[c * ATT_D + d];
        acc[a] = v;
    }
}

/* the query block of this group: (b, first row i0) */
inline int2 block_of(int rows) {
    int blocks = (rows + ATT_T - 1) / ATT_T, g = get_group_id(0);
    return (int2)(g / blocks, g % blocks * ATT_T);
}

/* keys a causal query block [i0, i0 + ATT_T) reads: those j <= its last row */
inline int keys_seen(int flags, int L, int S, int i0) {
    return flags & ATT_F_CAUSAL ? min(S, min(L, i0 + ATT_T)) : S;
}

/* query i sees key j (the mask aside) */
#define SEES(i, j, ni, nj) ((i) < (ni) && (j) < (nj) && !hides(flags, i, j))

__kernel void attn_fwd(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, __global const store_t *q, __global const store_t *k,
                       __global const store_t *v, __global store_t *out, __global real *lse) {
    __local real qs[ATT_T * ATT_D], kt[ATT_D * ATT_T], vs[ATT_T * ATT_D], sc[ATT_T * ATT_T];
    __local real ms[ATT_T], ls[ATT_T], fs[ATT_T];
    int t = get_local_id(1) * ATT_X + get_local_id(0);
    int2 bi = block_of(L);
    int b = bi.x, i0 = bi.y, ni = min(ATT_T, L - i0);
    real acc[ATT_NA];
    PRIVATE_LOOP for (int a = 0; a < ATT_NA; ++a) acc[a] = 0;
    load_rows(qs, q + at(lq, nh, b, i0), lq.z, ni, E, scale);
    for (int r = t; r < ATT_T; r += ATT_X * ATT_Y) {
        ms[r] = -BIG;
        ls[r] = 0;
    }
    int send = keys_seen(flags, L, S, i0);
    for (int j0 = 0; j0 < send; j0 += ATT_T) {
        int nj = min(ATT_T, send - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_cols(kt, k + at(lk, nh, b, j0), lk.z, nj, E);
        load_rows(vs, v + at(lv, nh, b, j0), lv.z, nj, Ev, 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        real sv[ATT_NR * ATT_NC];
        dots(sv, qs, kt);
        PRIVATE_LOOP for (int e = 0; e < ATT_NR * ATT_NC; ++e) {
            int r = SC_ROW(e), c = SC_COL(e), i = i0 + r, j = j0 + c;
            if (c >= ATT_T) continue;
            sc[r * ATT_T + c] = SEES(i, j, i0 + ni, j0 + nj) ? sv[e] +
                    mask_at(flags, fmask, bmask, mask_row(b, i, mnb, msb0, msb1, msl) + (long)j * mss) : -BIG;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = t; r < ATT_T; r += ATT_X * ATT_Y) {  /* the row's softmax step: new max, weights p z, new sum */
            real mo = ms[r], m = mo, l = 0;
            for (int c = 0; c < nj; ++c) m = max(m, sc[r * ATT_T + c]);
            size_t row = (size_t)b * L + i0 + r;
            for (int c = 0; c < nj; ++c) {
                real s = sc[r * ATT_T + c], p = s == -BIG ? 0 : exp(s - m);
                l += p;
                sc[r * ATT_T + c] = p * keep_scale(flags, row * S + j0 + c, seed, offset, p_drop);
            }
            fs[r] = m == -BIG ? 1 : exp(mo - m);
            ls[r] = ls[r] * fs[r] + l;
            ms[r] = m;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        acc_update(acc, fs, sc, ATT_T, 1, vs, nj);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = t; r < ni; r += ATT_X * ATT_Y) {
        real l = ls[r];
        lse[(size_t)b * L + i0 + r] = l > 0 ? ms[r] + log(l) : BIG;
        fs[r] = l > 0 ? 1 / l : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    store_acc(out, lo, nh, b, i0, ni, Ev, acc, fs);
}

/* D[b L + i] = dO[b, i] . out[b, i] for the B L rows */
__kernel void attn_bwd_dot(int rows, int L, int Ev, int nh, long4 lo, __global const store_t *out,
                           __global const store_t *gout, __global real *dsum) {
    int r = get_global_id(0);
    if (r >= rows) return;
    size_t o = at(lo, nh, r / L, r % L);
    real s = 0;
    for (int d = 0; d < Ev; ++d) s += LOAD(gout, o + d) * LOAD(out, o + d);
    dsum[r] = s;
}

__kernel void attn_bwd_q(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, __global const store_t *q, __global const store_t *k,
                         __global const store_t *v, __global const real *lse, __global const real *dsum,
                         __global const store_t *gout, __global store_t *gq) {
    __local real qs[ATT_T * ATT_D], gs[ATT_T * ATT_D], kt[ATT_D * ATT_T], ks[ATT_T * ATT_D], vt[ATT_D * ATT_T];
    __local real sc[ATT_T * ATT_T], fs[ATT_T];
    int t = get_local_id(1) * ATT_X + get_local_id(0);
    int2 bi = block_of(L);
    int b = bi.x, i0 = bi.y, ni = min(ATT_T, L - i0);
    real acc[ATT_NA];
    PRIVATE_LOOP for (int a = 0; a < ATT_NA; ++a) acc[a] = 0;
    load_rows(qs, q + at(lq, nh, b, i0), lq.z, ni, E, scale);
    load_rows(gs, gout + at(lo, nh, b, i0), lo.z, ni, Ev, 1);
    int send = keys_seen(flags, L, S, i0);
    for (int j0 = 0; j0 < send; j0 += ATT_T) {
        int nj = min(ATT_T, send - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_cols(kt, k + at(lk, nh, b, j0), lk.z, nj, E);
        load_rows(ks, k + at(lk, nh, b, j0), lk.z, nj, E, 1);
        load_cols(vt, v + at(lv, nh, b, j0), lv.z, nj, Ev);
        barrier(CLK_LOCAL_MEM_FENCE);
        real sv[ATT_NR * ATT_NC], dp[ATT_NR * ATT_NC];
        dots(sv, qs, kt);
        dots(dp, gs, vt);
        PRIVATE_LOOP for (int e = 0; e < ATT_NR * ATT_NC; ++e) {
            int r = SC_ROW(e), c = SC_COL(e), i = i0 + r, j = j0 + c;
            if (c >= ATT_T) continue;
            real ds = 0;
            if (SEES(i, j, i0 + ni, j0 + nj)) {
                size_t row = (size_t)b * L + i;
                real s = sv[e] +
                         mask_at(flags, fmask, bmask, mask_row(b, i, mnb, msb0, msb1, msl) + (long)j * mss);
                /* lse and D are read here, per score, not held in private memory across the barriers: Intel's
                 * CPU runtime (2026.22) miscompiled a D loaded before the barrier loop, giving every work-item
                 * the group's last D unless the group was exactly one SIMD vector (16 on AVX-512). */
                real p = s == -BIG ? 0 : exp(s - lse[row]);
                ds = p * (keep_scale(flags, row * S + j, seed, offset, p_drop) * dp[e]
                          - dsum[row]);
            }
            sc[r * ATT_T + c] = ds;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        acc_update(acc, 0, sc, ATT_T, 1, ks, nj);
    }
    for (int r = t; r < ATT_T; r += ATT_X * ATT_Y) fs[r] = scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    store_acc(gq, lq, nh, b, i0, ni, E, acc, fs);
}

__kernel void attn_bwd_kv(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, __global const store_t *q,
                          __global const store_t *k, __global const store_t *v, __global const real *lse,
                          __global const real *dsum,
                          __global const store_t *gout, __global store_t *gk, __global store_t *gv) {
    __local real kt[ATT_D * ATT_T], vt[ATT_D * ATT_T], qs[ATT_T * ATT_D], gs[ATT_T * ATT_D];
    __local real pz[ATT_T * ATT_T], dsc[ATT_T * ATT_T], fs[ATT_T];
    int t = get_local_id(1) * ATT_X + get_local_id(0);
    int2 bj = block_of(S);
    int b = bj.x, j0 = bj.y, nj = min(ATT_T, S - j0);
    real dk[ATT_NA], dv[ATT_NA];
    PRIVATE_LOOP for (int a = 0; a < ATT_NA; ++a) dk[a] = dv[a] = 0;
    load_cols(kt, k + at(lk, nh, b, j0), lk.z, nj, E);
    load_cols(vt, v + at(lv, nh, b, j0), lv.z, nj, Ev);
    /* causal: queries i < j0 see no key of this block */
    for (int i0 = flags & ATT_F_CAUSAL ? j0 : 0; i0 < L; i0 += ATT_T) {
        int ni = min(ATT_T, L - i0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_rows(qs, q + at(lq, nh, b, i0), lq.z, ni, E, scale);
        load_rows(gs, gout + at(lo, nh, b, i0), lo.z, ni, Ev, 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        real sv[ATT_NR * ATT_NC], dp[ATT_NR * ATT_NC];
        dots(sv, qs, kt);
        dots(dp, gs, vt);
        PRIVATE_LOOP for (int e = 0; e < ATT_NR * ATT_NC; ++e) {  /* entry (query r, key c) */
            int r = SC_ROW(e), c = SC_COL(e), i = i0 + r, j = j0 + c;
            if (c >= ATT_T) continue;
            real p = 0, ds = 0;
            if (SEES(i, j, i0 + ni, j0 + nj)) {
                size_t row = (size_t)b * L + i;
                real s = sv[e] +
                         mask_at(flags, fmask, bmask, mask_row(b, i, mnb, msb0, msb1, msl) + (long)j * mss);
                p = s == -BIG ? 0 : exp(s - lse[row]);
                real z = keep_scale(flags, row * S + j, seed, offset, p_drop);
                ds = p * (z * dp[e] - dsum[row]);
                p *= z;
            }
            pz[r * ATT_T + c] = p;
            dsc[r * ATT_T + c] = ds;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        acc_update(dv, 0, pz, 1, ATT_T, gs, ni);
        acc_update(dk, 0, dsc, 1, ATT_T, qs, ni);
    }
    for (int r = t; r < ATT_T; r += ATT_X * ATT_Y) fs[r] = 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    store_acc(gk, lk, nh, b, j0, nj, E, dk, fs);
    store_acc(gv, lv, nh, b, j0, nj, Ev, dv, fs);
}
