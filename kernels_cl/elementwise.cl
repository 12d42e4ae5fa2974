/* elementwise.cl: unary, scalar, binary (broadcasting) and comparison maps, and unary derivatives.
 *
 * Layout: tensors are contiguous. unary, unary_grad and binary_same (operands of the output's shape)
 * map EW_VEC neighbouring elements per work-item as one vector (realv): work-item i takes elements
 * EW_VEC i .. EW_VEC i + EW_VEC - 1 with vector loads and stores (the one at n / EW_VEC the tail): wide,
 * coalesced accesses, no index arithmetic, and unary.h's maps on whole vectors. binary and compare read a and b
 * through a descriptor (desc_t): the output's shape (outermost first, up to MAXD dims after the host merged what
 * it could) and the element strides of a (d.s0) and b (d.s1) in it, 0 where an operand is broadcast; they are
 * launched by runs of the output's rows (kernels.launch_runs).
 * Defines: the element type (clnn_dtype.h); EW_VEC (elements per work-item, a tuning knob: 1 or 4, or 8 or 16
 * but for bfloat16 storage; Intel's CPU compiler vectorizes across work-items itself); float16
 * runs in half precision (USE_FP16) on devices with cl_khr_fp16, else in float32 between half loads and
 * stores. The op is a run-time code (U_* in unary.h, B_*, C_* below; the host reads their values from
 * these files), uniform across a launch, so one build serves every op; with EW_OP defined (tuning's EW_STATIC,
 * CPUs) the op is that constant instead and the argument is ignored: CPU compilers vectorize a map only when its
 * switch folds away (PoCL, x * 2 over 7M floats: 7.3 -> 1.6 ms), at one program per op.
 */
#include "clnn_dtype.h"
#include "clnn_shape.h"

#ifndef EW_VEC
#define EW_VEC 4
#endif
#if EW_VEC == 1
typedef real realv;
#define LOADV LOAD
#define STOREV(p, i, v) STORE(p, i, v)
#elif EW_VEC == 4
typedef real4 realv;
#define LOADV LOAD4
#define STOREV STORE4
#elif STORE_BF16
#error "EW_VEC 8 or 16 needs float, double or half storage"
#elif STORE_HALF && HALF_SOFT
typedef CLNN_CAT(float, EW_VEC) realv;
#if VEC_LANES
VEC_LANE_IO(bits, CLNN_CAT(ushort, EW_VEC), ushort, EW_VEC)
#define LOAD_BITS(i, p) bits_load(i, p)
#define STORE_BITS(v, i, p) bits_store(v, i, p)
#else
#define LOAD_BITS(i, p) CLNN_CAT(vload, EW_VEC)(i, p)
#define STORE_BITS(v, i, p) CLNN_CAT(vstore, EW_VEC)(v, i, p)
#endif
#define LOADV(p, i) CLNN_CAT(half_bits_to_float, EW_VEC)(LOAD_BITS(i, (__global const ushort *)(p)))
#define STOREV(p, i, v) STORE_BITS(CLNN_CAT(float_to_half_bits, EW_VEC)(v), i, (__global ushort *)(p))
#elif STORE_HALF
typedef CLNN_CAT(float, EW_VEC) realv;
#define LOADV(p, i) CLNN_CAT(vload_half, EW_VEC)(i, p)
#define STOREV(p, i, v) CLNN_CAT(vstore_half, EW_VEC)(v, i, p)
#elif VEC_LANES
typedef CLNN_CAT(REAL_T, EW_VEC) realv;
VEC_LANE_IO(ew, realv, real, EW_VEC)
#define LOADV(p, i) ew_load(i, p)
#define STOREV(p, i, v) ew_store(v, i, p)
#else
typedef CLNN_CAT(REAL_T, EW_VEC) realv;
#define LOADV(p, i) CLNN_CAT(vload, EW_VEC)(i, p)
#define STOREV(p, i, v) CLNN_CAT(vstore, EW_VEC)(v, i, p)
#endif
#define UNARY_T realv
#include "unary.h"

#ifdef EW_OP
#define OP EW_OP
#else
#define OP op
#endif

/* The contiguous maps: work-item i takes elements EW_VEC i .. EW_VEC i + EW_VEC - 1 as one realv; the last one,
 * i = n / EW_VEC, the n % EW_VEC left (its other lanes compute on zeros and are not stored). */
inline bool in_map(size_t i, int n) { return i * EW_VEC < (size_t)n; }

inline realv load_group(__global const store_t *p, size_t i, int n) {
    if ((i + 1) * EW_VEC <= (size_t)n) return LOADV(p, i);
    real lanes[EW_VEC] = {0}; /* the last group's: lanes to a constant count, so that they stay in registers */
#pragma unroll
    for (int q = 0; q < EW_VEC; ++q)
        if (i * EW_VEC + q < (size_t)n) lanes[q] = LOAD(p, i * EW_VEC + q);
#if EW_VEC == 1
    return lanes[0];
#else
    return CLNN_CAT(vload, EW_VEC)(0, lanes);
#endif
}

inline void store_group(__global store_t *p, size_t i, int n, realv v) {
    if ((i + 1) * EW_VEC <= (size_t)n) {
        STOREV(p, i, v);
        return;
    }
    real lanes[EW_VEC];
#if EW_VEC == 1
    lanes[0] = v;
#else
    CLNN_CAT(vstore, EW_VEC)(v, 0, lanes);
#endif
#pragma unroll
    for (int q = 0; q < EW_VEC; ++q)
        if (i * EW_VEC + q < (size_t)n) STORE(p, i * EW_VEC + q, lanes[q]);
}

#ifdef KERNEL_unary
__kernel void unary(int op, int n, __global const store_t *x, __global store_t *y, param_t a, param_t b) {
    const size_t i = get_global_id(0);
    if (in_map(i, n)) store_group(y, i, n, apply_unary(OP, load_group(x, i, n), (real)a, (real)b));
}
#endif

/* gx = gy * f'(x) */
#ifdef KERNEL_unary_grad
__kernel void unary_grad(int op, int n, __global const store_t *x, __global const store_t *y,
                         __global const store_t *gy, __global store_t *gx, param_t a, param_t b) {
    const size_t i = get_global_id(0);
    if (in_map(i, n))
        store_group(gx, i, n, load_group(gy, i, n) * unary_derivative(OP, load_group(x, i, n), load_group(y, i, n),
                                                                         (real)a, (real)b));
}
#endif

/* binary out = a (op) b */
#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3
#define B_POW 4
#define B_MAX 5
#define B_MIN 6
/* comparisons, written as uchar 0/1 */
#define C_EQ 0
#define C_NE 1
#define C_LT 2
#define C_LE 3
#define C_GT 4
#define C_GE 5

/* the run's loops, EXPR on x_ = a and y_ = b of output element i_; the strides common on CPUs are constants, so
 * those loops vectorize (a row of a with b's, a row of a with one b, and the reverse) */
#define BCAST_LOOPS(EXPR)                                                                                 \
    if (sa == 1 && sb == 1)                                                                               \
        for (int j = j0; j < j1; ++j) { BCAST_AT(ia + j, ib + j); EXPR; }                                 \
    else if (sa == 1 && sb == 0)                                                                          \
        for (int j = j0; j < j1; ++j) { BCAST_AT(ia + j, ib); EXPR; }                                     \
    else if (sa == 0 && sb == 1)                                                                          \
        for (int j = j0; j < j1; ++j) { BCAST_AT(ia, ib + j); EXPR; }                                     \
    else                                                                                                  \
        for (int j = j0; j < j1; ++j) { BCAST_AT(ia + j * sa, ib + j * sb); EXPR; }
#define BCAST_AT(ka, kb) const real x_ = LOAD(a, ka), y_ = LOAD(b, kb); const size_t i_ = o + j
/* BCAST_LOOPS(EXPR) over each run of this work-item (kernels.launch_runs), with the operands' offsets at its row */
#define BCAST_RUNS(EXPR)                                                                                  \
    FOR_RUNS(d, rows, cols, chunk, w, {                                                                   \
        const int j0 = w.j0, j1 = w.j1, ia = w.o0, ib = w.o1, sa = w.t0, sb = w.t1;                       \
        const size_t o = (size_t)w.row * cols;                                                            \
        BCAST_LOOPS(EXPR)                                                                                 \
    })

/* out = x (op) y for T, real or realv (with a vector condition, c ? a : b selects per lane) */
#define BINARY(T, NAME)                                                                 \
    inline T NAME(int op, T x, T y) {                                                   \
        switch (op) {                                                                   \
        case B_ADD: return x + y;                                                       \
        case B_SUB: return x - y;                                                       \
        case B_MUL: return x * y;                                                       \
        case B_DIV: return x / y;                                                       \
        case B_POW: return pow(x, y);                                                   \
        case B_MAX: return isnan(x) || isnan(y) ? x + y : fmax(x, y);                   \
        case B_MIN: return isnan(x) || isnan(y) ? x + y : fmin(x, y);                   \
        }                                                                               \
        return (T)NAN;                                                                  \
    }
BINARY(real, apply_binary)
#if EW_VEC > 1
BINARY(realv, apply_binary_v)
#else
#define apply_binary_v apply_binary
#endif

/* out = a (op) b for operands of the output's shape */
#ifdef KERNEL_binary_same
__kernel void binary_same(int op, int n, __global const store_t *a, __global const store_t *b,
                          __global store_t *out) {
    const size_t i = get_global_id(0);
    if (in_map(i, n)) store_group(out, i, n, apply_binary_v(OP, load_group(a, i, n), load_group(b, i, n)));
}
#endif

#ifdef KERNEL_binary
__kernel void binary(int rows, int cols, int chunk, desc_t d, int op, __global const store_t *a,
                     __global const store_t *b, __global store_t *out) {
    BCAST_RUNS(STORE(out, i_, apply_binary(OP, x_, y_)));
}
#endif

inline int apply_compare(int op, real x, real y) {
    switch (op) {
    case C_EQ: return x == y;
    case C_NE: return x != y;
    case C_LT: return x < y;
    case C_LE: return x <= y;
    case C_GT: return x > y;
    case C_GE: return x >= y;
    }
    return 0;
}

#ifdef KERNEL_compare
__kernel void compare(int rows, int cols, int chunk, desc_t d, int op, __global const store_t *a,
                      __global const store_t *b, __global uchar *out) {
    BCAST_RUNS(out[i_] = (uchar)apply_compare(OP, x_, y_));
}
#endif
