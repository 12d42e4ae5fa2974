/* winograd.cl: 3x3 stride-1 convolutions by Winograd's minimal filtering, F(2x2, 3x3) (Lavin and Gray, 2015).
 *
 * Output tile t = (n, ti, tj) covers outputs (2ti .. 2ti+1, 2tj .. 2tj+1) and reads the 4x4 input window at
 * (2ti - PH, 2tj - PW), zero outside the image; T = N*TH*TW tiles, TH = ceil(OH/2), TW = ceil(OW/2). In the
 * transformed domain a convolution is 16 independent products, one per position xi of the 4x4 tile (conv.py
 * runs them as one batched GEMM):  M[xi] (O x T) = U[xi] (O x C) @ V[xi] (C x T),  with
 *   V = B^T d B   (wino_data: each input channel's window d)
 *   U = G g G^T   (wino_filter: each 3x3 filter g; FLIP: the input gradient's transposed, reversed filters)
 *   y = A^T M A   (wino_store: the 2x2 outputs, plus the bias, through gemm.h's store_act)
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
 * A^T = [1 1 1 0; 0 1 -1 -1]: 2.25x fewer multiply-adds than the direct product, and every coefficient a
 * power of two, so the transforms round no more than the sums they are.
 *
 * The weight gradient is F(3x3, 2x2), the same window d correlated with gy's 2x2 tile g:
 *   gW[xi] (O x C) = Z[xi] (O x T) @ V[xi]^T (T x C), summed over the tiles by the GEMM,
 *   Z = H g H^T   (wino_grad_tiles; H = [1 0; 1/2 1/2; 1/2 -1/2; 0 -1], the sign matching B^T's last row;
 *                  gy outside OH x OW is zero)
 *   gw = E^T gW E (wino_filter_grad; E^T = [1 1 1 0; 0 1 -1 0; 0 1 1 1]).
 * wino_data, wino_grad_tiles and wino_store cover tiles T0 .. T0 + TC - 1 (a chunk of the batch's tiles, so
 * the transformed planes stay within a fixed workspace); planes are laid out as plane[xi*XS + row*RS + t*TS].
 *
 * Defines: the element type (clnn_dtype.h); the planes are `real` (float for the half types). gemm.h's A_F32 (w in
 * wino_filter, gy in wino_grad_tiles) and B_F32 (x or gy in wino_data): that operand is float32, rounded to
 * store_t as it is loaded (clnn.autocast, as conv.cl's loads); C_F32: y (and pre) or gw is float32 holding
 * store_t's rounded result. Launch: 2-D, one work-item per (tile or column, row).
 */
#include "gemm.h"

/* out[0..3] = B^T (a, b, c, d): the data transform along one axis */
#define DATA_T(o0, o1, o2, o3, a, b, c, d) (o0 = (a) - (c), o1 = (b) + (c), o2 = (c) - (b), o3 = (b) - (d))

#ifdef KERNEL_wino_data
__kernel void wino_data(int C, int H, int W, int PH, int PW, int TH, int TW, int T0, int TC, int XS, int RS,
                        int TS, __global const b_t *restrict x, __global real *restrict v) {
    const int tl = get_global_id(0), c = get_global_id(1), t = T0 + tl;
    if (tl >= TC || c >= C) return;
    const int tj = t % TW, ti = t / TW % TH, n = t / (TW * TH), h0 = 2 * ti - PH, w0 = 2 * tj - PW;
    __global const b_t *xc = x + ((size_t)n * C + c) * H * W;
    real d[4][4], e[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int h = h0 + a, w = w0 + b;
            d[a][b] = h >= 0 && h < H && w >= 0 && w < W ? LOAD_B(xc, h * W + w) : (real)0;
        }
#pragma unroll
    for (int b = 0; b < 4; ++b) DATA_T(e[0][b], e[1][b], e[2][b], e[3][b], d[0][b], d[1][b], d[2][b], d[3][b]);
#pragma unroll
    for (int a = 0; a < 4; ++a) DATA_T(d[a][0], d[a][1], d[a][2], d[a][3], e[a][0], e[a][1], e[a][2], e[a][3]);
    __global real *out = v + (size_t)c * RS + (size_t)tl * TS;
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) out[(size_t)(a * 4 + b) * XS] = d[a][b];
}
#endif

/* out[0..3] = G (a, b, c): the filter transform along one axis */
#define FILTER_T(o0, o1, o2, o3, a, b, c) \
    (o0 = (a), o1 = ((a) + (b) + (c)) * (real)0.5, o2 = ((a) - (b) + (c)) * (real)0.5, o3 = (c))

#ifdef KERNEL_wino_filter
/* U[xi][o][c] = (G w[o][c] G^T)[xi] for w (O, C, 3, 3); FLIP: U[xi][c][o] from w[o][c] reversed in both taps.
 * The grid's first axis runs along U's rows (c, or o with FLIP), so neighbouring work-items store neighbours */
__kernel void wino_filter(int O, int C, int FLIP, __global const a_t *restrict w, __global real *restrict u) {
    const int c = get_global_id(FLIP ? 1 : 0), o = get_global_id(FLIP ? 0 : 1);
    if (c >= C || o >= O) return;
    __global const a_t *wf = w + ((size_t)o * C + c) * 9;
    real g[3][3], e[4][3], f[4][4];
#pragma unroll
    for (int i = 0; i < 9; ++i) g[i / 3][i % 3] = LOAD_A(wf, FLIP ? 8 - i : i);
#pragma unroll
    for (int j = 0; j < 3; ++j) FILTER_T(e[0][j], e[1][j], e[2][j], e[3][j], g[0][j], g[1][j], g[2][j]);
#pragma unroll
    for (int a = 0; a < 4; ++a) FILTER_T(f[a][0], f[a][1], f[a][2], f[a][3], e[a][0], e[a][1], e[a][2]);
    const size_t at = FLIP ? (size_t)c * O + o : (size_t)o * C + c, plane = (size_t)O * C;
#pragma unroll
    for (int xi = 0; xi < 16; ++xi) u[xi * plane + at] = f[xi / 4][xi % 4];
}
#endif

#ifdef KERNEL_wino_store
/* y[n][o][2ti + a][2tj + b] = act((A^T M[.][o][t] A)[a][b] + bias[o]) for the tiles T0 .. of M's (16, O, TC) planes */
__kernel void wino_store(int O, int OH, int OW, int TH, int TW, int T0, int TC, __global const real *restrict m,
                         __global const store_t *restrict bias, int has_bias, int act, int keep,
                         __global c_t *pre, __global c_t *y) {
    const int tl = get_global_id(0), o = get_global_id(1), t = T0 + tl;
    if (tl >= TC || o >= O) return;
    const int tj = t % TW, ti = t / TW % TH, n = t / (TW * TH);
    real f[4][4], e[2][4];
#pragma unroll
    for (int xi = 0; xi < 16; ++xi) f[xi / 4][xi % 4] = m[((size_t)xi * O + o) * TC + tl];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        e[0][b] = f[0][b] + f[1][b] + f[2][b];
        e[1][b] = f[1][b] - f[2][b] - f[3][b];
    }
    const real add = has_bias ? LOAD(bias, o) : (real)0;
#pragma unroll
    for (int a = 0; a < 2; ++a) {
        const int oh = 2 * ti + a;
        if (oh >= OH) break;
        const real out[2] = {e[a][0] + e[a][1] + e[a][2], e[a][1] - e[a][2] - e[a][3]};
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const int ow = 2 * tj + b;
            if (ow < OW)
                store_act(y, pre, (((size_t)n * O + o) * OH + oh) * OW + ow, has_bias ? out[b] + add : out[b], act, keep);
        }
    }
}
#endif

/* out[0..3] = H (a, b): the transform of gy's 2-tap tile along one axis */
#define GRAD_T(o0, o1, o2, o3, a, b) (o0 = (a), o1 = ((a) + (b)) * (real)0.5, o2 = ((a) - (b)) * (real)0.5, o3 = -(b))

#ifdef KERNEL_wino_grad_tiles
/* Z[xi][o][t] = (H g H^T)[xi] for gy's 2x2 tile g at (2ti, 2tj) of channel o, tiles T0 .. */
__kernel void wino_grad_tiles(int O, int OH, int OW, int TH, int TW, int T0, int TC, int XS, int RS, int TS,
                              __global const a_t *restrict gy, __global real *restrict z) {
    const int tl = get_global_id(0), o = get_global_id(1), t = T0 + tl;
    if (tl >= TC || o >= O) return;
    const int tj = t % TW, ti = t / TW % TH, n = t / (TW * TH), h0 = 2 * ti, w0 = 2 * tj;
    __global const a_t *go = gy + ((size_t)n * O + o) * OH * OW;
    real g[2][2], e[4][2], f[4][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b)
            g[a][b] = h0 + a < OH && w0 + b < OW ? LOAD_A(go, (h0 + a) * OW + w0 + b) : (real)0;
#pragma unroll
    for (int b = 0; b < 2; ++b) GRAD_T(e[0][b], e[1][b], e[2][b], e[3][b], g[0][b], g[1][b]);
#pragma unroll
    for (int a = 0; a < 4; ++a) GRAD_T(f[a][0], f[a][1], f[a][2], f[a][3], e[a][0], e[a][1]);
    __global real *out = z + (size_t)o * RS + (size_t)tl * TS;
#pragma unroll
    for (int xi = 0; xi < 16; ++xi) out[(size_t)xi * XS] = f[xi / 4][xi % 4];
}
#endif

#ifdef KERNEL_wino_filter_grad
/* gw[o][c] (3x3) = E^T gW[.][o][c] E from the (16, O, C) planes */
__kernel void wino_filter_grad(int O, int C, __global const real *restrict m, __global c_t *restrict gw) {
    const int c = get_global_id(0), o = get_global_id(1);
    if (c >= C || o >= O) return;
    const size_t plane = (size_t)O * C, at = (size_t)o * C + c;
    real f[4][4], e[3][4];
#pragma unroll
    for (int xi = 0; xi < 16; ++xi) f[xi / 4][xi % 4] = m[xi * plane + at];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        e[0][b] = f[0][b] + f[1][b] + f[2][b];
        e[1][b] = f[1][b] - f[2][b];
        e[2][b] = f[1][b] + f[2][b] + f[3][b];
    }
#pragma unroll
    for (int a = 0; a < 3; ++a) {
        STORE_C(gw, at * 9 + a * 3, e[a][0] + e[a][1] + e[a][2]);
        STORE_C(gw, at * 9 + a * 3 + 1, e[a][1] - e[a][2]);
        STORE_C(gw, at * 9 + a * 3 + 2, e[a][1] + e[a][2] + e[a][3]);
    }
}
#endif
