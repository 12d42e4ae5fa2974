/* clnn_dtype.h: the element type shared by every kernel file (included, never built alone).
 *
 * Defines (the host prepends them; the defaults give float32):
 *   STORE_T     storage type of tensors in global memory: half, float or double
 *   REAL_T      arithmetic type: float for half and float storage, double for double
 *   STORE_HALF  1 when STORE_T is half and REAL_T float: loads and stores go through
 *               vload_half/vstore_half, core OpenCL that needs no cl_khr_fp16
 *   USE_FP64    1 when any type is double
 *   USE_FP16    1 for half arithmetic (STORE_T = REAL_T = half) on a device with cl_khr_fp16
 *
 * Provides: store_t, real, real4, param_t (the type of scalar kernel arguments: double with USE_FP64, else
 * float), LOAD(p, i) -> real, STORE(p, i, v), LOAD4(p, i) -> real4, STORE4(p, i, v) for the i-th group
 * of four elements (p + 4 i; element-aligned, as vloadn), BIG (+infinity of real: the identity of min,
 * -BIG of max).
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
#ifndef USE_FP16
#define USE_FP16 0
#endif

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double param_t;
#else
typedef float param_t;
#endif
#if USE_FP16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

#define CLNN_CAT_(a, b) a##b
#define CLNN_CAT(a, b) CLNN_CAT_(a, b)

typedef STORE_T store_t;
typedef REAL_T real;
typedef CLNN_CAT(REAL_T, 4) real4;

#if USE_FP64
#define BIG HUGE_VAL
#else
#define BIG INFINITY
#endif

#if STORE_HALF
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half((float)(v), (i), (p))
#define LOAD4(p, i) vload_half4((i), (p))
#define STORE4(p, i, v) vstore_half4((v), (i), (p))
#else
#define LOAD(p, i) ((real)(p)[i])
#define STORE(p, i, v) ((p)[i] = (store_t)(v))
#define LOAD4(p, i) vload4((i), (p))
#define STORE4(p, i, v) vstore4((v), (i), (p))
#endif

#endif
