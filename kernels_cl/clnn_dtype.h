/* clnn_dtype.h: the element type shared by every kernel file (included, never built alone).
 *
 * Defines (the host prepends them; the defaults give float32):
 *   STORE_T     storage type of tensors in global memory: half, bf16, float or double
 *   REAL_T      arithmetic type: float for half, bf16 and float storage, double for double
 *   STORE_HALF  1 when STORE_T is half and REAL_T float: loads and stores go through
 *               vload_half/vstore_half, core OpenCL that needs no cl_khr_fp16
 *   STORE_BF16  1 when STORE_T is bf16 (bfloat16: the upper 16 bits of a float32) and REAL_T float:
 *               loads widen exactly, stores round to nearest even and keep NaN a NaN (sign kept,
 *               payload made the quiet 0x7FC0, as ml_dtypes does). bf16 is a struct, so a kernel
 *               that reads or writes elements without LOAD/STORE fails to build instead of
 *               silently converting the raw 16-bit word.
 *   HALF_SOFT   1: half loads and stores convert in integer and float arithmetic inline (round to nearest
 *               even, as vstore_half; NaN stays NaN) instead of calling vload_half/vstore_half, which are
 *               out-of-line calls on some CPU runtimes (PoCL: half GEMMs ran at half float32's speed); on an
 *               x86 target with F16C (__F16C__) its widenings and vector roundings are those instructions
 *   HALF_CONVERT 1 on a device with cl_khr_fp16 (kernels.program defines it from the device): gemm.h widens and
 *               rounds half vectors with convert_float / convert_half_rte (one instruction each on CPUs with
 *               F16C), not vload_half / vstore_half through private memory (Intel's runtime: an autocast conv
 *               rounding float32 weights in its loads 114 -> 104 ms); HALF_SOFT takes precedence
 *   USE_FP64    1 when any type is double
 *   USE_FP16    1 for half arithmetic (STORE_T = REAL_T = half) on a device with cl_khr_fp16
 *
 * Provides: store_t, real, real4, param_t (the type of scalar kernel arguments: double with USE_FP64, else
 * float), LOAD(p, i) -> real, STORE(p, i, v), LOAD4(p, i) -> real4, STORE4(p, i, v) for the i-th group
 * of four elements (p + 4 i; element-aligned, as vloadn), BIG (+infinity of real: the identity of min,
 * -BIG of max), bf16_to_float / float_to_bf16 (and their 4-wide forms), HALF_LOAD(p, i) / HALF_STORE(p, i, v)
 * (a global half array's elements as float) for kernels with their own type defines (copy.cl, norm.cl),
 * VEC_LANE_IO, IMIN and IMAX (below).
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
#ifndef STORE_BF16
#define STORE_BF16 0
#endif
#ifndef HALF_SOFT
#define HALF_SOFT 0
#endif
#ifndef HALF_CONVERT
#define HALF_CONVERT 0
#endif
#ifndef USE_FP64
#define USE_FP64 0
#endif
#ifndef USE_FP16
#define USE_FP16 0
#endif
#ifndef MATH_BUILTIN
#define MATH_BUILTIN 0
#endif
#ifndef PREFETCH
#define PREFETCH 0
#endif
/* VEC_LANES = 1: kernels that move whole vectors (rowvec.h's rows, elementwise.cl's maps) fill and empty them lane by
 * lane through a union (VEC_LANE_IO), which CPU compilers make one vector move, instead of calling vloadn / vstoren:
 * PoCL calls those out of line (row sums 1.7-2.4x slower), where Intel's runtime, which vectorizes across
 * work-items, ran row sums lane by lane 2.6-3x slower */
#ifndef VEC_LANES
#define VEC_LANES 0
#endif
/* VEC_LANE_IO(name, V, T, N): for N-vectors V of T, the union name_lanes (.v, .s[N]), and name_load(i, p) and
 * name_store(v, i, p), the i-th vector at global p (element-aligned) moved lane by lane through it: the VEC_LANES
 * paths', and Winograd's transforms' on every runtime */
#define VEC_LANE_IO(name, V, T, N)                                                                                   \
    typedef union {                                                                                                  \
        V v;                                                                                                         \
        T s[N];                                                                                                      \
    } CLNN_CAT(name, _lanes);                                                                                        \
    inline V CLNN_CAT(name, _load)(size_t i, __global const T *p) {                                                  \
        CLNN_CAT(name, _lanes) l;                                                                                    \
        _Pragma("unroll") for (int q = 0; q < (N); ++q) l.s[q] = p[i * (N) + q];                                     \
        return l.v;                                                                                                  \
    }                                                                                                                \
    inline void CLNN_CAT(name, _store)(V v, size_t i, __global T *p) {                                               \
        const CLNN_CAT(name, _lanes) l = {v};                                                                        \
        _Pragma("unroll") for (int q = 0; q < (N); ++q) p[i * (N) + q] = l.s[q];                                     \
    }

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double param_t;
#else
typedef float param_t;
#endif
#if USE_FP16 || HALF_CONVERT
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

#define CLNN_CAT_(a, b) a##b
#define CLNN_CAT(a, b) CLNN_CAT_(a, b)

typedef struct { ushort bits; } bf16;

inline float bf16_to_float(ushort h) { return as_float((uint)h << 16); }
inline float4 bf16_to_float4(ushort4 h) { return as_float4(convert_uint4(h) << 16); }

inline ushort float_to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)(((u >> 16) & 0x8000u) | 0x7FC0u);  /* NaN */
    return (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  /* round to nearest, ties to even */
}

inline ushort4 float4_to_bf16(float4 f) {
    uint4 u = as_uint4(f);
    uint4 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint4 nan = ((u >> 16) & 0x8000u) | 0x7FC0u;
    return convert_ushort4((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

/* float16 in integer and float arithmetic, n elements wide (n empty: scalar), with conditional expressions, not
 * branches, so that CPU compilers vectorize them: half_bits_to_float<n> (HALF_SOFT_WIDEN; exact, subnormals need
 * float denormals) and float_to_half_bits<n> (HALF_SOFT_NARROW; round to nearest even, 65520 and up: infinity,
 * NaN stays a quiet NaN). Not the select built-in: PoCL calls it out of line (a scalar widening of 8M halves took
 * 5.0 ms through it, 0.55 ms written as `c ? b : a`; eight at a time 1.57 against 1.04) */
#define HALF_SOFT_WIDEN(n)                                                                                  \
    inline CLNN_CAT(float, n) CLNN_CAT(half_bits_to_float, n)(CLNN_CAT(ushort, n) h) {                      \
        const CLNN_CAT(uint, n) a = CLNN_CAT(convert_uint, n)(h & (ushort)0x7FFFu) << 13;                  \
        const CLNN_CAT(uint, n) f = CLNN_CAT(as_uint, n)(CLNN_CAT(as_float, n)(a) * 0x1p112f); /* 15->127 */ \
        return CLNN_CAT(as_float, n)(CLNN_CAT(convert_uint, n)(h & (ushort)0x8000u) << 16 |                \
                                     (a >= 0x0F800000u ? a | 0x7F800000u : f)); /* infinity, NaN */        \
    }
#define HALF_SOFT_NARROW(n)                                                                                 \
    inline CLNN_CAT(ushort, n) CLNN_CAT(float_to_half_bits, n)(CLNN_CAT(float, n) f) {                      \
        const CLNN_CAT(uint, n) u = CLNN_CAT(as_uint, n)(f), a = u & 0x7FFFFFFFu, r = a - 0x38000000u;      \
        const CLNN_CAT(uint, n) normal = (r + 0x0FFFu + ((r >> 13) & 1u)) >> 13; /* rebiased 127 -> 15 */  \
        const CLNN_CAT(uint, n) small = /* subnormal: the add rounds to steps of 2^-24 */                  \
            CLNN_CAT(as_uint, n)(CLNN_CAT(as_float, n)(a) + 0.5f) - 0x3F000000u;                            \
        CLNN_CAT(uint, n) h = a >= 0x38800000u ? normal : small;                                            \
        h = a >= 0x477FF000u ? (CLNN_CAT(uint, n))0x7C00u : h;                                              \
        h = a > 0x7F800000u ? 0x7E00u | (a >> 13 & 0x3FFu) : h; /* NaN: quiet, top payload bits */         \
        return CLNN_CAT(convert_ushort, n)((u >> 16 & 0x8000u) | h);                                        \
    }
#if HALF_SOFT && defined(__F16C__)
/* where the compiler targets an x86 CPU with F16C (PoCL names its target CPU; clang then defines __F16C__), the
 * widenings are vcvtph2ps, which clang writes as a plain fpext that the vectorizers widen (fewer than 8 pad a
 * vector with zeros), and 8 or 16 narrowings at once are vcvtps2ph with round to nearest even: exact on
 * subnormals, NaN kept a quiet NaN with its top payload bits, as the arithmetic above. Fewer narrowings stay in
 * that arithmetic, which a runtime vectorizes across work-items; the instruction's intrinsic would stop it (PoCL's
 * Winograd filter transform, rounding float32 taps one per work-item: 4.8 -> 61 ms). PoCL, 8M halves: widened to
 * float32 3.8 -> 0.9 ms, added 2.9 -> 2.4 ms; a mixed_float16 AlexNet step (batch 16) 977 -> 859 ms. */
typedef short clnn_v8hi __attribute__((vector_size(16)));
typedef float clnn_v8sf __attribute__((vector_size(32)));
inline float8 half_bits_to_float8(ushort8 h) {
    return __builtin_bit_cast(float8, __builtin_ia32_vcvtph2ps256(__builtin_bit_cast(clnn_v8hi, h)));
}
inline float16 half_bits_to_float16(ushort16 h) {
    return (float16)(half_bits_to_float8(h.lo), half_bits_to_float8(h.hi));
}
inline float4 half_bits_to_float4(ushort4 h) { return half_bits_to_float8((ushort8)(h, (ushort4)0)).lo; }
inline float2 half_bits_to_float2(ushort2 h) { return half_bits_to_float4((ushort4)(h, (ushort2)0)).lo; }
inline float half_bits_to_float(ushort h) { return half_bits_to_float4((ushort4)(h, 0, 0, 0)).x; }
inline ushort8 float_to_half_bits8(float8 f) {
    return __builtin_bit_cast(ushort8, __builtin_ia32_vcvtps2ph256(__builtin_bit_cast(clnn_v8sf, f), 0));
}
inline ushort16 float_to_half_bits16(float16 f) {
    return (ushort16)(float_to_half_bits8(f.lo), float_to_half_bits8(f.hi));
}
HALF_SOFT_NARROW()
HALF_SOFT_NARROW(2)
HALF_SOFT_NARROW(4)
#elif HALF_SOFT
HALF_SOFT_WIDEN()
HALF_SOFT_WIDEN(2)
HALF_SOFT_WIDEN(4)
HALF_SOFT_WIDEN(8)
HALF_SOFT_WIDEN(16)
HALF_SOFT_NARROW()
HALF_SOFT_NARROW(2)
HALF_SOFT_NARROW(4)
HALF_SOFT_NARROW(8)
HALF_SOFT_NARROW(16)
#endif
#if HALF_SOFT
#define HALF_LOAD(p, i) half_bits_to_float(((__global const ushort *)(p))[i])
#define HALF_STORE(p, i, v) (((__global ushort *)(p))[i] = float_to_half_bits((float)(v)))
#else
#define HALF_LOAD(p, i) vload_half((i), (p))
#define HALF_STORE(p, i, v) vstore_half((float)(v), (i), (p))
#endif

/* IMIN(a, b), IMAX(a, b): integer min and max as selects, in per-element code: PoCL calls min and max out of line,
 * which keeps its loops scalar (avg_pool2d's gradient over 8x96x55^2: 23 -> 9.5 ms) */
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))

/* whether v is finite, by its exponent bits: PoCL calls isfinite out of line (8M floats checked and scaled in
 * 5.2 ms through it, 1.3 so) */
#if USE_FP64
#define FINITE(v) ((as_ulong((double)(v)) & 0x7FF0000000000000UL) != 0x7FF0000000000000UL)
#else
#define FINITE(v) ((as_uint((float)(v)) & 0x7F800000u) != 0x7F800000u)
#endif

/* SQRT(x), RSQRT(x), FMA(a, b, c): a scalar real's square root, its reciprocal and the fused multiply-add. PoCL
 * calls sqrt, rsqrt and fma out of line, which stops its vectorizing across work-items; clang's builtins are the
 * correctly rounded instructions (MATH_BUILTIN, PoCL: Adam over 16M floats 22 -> 7.7 ms; batch norm's input
 * gradient over 16x96x27x27 2.3 -> 0.11 ms) */
#if MATH_BUILTIN && USE_FP64
#define SQRT(x) __builtin_sqrt(x)
#define RSQRT(x) (1 / __builtin_sqrt(x))
#define FMA(a, b, c) __builtin_fma(a, b, c)
#elif MATH_BUILTIN
#define SQRT(x) __builtin_sqrtf(x)
#define RSQRT(x) (1 / __builtin_sqrtf(x))
#define FMA(a, b, c) __builtin_fmaf(a, b, c)
#else
#define SQRT(x) sqrt(x)
#define RSQRT(x) rsqrt(x)
#define FMA(a, b, c) fma(a, b, c)
#endif

/* PREFETCH_AT(p): with PREFETCH, clang's hint to bring p's cache line in (OpenCL's prefetch() does nothing on the
 * CPU runtimes); else nothing. It never faults, so p may lie past its buffer (gemm.h's staging asks for the next
 * k-slice of each run it loads: Intel's runtime on Zen 3, whose prefetchers lose a tile's hundreds of rows) */
#if PREFETCH
#define PREFETCH_AT(p) __builtin_prefetch(p)
#else
#define PREFETCH_AT(p) ((void)0)
#endif

typedef STORE_T store_t;
typedef REAL_T real;
typedef CLNN_CAT(REAL_T, 2) real2;
typedef CLNN_CAT(REAL_T, 4) real4;

#if USE_FP64
#define BIG HUGE_VAL
#else
#define BIG INFINITY
#endif

#if STORE_BF16
#define LOAD(p, i) bf16_to_float((p)[i].bits)
#define STORE(p, i, v) ((p)[i].bits = float_to_bf16((float)(v)))
#define LOAD4(p, i) bf16_to_float4((ushort4)((p)[4 * (i)].bits, (p)[4 * (i) + 1].bits, (p)[4 * (i) + 2].bits, \
                                             (p)[4 * (i) + 3].bits))
#define STORE4(p, i, v) do { ushort4 bf16_w_ = float4_to_bf16(v); (p)[4 * (i)].bits = bf16_w_.s0; \
    (p)[4 * (i) + 1].bits = bf16_w_.s1; (p)[4 * (i) + 2].bits = bf16_w_.s2; \
    (p)[4 * (i) + 3].bits = bf16_w_.s3; } while (0)
#elif STORE_HALF && HALF_SOFT
#define LOAD HALF_LOAD
#define STORE HALF_STORE
#define LOAD4(p, i) half_bits_to_float4(vload4((i), (__global const ushort *)(p)))
#define STORE4(p, i, v) vstore4(float_to_half_bits4(v), (i), (__global ushort *)(p))
#elif STORE_HALF
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
