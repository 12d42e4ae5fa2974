/* elementwise.cl: unary, scalar, binary (broadcasting) and comparison maps, and unary derivatives.
 *
 * Layout: tensors are contiguous. unary, unary_grad and binary_same (operands of the output's shape)
 * map EW_VEC neighbouring elements per work-item as one vector (realv): work-item i takes elements
 * EW_VEC i .. EW_VEC i + EW_VEC - 1 with vector loads and stores (the one at n / EW_VEC the tail): wide,
 * coalesced accesses, no index arithmetic, and unary.h's maps on whole vectors. binary and compare read a and b
 * through a Bcast descriptor: the output's shape (outermost first, up to MAXD dims after the host merged what it
 * could) and the element strides of a and b in it, 0 where an operand is broadcast.
 * Defines: the element type (clnn_dtype.h); EW_VEC (elements per work-item, a tuning knob: 1 or 4, or 8 or 16
 * for float32 and float64 storage; Intel's CPU compiler vectorizes across work-items itself); float16
 * runs in half precision (USE_FP16) on devices with cl_khr_fp16, else in float32 between half loads and
 * stores. The op is a run-time code (U_* in unary.h, B_*, C_* below; the host reads their values from
 * these files), uniform across a launch, so one build serves every op; with EW_OP defined (tuning's EW_STATIC,
 * PoCL) the op is that constant instead and the argument is ignored: PoCL vectorizes a map across work-items only
 * when its switch folds away (x * 2 over 7M floats: 7.3 -> 1.6 ms), at one program per op.
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
#elif STORE_HALF || STORE_BF16
#error "EW_VEC 8 or 16 needs float or double storage"
#else
typedef CLNN_CAT(REAL_T, EW_VEC) realv;
#define LOADV(p, i) CLNN_CAT(vload, EW_VEC)(i, p)
#define STOREV(p, i, v) CLNN_CAT(vstore, EW_VEC)(v, i, p)
#endif
#define UNARY_T realv
#include "unary.h"

typedef struct { int ndim; int shape[MAXD]; int sa[MAXD]; int sb[MAXD]; } Bcast;

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
    real lanes[EW_VEC] = {0};
    for (size_t j = i * EW_VEC; j < (size_t)n; ++j) lanes[j - i * EW_VEC] = LOAD(p, j);
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
    for (size_t j = i * EW_VEC; j < (size_t)n; ++j) STORE(p, j, lanes[j - i * EW_VEC]);
}

__kernel void unary(int op, int n, __global const store_t *x, __global store_t *y, param_t a, param_t b) {
    const size_t i = get_global_id(0);
    if (in_map(i, n)) store_group(y, i, n, apply_unary(OP, load_group(x, i, n), (real)a, (real)b));
}

/* gx = gy * f'(x) */
__kernel void unary_grad(int op, int n, __global const store_t *x, __global const store_t *y,
                         __global const store_t *gy, __global store_t *gx, param_t a, param_t b) {
    const size_t i = get_global_id(0);
    if (in_map(i, n))
        store_group(gx, i, n, load_group(gy, i, n) * unary_derivative(OP, load_group(x, i, n), load_group(y, i, n),
                                                                         (real)a, (real)b));
}

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

inline void bcast_offsets(int i, const Bcast *d, int *ia, int *ib) {
    int oa = 0, ob = 0;
    for (int k = d->ndim - 1; k >= 0; --k) {
        int idx = i % d->shape[k];
        i /= d->shape[k];
        oa += idx * d->sa[k];
        ob += idx * d->sb[k];
    }
    *ia = oa;
    *ib = ob;
}

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
__kernel void binary_same(int op, int n, __global const store_t *a, __global const store_t *b,
                          __global store_t *out) {
    const size_t i = get_global_id(0);
    if (in_map(i, n)) store_group(out, i, n, apply_binary_v(OP, load_group(a, i, n), load_group(b, i, n)));
}

__kernel void binary(int op, int n, Bcast d, __global const store_t *a, __global const store_t *b,
                     __global store_t *out) {
    int i = get_global_id(0);
    if (i >= n) return;
    int ia, ib;
    bcast_offsets(i, &d, &ia, &ib);
    STORE(out, i, apply_binary(OP, LOAD(a, ia), LOAD(b, ib)));
}

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

__kernel void compare(int op, int n, Bcast d, __global const store_t *a, __global const store_t *b,
                      __global uchar *out) {
    int i = get_global_id(0);
    if (i >= n) return;
    int ia, ib;
    bcast_offsets(i, &d, &ia, &ib);
    out[i] = (uchar)apply_compare(OP, LOAD(a, ia), LOAD(b, ib));
}
