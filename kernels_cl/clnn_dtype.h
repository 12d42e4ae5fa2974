/* clnn_dtype.h: the element type shared by every kernel file (included, never built alone).
 *
 * Defines (the host prepends them; the defaults give float32):
 *   STORE_T     storage type of tensors in global memory: half, float or double
 *   REAL_T      arithmetic type: float for half and float storage, double for double
 *   STORE_HALF  1 when STORE_T is half: loads and stores go through vload_half/vstore_half,
 *               core OpenCL that needs no cl_khr_fp16
 *   USE_FP64    1 when any type is double
 *
 * Provides: store_t, real, LOAD(p, i) -> real, STORE(p, i, v).
 */
#ifndef CLNN_DTYPE_H
#define CLNN_DTYPE_H

#ifndef STORE_T
#define STORE_T float
#endif
#ifndef REAL_T
#define REAL_T float
#endif
#ifndef STORE_HALF
#define STORE_HALF 0
#endif
#ifndef USE_FP64
#define USE_FP64 0
#endif

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

typedef STORE_T store_t;
typedef REAL_T real;

#if STORE_HALF
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half((float)(v), (i), (p))
#else
#define LOAD(p, i) ((real)(p)[i])
#define STORE(p, i, v) ((p)[i] = (store_t)(v))
#endif

#endif
