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
 * pool_fwd: one work-item per output (GPUs: neighbouring work-items read neighbouring pixels).
 * pool_fwd_rows: one work-item per output row (CPUs: PoCL runs rows ~10x faster than pixels); each
 *           output comes from the same function as in pool_fwd, so both give the same bits. Both take 2x2 max
 *           windows at stride 2 inside the plane (halves) with constant taps (max_2x2).
 * pool_bwd: one work-item per input pixel gathers the gradient of the windows that hold it at a tap
 *           (max: only the windows whose idx names it), taps in (kh, kw) order (GPUs: coalesced, and
 *           enough work-items to fill the device).
 * pool_bwd_rows: one work-item per input row (CPUs: 3-4x faster there than pool_bwd) adds the gradient
 *           of every window touching the row into it, windows by kh ascending, then ow descending: for
 *           each pixel the same (kh, kw) order as pool_bwd, so both give the same bits.
 * pool_max_bwd_bands: max pooling whose windows do not overlap vertically ((kH - 1) dH + 1 <= sH: LeNet's and
 *           VGG's 2x2 / 2): one work-item per output row oh owns the input rows of its stride band [oh sH - pH,
 *           (oh + 1) sH - pH) (the first and last bands stretched to the plane's edges), zeroes them and adds each
 *           output's gradient at its argmax, ow descending: per pixel the order of pool_bwd again. A pass over
 *           the outputs instead of pool_bwd_rows's over every (input row, window row) pair: CPUs.
 * The host picks the pixel kernels on GPUs, the row (or band) kernels elsewhere. No atomics: reruns are bit-identical.
 * Defines: the element type (clnn_dtype.h). Sizes and hyperparameters are run-time (pool_geom).
 */
#include "clnn_dtype.h"

#define P_MAX 0
#define P_AVG 1
#define P_ADAPTIVE 2

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
    int end = IMIN(start + K, I + p);
    int padded = end - start;
    *lo = IMAX(start, 0);
    *hi = IMIN(end, I);
    return count_pad ? padded : *hi - *lo;
}

inline real avg_divisor(int op, int oh, int ow, pool_geom g, int *h0, int *h1, int *w0, int *w1) {
    int nh = avg_window(op, oh, g.H, g.OH, g.kH, g.sH, g.pH, g.count_pad, h0, h1);
    int nw = avg_window(op, ow, g.W, g.OW, g.kW, g.sW, g.pW, g.count_pad, w0, w1);
    return (op == P_AVG && g.divisor > 0) ? (real)g.divisor : (real)(nh * nw);
}

/* first tap k0 and end tap k1 of a window starting at `start` whose taps (step d) lie in [0, I) */
inline void taps_inside(int start, int K, int d, int I, int *k0, int *k1) {
    int a = 0, b = K;
    while (start + a * d < 0) ++a;
    while (b > a && start + (b - 1) * d >= I) --b;
    *k0 = a;
    *k1 = b;
}

/* max-pool output (oh, ow) of one (H, W) plane and its argmax *bi (h * W + w). [kh0, kh1): the row's
 * taps inside the input (taps_inside of oh * sH - pH), found once per row by the caller. */
inline real max_output(pool_geom g, __global const store_t *xp, int oh, int ow, int kh0, int kh1, int *bi) {
    int hs = oh * g.sH - g.pH, ws = ow * g.sW - g.pW, kw0, kw1;
    taps_inside(ws, g.kW, g.dW, g.W, &kw0, &kw1);
    real best = -BIG;
    *bi = (hs + kh0 * g.dH) * g.W + ws + kw0 * g.dW;
    for (int kh = kh0; kh < kh1; ++kh) {
        int h = hs + kh * g.dH;
        for (int kw = kw0; kw < kw1; ++kw) {
            int w = ws + kw * g.dW;
            real v = LOAD(xp, h * g.W + w);
            if (v > best || v != v) { best = v; *bi = h * g.W + w; }  /* v != v: NaN */
        }
    }
    return best;
}

/* 2x2 windows at stride 2, all inside the plane (LeNet's and VGG's max pooling): max_2x2 */
inline bool halves(pool_geom g) {
    return g.kH == 2 && g.kW == 2 && g.sH == 2 && g.sW == 2 && g.pH == 0 && g.pW == 0 && g.dH == 1 && g.dW == 1 &&
           2 * g.OH <= g.H && 2 * g.OW <= g.W;
}

/* max_output of a 2x2 window at stride 2 inside a plane W wide, with constant taps in the same order (the same
 * bits): PoCL vectorizes a row of them, 2.7x faster than max_output's loops */
inline real max_2x2(int W, __global const store_t *xp, int oh, int ow, int *bi) {
    const int i = 2 * oh * W + 2 * ow, taps[4] = {i, i + 1, i + W, i + W + 1};
    real best = LOAD(xp, i);
    *bi = i;
#pragma unroll
    for (int t = 1; t < 4; ++t) {
        const real v = LOAD(xp, taps[t]);
        if (v > best || v != v) { best = v; *bi = taps[t]; }  /* v != v: NaN */
    }
    return best;
}

/* average (P_AVG or P_ADAPTIVE) output (oh, ow) of one (H, W) plane */
inline real avg_output(int op, pool_geom g, __global const store_t *xp, int oh, int ow) {
    int h0, h1, w0, w1;
    real div = avg_divisor(op, oh, ow, g, &h0, &h1, &w0, &w1);
    real acc = 0;
    for (int h = h0; h < h1; ++h)
        for (int w = w0; w < w1; ++w) acc += LOAD(xp, h * g.W + w);
    return (h0 >= h1 || w0 >= w1) ? (real)0 : acc / div;
}

/* along one axis, the outputs [*lo, *hi] whose windows (K taps d apart, stride s, padding p, O outputs) span input
 * i: o * s - p <= i <= o * s - p + (K - 1) * d. A dilated window (d > 1) in that range may step over i. */
inline void windows_holding(int i, int K, int s, int p, int d, int O, int *lo, int *hi) {
    int first = i + p - (K - 1) * d;
    *lo = first > 0 ? (first + s - 1) / s : 0;
    *hi = IMIN((i + p) / s, O - 1);
}

/* the gradient of input pixel (ih, iw): gy and idx point at this plane's (OH, OW) outputs */
inline real pool_input_grad(int op, pool_geom g, __global const store_t *gy, __global const int *idx, int ih,
                            int iw) {
    real acc = 0;
    if (op == P_ADAPTIVE) {
        int oh1 = ((ih + 1) * g.OH + g.H - 1) / g.H, ow1 = ((iw + 1) * g.OW + g.W - 1) / g.W;
        for (int oh = (ih * g.OH) / g.H; oh < oh1; ++oh)
            for (int ow = (iw * g.OW) / g.W; ow < ow1; ++ow) {
                int h0, h1, w0, w1;
                acc += LOAD(gy, oh * g.OW + ow) / avg_divisor(op, oh, ow, g, &h0, &h1, &w0, &w1);
            }
        return acc;
    }
    int dH = op == P_MAX ? g.dH : 1, dW = op == P_MAX ? g.dW : 1, oh0, oh1, ow0, ow1;
    windows_holding(ih, g.kH, g.sH, g.pH, dH, g.OH, &oh0, &oh1);
    windows_holding(iw, g.kW, g.sW, g.pW, dW, g.OW, &ow0, &ow1);
    for (int oh = oh1; oh >= oh0; --oh) {  /* descending, as pool_bwd_rows adds them: the same bits */
        if (dH > 1 && (ih + g.pH - oh * g.sH) % dH) continue;  /* the window's taps step over ih */
        for (int ow = ow1; ow >= ow0; --ow) {
            if (dW > 1 && (iw + g.pW - ow * g.sW) % dW) continue;
            int o = oh * g.OW + ow;
            if (op == P_MAX) {
                if (idx[o] == ih * g.W + iw) acc += LOAD(gy, o);
            } else {
                int h0, h1, w0, w1;
                real v = LOAD(gy, o) / avg_divisor(op, oh, ow, g, &h0, &h1, &w0, &w1);
                acc += v;
            }
        }
    }
    return acc;
}

__kernel void pool_fwd(int op, int planes, pool_geom g, __global const store_t *x, __global store_t *out,
                       __global int *idx) {
    int i = get_global_id(0);                    /* i = (plane * OH + oh) * OW + ow */
    if (i >= planes * g.OH * g.OW) return;
    int r = i / g.OW, oh = r % g.OH;
    __global const store_t *xp = x + (size_t)(r / g.OH) * g.H * g.W;
    if (op == P_MAX && halves(g)) {
        int bi;
        STORE(out, i, max_2x2(g.W, xp, oh, i - r * g.OW, &bi));
        idx[i] = bi;
    } else if (op == P_MAX) {
        int kh0, kh1, bi;
        taps_inside(oh * g.sH - g.pH, g.kH, g.dH, g.H, &kh0, &kh1);
        STORE(out, i, max_output(g, xp, oh, i - r * g.OW, kh0, kh1, &bi));
        idx[i] = bi;
    } else {
        STORE(out, i, avg_output(op, g, xp, oh, i - r * g.OW));
    }
}

__kernel void pool_fwd_rows(int op, int planes, pool_geom g, __global const store_t *x, __global store_t *out,
                            __global int *idx) {
    int r = get_global_id(0);                    /* r = plane * OH + oh: one output row */
    if (r >= planes * g.OH) return;
    int oh = r % g.OH;
    __global const store_t *xp = x + (size_t)(r / g.OH) * g.H * g.W;
    size_t row = (size_t)r * g.OW;
    if (op == P_MAX && halves(g)) {
        for (int ow = 0; ow < g.OW; ++ow) {
            int bi;
            STORE(out, row + ow, max_2x2(g.W, xp, oh, ow, &bi));
            idx[row + ow] = bi;
        }
    } else if (op == P_MAX) {
        int kh0, kh1;
        taps_inside(oh * g.sH - g.pH, g.kH, g.dH, g.H, &kh0, &kh1);
        for (int ow = 0; ow < g.OW; ++ow) {
            int bi;
            STORE(out, row + ow, max_output(g, xp, oh, ow, kh0, kh1, &bi));
            idx[row + ow] = bi;
        }
    } else {
        for (int ow = 0; ow < g.OW; ++ow) STORE(out, row + ow, avg_output(op, g, xp, oh, ow));
    }
}

__kernel void pool_bwd(int op, int planes, pool_geom g, __global const store_t *gy, __global const int *idx,
                       __global store_t *gx) {
    int i = get_global_id(0);                    /* i = (plane * H + ih) * W + iw */
    if (i >= planes * g.H * g.W) return;
    int r = i / g.W;
    size_t plane = (size_t)(r / g.H) * g.OH * g.OW;
    STORE(gx, i, pool_input_grad(op, g, gy + plane, idx + plane, r % g.H, i - r * g.W));
}

__kernel void pool_bwd_rows(int op, int planes, pool_geom g, __global const store_t *gy, __global const int *idx,
                            __global store_t *gx) {
    int gid = get_global_id(0);                  /* gid = plane * H + ih: one input row */
    if (gid >= planes * g.H) return;
    int ih = gid % g.H;
    size_t base = (size_t)(gid / g.H) * g.OH * g.OW;  /* this plane's (OH, OW) gradient */
    __global store_t *gxr = gx + (size_t)gid * g.W;
    if (op == P_ADAPTIVE) {
        for (int iw = 0; iw < g.W; ++iw) STORE(gxr, iw, pool_input_grad(op, g, gy + base, idx, ih, iw));
        return;
    }
    for (int iw = 0; iw < g.W; ++iw) STORE(gxr, iw, 0);
    int dH = op == P_MAX ? g.dH : 1;
    for (int kh = 0; kh < g.kH; ++kh) {
        int th = ih + g.pH - kh * dH;  /* = oh * sH for a window holding ih at tap kh */
        if (th < 0 || th % g.sH || th / g.sH >= g.OH) continue;
        size_t orow = base + (th / g.sH) * g.OW;
        for (int ow = g.OW - 1; ow >= 0; --ow) {
            if (op == P_MAX) {
                int b = idx[orow + ow] - ih * g.W;   /* the window's argmax, as a column of row ih */
                if (b >= 0 && b < g.W) STORE(gxr, b, LOAD(gxr, b) + LOAD(gy, orow + ow));
            } else {
                int h0, h1, w0, w1;
                real v = LOAD(gy, orow + ow) / avg_divisor(op, th / g.sH, ow, g, &h0, &h1, &w0, &w1);
                for (int kw = 0; kw < g.kW; ++kw) {
                    int iw = ow * g.sW - g.pW + kw;
                    if (iw >= 0 && iw < g.W) STORE(gxr, iw, LOAD(gxr, iw) + v);
                }
            }
        }
    }
}

__kernel void pool_max_bwd_bands(int planes, pool_geom g, __global const store_t *gy, __global const int *idx,
                                 __global store_t *gx) {
    const int r = get_global_id(0);                    /* r = plane * OH + oh: one output row */
    if (r >= planes * g.OH) return;
    const int oh = r % g.OH;
    const int h0 = oh == 0 ? 0 : IMAX(oh * g.sH - g.pH, 0);
    const int h1 = oh == g.OH - 1 ? g.H : IMIN((oh + 1) * g.sH - g.pH, g.H);
    __global store_t *gxp = gx + (size_t)(r / g.OH) * g.H * g.W;
    for (int i = h0 * g.W; i < h1 * g.W; ++i) STORE(gxp, i, 0);
    const size_t row = (size_t)r * g.OW;
    for (int ow = g.OW - 1; ow >= 0; --ow) {
        const int b = idx[row + ow];
        STORE(gxp, b, LOAD(gxp, b) + LOAD(gy, row + ow));
    }
}
