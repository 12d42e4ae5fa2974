/* unary_maps.h: unary.h's maps y = f(x; alpha, beta) and their derivatives on UNARY_T, each named UNARY_FN(name):
 * included by unary.h once, and again for UNARY_VEC. Constants that a selection returns are cast to UNARY_T: with
 * a vector condition, `c ? a : b` selects per lane, and needs a or b to be a vector. */

inline UNARY_T UNARY_FN(softplus)(UNARY_T x, real beta, real threshold) {
    UNARY_T bx = beta * x;
    return bx > threshold ? x : (fmax(bx, (real)0) + log1p(exp(-fabs(bx)))) / beta;
}

#if ERFC_SOFT && !USE_FP64
/* erfc in float32 by the Chebyshev fit of Numerical Recipes (erfcc: fractional error under 1.2e-7), its
 * exp(-z^2) kept exact to a rounding with fma: PoCL's own erfc ran about 26 ns per element, 13x its exp (GELU
 * was half of the GPT example's step there). Tuning's storage ERFC_SOFT; float64 keeps the library's. */
inline UNARY_T UNARY_FN(erfc_)(UNARY_T x) {
    const UNARY_T z = fabs(x), t = 1 / (1 + (real)0.5 * z), zz = z * z, lost = fma(z, z, -zz);
    const UNARY_T poly = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f +
                      t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f +
                      t * 0.17087277f))))))));
    const UNARY_T tail = t * exp(poly - zz) * (1 - lost);
    return x >= 0 ? tail : 2 - tail;
}
#define ERFC UNARY_FN(erfc_)
#else
#define ERFC erfc
#endif

inline UNARY_T UNARY_FN(sigmoid)(UNARY_T x) {
    /* stable for large |x|: exp of a non-positive number only */
    const UNARY_T e = exp(-fabs(x));
    return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}

/* s = sigmoid(x) and sn = sigmoid(-x) from one exp: e = exp(-|x|), 1 / (1 + e) the larger of the two, e / (1 + e)
 * the smaller (the derivatives below: a second sigmoid's exp ran sigmoid's gradient at twice its forward's time) */
#define SIGMOID_PAIR(x, s, sn)                                                               \
    const UNARY_T s##_e = exp(-fabs(x)), s##_big = 1 / (1 + s##_e), s##_small = s##_e * s##_big; \
    const UNARY_T s = (x) >= 0 ? s##_big : s##_small, sn = (x) >= 0 ? s##_small : s##_big

inline UNARY_T UNARY_FN(apply_unary)(int op, UNARY_T x, real a, real b) {
    switch (op) {
    case U_NEG: return -x;
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_ABS: return fabs(x);
    case U_RELU: return x < 0 ? (real)0 : x;  /* NaN passes through, as torch.relu (fmax would drop it) */
    case U_LEAKY_RELU: return x > 0 ? x : a * x;
    case U_ELU: return x > 0 ? x : a * expm1(x);
    /* erfc and 2 * UNARY_FN(sigmoid)(2u) = 1 + tanh(u) keep the digits of the small negative tail */
    case U_GELU: return (real)0.5 * x * ERFC(-x * (real)SQRT1_2);
    case U_GELU_TANH: return x * UNARY_FN(sigmoid)(2 * (real)SQRT2_PI * (x + (real)0.044715 * x * x * x));
    case U_SIGMOID: return UNARY_FN(sigmoid)(x);
    case U_TANH: return tanh(x);
    case U_SOFTPLUS: return UNARY_FN(softplus)(x, a, b);
    case U_SILU: return x * UNARY_FN(sigmoid)(x);
    case U_HARDSWISH: return x * clamp(x + 3, (real)0, (real)6) / 6;
    case U_ADD_S: return x + a;
    case U_MUL_S: return x * a;
    case U_RSUB_S: return a - x;
    case U_RDIV_S: return a / x;
    case U_POW_S: return pow(x, (UNARY_T)a);
    case U_RPOW_S: return pow((UNARY_T)a, x);
    case U_CLAMP: return fmin(fmax(x, a), b);
    case U_SQUARE: return x * x;
    }
    return (UNARY_T)NAN;
}

/* d f(x) / dx given x and y = f(x) */
inline UNARY_T UNARY_FN(unary_derivative)(int op, UNARY_T x, UNARY_T y, real a, real b) {
    switch (op) {
    case U_NEG: return (UNARY_T)-1;
    case U_EXP: return y;
    case U_LOG: return 1 / x;
    case U_SQRT: return (real)0.5 / y;
    case U_ABS: return sign(x);
    case U_RELU: return x > 0 ? (UNARY_T)1 : (UNARY_T)0;
    case U_LEAKY_RELU: return x > 0 ? (UNARY_T)1 : (UNARY_T)a;
    case U_ELU: return x > 0 ? (UNARY_T)1 : a * exp(x);
    case U_GELU: {
        const UNARY_T cdf = (real)0.5 * ERFC(-x * (real)SQRT1_2);
        const UNARY_T pdf = exp((real)-0.5 * x * x) * (real)(SQRT2_PI * 0.5);
        return cdf + x * pdf;
    }
    case U_GELU_TANH: {
        const UNARY_T inner = (real)SQRT2_PI * (x + (real)0.044715 * x * x * x);
        /* (1 + tanh) / 2 and (1 - tanh) / 2 */
        SIGMOID_PAIR(2 * inner, s, sn);
        const UNARY_T dinner = (real)SQRT2_PI * (1 + (real)(3 * 0.044715) * x * x);
        return s + 2 * x * s * sn * dinner;
    }
    /* from x, not y: 1 - y cancels when y is near 1 and loses the small derivatives' digits */
    case U_SIGMOID: { SIGMOID_PAIR(x, s, sn); return s * sn; }
    case U_TANH: { const UNARY_T e = exp(-2 * fabs(x)); return 4 * e / ((1 + e) * (1 + e)); }
    case U_SOFTPLUS: return a * x > b ? (UNARY_T)1 : UNARY_FN(sigmoid)(a * x);
    case U_SILU: { SIGMOID_PAIR(x, s, sn); return s * (1 + x * sn); }
    case U_HARDSWISH: return x < -3 ? (UNARY_T)0 : (x > 3 ? (UNARY_T)1 : (2 * x + 3) / 6);
    case U_ADD_S: return (UNARY_T)1;
    case U_MUL_S: return (UNARY_T)a;
    case U_RSUB_S: return (UNARY_T)-1;
    case U_RDIV_S: return -y / x;
    case U_POW_S: return a == 0 ? (UNARY_T)0 : a * pow(x, (UNARY_T)(a - 1));
    case U_RPOW_S: return y * log(a);
    case U_CLAMP: return x >= a && x <= b ? (UNARY_T)1 : (UNARY_T)0;
    case U_SQUARE: return 2 * x;
    }
    return (UNARY_T)NAN;
}
