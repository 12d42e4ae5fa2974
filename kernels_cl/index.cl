/* index.cl: integer-indexed reads and writes, masked selection, triangles, prefix sums and top-k.
 *
 * Tensors are contiguous. An indexed op sees its data as (O, V, I) around the indexed axis (V long) and
 * its index as (O, J, I) read through element strides (so, sj, si): stride 0 broadcasts one index list
 * (index_select, embedding, x[idx]) over O and I, full strides give torch.gather/scatter_add's per-element
 * index. A negative index counts from V (x[idx]); the host checks the range first (index_check).
 *   index_check: first[0] = the lowest position p < n with idx[p] outside [lo, hi); integer atomic_min
 *                only, so the result is exact and deterministic. The host reads that one int.
 *   gather:      out[o, j, i] = x[o, idx(o, j, i), i]; one work-item per output.
 *   gather_rows: gather with an index per row (si 0: index_select, embedding) on CPUs, one work-item per output
 *                row (o, j) copying its I elements in a loop the compiler vectorizes: gather's divisions and index
 *                load per element took PoCL 1.4 ms for 2048 rows of 128, Intel's runtime 0.5-0.7.
 *   scatter:     out[o, v, i] = base[o, v, i] + sum of src[o, j, i] over j with idx(o, j, i) == v, in
 *                increasing j (without SX_BASE the base is 0), or with SX_ASSIGN src of the last such
 *                j, else the base. Row v == skip gets no contribution (embedding's padding_idx). One
 *                work-item per output walks the J indices: a fixed order, no atomics, bit-identical reruns.
 *   scatter_cols: (CPUs, ROW_VW defined: rowvec.h; float32/64) scatter with one index list (strides (0, 1, 0))
 *                into zeros, or with SX_BASE in place (out is the base): a work-item per (o, chunk of ROW_VW
 *                columns) zeroes its columns of every row (Intel's runtime fills 50 MB at 2 GB/s), then walks
 *                the J indices in order, adding (with SX_ASSIGN assigning) src[o, j, chunk] into
 *                out[o, idx[j], chunk] in vectors (a row's last chunk lane by lane). The same order and bits as
 *                scatter, in O(V + J) vector steps a work-item, where scatter takes O(J) an output element and
 *                the sorted path a dozen launches.
 *   scatter_sorted: the same result as scatter from a sorted index: order[lo[s]..hi[s]) are the index
 *                positions q that point at segment s (s = v for one index list, s = (o * I + i) * V + v
 *                for a per-element one), in increasing q; each output walks only its own segment, in
 *                that order, so both paths add in the same order and give the same bits.
 *   radix_count, radix_scatter: one pass of a stable least-significant-digit radix sort of int keys
 *                (>= 0) carrying int values, RADIX_BITS bits from bit `shift`. A work-group owns a tile of
 *                IDX_WG * RADIX_K keys, each work-item RADIX_K consecutive ones; it counts the digits per
 *                work-item and scans those counts across work-items in local memory (integers, exact).
 *                radix_count writes the tile's digit totals to hist[digit * groups + group];
 *                radix_scatter reads their inclusive scan (inc) and moves each key to its digit's offset
 *                plus its rank among equal digits before it, so equal digits keep their order.
 *   segment_keys: keys[q] = the segment (as scatter_sorted's s) that index position q points at, vals[q] = q.
 *   seg_bounds:  for sorted keys, lo[k] and hi[k] = the first and one past the last position of key k
 *                (each written by one work-item; the host zeroes both first).
 *   mask_positions: out[inc[p] - 1] = p for every p with mask[p], inc the inclusive scan of the mask:
 *                the positions of the true entries, in order.
 *   where_fill:  out[i] = cond[d.s0 . idx] ? a[d.s1 . idx] : out[i] over the shape of d (broadcasting), by runs
 *                of its rows (kernels.launch_runs).
 *   tri:         out = x where (col - row) >= diagonal (upper) or <= diagonal (lower), else 0, for a
 *                batch of (R, C) matrices.
 *   scan:        inclusive prefix sums of rows (row r at (r / I) * L * I + r % I, stride I), in blocks of
 *                C = IDX_WG * SCAN_K elements, one work-group per (row, block): the block is loaded to
 *                local memory (coalesced when I == 1), each work-item sums SCAN_K of it serially and a
 *                Hillis-Steele scan over the IDX_WG partial sums joins them. SC_TOTALS writes each block's
 *                total to totals[row * blocks + block] instead; SC_CARRY adds carry[row * blocks + block
 *                - 1] (the inclusive scan of those totals) to every block after the first; SC_REVERSE
 *                scans from the row's end. Work O(L), depth O(SCAN_K + log IDX_WG) per block.
 *   topk:        one work-group per row (same row layout), k rounds; each picks the best element ranked
 *                after the previous pick with a local-memory tree over IDX_WG work-items. The row sits in
 *                local memory when it has at most TK_CAP elements. Order: value (descending when
 *                largest, NaN largest), ties by lower index. vals/idx rows are (O, k, I).
 * Defines: the element type (clnn_dtype.h; integer types compute in their own type); IDX_WG, the
 * work-group size of scan, topk and the radix passes (a power of two, at least 1 << RADIX_BITS);
 * SCAN_K; TK_CAP; RADIX_BITS; RADIX_K.
 */
#include "clnn_dtype.h"
#include "clnn_shape.h"

#ifndef IDX_WG
#define IDX_WG 64
#endif
#ifndef SCAN_K
#define SCAN_K 4
#endif
#ifndef TK_CAP
#define TK_CAP 1024
#endif
#ifndef RADIX_BITS
#define RADIX_BITS 4
#endif
#ifndef RADIX_K
#define RADIX_K 4
#endif
#define RADIX (1 << RADIX_BITS)

#define SX_ASSIGN 1
#define SX_BASE 2

#define SC_TOTALS 1
#define SC_CARRY 2
#define SC_REVERSE 4


__kernel void index_check(int n, __global const long *idx, long lo, long hi, __global int *first) {
    int p = get_global_id(0);
    if (p >= n) return;
    long k = idx[p];
    if (k < lo || k >= hi) atomic_min(first, p);
}

inline int wrap(long k, int V) { return (int)(k < 0 ? k + V : k); }

__kernel void gather(int n, int V, int J, int I, int so, int sj, int si, __global const long *idx,
                     __global const store_t *x, __global store_t *out) {
    int p = get_global_id(0);
    if (p >= n) return;
    int i = p % I, j = (p / I) % J, o = p / (I * J);  /* out (O, J, I) */
    int v = wrap(idx[(size_t)o * so + (size_t)j * sj + (size_t)i * si], V);
    STORE(out, p, LOAD(x, ((size_t)o * V + v) * I + i));
}

__kernel void gather_rows(int rows, int V, int J, int I, int so, int sj, __global const long *idx,
                          __global const store_t *x, __global store_t *out) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    const int o = r / J, j = r - o * J;
    __global const store_t *src = x + ((size_t)o * V + wrap(idx[(size_t)o * so + (size_t)j * sj], V)) * I;
    __global store_t *dst = out + (size_t)r * I;
    for (int i = 0; i < I; ++i) STORE(dst, i, LOAD(src, i));
}

__kernel void scatter(int n, int flags, int V, int J, int I, int so, int sj, int si, int skip,
                      __global const long *idx, __global const store_t *base, __global const store_t *src,
                      __global store_t *out) {
    int p = get_global_id(0);
    if (p >= n) return;
    int i = p % I, v = (p / I) % V, o = p / (I * V);  /* out (O, V, I) */
    real acc = (flags & SX_BASE) ? LOAD(base, p) : (real)0;
    if (v != skip) {
        size_t at = (size_t)o * so + (size_t)i * si;
        for (int j = 0; j < J; ++j) {
            if (wrap(idx[at + (size_t)j * sj], V) != v) continue;
            real s = LOAD(src, ((size_t)o * J + j) * I + i);
            acc = (flags & SX_ASSIGN) ? s : acc + s;
        }
    }
    STORE(out, p, acc);
}

__kernel void scatter_sorted(int n, int flags, int V, int J, int I, int per_element, int skip,
                             __global const int *lo, __global const int *hi, __global const int *order,
                             __global const store_t *base, __global const store_t *src, __global store_t *out) {
    int p = get_global_id(0);
    if (p >= n) return;
    int i = p % I, v = (p / I) % V, o = p / (I * V);  /* out (O, V, I) */
    real acc = (flags & SX_BASE) ? LOAD(base, p) : (real)0;
    if (v != skip) {
        int s = per_element ? (o * I + i) * V + v : v;
        for (int e = lo[s]; e < hi[s]; ++e) {
            size_t q = order[e];
            real x = LOAD(src, per_element ? q : ((size_t)o * J + q) * I + i);
            acc = (flags & SX_ASSIGN) ? x : acc + x;
        }
    }
    STORE(out, p, acc);
}

/* Loads this work-item's RADIX_K keys (digits in dig, -1 past n), counts them per digit into c and
 * cnt[d * IDX_WG + t], and scans cnt across work-items (inclusive) for every digit. */
inline void radix_rank(int n, int shift, __global const int *keys, int *dig, int *c, __local int *cnt) {
    int t = get_local_id(0);
    int first = (get_group_id(0) * IDX_WG + t) * RADIX_K;
    for (int d = 0; d < RADIX; ++d) c[d] = 0;
    for (int k = 0; k < RADIX_K; ++k) {
        dig[k] = first + k < n ? (keys[first + k] >> shift) & (RADIX - 1) : -1;
        if (dig[k] >= 0) c[dig[k]]++;
    }
    for (int d = 0; d < RADIX; ++d) cnt[d * IDX_WG + t] = c[d];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < IDX_WG; off <<= 1) {
        int add[RADIX];
        for (int d = 0; d < RADIX; ++d) add[d] = t >= off ? cnt[d * IDX_WG + t - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int d = 0; d < RADIX; ++d) cnt[d * IDX_WG + t] += add[d];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

__kernel __attribute__((reqd_work_group_size(IDX_WG, 1, 1)))
void radix_count(int n, int shift, __global const int *keys, __global int *hist) {
    __local int cnt[RADIX * IDX_WG];
    int dig[RADIX_K], c[RADIX];
    radix_rank(n, shift, keys, dig, c, cnt);
    int groups = get_num_groups(0), g = get_group_id(0);
    for (int d = get_local_id(0); d < RADIX; d += IDX_WG) hist[d * groups + g] = cnt[d * IDX_WG + IDX_WG - 1];
}

__kernel __attribute__((reqd_work_group_size(IDX_WG, 1, 1)))
void radix_scatter(int n, int shift, __global const int *keys, __global const int *vals,
                   __global const int *inc, __global int *keys_out, __global int *vals_out) {
    __local int cnt[RADIX * IDX_WG];
    int dig[RADIX_K], c[RADIX];
    radix_rank(n, shift, keys, dig, c, cnt);
    int t = get_local_id(0), groups = get_num_groups(0), g = get_group_id(0);
    int at[RADIX];
    for (int d = 0; d < RADIX; ++d) {
        int h = d * groups + g;  /* this tile's digit-d keys follow every earlier (digit, tile) */
        at[d] = (h > 0 ? inc[h - 1] : 0) + cnt[d * IDX_WG + t] - c[d];
    }
    int first = (g * IDX_WG + t) * RADIX_K;
    for (int k = 0; k < RADIX_K; ++k) {
        if (dig[k] < 0) continue;
        int pos = at[dig[k]]++;
        keys_out[pos] = keys[first + k];
        vals_out[pos] = vals[first + k];
    }
}

__kernel void segment_keys(int n, int V, int J, int I, int per_element, __global const long *idx,
                           __global int *keys, __global int *vals) {
    int q = get_global_id(0);
    if (q >= n) return;
    int v = wrap(idx[q], V);
    keys[q] = per_element ? ((q / (I * J)) * I + q % I) * V + v : v;  /* idx (O, J, I) */
    vals[q] = q;
}

__kernel void seg_bounds(int n, __global const int *keys, __global int *lo, __global int *hi) {
    int p = get_global_id(0);
    if (p >= n) return;
    int k = keys[p];
    if (p == 0 || keys[p - 1] != k) lo[k] = p;
    if (p == n - 1 || keys[p + 1] != k) hi[k] = p + 1;
}

__kernel void mask_positions(int n, __global const uchar *mask, __global const int *inc, __global long *out) {
    int p = get_global_id(0);
    if (p < n && mask[p]) out[inc[p] - 1] = p;
}

/* launched by kernels.launch_runs over the rows of d's innermost dimension (d.s0: cond's strides, d.s1: a's) */
__kernel void where_fill(int rows, int cols, int chunk, desc_t d, __global const uchar *cond,
                         __global const store_t *a, __global store_t *out) {
    FOR_RUNS(d, rows, cols, chunk, w, {
        __global store_t *o = out + (size_t)w.row * cols;
        for (int j = w.j0; j < w.j1; ++j)
            if (cond[w.o0 + j * w.t0]) STORE(o, j, LOAD(a, w.o1 + j * w.t1));
    });
}

__kernel void tri(int n, int R, int C, int diagonal, int upper, __global const store_t *x,
                  __global store_t *out) {
    int p = get_global_id(0);
    if (p >= n) return;
    int d = p % C - (p / C) % R;  /* col - row */
    int keep = upper ? d >= diagonal : d <= diagonal;
    STORE(out, p, keep ? LOAD(x, p) : (real)0);
}

__kernel __attribute__((reqd_work_group_size(IDX_WG, 1, 1)))
void scan(int L, int I, int blocks, int flags, __global const store_t *x, __global const real *carry,
          __global store_t *out, __global real *totals) {
    __local real tile[IDX_WG * SCAN_K];
    __local real part[IDX_WG];
    const int C = IDX_WG * SCAN_K;
    int t = get_local_id(0), g = get_group_id(0);
    int row = g / blocks, b = g % blocks;
    size_t base = (size_t)(row / I) * L * I + row % I;
    int p0 = b * C, n = min(C, L - p0);
    for (int e = t; e < C; e += IDX_WG) {
        int q = (flags & SC_REVERSE) ? L - 1 - (p0 + e) : p0 + e;
        tile[e] = e < n ? LOAD(x, base + (size_t)q * I) : (real)0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    real s = 0;
    for (int k = 0; k < SCAN_K; ++k) {
        s += tile[t * SCAN_K + k];
        tile[t * SCAN_K + k] = s;
    }
    part[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < IDX_WG; off <<= 1) {
        real v = t >= off ? part[t - off] : (real)0;
        barrier(CLK_LOCAL_MEM_FENCE);
        part[t] += v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (flags & SC_TOTALS) {
        if (t == 0) totals[(size_t)row * blocks + b] = part[IDX_WG - 1];
        return;
    }
    real c = (flags & SC_CARRY) && b > 0 ? carry[(size_t)row * blocks + b - 1] : (real)0;
    for (int e = t; e < n; e += IDX_WG) {
        int owner = e / SCAN_K;
        int q = (flags & SC_REVERSE) ? L - 1 - (p0 + e) : p0 + e;
        STORE(out, base + (size_t)q * I, c + (owner > 0 ? part[owner - 1] : (real)0) + tile[e]);
    }
}

/* a > b with NaN the largest value; a == b with NaN equal to NaN (v != v: also compiles for integers) */
#define GT(a, b) ((a) != (a) ? (b) == (b) : (a) > (b))
#define EQ(a, b) ((a) == (b) || ((a) != (a) && (b) != (b)))

/* does (a, ia) rank before (b, ib)? */
inline int before(int largest, real a, int ia, real b, int ib) {
    if (EQ(a, b)) return ia < ib;
    return largest ? GT(a, b) : GT(b, a);
}

__kernel __attribute__((reqd_work_group_size(IDX_WG, 1, 1)))
void topk(int L, int I, int k, int largest, __global const store_t *x, __global store_t *vals,
          __global long *idx) {
    __local real cache[TK_CAP];
    __local real bv[IDX_WG];
    __local int bi[IDX_WG];
    int t = get_local_id(0), row = get_group_id(0);
    size_t base = (size_t)(row / I) * L * I + row % I;
    size_t obase = (size_t)(row / I) * k * I + row % I;
    int cached = L <= TK_CAP;
    if (cached)
        for (int e = t; e < L; e += IDX_WG) cache[e] = LOAD(x, base + (size_t)e * I);
    barrier(CLK_LOCAL_MEM_FENCE);
    real pv = 0;
    int pi = -1;  /* the previous pick; -1: none yet */
    for (int r = 0; r < k; ++r) {
        real best = 0;
        int bidx = -1;
        for (int e = t; e < L; e += IDX_WG) {
            real v = cached ? cache[e] : LOAD(x, base + (size_t)e * I);
            if ((pi < 0 || before(largest, pv, pi, v, e)) && (bidx < 0 || before(largest, v, e, best, bidx))) {
                best = v;
                bidx = e;
            }
        }
        bv[t] = best;
        bi[t] = bidx;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = IDX_WG / 2; s > 0; s >>= 1) {
            if (t < s) {
                int j = bi[t + s];
                if (j >= 0 && (bi[t] < 0 || before(largest, bv[t + s], j, bv[t], bi[t]))) {
                    bv[t] = bv[t + s];
                    bi[t] = j;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        pv = bv[0];
        pi = bi[0];
        if (t == 0) {
            STORE(vals, obase + (size_t)r * I, pv);
            idx[obase + (size_t)r * I] = pi;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

#ifdef ROW_VW
#include "rowvec.h"

__kernel void scatter_cols(int chunks, int flags, int V, int J, int I, int skip, __global const long *idx,
                           __global const real *src, __global real *out) {
    const int p = get_global_id(0);
    if (p >= chunks) return;
    const int per_row = (I + ROW_VW - 1) / ROW_VW, c0 = p % per_row * ROW_VW, o = p / per_row;
    __global real *rows = out + (size_t)o * V * I + c0;
    __global const real *from = src + (size_t)o * J * I + c0;
    const int lanes = min(ROW_VW, I - c0);
    if (!(flags & SX_BASE)) {
        for (int v = 0; v < V; ++v) {
            if (lanes == ROW_VW) RV_STORE((realrv)0, 0, rows + (size_t)v * I);
            else for (int r = 0; r < lanes; ++r) rows[(size_t)v * I + r] = 0;
        }
    }
    for (int j = 0; j < J; ++j) {
        const int v = wrap(idx[j], V);
        if (v == skip) continue;
        __global real *at = rows + (size_t)v * I;
        __global const real *s = from + (size_t)j * I;
        if (lanes == ROW_VW) {
            const realrv x = RV_LOAD(0, s);
            RV_STORE((flags & SX_ASSIGN) ? x : RV_LOAD(0, at) + x, 0, at);
        } else {
            for (int r = 0; r < lanes; ++r) at[r] = (flags & SX_ASSIGN) ? s[r] : at[r] + s[r];
        }
    }
}
#endif
