/* pool.cl: 2-D pooling over the last two axes of a contiguous tensor viewed as (P, H, W) planes,
 * P = N * C, with PyTorch's semantics; the output is (P, OH, OW).
 *
 * Ops (run-time code; the host reads the P_* values from this file):
 *   P_MAX       out = max over the window x[oh*sH - pH + kh*dH, ow*sW - pW + kw*dW]; idx = h * W + w of
 *               the first largest value, or of the last NaN (NaN propagates), as PyTorch.
 *   P_AVG       out = sum over the window, clipped to the input, / divisor; the divisor is
 *               g.divisor when > 0, else the window clipped to the padded input (count_pad) or to
 *               the input. A window wholly in the padding gives 0.
 *   P_ADAPTIVE  out = mean of x[floor(oh*H/OH) .. ceil((oh+1)*H/OH)) x (the same along W).
 * pool_fwd: one work-item per output row (plane, oh), walking along it.
 * pool_bwd: one work-item per input row (plane, ih) adds the gradient of every window that touches
 *           the row into it (max: only the pixel its idx names), in a fixed order: no atomics,
 *           bit-identical reruns. Rows rather than elements: PoCL runs them ~10x faster.
 * Defines: the element type (clnn_dtype.h). Sizes and hyperparameters are run-time (pool_geom).
 */
#include "clnn_dtype.h"

#define P_MAX 0
#define P_AVG 1
#define P_ADAPTIVE 2

#if USE_FP64
#define NEG_BIG (-HUGE_VAL)
#else
#define NEG_BIG (-INFINITY)
#endif

typedef struct {
    int H, W, OH, OW;  /* input and output plane sizes */
    int kH, kW, sH, sW, pH, pW, dH, dW;
    int count_pad;     /* P_AVG: padded positions count in the divisor */
    int divisor;       /* P_AVG: fixed divisor when > 0 */
} pool_geom;

/* the averaging window of output o along one axis: [*lo, *hi) clipped to the input; returns the
 * divisor count along this axis (clipped to the padded input when count_pad) */
inline int avg_window(int op, int o, int I, int O, int K, int s, int p, int count_pad, int *lo, int *hi) {
    if (op == P_ADAPTIVE) {
        *lo = (o * I) / O;
        *hi = ((o + 1) * I + O - 1) / O;
        return *hi - *lo;
    }
    int start = o * s - p;
    int end = min(start + K, I + p);
    int padded = end - start;
    *lo = max(start, 0);
    *hi = min(end, I);
    return count_pad ? padded : *hi - *lo;
}

inline real avg_divisor(int op, int oh, int ow, pool_geom g, int *h0, int *h1, int *w0, int *w1) {
    int nh = avg_window(op, oh, g.H, g.OH, g.kH, g.sH, g.pH, g.count_pad, h0, h1);
    int nw = avg_window(op, ow, g.W, g.OW, g.kW, g.sW, g.pW, g.count_pad, w0, w1);
    return (op == P_AVG && g.divisor > 0) ? (real)g.divisor : (real)(nh * nw);
}

__kernel void pool_fwd(int op, int planes, pool_geom g, __global const store_t *x, __global store_t *out,
                       __global int *idx) {
    int gid = get_global_id(0);                  /* gid = plane * OH + oh: one output row */
    if (gid >= planes * g.OH) return;
    int oh = gid % g.OH;
    __global const store_t *xp = x + (size_t)(gid / g.OH) * g.H * g.W;  /* (H, W) plane */
    size_t row = (size_t)gid * g.OW;

    if (op == P_MAX) {
        /* the taps inside the input, [kh0, kh1) x [kw0, kw1): the inner loops need no bounds checks */
        int hs = oh * g.sH - g.pH, kh0 = 0, kh1 = g.kH;
        while (hs + kh0 * g.dH < 0) ++kh0;
        while (kh1 > kh0 && hs + (kh1 - 1) * g.dH >= g.H) --kh1;
        for (int ow = 0; ow < g.OW; ++ow) {
            int ws = ow * g.sW - g.pW, kw0 = 0, kw1 = g.kW;
            while (ws + kw0 * g.dW < 0) ++kw0;
            while (kw1 > kw0 && ws + (kw1 - 1) * g.dW >= g.W) --kw1;
            real best = NEG_BIG;
            int bi = (hs + kh0 * g.dH) * g.W + ws + kw0 * g.dW;
            for (int kh = kh0; kh < kh1; ++kh) {
                int h = hs + kh * g.dH;
                for (int kw = kw0; kw < kw1; ++kw) {
                    int w = ws + kw * g.dW;
                    real v = LOAD(xp, h * g.W + w);
                    if (v > best || v != v) { best = v; bi = h * g.W + w; }  /* v != v: NaN */
                }
            }
            STORE(out, row + ow, best);
            idx[row + ow] = bi;
        }
        return;
    }
    for (int ow = 0; ow < g.OW; ++ow) {
        int h0, h1, w0, w1;
        real div = avg_divisor(op, oh, ow, g, &h0, &h1, &w0, &w1);
        real acc = 0;
        for (int h = h0; h < h1; ++h)
            for (int w = w0; w < w1; ++w) acc += LOAD(xp, h * g.W + w);
        STORE(out, row + ow, (h0 >= h1 || w0 >= w1) ? (real)0 : acc / div);
    }
}

__kernel void pool_bwd(int op, int planes, pool_geom g, __global const store_t *gy, __global const int *idx,
                       __global store_t *gx) {
    int gid = get_global_id(0);                  /* gid = plane * H + ih: one input row */
    if (gid >= planes * g.H) return;
    int ih = gid % g.H;
    size_t base = (size_t)(gid / g.H) * g.OH * g.OW;  /* this plane's (OH, OW) gradient */
    __global store_t *gxr = gx + (size_t)gid * g.W;

    if (op == P_ADAPTIVE) {
        int oh1 = ((ih + 1) * g.OH + g.H - 1) / g.H;
        for (int iw = 0; iw < g.W; ++iw) {
            int ow1 = ((iw + 1) * g.OW + g.W - 1) / g.W;
            real acc = 0;
            for (int oh = (ih * g.OH) / g.H; oh < oh1; ++oh)
                for (int ow = (iw * g.OW) / g.W; ow < ow1; ++ow) {
                    int h0, h1, w0, w1;
                    real div = avg_divisor(op, oh, ow, g, &h0, &h1, &w0, &w1);
                    acc += LOAD(gy, base + oh * g.OW + ow) / div;
                }
            STORE(gxr, iw, acc);
        }
        return;
    }
    /* Scatter into the row this work-item owns: windows by kh ascending, then ow descending, which
     * for each input pixel is the order (kh, kw) ascending of a per-pixel gather. */
    for (int iw = 0; iw < g.W; ++iw) STORE(gxr, iw, 0);
    int dH = op == P_MAX ? g.dH : 1;
    for (int kh = 0; kh < g.kH; ++kh) {
        int th = ih + g.pH - kh * dH;  /* = oh * sH for a window holding ih at tap kh */
        if (th < 0 || th % g.sH) continue;
        int oh = th / g.sH;
        if (oh >= g.OH) continue;
        size_t orow = base + oh * g.OW;
        for (int ow = g.OW - 1; ow >= 0; --ow) {
            if (op == P_MAX) {
                int b = idx[orow + ow] - ih * g.W;   /* the window's argmax, as a column of row ih */
                if (b >= 0 && b < g.W) STORE(gxr, b, LOAD(gxr, b) + LOAD(gy, orow + ow));
            } else {
                int h0, h1, w0, w1;
                real v = LOAD(gy, orow + ow) / avg_divisor(op, oh, ow, g, &h0, &h1, &w0, &w1);
                for (int kw = 0; kw < g.kW; ++kw) {
                    int iw = ow * g.sW - g.pW + kw;
                    if (iw >= 0 && iw < g.W) STORE(gxr, iw, LOAD(gxr, iw) + v);
                }
            }
        }
    }
}
