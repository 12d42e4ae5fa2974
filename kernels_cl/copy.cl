/* copy.cl: strided gather/scatter with type conversion.
 *
 * dst[dst_off + sum_k idx_k * sd[k]] = (DST_T) src[src_off + sum_k idx_k * ss[k]] for every index
 * of `shape` (outermost first). Serves contiguous(), permute/transpose, slicing, the scatter of a
 * slice's gradient into a larger tensor, and astype().
 * Defines:
 *   SRC_T, DST_T   storage types (half, float, double, int, long, uchar)
 *   SRC_HALF, DST_HALF   1 when the type is half (vload_half / vstore_half)
 *   DST_BOOL       1 when the destination is bool (stored as uchar 0/1)
 *   USE_FP64       1 when either type is double
 */
#include "clnn_shape.h"
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
#ifndef DST_BOOL
#define DST_BOOL 0
#endif
#ifndef USE_FP64
#define USE_FP64 0
#endif
#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#if SRC_HALF
#define READ(p, i) vload_half((i), (p))
#else
#define READ(p, i) ((p)[i])
#endif

#if DST_HALF
#define WRITE(p, i, v) vstore_half((float)(v), (i), (p))
#elif DST_BOOL
#define WRITE(p, i, v) ((p)[i] = (uchar)((v) != 0))
#else
#define WRITE(p, i, v) ((p)[i] = (DST_T)(v))
#endif

typedef struct { int ndim; int shape[MAXD]; int ss[MAXD]; int sd[MAXD]; } Strides;

__kernel void copy(int n, Strides d, __global const SRC_T *src, int src_off, __global DST_T *dst,
                   int dst_off) {
    int i = get_global_id(0);
    if (i >= n) return;
    int os = src_off, od = dst_off;
    for (int k = d.ndim - 1; k >= 0; --k) {
        int idx = i % d.shape[k];
        i /= d.shape[k];
        os += idx * d.ss[k];
        od += idx * d.sd[k];
    }
    WRITE(dst, od, READ(src, os));
}
