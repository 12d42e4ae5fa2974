/* copy.cl: strided gather/scatter with type conversion.
 *
 * dst[dst_off + sum_k idx_k * sd[k]] = (DST_T) src[src_off + sum_k idx_k * ss[k]] for every index
 * of `shape` (outermost first). Serves contiguous(), permute/transpose, slicing, the scatter of a
 * slice's gradient into a larger tensor, and astype().
 * transpose: dst (B, P, Q) = src (B, Q, P) with its last two axes swapped, both contiguous from their
 * offsets: the strided copy's most common GPU-hostile case (a permute that moves the innermost axis).
 * A TT x TT tile goes through local memory, so both the reads and the writes are coalesced; the tile's
 * rows are padded by one element against bank conflicts. Work-group (TT, TR); each work-item moves
 * TT / TR elements of a tile; global (ceil(Q / TT) * TT, ceil(P / TT) * TR, B).
 * Defines:
 *   SRC_T, DST_T   storage types (half, float, double, int, long, uchar; ushort for bfloat16)
 *   SRC_HALF, DST_HALF   1 when the type is half (clnn_dtype.h's HALF_LOAD / HALF_STORE)
 *   SRC_BF16, DST_BF16   1 when the type is bfloat16 converted to or from another type (a bfloat16 to
 *                  bfloat16 copy moves the ushort words as they are)
 *   DST_BOOL       1 when the destination is bool (stored as uchar 0/1)
 *   USE_FP64       1 when either type is double
 *   TT, TR         transpose: tile side and work-group rows (TT % TR == 0)
 *   TB             transpose_blocks: block side
 */
#include "clnn_shape.h"
#include "clnn_dtype.h"
#ifndef SRC_T
#define SRC_T float
#endif
#ifndef DST_T
#define DST_T float
#endif
#ifndef SRC_HALF
#define SRC_HALF 0
#endif
#ifndef DST_HALF
#define DST_HALF 0
#endif
#ifndef SRC_BF16
#define SRC_BF16 0
#endif
#ifndef DST_BF16
#define DST_BF16 0
#endif
#ifndef DST_BOOL
#define DST_BOOL 0
#endif

#if SRC_HALF
#define READ HALF_LOAD
#elif SRC_BF16
#define READ(p, i) bf16_to_float((p)[i])
#else
#define READ(p, i) ((p)[i])
#endif

#if DST_HALF
#define WRITE HALF_STORE
#elif DST_BF16
#define WRITE(p, i, v) ((p)[i] = float_to_bf16((float)(v)))
#elif DST_BOOL
#define WRITE(p, i, v) ((p)[i] = (uchar)((v) != 0))
#else
#define WRITE(p, i, v) ((p)[i] = (DST_T)(v))
#endif

/* launched by kernels.launch_runs over the rows of d's innermost dimension (d.s0: src's strides, d.s1: dst's): each
 * row's offsets found once (no division per element), its run copied in a loop the compiler vectorizes where both
 * strides are 1 (CPUs) */
__kernel void copy(int rows, int cols, int chunk, desc_t d, __global const SRC_T *src, int src_off,
                   __global DST_T *dst, int dst_off) {
    FOR_RUNS(d, rows, cols, chunk, w, {
        const int os = w.o0 + src_off, od = w.o1 + dst_off;
        if (w.t0 == 1 && w.t1 == 1)
            for (int j = w.j0; j < w.j1; ++j) WRITE(dst, od + j, READ(src, os + j));
        else
            for (int j = w.j0; j < w.j1; ++j) WRITE(dst, od + j * w.t1, READ(src, os + j * w.t0));
    });
}

#ifndef TT
#define TT 32
#endif
#ifndef TR
#define TR 8
#endif
#if USE_FP64
typedef double tile_t;
#else
typedef float tile_t;
#endif

__kernel __attribute__((reqd_work_group_size(TT, TR, 1)))
void transpose(int P, int Q, __global const SRC_T *src, int src_off, __global DST_T *dst, int dst_off) {
    __local tile_t tile[TT][TT + 1];
    int tx = get_local_id(0), ty = get_local_id(1);
    int q0 = get_group_id(0) * TT, p0 = GROUP_ID(1) * TT;
    size_t plane = (size_t)get_global_id(2) * P * Q;
    for (int k = 0; k < TT; k += TR) {            /* read rows q of src, along p */
        int q = q0 + ty + k, p = p0 + tx;
        if (q < Q && p < P) tile[ty + k][tx] = READ(src, src_off + plane + (size_t)q * P + p);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TT; k += TR) {            /* write rows p of dst, along q */
        int p = p0 + ty + k, q = q0 + tx;
        if (p < P && q < Q) WRITE(dst, dst_off + plane + (size_t)p * Q + q, tile[tx][ty + k]);
    }
}

#ifndef TB
#define TB 32
#endif
/* transpose_blocks (CPUs): the same copy, a work-item per TB x TB block of dst, src read down its columns within the
 * block (its TB rows stay in cache): PoCL runs transpose's barriers as loops over the work-group (2048^2: 14.7 ->
 * 4.2 ms) */
__kernel void transpose_blocks(int B, int P, int Q, __global const SRC_T *src, int src_off, __global DST_T *dst,
                               int dst_off) {
    const int np = (P + TB - 1) / TB, nq = (Q + TB - 1) / TB;
    const size_t e = get_global_id(0);
    if (e >= (size_t)B * np * nq) return;
    const int b = e / ((size_t)np * nq), r = e - (size_t)b * np * nq, p0 = r / nq * TB, q0 = r % nq * TB;
    const int p1 = min(P, p0 + TB), q1 = min(Q, q0 + TB);
    const size_t plane = (size_t)b * P * Q;
    __global const SRC_T *from = src + src_off + plane;
    __global DST_T *to = dst + dst_off + plane;
    for (int p = p0; p < p1; ++p)
        for (int q = q0; q < q1; ++q) WRITE(to, (size_t)p * Q + q, READ(from, (size_t)q * P + p));
}
