/* rowvec.h: a contiguous row walked by one work-item in explicit vectors of ROW_VW reals (CPUs: the compiler
 * keeps them as SIMD registers and calls its vector exp, where a work-group per row reduced through barriers and
 * a scalar walk waited on each operation). Rows of `real`: float32 or float64 storage, or a half program's `real`
 * buffers (attention_rows.cl's transposed keys). Included by a kernel file when the host defines ROW_VW (4, 8 or
 * 16; tuning's "softmax", "norm_rows" and "attention_rows" rows).
 */
#ifndef CLNN_ROWVEC_H
#define CLNN_ROWVEC_H
#include "clnn_dtype.h"

typedef CLNN_CAT(REAL_T, ROW_VW) realrv;
/* RV_LOAD(i, p), RV_STORE(v, i, p): vloadn and vstoren of the i-th vector at p (global); RV_LANES(v, l): l, the
 * lanes of v. With VEC_LANES (clnn_dtype.h) lane by lane, through rv_lanes */
#if VEC_LANES
VEC_LANE_IO(rv, realrv, real, ROW_VW)
#define RV_LOAD(i, p) rv_load(i, p)
#define RV_STORE(v, i, p) rv_store(v, i, p)
#define RV_LANES(v, l)         \
    const rv_lanes u_##l = {v}; \
    const real *l = u_##l.s
#else
#define RV_LOAD(i, p) CLNN_CAT(vload, ROW_VW)(i, p)
#define RV_STORE(v, i, p) CLNN_CAT(vstore, ROW_VW)(v, i, p)
#define RV_LANES(v, l) \
    real l[ROW_VW];    \
    RV_STORE(v, 0, l)
#endif

/* the lanes of v folded by OP (fmax, or + through add_) in a fixed order */
inline real add_(real a, real b) { return a + b; }
#define RV_FOLD(OP, v, out)                                                    \
    do {                                                                       \
        RV_LANES(v, l_);                                                       \
        out = l_[0];                                                           \
        _Pragma("unroll") for (int i_ = 1; i_ < ROW_VW; ++i_) out = OP(out, l_[i_]); \
    } while (0)

/* for each element of a row R long: the vector part as vector index i, then the tail as element index r */
#define RV_EACH(R, VBODY, SBODY)                                               \
    do {                                                                       \
        const int nv_ = (R) / ROW_VW;                                          \
        for (int i = 0; i < nv_; ++i) { VBODY; }                               \
        for (int r = nv_ * ROW_VW; r < (R); ++r) { SBODY; }                    \
    } while (0)
#endif
