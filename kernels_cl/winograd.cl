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
 * wino_data, wino_grad_tiles and wino_store cover tile rows R0 .. R0 + RC - 1 (a chunk of the batch's N*TH rows of
 * TW tiles, so the transformed planes stay within a fixed workspace), VT neighbouring tiles of a row per work-item
 * (TILES): VT 1 for GPUs (a work-item per tile: parallelism, and neighbours store neighbours); on CPUs 16, the
 * lanes of explicit vectors, so the per-tile index arithmetic is done once per row and the loads are runs of the
 * image row (Zen 5, 8x128 channels at 56^2: wino_data 6.2 -> 4.7 ms on PoCL, 6.5 -> 2.8 ms on Intel's runtime).
 * Planes are laid out as plane[xi][row][t], row the channel, t = (tile row - R0) * TW + tj within the chunk.
 *
 * Defines: the element type (clnn_dtype.h), WINO_M, VT; the planes are `real` (float for the half types). gemm.h's
 * A_F32 (w in wino_filter, gy in wino_grad_tiles) and B_F32 (x or gy in wino_data): that operand is float32,
 * rounded to store_t as it is loaded (clnn.autocast, as conv.cl's loads); C_F32: y (and pre) or gw is float32
 * holding store_t's rounded result. Launch: the transforms 3-D, (ceil(TW / VT), RC, channels); the filter ones
 * 2-D, one work-item per (column, row).
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

/* out = L in L^T for `in` (I x I, of type T: real, or vt for VT tiles at once) and an R x I matrix L read through
 * GET (ROW or COL): out[r][s] = sum_i sum_j L(r, i) in[i][j] L(s, j) */
#define SANDWICH(out, T, GET, L, in, R, I)                                                          \
    do {                                                                                            \
        T half_[R][I];                                                                              \
        _Pragma("unroll") for (int r = 0; r < (R); ++r)                                             \
            _Pragma("unroll") for (int j = 0; j < (I); ++j) {                                       \
                T s_ = 0;                                                                           \
                _Pragma("unroll") for (int i = 0; i < (I); ++i) s_ += GET(L, r, i) * in[i][j];      \
                half_[r][j] = s_;                                                                   \
            }                                                                                       \
        _Pragma("unroll") for (int r = 0; r < (R); ++r)                                             \
            _Pragma("unroll") for (int s = 0; s < (R); ++s) {                                       \
                T s_ = 0;                                                                           \
                _Pragma("unroll") for (int j = 0; j < (I); ++j) s_ += half_[r][j] * GET(L, s, j);   \
                out[r][s] = s_;                                                                     \
            }                                                                                       \
    } while (0)

/* VT neighbouring tiles of a tile row per work-item, as the lanes of vt (VT 1: real, one tile) */
#ifndef VT
#define VT 1
#endif
#if VT == 1
typedef real vt;
#else
typedef CAT(REAL_T, VT) vt;
#endif
/* vt_lanes (a vt's lanes by index), vt_load, vt_store (clnn_dtype.h): vectors are filled and emptied lane by lane,
 * which compilers turn into vector moves, on every runtime: vloadn and vstoren are out-of-line calls on PoCL (half
 * of wino_data's time there), and Intel's runtime ran these kernels as fast either way */
VEC_LANE_IO(vt, vt, real, VT)

/* dst[b] (b < COLS) = the tiles' column b from a row run: lane q takes run[WINO_M * q + b] (tile q's window or tile
 * starts WINO_M further along the row) */
#define RUN_LANES(dst, run, COLS)                                                                   \
    do {                                                                                            \
        vt_lanes l_;                                                                                \
        _Pragma("unroll") for (int b = 0; b < (COLS); ++b) {                                        \
            _Pragma("unroll") for (int q = 0; q < VT; ++q) l_.s[q] = (run)[WINO_M * q + b];         \
            dst[b] = l_.v;                                                                          \
        }                                                                                           \
    } while (0)

/* the work-item's tiles: tile row R0 + rl (image n, tile row ti), tiles tj0 .. tj0 + VT - 1 of its TW (those
 * < TW exist); grid (ceil(TW / VT), RC, rows of the planes). Returns false for a work-item past the grid. */
#define TILES(TW, RC, ROWS)                                                                         \
    const int tj0 = get_global_id(0) * VT, rl = get_global_id(1), pr = get_global_id(2);          \
    if (tj0 >= (TW) || rl >= (RC) || pr >= (ROWS)) return;                                          \
    const int ti = (R0 + rl) % TH, n = (R0 + rl) / TH, live = min(VT, (TW) - tj0)

/* stores f (AL x AL, the tiles' lanes) into the planes: plane row pr's tiles at plane[xi][pr][rl * TW + tj0 ..]
 * (a macro: a function taking f lost its registers to memory on Intel's runtime) */
#if VT == 1
#define STORE_PLANES(v, rows, RC, TW, f)                                                            \
    do {                                                                                            \
        const size_t TC_ = (size_t)(RC) * (TW), XS_ = (size_t)(rows) * TC_;                         \
        __global real *out_ = (v) + pr * TC_ + (size_t)rl * (TW) + tj0;                             \
        _Pragma("unroll") for (int xi = 0; xi < AL * AL; ++xi) out_[xi * XS_] = f[xi / AL][xi % AL]; \
    } while (0)
#else
#define STORE_PLANES(v, rows, RC, TW, f)                                                            \
    do {                                                                                            \
        const size_t TC_ = (size_t)(RC) * (TW), XS_ = (size_t)(rows) * TC_;                         \
        __global real *out_ = (v) + pr * TC_ + (size_t)rl * (TW) + tj0;                             \
        if (live == VT) {                                                                           \
            _Pragma("unroll") for (int xi = 0; xi < AL * AL; ++xi)                                  \
                vt_store(f[xi / AL][xi % AL], 0, out_ + xi * XS_);                                  \
        } else {                                                                                    \
            _Pragma("unroll") for (int xi = 0; xi < AL * AL; ++xi)                                  \
                STORE_LIVE(f[xi / AL][xi % AL], out_ + xi * XS_, live);                             \
        }                                                                                           \
    } while (0)

/* p[0 .. n) = the first n < VT lanes of the vt v: per set bit K of n, K lanes stored together (one vector move) and
 * the lanes after them moved down (a lane-by-lane loop to n: Intel's runtime took 1.25-1.5x as long over wino_data's
 * rows of 14 tiles) */
#define STORE_LIVE(v, p, n)                                                                         \
    do {                                                                                            \
        vt_lanes v_ = {v};                                                                          \
        __global real *p_ = (p);                                                                    \
        STORE_LIVE_8(v_, p_, n);                                                                    \
        STORE_LIVE_4(v_, p_, n);                                                                    \
        STORE_LIVE_2(v_, p_, n);                                                                    \
        if ((n) & 1) *p_ = v_.s[0];                                                                 \
    } while (0)
/* STORE_LIVE_K(l, p, n): with bit K of n, the vt_lanes l's first K lanes to p, then p moves on K and l's next K lanes
 * down */
#define STORE_LIVE_LANES(l, p, n, K, MOVE)                                                          \
    if ((n) & (K)) {                                                                                \
        _Pragma("unroll") for (int q = 0; q < (K); ++q) (p)[q] = (l).s[q];                          \
        p += (K);                                                                                   \
        MOVE;                                                                                       \
    }
#if VT == 16
#define STORE_LIVE_8(l, p, n) STORE_LIVE_LANES(l, p, n, 8, (l).v.lo = (l).v.hi)
#else
#define STORE_LIVE_8(l, p, n)
#endif
#if VT >= 8
#define STORE_LIVE_4(l, p, n) STORE_LIVE_LANES(l, p, n, 4, (l).v.s0123 = (l).v.s4567)
#else
#define STORE_LIVE_4(l, p, n)
#endif
#if VT >= 4
#define STORE_LIVE_2(l, p, n) STORE_LIVE_LANES(l, p, n, 2, (l).v.s01 = (l).v.s23)
#else
#define STORE_LIVE_2(l, p, n)
#endif
#endif

#ifdef KERNEL_wino_data
/* V planes (AL*AL, C, RC*TW) of x's windows for tile rows R0 .. R0 + RC - 1 */
__kernel void wino_data(int C, int H, int W, int PH, int PW, int TH, int TW, int R0, int RC,
                        __global const b_t *restrict x, __global real *restrict v) {
    TILES(TW, RC, C);
    const int h0 = WINO_M * ti - PH, w0 = WINO_M * tj0 - PW;
    __global const b_t *xc = x + ((size_t)n * C + pr) * H * W;
    vt d[AL][AL], f[AL][AL];
#if VT == 1 /* GPUs: d's row a indexed at run time put d in the stack (144 bytes, bfloat16's loads); PoCL's VT 16
             * build ran 1.3x slower unrolled */
#pragma unroll
#endif
    for (int a = 0; a < AL; ++a) { /* the row's run of the windows, zero outside the image */
        const int h = h0 + a;
        real run[WINO_M * VT + 2];
#pragma unroll
        for (int e = 0; e < WINO_M * VT + 2; ++e)
            run[e] = h >= 0 && h < H && w0 + e >= 0 && w0 + e < W ? LOAD_B(xc, h * W + w0 + e) : (real)0;
        RUN_LANES(d[a], run, AL);
    }
    SANDWICH(f, vt, ROW, BT, d, AL, AL);
    STORE_PLANES(v, C, RC, TW, f);
}
#endif

#ifdef KERNEL_wino_filter
/* U[xi][o][c] = (G w[o][c] G^T)[xi] for w (O, C, 3, 3); FLIP: U[xi][c][o] from w[o][c] reversed in both taps.
 * A flat grid along U's rows (c, or o with FLIP), so neighbouring work-items store neighbours */
__kernel void wino_filter(int O, int C, int FLIP, __global const a_t *restrict w, __global real *restrict u) {
    const int e = get_global_id(0), along = FLIP ? O : C;
    if (e >= O * C) return;
    const int c = FLIP ? e / along : e % along, o = FLIP ? e % along : e / along;
    __global const a_t *wf = w + ((size_t)o * C + c) * 9;
    real g[3][3], f[AL][AL];
#if A_F32 && STORE_HALF && VW == 8 && !HALF_SOFT
    /* float32 taps rounded to half: eight in one vector (one at a time, Intel's runtime ran AlexNet's filters 11x
     * slower than float32's, 67 against 5 ms). bf16's rounding is integer arithmetic that vectorizes across
     * work-items as it is (49 ms through this vector), and PoCL's software half rounding ran 51-62 ms through
     * it against 37 */
    union { realv v; real s[8]; } lo = {CAT(vec_round, 8)(vload8(0, wf))};
    const real last = LOAD_A(wf, 8);
#pragma unroll
    for (int i = 0; i < 9; ++i) g[i / 3][i % 3] = FLIP ? (i == 0 ? last : lo.s[8 - i]) : (i == 8 ? last : lo.s[i]);
#else
#pragma unroll
    for (int i = 0; i < 9; ++i) g[i / 3][i % 3] = LOAD_A(wf, FLIP ? 8 - i : i);
#endif
    SANDWICH(f, real, ROW, GM, g, AL, 3);
    const size_t at = FLIP ? (size_t)c * O + o : (size_t)o * C + c, plane = (size_t)O * C;
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) u[xi * plane + at] = f[xi / AL][xi % AL];
}
#endif

#ifdef KERNEL_wino_store
/* y[n][o][M*ti + a][M*tj + b] = act((AT M[.][o][t] AT^T)[a][b] + bias[o]) for tile rows R0 .. of (AL*AL, O, RC*TW)
 * planes */
__kernel void wino_store(int O, int OH, int OW, int TH, int TW, int R0, int RC, __global const real *restrict m,
                         __global const store_t *restrict bias, int has_bias, int act, int keep,
                         __global c_t *pre, __global c_t *y) {
    TILES(TW, RC, O);
    const size_t TC = (size_t)RC * TW, XS = (size_t)O * TC;
    __global const real *in = m + pr * TC + (size_t)rl * TW + tj0;
    vt f[AL][AL], out[WINO_M][WINO_M];
#if VT > 1 /* whole vectors but in the plane's last VT elements: lanes past `live` are other tiles', never stored */
    const bool whole = pr * TC + (size_t)rl * TW + tj0 + VT <= XS;
#endif
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) {
#if VT == 1
        f[xi / AL][xi % AL] = in[xi * XS];
#else
        if (whole) {
            f[xi / AL][xi % AL] = vt_load(0, in + xi * XS);
        } else {
            vt_lanes l;
#pragma unroll
            for (int q = 0; q < VT; ++q) l.s[q] = q < live ? in[xi * XS + q] : (real)0;
            f[xi / AL][xi % AL] = l.v;
        }
#endif
    }
    SANDWICH(out, vt, ROW, AT, f, WINO_M, AL);
    const real add = has_bias ? LOAD(bias, pr) : (real)0;
    const int ow0 = WINO_M * tj0, cols = min(WINO_M * VT, OW - ow0), rows = min(WINO_M, OH - WINO_M * ti);
    /* rows and (with VT 1) columns to their constant counts, tested inside: out and run indexed at run time would
     * live in each work-item's stack on GPUs (80 bytes in clang's NVPTX build) */
#pragma unroll
    for (int a = 0; a < WINO_M; ++a) {
        if (a >= rows) continue;
        real run[WINO_M * VT];
#pragma unroll
        for (int b = 0; b < WINO_M; ++b) {
            const vt_lanes l = {has_bias ? out[a][b] + add : out[a][b]};
#pragma unroll
            for (int q = 0; q < VT; ++q) run[WINO_M * q + b] = l.s[q];
        }
        const size_t at = (((size_t)n * O + pr) * OH + WINO_M * ti + a) * OW + ow0;
#if VT == 1
#pragma unroll
        for (int e = 0; e < WINO_M; ++e)
            if (e < cols) store_act(y, pre, at + e, run[e], act, keep);
#else
        for (int e = 0; e < cols; ++e) store_act(y, pre, at + e, run[e], act, keep);
#endif
    }
}
#endif

#ifdef KERNEL_wino_grad_tiles
/* Z planes (AL*AL, O, RC*TW): (AT^T g AT)[xi] for gy's M x M tiles g at (M*ti, M*tj) of channel o, tile rows R0 .. */
__kernel void wino_grad_tiles(int O, int OH, int OW, int TH, int TW, int R0, int RC, __global const a_t *restrict gy,
                              __global real *restrict z) {
    TILES(TW, RC, O);
    const int h0 = WINO_M * ti, w0 = WINO_M * tj0;
    __global const a_t *go = gy + ((size_t)n * O + pr) * OH * OW;
    vt g[WINO_M][WINO_M], f[AL][AL];
#pragma unroll
    for (int a = 0; a < WINO_M; ++a) { /* the row's run of the tiles, zero past OH x OW */
        const int h = h0 + a;
        real run[WINO_M * VT];
#pragma unroll
        for (int e = 0; e < WINO_M * VT; ++e)
            run[e] = h < OH && w0 + e < OW ? LOAD_A(go, h * OW + w0 + e) : (real)0;
        RUN_LANES(g[a], run, WINO_M);
    }
    SANDWICH(f, vt, COL, AT, g, AL, WINO_M);
    STORE_PLANES(z, O, RC, TW, f);
}
#endif

#ifdef KERNEL_wino_filter_grad
/* gw[o][c] (3x3) = G^T gW[.][o][c] G from the (AL*AL, O, C) planes */
__kernel void wino_filter_grad(int O, int C, __global const real *restrict m, __global c_t *restrict gw) {
    const int e = get_global_id(0), c = e % C, o = e / C;
    if (e >= O * C) return;
    const size_t plane = (size_t)O * C, at = (size_t)o * C + c;
    real f[AL][AL], out[3][3];
#pragma unroll
    for (int xi = 0; xi < AL * AL; ++xi) f[xi / AL][xi % AL] = m[xi * plane + at];
    SANDWICH(out, real, COL, GM, f, 3, AL);
#if C_F32 && STORE_HALF && VW == 8 && !HALF_SOFT
    /* a float32 gradient holding half-rounded taps: eight rounded in one vector, as wino_filter's loads */
    union { realv v; real s[8]; } lo;
#pragma unroll
    for (int i = 0; i < 8; ++i) lo.s[i] = out[i / 3][i % 3];
    vstore8(CAT(vec_round, 8)(lo.v), 0, gw + at * 9);
    STORE_C(gw, at * 9 + 8, out[2][2]);
#else
#pragma unroll
    for (int i = 0; i < 9; ++i) STORE_C(gw, at * 9 + i, out[i / 3][i % 3]);
#endif
}
#endif
