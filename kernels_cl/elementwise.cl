/* elementwise.cl: unary, scalar, binary (broadcasting) and comparison maps, and unary derivatives.
 *
 * Layout: tensors are contiguous. unary, unary_grad and binary_same (operands of the output's shape)
 * map EW_VEC neighbouring elements per work-item: with EW_VEC 4, work-item i takes elements 4i .. 4i+3
 * with vector loads and stores (the one at n / 4 maps the tail of n % 4): wide, coalesced accesses and
 * no index arithmetic; with EW_VEC 1, one element each. binary and compare read a and b through a
 * Bcast descriptor: the output's shape (outermost first, up to MAXD dims after the host merged what it
 * could) and the element strides of a and b in it, 0 where an operand is broadcast.
 * Defines: the element type (clnn_dtype.h); EW_VEC (1 or 4 elements per work-item, a tuning knob: Intel's
 * CPU compiler vectorizes across work-items and runs four switches per work-item 5x slower); float16
 * runs in half precision (USE_FP16) on devices with cl_khr_fp16, else in float32 between half loads and
 * stores. The op is a run-time code (U_* in unary.h, B_*, C_* below; the host reads their values from
 * these files), uniform across a launch, so one build serves every op; with EW_OP defined (tuning's EW_STATIC,
 * PoCL) the op is that constant instead and the argument is ignored: PoCL vectorizes a map across work-items only
 * when its switch folds away (x * 2 over 7M floats: 7.3 -> 1.6 ms), at one program per op.
 */
#include "clnn_dtype.h"
#include "clnn_shape.h"
#include "unary.h"

typedef struct { int ndim; int shape[MAXD]; int sa[MAXD]; int sb[MAXD]; } Bcast;

#ifndef EW_VEC
#define EW_VEC 4
#endif
#ifdef EW_OP
#define OP EW_OP
#else
#define OP op
#endif

/* A map over n elements: EXPR4 maps the four elements of group i (vectors), EXPR1 element j. */
#if EW_VEC == 4
#define MAP(n, EXPR4, EXPR1)                                          \
    size_t i = get_global_id(0);                                      \
    if (i < (n) / 4) {                                                \
        EXPR4;                                                        \
    } else if (i == (n) / 4) {                                        \
        for (size_t j = 4 * i; j < (n); ++j) { EXPR1; }               \
    }
#else
#define MAP(n, EXPR4, EXPR1)                                          \
    size_t j = get_global_id(0);                                      \
    if (j < (n)) { EXPR1; }
#endif

#define LANES4(f) (real4)(f(s0), f(s1), f(s2), f(s3))

__kernel void unary(int op, int n, __global const store_t *x, __global store_t *y, param_t a, param_t b) {
#define U(s) apply_unary(OP, v.s, (real)a, (real)b)
    MAP(n, real4 v = LOAD4(x, i); STORE4(y, i, LANES4(U)),
         STORE(y, j, apply_unary(OP, LOAD(x, j), (real)a, (real)b)))
#undef U
}

/* gx = gy * f'(x) */
__kernel void unary_grad(int op, int n, __global const store_t *x, __global const store_t *y,
                         __global const store_t *gy, __global store_t *gx, param_t a, param_t b) {
#define D(s) unary_derivative(OP, v.s, w.s, (real)a, (real)b)
    MAP(n, real4 v = LOAD4(x, i); real4 w = LOAD4(y, i); STORE4(gx, i, LOAD4(gy, i) * LANES4(D)),
         STORE(gx, j, LOAD(gy, j) * unary_derivative(OP, LOAD(x, j), LOAD(y, j), (real)a, (real)b)))
#undef D
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

inline real apply_binary(int op, real x, real y) {
    switch (op) {
    case B_ADD: return x + y;
    case B_SUB: return x - y;
    case B_MUL: return x * y;
    case B_DIV: return x / y;
    case B_POW: return pow(x, y);
    case B_MAX: return isnan(x) || isnan(y) ? x + y : fmax(x, y);
    case B_MIN: return isnan(x) || isnan(y) ? x + y : fmin(x, y);
    }
    return NAN;
}

/* out = a (op) b for operands of the output's shape */
__kernel void binary_same(int op, int n, __global const store_t *a, __global const store_t *b,
                          __global store_t *out) {
#define B(s) apply_binary(OP, v.s, w.s)
    MAP(n, real4 v = LOAD4(a, i); real4 w = LOAD4(b, i); STORE4(out, i, LANES4(B)),
         STORE(out, j, apply_binary(OP, LOAD(a, j), LOAD(b, j))))
#undef B
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
