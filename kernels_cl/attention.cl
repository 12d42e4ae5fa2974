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
 * and out written in the same form: multi-head attention needs no head split or merge copies. The mask is read through element strides, 0 where it broadcasts:
 * (b, i, j) is at (b / mnb) msb0 + (b % mnb) msb1 + i msl + j mss. lse and D are (B, L) in `real`.
 * The L x S scores are never stored: each kernel recomputes them tile by tile.
 *
 * Kernels, one work-item per row (its q or k, v and its accumulators in private memory, zero-padded to
 * ATT_D so every inner loop has a fixed length; work-items past the last row shadow it and store nothing);
 * the work-group streams tiles of ATT_BK rows of the other side through local memory:
 *   attn_fwd:    a group per (b, block of local-size query rows), tiles of k and v; online softmax (a running
 *                max m and sum l, the accumulator rescaled when m grows). Writes out and
 *                lse[b, i] = m + log(l) (+inf for a row with no key, so the backward's exp(s - lse) is 0).
 *   attn_bwd_dot: D_r = dO_r . out_r, one work-item per row.
 *   attn_bwd_q:  the forward's grid: dq_i = sum_j dS_ij k_j scale with p = exp(s - lse),
 *                dS_ij = p_ij (z_ij dO_i . v_j - D_i).
 *   attn_bwd_kv: a group per (b, block of key rows), tiles of q, dO, lse and D:
 *                dv_j = sum_i p_ij z_ij dO_i, dk_j = sum_i dS_ij q_i scale.
 * The backward is two kernels after D, not one: a single pass over (query block, key block) pairs would
 * have to add every block's share of dq (or of dk, dv) into one row from many work-groups, that is float
 * atomics or an extra pass over per-block partials. Here every output element is summed by one work-item
 * in a fixed order, so results are bit-identical run after run.
 * Causal blocks skip the tiles that lie wholly above the diagonal.
 * Dropout: z_ij comes from Philox (philox.h) with counter (b L + i) S + j and the host's (seed, offset), so
 * the backward regenerates the forward's mask without storing it.
 * Defines: the element type (clnn_dtype.h); ATT_D, the private row capacity (a power of two >= E and Ev);
 * ATT_BK, rows per tile in local memory (the host picks it from the device's local memory).
 */
#include "clnn_dtype.h"
#include "philox.h"

#ifndef ATT_D
#define ATT_D 64
#endif
#ifndef ATT_BK
#define ATT_BK 16
#endif

#define ATT_F_FLOAT_MASK 1
#define ATT_F_BOOL_MASK 2
#define ATT_F_CAUSAL 4
#define ATT_F_DROPOUT 8

#define ATT_MASK_ARGS int mnb, int msb0, int msb1, int msl, int mss, \
    __global const store_t *fmask, __global const uchar *bmask
#define ATT_ARGS int flags, int L, int S, int E, int Ev, real scale, real p_drop, uint2 seed, uint2 offset
#define ATT_LAYOUT_ARGS int nh, long4 lq, long4 lk, long4 lv, long4 lo

/* element offset of row r of batch b in layout lay */
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

/* dropout's factor for score e = (b L + i) S + j */
inline real keep_scale(int flags, ulong e, uint2 seed, uint2 offset, real p) {
    if (!(flags & ATT_F_DROPOUT)) return 1;
    float u = to_unit(philox((uint4)((uint)e, offset.x, offset.y, (uint)(e >> 32)), seed).x);
    return u >= p ? 1 / (1 - p) : 0;
}

inline real dot_d(const real *a, __local const real *b) {
    real s = 0;
    for (int d = 0; d < ATT_D; ++d) s += a[d] * b[d];
    return s;
}

/* nt rows, rs elements apart, of width values into tile[r][d], zero-padded to ATT_D, times f */
inline void load_tile(__local real *tile, __global const store_t *src, long rs, int nt, int width, real f, int t,
                      int n) {
    for (int idx = t; idx < nt * ATT_D; idx += n) {
        int r = idx / ATT_D, d = idx % ATT_D;
        tile[idx] = d < width ? f * LOAD(src, r * rs + d) : 0;
    }
}

/* a row of width values into p, zero-padded to ATT_D, times f */
inline void load_row(real *p, __global const store_t *src, int width, real f) {
    for (int d = 0; d < ATT_D; ++d) p[d] = d < width ? f * LOAD(src, d) : 0;
}

inline void store_row(__global store_t *dst, const real *p, int width, real f) {
    for (int d = 0; d < ATT_D; ++d)
        if (d < width) STORE(dst, d, f * p[d]);
}

/* the query block of this group: (b, first row i0); the work-item's row is i0 + local id */
inline int2 block_of(int rows) {
    int n = get_local_size(0), blocks = (rows + n - 1) / n, g = get_group_id(0);
    return (int2)(g / blocks, g % blocks * n);
}

/* keys a causal query block [i0, i0 + n) reads: those j <= its last row */
inline int keys_seen(int flags, int L, int S, int i0) {
    return flags & ATT_F_CAUSAL ? min(S, min(L, i0 + (int)get_local_size(0))) : S;
}

__kernel void attn_fwd(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, __global const store_t *q, __global const store_t *k,
                       __global const store_t *v, __global store_t *out, __global real *lse) {
    __local real ks[ATT_BK * ATT_D], vs[ATT_BK * ATT_D];
    int t = get_local_id(0), n = get_local_size(0);
    int2 bi = block_of(L);
    int b = bi.x, valid = bi.y + t < L, i = min(bi.y + t, L - 1);  /* work-items past L shadow row L - 1 */
    real qp[ATT_D], acc[ATT_D];
    size_t row = (size_t)b * L + i;
    for (int d = 0; d < ATT_D; ++d) acc[d] = 0;
    load_row(qp, q + at(lq, nh, b, i), E, scale);
    long mrow = mask_row(b, i, mnb, msb0, msb1, msl);
    real m = -BIG, l = 0;
    int send = keys_seen(flags, L, S, bi.y);
    for (int j0 = 0; j0 < send; j0 += ATT_BK) {
        int nt = min(ATT_BK, send - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(ks, k + at(lk, nh, b, j0), lk.z, nt, E, 1, t, n);
        load_tile(vs, v + at(lv, nh, b, j0), lv.z, nt, Ev, 1, t, n);
        barrier(CLK_LOCAL_MEM_FENCE);
        int jn = flags & ATT_F_CAUSAL ? min(nt, i - j0 + 1) : nt;
        for (int jj = 0; jj < jn; ++jj) {
            int j = j0 + jj;
            real s = dot_d(qp, ks + jj * ATT_D) + mask_at(flags, fmask, bmask, mrow + (long)j * mss);
            if (s == -BIG) continue;
            if (s > m) {
                real c = exp(m - s);
                l *= c;
                for (int d = 0; d < ATT_D; ++d) acc[d] *= c;
                m = s;
            }
            real p = exp(s - m);
            l += p;
            real pz = p * keep_scale(flags, row * S + j, seed, offset, p_drop);
            for (int d = 0; d < ATT_D; ++d) acc[d] += pz * vs[jj * ATT_D + d];
        }
    }
    if (!valid) return;
    store_row(out + at(lo, nh, b, i), acc, Ev, l > 0 ? 1 / l : 0);
    lse[row] = l > 0 ? m + log(l) : BIG;
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
    __local real ks[ATT_BK * ATT_D], vs[ATT_BK * ATT_D];
    int t = get_local_id(0), n = get_local_size(0);
    int2 bi = block_of(L);
    int b = bi.x, valid = bi.y + t < L, i = min(bi.y + t, L - 1);
    real qp[ATT_D], g[ATT_D], dq[ATT_D];
    size_t row = (size_t)b * L + i;
    for (int d = 0; d < ATT_D; ++d) dq[d] = 0;
    load_row(qp, q + at(lq, nh, b, i), E, scale);
    load_row(g, gout + at(lo, nh, b, i), Ev, 1);
    real li = lse[row];
    long mrow = mask_row(b, i, mnb, msb0, msb1, msl);
    int send = keys_seen(flags, L, S, bi.y);
    for (int j0 = 0; j0 < send; j0 += ATT_BK) {
        int nt = min(ATT_BK, send - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(ks, k + at(lk, nh, b, j0), lk.z, nt, E, 1, t, n);
        load_tile(vs, v + at(lv, nh, b, j0), lv.z, nt, Ev, 1, t, n);
        barrier(CLK_LOCAL_MEM_FENCE);
        int jn = flags & ATT_F_CAUSAL ? min(nt, i - j0 + 1) : nt;
        for (int jj = 0; jj < jn; ++jj) {
            int j = j0 + jj;
            real s = dot_d(qp, ks + jj * ATT_D) + mask_at(flags, fmask, bmask, mrow + (long)j * mss);
            if (s == -BIG) continue;
            real p = exp(s - li);
            real z = keep_scale(flags, row * S + j, seed, offset, p_drop);
            /* D is read here, not held from before the loop: Intel's CPU runtime (2026.22) miscompiles a D
             * loaded before the barrier loop, giving every work-item the group's last D unless the group is
             * exactly one SIMD vector (16 on AVX-512). No race, out-of-range read or divergent barrier here:
             * Oclgrind with race checks computes that form correctly, and -cl-opt-disable fixes Intel's. */
            real ds = p * (z * dot_d(g, vs + jj * ATT_D) - dsum[row]);
            for (int d = 0; d < ATT_D; ++d) dq[d] += ds * ks[jj * ATT_D + d];
        }
    }
    if (valid) store_row(gq + at(lq, nh, b, i), dq, E, scale);
}

__kernel void attn_bwd_kv(ATT_ARGS, ATT_MASK_ARGS, ATT_LAYOUT_ARGS, __global const store_t *q, __global const store_t *k,
                          __global const store_t *v, __global const real *lse, __global const real *dsum,
                          __global const store_t *gout, __global store_t *gk, __global store_t *gv) {
    __local real qs[ATT_BK * ATT_D], gs[ATT_BK * ATT_D], ls[ATT_BK], ds[ATT_BK];
    int t = get_local_id(0), n = get_local_size(0);
    int2 bj = block_of(S);
    int b = bj.x, valid = bj.y + t < S, j = min(bj.y + t, S - 1);  /* work-items past S shadow key S - 1 */
    real kp[ATT_D], vp[ATT_D], dk[ATT_D], dv[ATT_D];
    for (int d = 0; d < ATT_D; ++d) dk[d] = dv[d] = 0;
    load_row(kp, k + at(lk, nh, b, j), E, 1);
    load_row(vp, v + at(lv, nh, b, j), Ev, 1);
    long mcol = (long)j * mss;
    /* causal: queries i < j0 see no key of this block */
    for (int i0 = flags & ATT_F_CAUSAL ? bj.y : 0; i0 < L; i0 += ATT_BK) {
        int nt = min(ATT_BK, L - i0);
        size_t qrow = (size_t)b * L + i0;
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(qs, q + at(lq, nh, b, i0), lq.z, nt, E, scale, t, n);
        load_tile(gs, gout + at(lo, nh, b, i0), lo.z, nt, Ev, 1, t, n);
        for (int r = t; r < nt; r += n) {
            ls[r] = lse[qrow + r];
            ds[r] = dsum[qrow + r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int ii = 0; ii < nt; ++ii) {
            int i = i0 + ii;
            if (flags & ATT_F_CAUSAL && j > i) continue;
            real s = dot_d(kp, qs + ii * ATT_D) + mask_at(flags, fmask, bmask,
                                                          mask_row(b, i, mnb, msb0, msb1, msl) + mcol);
            if (s == -BIG) continue;
            real p = exp(s - ls[ii]);
            real z = keep_scale(flags, (qrow + ii) * S + j, seed, offset, p_drop);
            real pz = p * z;
            real dsc = p * (z * dot_d(vp, gs + ii * ATT_D) - ds[ii]);
            for (int d = 0; d < ATT_D; ++d) {
                dv[d] += pz * gs[ii * ATT_D + d];
                dk[d] += dsc * qs[ii * ATT_D + d];
            }
        }
    }
    if (!valid) return;
    store_row(gk + at(lk, nh, b, j), dk, E, 1);
    store_row(gv + at(lv, nh, b, j), dv, Ev, 1);
}
