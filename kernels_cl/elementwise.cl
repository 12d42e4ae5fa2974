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
 * stores. The op is a run-time code (U_*, B_*, C_* below; the host reads
 * their values from this file), uniform across a launch, so one build serves every op.
 */
#include "clnn_dtype.h"
#include "clnn_shape.h"

typedef struct { int ndim; int shape[MAXD]; int sa[MAXD]; int sb[MAXD]; } Bcast;

/* unary y = f(x; alpha, beta) */
#define U_NEG 0
#define U_EXP 1
#define U_LOG 2
#define U_SQRT 3
#define U_ABS 4
#define U_RELU 5
#define U_LEAKY_RELU 6   /* alpha: negative slope */
#define U_ELU 7          /* alpha */
#define U_GELU 8
#define U_GELU_TANH 9
#define U_SIGMOID 10
#define U_TANH 11
#define U_SOFTPLUS 12    /* alpha: beta, beta: threshold */
#define U_SILU 13
#define U_HARDSWISH 14
#define U_ADD_S 15       /* x + alpha */
#define U_MUL_S 16       /* x * alpha */
#define U_RSUB_S 17      /* alpha - x */
#define U_RDIV_S 18      /* alpha / x */
#define U_POW_S 19       /* x ^ alpha */
#define U_RPOW_S 20      /* alpha ^ x */
#define U_CLAMP 21       /* min(max(x, alpha), beta) */
#define U_SQUARE 22

#define SQRT1_2 0.70710678118654752440
#define SQRT2_PI 0.79788456080286535588

inline real softplus(real x, real beta, real threshold) {
    real bx = beta * x;
    return bx > threshold ? x : (fmax(bx, (real)0) + log1p(exp(-fabs(bx)))) / beta;
}

inline real sigmoid(real x) {
    /* stable for large |x|: exp of a non-positive number only */
    real e = exp(-fabs(x));
    return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}

inline real apply_unary(int op, real x, real a, real b) {
    switch (op) {
    case U_NEG: return -x;
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_ABS: return fabs(x);
    case U_RELU: return x < 0 ? (real)0 : x;  /* NaN passes through, as torch.relu (fmax would drop it) */
    case U_LEAKY_RELU: return x > 0 ? x : a * x;
    case U_ELU: return x > 0 ? x : a * expm1(x);
    /* erfc and 2 * sigmoid(2u) = 1 + tanh(u) keep the digits of the small negative tail */
    case U_GELU: return (real)0.5 * x * erfc(-x * (real)SQRT1_2);
    case U_GELU_TANH: return x * sigmoid(2 * (real)SQRT2_PI * (x + (real)0.044715 * x * x * x));
    case U_SIGMOID: return sigmoid(x);
    case U_TANH: return tanh(x);
    case U_SOFTPLUS: return softplus(x, a, b);
    case U_SILU: return x * sigmoid(x);
    case U_HARDSWISH: return x * clamp(x + 3, (real)0, (real)6) / 6;
    case U_ADD_S: return x + a;
    case U_MUL_S: return x * a;
    case U_RSUB_S: return a - x;
    case U_RDIV_S: return a / x;
    case U_POW_S: return pow(x, a);
    case U_RPOW_S: return pow(a, x);
    case U_CLAMP: return fmin(fmax(x, a), b);
    case U_SQUARE: return x * x;
    }
    return NAN;
}

/* d f(x) / dx given x and y = f(x) */
inline real unary_derivative(int op, real x, real y, real a, real b) {
    switch (op) {
    case U_NEG: return -1;
    case U_EXP: return y;
    case U_LOG: return 1 / x;
    case U_SQRT: return (real)0.5 / y;
    case U_ABS: return (real)((x > 0) - (x < 0));
    case U_RELU: return x > 0 ? 1 : 0;
    case U_LEAKY_RELU: return x > 0 ? 1 : a;
    case U_ELU: return x > 0 ? 1 : a * exp(x);
    case U_GELU: {
        real cdf = (real)0.5 * erfc(-x * (real)SQRT1_2);
        real pdf = exp((real)-0.5 * x * x) * (real)(SQRT2_PI * 0.5);
        return cdf + x * pdf;
    }
    case U_GELU_TANH: {
        real inner = (real)SQRT2_PI * (x + (real)0.044715 * x * x * x);
        real s = sigmoid(2 * inner), sn = sigmoid(-2 * inner);  /* (1 + tanh) / 2 and (1 - tanh) / 2 */
        real dinner = (real)SQRT2_PI * (1 + (real)(3 * 0.044715) * x * x);
        return s + 2 * x * s * sn * dinner;
    }
    /* from x, not y: 1 - y cancels when y is near 1 and loses the small derivatives' digits */
    case U_SIGMOID: return sigmoid(x) * sigmoid(-x);
    case U_TANH: { real e = exp(-2 * fabs(x)); return 4 * e / ((1 + e) * (1 + e)); }
    case U_SOFTPLUS: return a * x > b ? 1 : sigmoid(a * x);
    case U_SILU: return sigmoid(x) * (1 + x * sigmoid(-x));
    case U_HARDSWISH: return x < -3 ? 0 : (x > 3 ? 1 : (2 * x + 3) / 6);
    case U_ADD_S: return 1;
    case U_MUL_S: return a;
    case U_RSUB_S: return -1;
    case U_RDIV_S: return -y / x;
    case U_POW_S: return a == 0 ? 0 : a * pow(x, a - 1);
    case U_RPOW_S: return y * log(a);
    case U_CLAMP: return (x >= a && x <= b) ? 1 : 0;
    case U_SQUARE: return 2 * x;
    }
    return NAN;
}

#ifndef EW_VEC
#define EW_VEC 4
#endif

/* A map over n elements: EXPR4 maps the four elements of group i (vectors), EXPR1 element j. */
#if EW_VEC == 4
#define MAP(n, EXPR4, EXPR1)                                          \
    int i = get_global_id(0);                                         \
    if (i < (n) / 4) {                                                \
        EXPR4;                                                        \
    } else if (i == (n) / 4) {                                        \
        for (int j = 4 * i; j < (n); ++j) { EXPR1; }                  \
    }
#else
#define MAP(n, EXPR4, EXPR1)                                          \
    int j = get_global_id(0);                                         \
    if (j < (n)) { EXPR1; }
#endif

#define LANES4(f) (real4)(f(s0), f(s1), f(s2), f(s3))

__kernel void unary(int op, int n, __global const store_t *x, __global store_t *y, param_t a, param_t b) {
#define U(s) apply_unary(op, v.s, (real)a, (real)b)
    MAP(n, real4 v = LOAD4(x, i); STORE4(y, i, LANES4(U)),
         STORE(y, j, apply_unary(op, LOAD(x, j), (real)a, (real)b)))
#undef U
}

/* gx = gy * f'(x) */
__kernel void unary_grad(int op, int n, __global const store_t *x, __global const store_t *y,
                         __global const store_t *gy, __global store_t *gx, param_t a, param_t b) {
#define D(s) unary_derivative(op, v.s, w.s, (real)a, (real)b)
    MAP(n, real4 v = LOAD4(x, i); real4 w = LOAD4(y, i); STORE4(gx, i, LOAD4(gy, i) * LANES4(D)),
         STORE(gx, j, LOAD(gy, j) * unary_derivative(op, LOAD(x, j), LOAD(y, j), (real)a, (real)b)))
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
#define B(s) apply_binary(op, v.s, w.s)
    MAP(n, real4 v = LOAD4(a, i); real4 w = LOAD4(b, i); STORE4(out, i, LANES4(B)),
         STORE(out, j, apply_binary(op, LOAD(a, j), LOAD(b, j))))
#undef B
}

__kernel void binary(int op, int n, Bcast d, __global const store_t *a, __global const store_t *b,
                     __global store_t *out) {
    int i = get_global_id(0);
    if (i >= n) return;
    int ia, ib;
    bcast_offsets(i, &d, &ia, &ib);
    STORE(out, i, apply_binary(op, LOAD(a, ia), LOAD(b, ib)));
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
    out[i] = (uchar)apply_compare(op, LOAD(a, ia), LOAD(b, ib));
}
