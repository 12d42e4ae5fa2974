/* unary.h: the unary maps y = f(x; alpha, beta) and their derivatives, shared by elementwise.cl (the
 * maps) and the GEMM and convolution stores (gemm.h), which apply an activation in their epilogue.
 *
 * The op is a run-time code U_* below (the host reads the values from this file with
 * kernels.op_codes("unary.h", "U_")), uniform across a launch. Needs clnn_dtype.h's `real`.
 * The maps (unary_maps.h) take and return UNARY_T: `real` unless the includer defines it as a vector of reals
 * (elementwise.cl's maps of EW_VEC elements per work-item), so a CPU runtime calls its vector exp, erfc, tanh.. on
 * all lanes at once (PoCL calls the scalar ones once per element). An includer that defines UNARY_VEC, a vector
 * of reals, gets them on it too, named *_vec (apply_unary_vec).
 */
#ifndef CLNN_UNARY_H
#define CLNN_UNARY_H
#include "clnn_dtype.h"

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

#ifndef UNARY_T
#define UNARY_T real
#endif
#define SQRT1_2 0.70710678118654752440
#define SQRT2_PI 0.79788456080286535588
#ifndef ERFC_SOFT
#define ERFC_SOFT 0
#endif

#define UNARY_FN(name) name
#include "unary_maps.h"
#ifdef UNARY_VEC /* the maps again on the includer's vector of reals UNARY_VEC, as *_vec (gemm.h's vector stores) */
#undef UNARY_T
#undef UNARY_FN
#undef ERFC
#define UNARY_T UNARY_VEC
#define UNARY_FN(name) name##_vec
#include "unary_maps.h"
#endif

#endif
