/* winograd.cl: 3x3 stride-1 convolutions by Winograd's minimal filtering F(MxM, 3x3), M = WINO_M (2 or 4)
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).
 *
 * With AL = M + 2: output tile t = (n, ti, tj) covers outputs (M*ti .., M*tj ..), M x M of them, and reads the
 * AL x AL input window at (M*ti - PH, M*tj - PW), zero outside the image; T = N*TH*TW tiles, TH = ceil(OH/M),
 * TW = ceil(OW/M). In the transformed domain a convolution is AL*AL independent products, one per position xi
 * of the window (conv.py runs them as one batched GEMM):  M[xi] (O x T) = U[xi] (O x C) @ V[xi] (C x T), with
 *   V = BT d BT^T   (wino_data: each input channel's window d)
 *   U = G g G^T     (wino_filter: each 3x3 filter g; FLIP: the input gradient's transposed, reversed filters)
 *   y = AT M AT^T   (wino_store: the M x M outputs, plus the bias, through gemm.h's store_act)
 * The weight gradient is F(3x3, MxM) with the same matrices (the transposition principle): the same windows d
 * correlated with gy's M x M tiles g,
 *   gW[xi] (O x C) = Z[xi] (O x T) @ V[xi]^T (T x C), summed over the tiles by the GEMM,
 *   Z = AT^T g AT   (wino_grad_tiles; gy outside OH x OW is zero)
 *   gw = G^T gW G   (wino_filter_grad).
 * F(2x2, 3x3): 2.25x fewer multiply-adds than the direct product, every coefficient a power of two. F(4x4, 3x3):
 * 4x fewer and 2.25 plane elements per output against 4, but coefficients up to 8 and thirds that round: about
 * 7x F(2x2)'s rounding error (float32, 256 channels: 3.3e-6 of the output's norm against 5e-7).
 * wino_data, wino_grad_tiles and wino_store cover tiles T0 .. T0 + TC - 1 (a chunk of the batch's tiles, so
 * the transformed planes stay within a fixed workspace); planes are laid out as plane[xi*XS + row*RS + t*TS].
 *
 * Defines: the element type (clnn_dtype.h), WINO_M; the planes are `real` (float for the half types). gemm.h's
 * A_F32 (w in wino_filter, gy in wino_grad_tiles) and B_F32 (x or gy in wino_data): that operand is float32,
 * rounded to store_t as it is loaded (clnn.autocast, as conv.cl's loads); C_F32: y (and pre) or gw is float32
 * holding store_t's rounded result. Launch: 2-D, one work-item per (tile or column, row).
 */
#include "gemm.h"

#ifndef WINO_M
#define WINO_M 2
#endif
#define AL (WINO_M + 2)

/* the transforms' matrices: constants, so the unrolled products below fold to adds and a few multiplies */
#if WINO_M == 2
__constant real BT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
__constant real GM[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
__constant real AT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
#elif WINO_M == 4
#define R6 ((real)1 / 6)
#define R12 ((real)1 / 12)
#define R24 ((real)1 / 24)
__constant real BT[6][6] = {{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                            {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
__constant real GM[6][3] = {{0.25f, 0, 0}, {-R6, -R6, -R6}, {-R6, R6, -R6},
                            {R24, R12, R6}, {R24, -R12, R6}, {0, 0, 1}};
__constant real AT[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
#else
#error "WINO_M must be 2 or 4"
#endif

/* L's element (r, i), for L as written (ROW) or given transposed (COL) */
#define ROW(L, r, i) L[r][i]
#define COL(L, r, i) L[i][r]

/* out = L in L^T for `in` (I x I) and an R x I matrix L read through GET (ROW or COL):
 * out[r][s] = sum_i sum_j L(r, i) in[i][j] L(s, j) */
#define SANDWICH(out, GET, L, in, R, I)                                                             \
    do {                                                                                            \
        real half_[R][I];                                                                           \
        _Pragma("unroll") for (int r = 0; r < (R); ++r)                                             \
            _Pragma("unroll") for (int j = 0; j < (I); ++j) {                                       \
                real s_ = 0;                                                                        \
                _Pragma("unroll") for (int i = 0; i < (I); ++i) s_ += GET(L, r, i) * in[i][j];      \
                half_[r][j] = s_;                                                                   \
            }                                                                                       \
        _Pragma("unroll") for (int r = 0; r < (R); ++r)                                             \
            _Pragma("unroll") for (int s = 0; s < (R); ++s) {                                       \
                real s_ = 0;                                                                        \
                _Pragma("unroll") for (int j = 0; j < (I); ++j) s_ += half_[r][j] * GET(L, s, j);   \
                out[r][s] = s_;                                                                     \
            }                                                                                       \
    } while (0)

#ifdef KERNEL_wino_data
__kernel void wino_data(int C, int H, int W, int PH, int PW, int TH, int TW, int T0, int TC, int XS, int RS,
                        int TS, __global const b_t *restrict x, __global real *restrict v) {
    const int tl = get_global_id(0), c = get_global_id(1), t = T0 + tl;
    if (tl >= TC || c >= C) return;
    const int tj = t % TW, ti = t / TW % TH, n = t / (TW * TH), h0 = WINO_M * ti - PH, w0 = WINO_M * tj - PW;
    __global const b_t *xc = x + ((size_t)n * C + c) * H * W;
    real d[AL][AL], f[AL][AL];
    if (h0 >= 0 && h0 + AL <= H && w0 >= 0 && w0 + AL <= W) { /* inside the image: no bounds per element */
#pragma unroll
        for (int a = 0; a < AL; ++a)
#pragma unroll
            for (int b = 0; b < AL; ++b) d[a][b] = LOAD_B(xc, (h0 + a) * W + w0 + b);
    } else {
#pragma unroll
        for (int a = 0; a < AL; ++a)
#pragma unroll
            for (int b = 0; b < AL; ++b) {
                const int h = h0 + a, w = w0 + b;
                d[a][b] = h >= 0 && h < H && w >= 0 && w < W ? LOAD_B(xc, h * W + w) : (real)0;
            }
    }
    SANDWICH(f, ROW, BT, d, AL, AL);
    __global real *out = v + (size_t)c * RS + (size_t)tl * TS;
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) out[(size_t)xi * XS] = f[xi / AL][xi % AL];
}
#endif

#ifdef KERNEL_wino_filter
/* U[xi][o][c] = (G w[o][c] G^T)[xi] for w (O, C, 3, 3); FLIP: U[xi][c][o] from w[o][c] reversed in both taps.
 * The grid's first axis runs along U's rows (c, or o with FLIP), so neighbouring work-items store neighbours */
__kernel void wino_filter(int O, int C, int FLIP, __global const a_t *restrict w, __global real *restrict u) {
    const int c = get_global_id(FLIP ? 1 : 0), o = get_global_id(FLIP ? 0 : 1);
    if (c >= C || o >= O) return;
    __global const a_t *wf = w + ((size_t)o * C + c) * 9;
    real g[3][3], f[AL][AL];
#pragma unroll
    for (int i = 0; i < 9; ++i) g[i / 3][i % 3] = LOAD_A(wf, FLIP ? 8 - i : i);
    SANDWICH(f, ROW, GM, g, AL, 3);
    const size_t at = FLIP ? (size_t)c * O + o : (size_t)o * C + c, plane = (size_t)O * C;
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) u[xi * plane + at] = f[xi / AL][xi % AL];
}
#endif

#ifdef KERNEL_wino_store
/* y[n][o][M*ti + a][M*tj + b] = act((AT M[.][o][t] AT^T)[a][b] + bias[o]) for tiles T0 .. of (AL*AL, O, TC) planes */
__kernel void wino_store(int O, int OH, int OW, int TH, int TW, int T0, int TC, __global const real *restrict m,
                         __global const store_t *restrict bias, int has_bias, int act, int keep,
                         __global c_t *pre, __global c_t *y) {
    const int tl = get_global_id(0), o = get_global_id(1), t = T0 + tl;
    if (tl >= TC || o >= O) return;
    const int tj = t % TW, ti = t / TW % TH, n = t / (TW * TH);
    real f[AL][AL], out[WINO_M][WINO_M];
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) f[xi / AL][xi % AL] = m[((size_t)xi * O + o) * TC + tl];
    SANDWICH(out, ROW, AT, f, WINO_M, AL);
    const real add = has_bias ? LOAD(bias, o) : (real)0;
#pragma unroll
    for (int a = 0; a < WINO_M; ++a) {
        const int oh = WINO_M * ti + a;
        if (oh >= OH) break;
#pragma unroll
        for (int b = 0; b < WINO_M; ++b) {
            const int ow = WINO_M * tj + b;
            if (ow < OW)
                store_act(y, pre, (((size_t)n * O + o) * OH + oh) * OW + ow, has_bias ? out[a][b] + add : out[a][b],
                          act, keep);
        }
    }
}
#endif

#ifdef KERNEL_wino_grad_tiles
/* Z[xi][o][t] = (AT^T g AT)[xi] for gy's M x M tile g at (M*ti, M*tj) of channel o, tiles T0 .. */
__kernel void wino_grad_tiles(int O, int OH, int OW, int TH, int TW, int T0, int TC, int XS, int RS, int TS,
                              __global const a_t *restrict gy, __global real *restrict z) {
    const int tl = get_global_id(0), o = get_global_id(1), t = T0 + tl;
    if (tl >= TC || o >= O) return;
    const int tj = t % TW, ti = t / TW % TH, n = t / (TW * TH), h0 = WINO_M * ti, w0 = WINO_M * tj;
    __global const a_t *go = gy + ((size_t)n * O + o) * OH * OW;
    real g[WINO_M][WINO_M], f[AL][AL];
#pragma unroll
    for (int a = 0; a < WINO_M; ++a)
#pragma unroll
        for (int b = 0; b < WINO_M; ++b)
            g[a][b] = h0 + a < OH && w0 + b < OW ? LOAD_A(go, (h0 + a) * OW + w0 + b) : (real)0;
    SANDWICH(f, COL, AT, g, AL, WINO_M);
    __global real *out = z + (size_t)o * RS + (size_t)tl * TS;
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) out[(size_t)xi * XS] = f[xi / AL][xi % AL];
}
#endif

#ifdef KERNEL_wino_filter_grad
/* gw[o][c] (3x3) = G^T gW[.][o][c] G from the (AL*AL, O, C) planes */
__kernel void wino_filter_grad(int O, int C, __global const real *restrict m, __global c_t *restrict gw) {
    const int c = get_global_id(0), o = get_global_id(1);
    if (c >= C || o >= O) return;
    const size_t plane = (size_t)O * C, at = (size_t)o * C + c;
    real f[AL][AL], out[3][3];
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) f[xi / AL][xi % AL] = m[xi * plane + at];
    SANDWICH(out, COL, GM, f, 3, AL);
#pragma unroll
    for (int i = 0; i < 9; ++i) STORE_C(gw, at * 9 + i, out[i / 3][i % 3]);
}
#endif
