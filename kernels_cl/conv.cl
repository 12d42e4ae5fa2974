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
 *   onp_to_nop    y chunk (NB, O, P) at y_off <- t (O, NB, P), plus an optional per-channel bias
 * Defines: only the element type (clnn_dtype.h).
 */
#include "clnn_dtype.h"

__kernel void im2col(int NB, int C, int H, int W, int KH, int KW, int OH, int OW,
                     int SH, int SW, int PH, int PW, int DH, int DW,
                     __global const store_t *x, int x_off, __global store_t *col) {
    const int q = get_global_id(0);              /* column: n*P + p */
    const int r = get_global_id(1);              /* row: (c*KH + i)*KW + j */
    const int P = OH * OW, NP = NB * P;
    if (q >= NP || r >= C * KH * KW) return;
    const int n = q / P, p = q - n * P;
    const int oh = p / OW, ow = p - oh * OW;
    const int j = r % KW, t = r / KW;
    const int i = t % KH, c = t / KH;
    const int h = oh * SH - PH + i * DH, w = ow * SW - PW + j * DW;
    real v = 0;
    if (h >= 0 && h < H && w >= 0 && w < W) v = LOAD(x, x_off + ((n * C + c) * H + h) * W + w);
    STORE(col, r * NP + q, v);
}

__kernel void col2im(int NB, int C, int H, int W, int KH, int KW, int OH, int OW,
                     int SH, int SW, int PH, int PW, int DH, int DW,
                     __global const store_t *col, __global const store_t *bias, int has_bias,
                     __global store_t *x, int x_off) {
    const int e = get_global_id(0);              /* (n, c, h, w) within the chunk */
    if (e >= NB * C * H * W) return;
    const int w = e % W, t0 = e / W;
    const int h = t0 % H, t1 = t0 / H;
    const int c = t1 % C, n = t1 / C;
    const int P = OH * OW, NP = NB * P;
    real acc = has_bias ? LOAD(bias, c) : 0;
    for (int i = 0; i < KH; ++i) {
        const int th = h + PH - i * DH;          /* = oh * SH when tap i of row oh lands on h */
        if (th < 0) break;
        if (th % SH) continue;
        const int oh = th / SH;
        if (oh >= OH) continue;
        for (int j = 0; j < KW; ++j) {
            const int tw = w + PW - j * DW;
            if (tw < 0) break;
            if (tw % SW) continue;
            const int ow = tw / SW;
            if (ow >= OW) continue;
            acc += LOAD(col, ((c * KH + i) * KW + j) * NP + n * P + oh * OW + ow);
        }
    }
    STORE(x, x_off + e, acc);
}

__kernel void onp_to_nop(int NB, int O, int P, __global const store_t *t, __global const store_t *bias,
                         int has_bias, __global store_t *y, int y_off) {
    const int e = get_global_id(0);              /* (n, o, p) within the chunk */
    if (e >= NB * O * P) return;
    const int p = e % P, t0 = e / P;
    const int o = t0 % O, n = t0 / O;
    real v = LOAD(t, (o * NB + n) * P + p);
    if (has_bias) v += LOAD(bias, o);
    STORE(y, y_off + e, v);
}
