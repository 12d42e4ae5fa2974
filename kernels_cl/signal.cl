/* signal.cl: direct 2-D cross-correlation with an offset, the one primitive behind
 * clnn.signal.correlate/convolve and their gradients (a 1-D signal is a 1 x N plane).
 *
 *   out[m0, m1] = sum_{j0 < K0, j1 < K1} x[m0 + o0 + j0, m1 + o1 + j1] * w[j0', j1']
 *
 * x is (N0, N1), w is (K0, K1), out is (L0, L1), all contiguous row-major; x reads outside its bounds
 * are zero (the taps that would make them are skipped). Flags (run time):
 *   SIG_FLIP_W    j' = K - 1 - j on both axes (convolution instead of correlation)
 *   SIG_FLIP_OUT  the value for m is stored at (L0 - 1 - m0, L1 - 1 - m1)
 * correlate2d:    one work-item per output element, summing its taps in a fixed order (row by row).
 * correlate2d_wg: one work-group of RED_WG work-items per output element, for few outputs with many
 *                 taps (a long kernel, or the gradient w.r.t. a short input): each work-item sums a
 *                 strided share of the taps, then the tree of reduce.h combines the shares.
 * Both sum in a fixed order, so reruns are bit-identical.
 * Defines: the element type (clnn_dtype.h); RED_WG (reduce.h), also the local size of correlate2d_wg.
 * Sizes and offsets are run-time (sig_geom).
 */
#include "reduce.h"

#define SIG_FLIP_W 1
#define SIG_FLIP_OUT 2

typedef struct {
    int N0, N1;  /* x */
    int K0, K1;  /* w */
    int L0, L1;  /* out */
    int o0, o1;  /* offset of out[0, 0]'s first tap in x */
    int flags;
} sig_geom;

__kernel void correlate2d(sig_geom g, __global const store_t *x, __global const store_t *w,
                          __global store_t *out) {
    int gid = get_global_id(0);
    if (gid >= g.L0 * g.L1) return;
    int m0 = gid / g.L1, m1 = gid - m0 * g.L1;
    int a0 = m0 + g.o0, a1 = m1 + g.o1;  /* x index of tap (0, 0) */
    int j0lo = max(0, -a0), j0hi = min(g.K0, g.N0 - a0);
    int j1lo = max(0, -a1), j1hi = min(g.K1, g.N1 - a1);
    int flip = g.flags & SIG_FLIP_W;
    int wstep = flip ? -1 : 1;
    real acc = 0;
    for (int j0 = j0lo; j0 < j0hi; ++j0) {
        __global const store_t *xr = x + (size_t)(a0 + j0) * g.N1 + a1;  /* row a0 + j0 of x, at column a1 */
        int wrow = flip ? g.K0 - 1 - j0 : j0;
        int wi = wrow * g.K1 + (flip ? g.K1 - 1 - j1lo : j1lo);
        for (int j1 = j1lo; j1 < j1hi; ++j1, wi += wstep) acc += LOAD(xr, j1) * LOAD(w, wi);
    }
    int dst = (g.flags & SIG_FLIP_OUT) ? (g.L0 - 1 - m0) * g.L1 + (g.L1 - 1 - m1) : gid;
    STORE(out, dst, acc);
}

__kernel __attribute__((reqd_work_group_size(RED_WG, 1, 1)))
void correlate2d_wg(sig_geom g, __global const store_t *x, __global const store_t *w, __global store_t *out) {
    __local real part[RED_WG];
    int t = get_local_id(0);
    int gid = get_group_id(0);
    int m0 = gid / g.L1, m1 = gid - m0 * g.L1;
    int a0 = m0 + g.o0, a1 = m1 + g.o1;
    int j0lo = max(0, -a0), j0hi = min(g.K0, g.N0 - a0);
    int j1lo = max(0, -a1), j1hi = min(g.K1, g.N1 - a1);
    int rows = max(j0hi - j0lo, 0), cols = max(j1hi - j1lo, 0);
    int flip = g.flags & SIG_FLIP_W;
    real acc = 0;
    for (int i = t; i < rows * cols; i += RED_WG) {
        int j0 = j0lo + i / cols, j1 = j1lo + i % cols;
        int wi = flip ? (g.K0 - 1 - j0) * g.K1 + (g.K1 - 1 - j1) : j0 * g.K1 + j1;
        acc += LOAD(x, (size_t)(a0 + j0) * g.N1 + a1 + j1) * LOAD(w, wi);
    }
    acc = group_sum(part, acc);
    if (t == 0) {
        int dst = (g.flags & SIG_FLIP_OUT) ? (g.L0 - 1 - m0) * g.L1 + (g.L1 - 1 - m1) : gid;
        STORE(out, dst, acc);
    }
}
