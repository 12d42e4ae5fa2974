/* conv.cl: the data-movement halves of 2-D convolution as im2col + GEMM (the GEMM is gemm.cl).
 *
 * Geometry (all run-time arguments): input x (N, C, H, W), kernel (KH, KW), output (OH, OW),
 * stride (SH, SW), top/left padding (PH, PW), dilation (DH, DW). Output pixel (oh, ow) reads input
 * pixel (oh*SH - PH + i*DH, ow*SW - PW + j*DW) for kernel tap (i, j); taps outside the input are zero.
 * A batch chunk of NB images starting at image n0 is handled per launch; P = OH*OW.
 *
 * Column matrix layout: col[r][n*P + p] with r = (c*KH + i)*KW + j, shape (C*KH*KW, NB*P).
 * With groups, rows of group g are the contiguous block [g*Cg*KH*KW, (g+1)*Cg*KH*KW).
 *
 * Kernels:
 *   im2col        col <- x chunk (x read from element offset x_off = n0*C*H*W)
 *   col2im        x chunk <- col, a gather: every input pixel sums its taps in a fixed order (i, j),
 *                 so results are deterministic without atomics; optional per-channel bias
 *   onp_to_nop    y chunk (NB, O, OH, OW) at y_off <- t (O, NB, OH, OW), plus an optional per-channel bias
 *   nop_to_onp    t (O, NB, OH, OW) <- y chunk (NB, O, OH, OW) at y_off
 * Defines: only the element type (clnn_dtype.h).
 */
#include "clnn_dtype.h"

/* Launch geometry: one work-item per output row, walking along it (ow or w). PoCL runs this 10-20x
 * faster than one work-item per element (far fewer work-groups; integer division once per row). */

__kernel void im2col(int NB, int C, int H, int W, int KH, int KW, int OH, int OW,
                     int SH, int SW, int PH, int PW, int DH, int DW,
                     __global const store_t *x, int x_off, __global store_t *col) {
    const int e = get_global_id(0);              /* e = (r*NB + n)*OH + oh, r = (c*KH + i)*KW + j */
    if (e >= C * KH * KW * NB * OH) return;
    const int oh = e % OH, z = e / OH;
    const int n = z % NB, r = z / NB;
    const int j = r % KW, t = r / KW;
    const int i = t % KH, c = t / KH;
    const int h = oh * SH - PH + i * DH;
    __global store_t *dst = col + (size_t)e * OW; /* = col[r][n*P + oh*OW ...] */
    if (h < 0 || h >= H) {
        for (int ow = 0; ow < OW; ++ow) STORE(dst, ow, 0);
        return;
    }
    const int base = x_off + ((n * C + c) * H + h) * W;
    for (int ow = 0; ow < OW; ++ow) {
        const int w = ow * SW - PW + j * DW;
        STORE(dst, ow, (w >= 0 && w < W) ? LOAD(x, base + w) : (real)0);
    }
}

/* col2im walks its row in CW-wide chunks of private accumulators and, per kernel tap, adds the
 * contiguous run of col that lands in the chunk: no division per pixel and tap (~2x on PoCL). */
#define CW 16

__kernel void col2im(int NB, int C, int H, int W, int KH, int KW, int OH, int OW,
                     int SH, int SW, int PH, int PW, int DH, int DW,
                     __global const store_t *col, __global const store_t *bias, int has_bias,
                     __global store_t *x, int x_off) {
    const int e = get_global_id(0);              /* e = (n*C + c)*H + h */
    if (e >= NB * C * H) return;
    const int h = e % H, z = e / H;
    const int c = z % C, n = z / C;
    const int P = OH * OW, NP = NB * P;
    const real b = has_bias ? LOAD(bias, c) : 0;
    for (int wc = 0; wc < W; wc += CW) {
        const int wn = min(CW, W - wc);
        real acc[CW];
        for (int q = 0; q < CW; ++q) acc[q] = b;
        for (int i = 0; i < KH; ++i) {
            const int th = h + PH - i * DH;      /* = oh * SH when tap i of row oh lands on h */
            if (th < 0) break;
            if (th % SH) continue;
            const int oh = th / SH;
            if (oh >= OH) continue;
            for (int j = 0; j < KW; ++j) {
                /* output column ow puts tap j on input column w0 + ow*SW; those inside [wc, wc + wn) */
                const int w0 = j * DW - PW, lo = wc - w0, hi = wc + wn - w0;
                const int ow0 = lo <= 0 ? 0 : (lo + SW - 1) / SW;
                const int ow1 = hi <= 0 ? 0 : min(OW, (hi + SW - 1) / SW);
                __global const store_t *src = col + (size_t)((c * KH + i) * KW + j) * NP + n * P + oh * OW;
                for (int ow = ow0; ow < ow1; ++ow) acc[w0 + ow * SW - wc] += LOAD(src, ow);
            }
        }
        for (int q = 0; q < wn; ++q) STORE(x, x_off + e * W + wc + q, acc[q]);
    }
}

__kernel void onp_to_nop(int NB, int O, int OH, int OW, __global const store_t *t, __global const store_t *bias,
                         int has_bias, __global store_t *y, int y_off) {
    const int e = get_global_id(0);              /* e = (n*O + o)*OH + oh */
    if (e >= NB * O * OH) return;
    const int oh = e % OH, z = e / OH;
    const int o = z % O, n = z / O;
    const real b = has_bias ? LOAD(bias, o) : 0;
    const int src = ((o * NB + n) * OH + oh) * OW, dst = y_off + e * OW;
    for (int ow = 0; ow < OW; ++ow) STORE(y, dst + ow, LOAD(t, src + ow) + b);
}

__kernel void nop_to_onp(int NB, int O, int OH, int OW, __global const store_t *y, int y_off,
                         __global store_t *t) {
    const int e = get_global_id(0);              /* e = (n*O + o)*OH + oh */
    if (e >= NB * O * OH) return;
    const int oh = e % OH, z = e / OH;
    const int o = z % O, n = z / O;
    const int src = y_off + e * OW, dst = ((o * NB + n) * OH + oh) * OW;
    for (int ow = 0; ow < OW; ++ow) STORE(t, dst + ow, LOAD(y, src + ow));
}
