/* conv.cl: 2-D convolution as implicit GEMM (no column matrix), and direct kernels for small channels.
 *
 * Geometry (run-time arguments): input x (N, C, H, W), weight (O, C/G, KH, KW), output y (N, O, OH, OW),
 * stride (SH, SW), top/left padding (PH, PW), dilation (DH, DW), G groups; Cg = C/G, Og = O/G,
 * P = OH*OW, KK = KH*KW. Output pixel (oh, ow) reads input pixel (oh*SH - PH + i*DH, ow*SW - PW + j*DW)
 * for tap (i, j); taps outside the input are zero. All tensors are contiguous NCHW / OIHW.
 *
 * Implicit GEMM, per group g (the grid's third axis), with gemm.h's tiles and register-blocked multiply:
 *   conv_fwd         y[n, g*Og + o, p]   = act(sum_k W[o][k] * X[k][(n, p)] + bias), k = (c, i, j)
 *   conv_bwd_weight  gw[g*Og + o][k]     = sum_q GY[o][q] * X^T[q][k] over q = (n, p) in k-split range s
 *                    (z = g*S + s, ranges of KS; with S > 1, C points at (G, S, Og, Cg*KK) `real` partials
 *                    that gemm.cl's gemm_sum adds in order of s)
 * The operand tiles are gathered straight from NCHW x, gy and OIHW w while staging into local memory; the
 * decomposition of a tile's columns into (n, pixel) or (c, i, j) is computed once per work-group and that
 * of each k-slice's rows once per slice, in small local tables, so staging costs no division per element.
 * VWG neighbouring outputs of one image row whose inputs all lie inside the image load as a run (GATHER_ROW):
 * one vector at a unit stride, else VWG loads SW apart with no bounds check or table lookups per element
 * (ResNet's 7x7 stride-2 stem, forward and weight gradient: 16.4 -> 12.7 and 15.2 -> 11.5 ms on Intel's runtime).
 * A run whose inputs are neighbours in memory but not all inside the image (a padded edge; a "same" convolution's
 * run wrapping to the next row) is one vector load with the lanes outside zeroed (gemm.h's GATHER_MASKED).
 * The store writes NCHW (or OIHW) directly, adding the bias; the forward's store then applies the
 * activation `act` (a unary.h code, negative: none) and with `keep` also writes the value before it to
 * `pre` (laid out as y), through gemm.h's STORE_ACT_LANES.
 * Local tiles are single-buffered here (gemm.h's DB is ignored); the k-slices' row tables are double-buffered
 * (the next slice's are written while this one's are read). With PF 1 (gemm.h) a slice's gathers all go to
 * registers before any is stored, with PF 2 before the multiply of the slice before and into local memory after
 * it.
 *
 * The input gradient has no kernel of its own: conv.py runs it as conv_fwd (or conv_direct_fwd) of gy, one
 * launch per phase of the stride (the input pixels whose taps land on outputs in the same pattern), each a
 * stride-1 convolution with the taps that land, transposed and reversed, storing into gx through YLAYOUT.
 *
 * Direct kernels (taps in a fixed order), for depthwise and other products too thin for a tile:
 * conv_direct_fwd (one work-item per OV neighbouring output pixels of a row, as one vector, and RO output
 * channels: OV > 1 for runtimes that vectorize only loop-free kernels across work-items) and conv_direct_bwd_weight
 * (one work-item per (s, weight element), summing the s-th of S ranges of the N*OH output rows into partials, a
 * row's outputs OV at a time).
 *
 * Defines: the element type (clnn_dtype.h), gemm.h's tile (TM, TN, TK, WM, WN, VW, VWG, VWA, APAD) and its A_F32,
 * B_F32: the GEMM's first operand (w in fwd, gy in bwd_weight) or second (x) is float32, rounded to store_t
 * as it is loaded (clnn.autocast's half convolutions, no cast pass); C_F32: the output (y and pre, gw or its
 * partials) is float32 holding store_t's rounded result (a float32 gradient under autocast, with no half
 * gradient widened).
 * Launch (tiled): work-group (TN/WN, TM/WM, 1), global (ceil(cols/TN)*TN/WN, ceil(rows/TM)*TM/WM, G*S);
 * conv_direct_fwd: global (ceil(OW/OV) rounded up, OH, N*G*ceil(Og/RO)); conv_direct_bwd_weight: one work-item per
 * partial, 1-D.
 */
#include "gemm.h"

#define FAR (1 << 28) /* a coordinate offset that puts a padded row or column outside every image */

/* a convolution's geometry (clnn/ops/conv.py's _Geom.args): its sizes, strides, padding, dilation and groups, and
 * the products the kernels use (channels a group, pixels of an output plane, taps, a group's product depth, output
 * pixels of the batch, pixels of an input plane): as arguments, GPUs read them from constant memory where, worked
 * out in the kernel, each held a register across its k-loop (conv_fwd in clang's NVPTX build: 155 -> 130) */
#define GEOM int N, int C, int H, int W, int O, int KH, int KW, int OH, int OW, int SH, int SW, int PH, \
             int PW, int DH, int DW, int G, int Cg, int Og, int P, int KK, int K, int NP, int HW
/* where the forward stores output (n, o, oh, ow): n*YN + o*YO + oh*YR + ow*YC + Y0 (NCHW y, or one phase of a
 * strided input gradient's pixels inside gx) */
#define YLAYOUT int YN, int YO, int YR, int YC, int Y0

#if VWG > 1
typedef CAT(int, VWG) intg; /* a run's tap coordinates */
#define RUN_ALIGNED __attribute__((aligned(sizeof(intg))))
#else
#define RUN_ALIGNED
#endif

inline bool in_image(int h, int w, int H, int W) {
    return h >= 0 && h < H && w >= 0 && w < W;
}
#if VWG > 1
/* in_image for a run's lanes at once: -1 where lane q's (h, w) lies inside, else 0 (GATHER_MASKED's mask) */
inline intg run_in_image(intg h, intg w, int H, int W) {
    return (h >= 0) & (h < H) & (w >= 0) & (w < W);
}
#endif

inline void zero_acc(realv acc[WM][NV]) {
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[i][v] = (realv)0;
}

/* the run *t = X's p[q * stride], q < VWG: a run of neighbouring outputs' inputs along an image row (all inside it); a
 * unit stride loads one vector */
#define GATHER_ROW(X, t, p, stride)                     \
    do {                                                \
        if ((stride) == 1)                              \
            GATHER(X, t, p, true, q);                   \
        else                                            \
            GATHER(X, t, p, true, q * (stride));        \
    } while (0)

/* for each of the work-item's accumulator vectors acc[i][v] in a tile row r inside `rows` (its lane q at tile
 * column c0 + q): BODY */
#define EACH_OUTPUT_VEC(rows, BODY)                                             \
    _Pragma("unroll") for (int i = 0; i < WM; ++i) {                            \
        const int r = ACC_ROW(i);                                               \
        if (row0 + r >= (rows)) break;                                          \
        _Pragma("unroll") for (int v = 0; v < NV; ++v) {                        \
            const int c0 = ACC_COL(v);                                          \
            BODY;                                                               \
        }                                                                       \
    }

/* conv_fwd's rows of k-slice k0: per row kk, k = k0 + kk = (c, i, j): x offset and tap offsets (rows past K: -FAR) */
inline void fwd_rows(__local int *ko, __local int *kh, __local int *kw, int k0, int K, int KK, int KW, int DH, int DW,
                     int W, int HW, int lid) {
    for (int kk = lid; kk < TK; kk += WG) {
        const int k = k0 + kk, r = k % KK, i = r / KW * DH, j = r % KW * DW;
        kh[kk] = k < K ? i : -FAR;
        kw[kk] = j;
        ko[kk] = k / KK * HW + i * W + j;
    }
}

/* the `mode` half (gemm.h's FETCH, PUT or STAGE) of gathering conv_fwd's x operand, k-slice k0 (rows ko, kh, kw)
 * by the tile's columns (qo, qh, qw, qrun, qcont), into bs through the registers rb. A run whose inputs are
 * neighbours in memory (qcont) but not all inside the image (a padded edge, or rows of a "same" convolution's run
 * that wraps to the next row) is one vector load with the lanes outside the image zeroed, where it lies inside x
 * (elements [xlo, xhi) of the pointer): LeNet's conv2 (128x32->64 3x3 14^2), whose 16-wide runs all wrap, gathered
 * element by element before. With gemm.h's ASYNC, a run along an image row at a unit stride, inside it, is copied
 * (ASYNC_TRY) */
inline void gather_fwd(__local local_t *bs, stage_run *rb, int mode, int k0, int K, __global const b_t *x, int xlo,
                       int xhi, __local const int *qo, __local const int *qh, __local const int *qw,
                       __local const bool *qrun, __local const bool *qcont, __local const int *ko,
                       __local const int *kh, __local const int *kw, int H, int W, int SW, int lid) {
    const int kn = min(TK, K - k0);
    stage_run one;
    EACH_RUN(j, e, kn * (TN / VWG), B_RUNS) {
        const int kk = e / (TN / VWG), c = e % (TN / VWG) * VWG;
#if ASYNC_B_N /* a unit-stride run inside the image row: gemm.h's ASYNC copies */
        if (SW == 1 && qrun[c]) {
            const int h = qh[c] + kh[kk], w0 = qw[c] + kw[kk], o = qo[c] + ko[kk];
            if (h >= 0 && h < H && w0 >= 0 && w0 + VWG <= W) {
                ASYNC_TRY(ASYNC_B_N, bs, B_AT(kk, c + q_), x + o)
            }
        }
#endif
        stage_run *t = SLOT(rb, one, mode, j);
        if (mode & FETCH) {
            const int h = qh[c] + kh[kk], w0 = qw[c] + kw[kk], o = qo[c] + ko[kk];
            if (qrun[c] && h >= 0 && h < H && w0 >= 0 && w0 + (VWG - 1) * SW < W)
                GATHER_ROW(B, t, x + o, SW);
#if VWG > 1
            else if (qcont[c] && o >= xlo && o <= xhi - VWG) {
                GATHER_MASKED(B, t, x + o, run_in_image(*(__local const intg *)(qh + c) + kh[kk],
                                                        *(__local const intg *)(qw + c) + kw[kk], H, W));
            }
#endif
            else
                GATHER(B, t, x, in_image(qh[c + q] + kh[kk], qw[c + q] + kw[kk], H, W), qo[c + q] + ko[kk]);
        }
        if (mode & PUT) PUT_B_RUN(bs, kk, c, t);
    }
}

#ifdef KERNEL_conv_fwd
TILED_KERNEL
void conv_fwd(GEOM, YLAYOUT, __global const b_t *restrict x, __global const a_t *restrict w,
              __global const store_t *restrict bias, int has_bias, int act, int keep, __global c_t *pre,
              __global c_t *y) {
    __local a_tile As TILE_ALIGNED;
    __local b_tile Bs TILE_ALIGNED;
    __local int qo[TN], qy[TN];                 /* per column (n, p): x offset, y offset */
    __local int qh[TN] RUN_ALIGNED, qw[TN] RUN_ALIGNED; /* its top-left tap (gather_fwd reads VWG as a vector) */
    __local bool qrun[TN];                       /* columns c .. c+VWG-1 read one run of a row, all inside it */
    __local bool qcont[TN];                      /* columns c .. c+VWG-1 read neighbours in memory */
    __local int ko[2][TK], kh[2][TK], kw[2][TK]; /* fwd_rows of the slices in turn */
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * RTN + tx;
    const int row0 = GROUP_ID(1) * TM, col0 = get_group_id(0) * TN, g = GROUP_ID(2);
    const int kend = K;
    x += (size_t)g * Cg * HW;
    w += (size_t)g * Og * K;
    const int xlo = -g * Cg * HW, xhi = N * C * HW + xlo; /* x's elements, from the group's pointer */
    for (int c = lid; c < TN; c += WG) {
        const int q = col0 + c, n = q / P, p = q % P, ih = p / OW * SH - PH, iw = p % OW * SW - PW;
        qh[c] = q < NP ? ih : -FAR;
        qw[c] = iw;
        qo[c] = n * C * HW + ih * W + iw;
        qy[c] = n * YN + p / OW * YR + p % OW * YC + Y0;
        qrun[c] = p % OW + VWG <= OW && q + VWG <= NP;
        /* one image, at a unit stride, within a row or wrapping to the next at a unit step (SH*W == OW) */
        qcont[c] = q + VWG <= NP && p + VWG <= P && SW == 1 && (p % OW + VWG <= OW || SH * W == OW);
    }
    fwd_rows(ko[0], kh[0], kw[0], 0, K, KK, KW, DH, DW, W, HW, lid);
    const bool a_vec = runs_aligned(w, K);
    FETCH_REGISTERS(ra, rb);
    realv acc[WM][NV];
    zero_acc(acc);
    barrier(CLK_LOCAL_MEM_FENCE);
/* the `mode` half of staging slice k0 (its rows' tables: s) */
#define FWD_STAGE(mode, k0, s)                                                                                  \
    do {                                                                                                        \
        stage_a((__local local_t *)As, ra, mode, k0, kend, Og, row0, w, K, 1, a_vec, lid);                         \
        gather_fwd((__local local_t *)Bs, rb, mode, k0, K, x, xlo, xhi, qo, qh, qw, qrun, qcont, ko[s], kh[s],  \
                   kw[s], H, W, SW, lid);                                                                       \
    } while (0)
    for (int k0 = 0; k0 < K; k0 += TK) {
        const int s = (k0 / TK) & 1;
        if (FETCH_HERE(k0 == 0)) FWD_STAGE(FETCH, k0, s);
        FWD_STAGE(PUT_HALF, k0, s);
        fwd_rows(ko[s ^ 1], kh[s ^ 1], kw[s ^ 1], k0 + TK, K, KK, KW, DH, DW, W, HW, lid); /* the next slice's */
        STAGED_BARRIER();
        if (PF == 2 && k0 + TK < K) FWD_STAGE(FETCH, k0 + TK, s ^ 1); /* in flight during the multiply */
        MULTIPLY(As, Bs, k0);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#undef FWD_STAGE
    EACH_OUTPUT_VEC(Og, {
        const int o = g * Og + row0 + r;
        const realv val = has_bias ? acc[i][v] + LOAD(bias, o) : acc[i][v];
        STORE_ACT_LANES(y, pre, val, act, keep, qy[c0 + q] + (size_t)o * YO, col0 + c0 + q < NP);
    })
}
#endif

/* conv_bwd_weight's rows of k-slice k0 of the range at kbeg (kend long): per row kk, pixel q = (n, p): x offset,
 * top-left tap (rows past the range: -FAR), gy offset, and whether rows kk .. kk+VWG-1 read one run of gy (arun),
 * of x's row (krun), of neighbours in x (kcont: as conv_fwd's qcont) */
inline void bwd_rows(__local int *ko, __local int *kh, __local int *kw, __local int *ka, __local bool *krun,
                     __local bool *kcont, __local bool *arun, int k0, int kbeg, int kend, int C, int O, int W, int OW,
                     int SH, int SW, int PH, int PW, int P, int HW, int lid) {
    for (int kk = lid; kk < TK; kk += WG) {
        const int q = kbeg + k0 + kk, n = q / P, p = q % P, ih = p / OW * SH - PH, iw = p % OW * SW - PW;
        kh[kk] = k0 + kk < kend ? ih : -FAR;
        kw[kk] = iw;
        ko[kk] = n * C * HW + ih * W + iw;
        ka[kk] = n * O * P + p;
        arun[kk] = p + VWG <= P && k0 + kk + VWG <= kend;
        krun[kk] = arun[kk] && p % OW + VWG <= OW;
        kcont[kk] = arun[kk] && SW == 1 && (p % OW + VWG <= OW || SH * W == OW);
    }
}

/* the `mode` half of gathering conv_bwd_weight's gy operand (rows: output channels, k: pixels), k-slice k0, into as
 * through the registers ra; with gemm.h's ASYNC, a run of one image's pixels copied */
inline void gather_gy(__local local_t *as, stage_run *ra, int mode, int k0, int kend, int Og, int row0, int P,
                      __global const a_t *gy, __local const int *ka, __local const bool *arun, int lid) {
    const int kn = min(TK, kend - k0);
    stage_run one;
    EACH_RUN(j, e, TM * (TK / VWG), A_RUNS) {
        const int r = e / (TK / VWG), kk = e % (TK / VWG) * VWG;
        if (kk >= kn) continue;
#if ASYNC_A_K
        if (row0 + r < Og && arun[kk]) {
            ASYNC_TRY(ASYNC_A_K, as, A_AT(r, kk + q_), gy + ka[kk] + (row0 + r) * P)
        }
#endif
        stage_run *t = SLOT(ra, one, mode, j);
        if (mode & FETCH) {
            if (row0 + r >= Og) {
                SET_RUN(t, (stage_run)0);
            } else if (arun[kk]) {
                GATHER(A, t, gy + ka[kk] + (row0 + r) * P, true, q);
            } else {
                GATHER(A, t, gy, kk + q < kn, ka[kk + q] + (row0 + r) * P);
            }
        }
        if (mode & PUT) PUT_A_RUN(as, r, kk, t);
    }
}

/* the `mode` half of gathering conv_bwd_weight's x operand (k: pixels, rows ko, kh, kw, krun, kcont; columns: taps
 * qo, qh, qw), k-slice k0, into bs through the registers rb; runs of neighbours in x (elements [xlo, xhi) of the
 * pointer) and ASYNC copies as gather_fwd's */
inline void gather_x(__local local_t *bs, stage_run *rb, int mode, int k0, int kend, __global const b_t *x, int xlo,
                     int xhi, __local const int *qo, __local const int *qh, __local const int *qw,
                     __local const int *ko, __local const int *kh, __local const int *kw, __local const bool *krun,
                     __local const bool *kcont, int H, int W, int SW, int lid) {
    const int kn = min(TK, kend - k0);
    stage_run one;
    EACH_RUN(j, e, TN * (TK / VWG), B_RUNS) {
        const int c = e / (TK / VWG), kk = e % (TK / VWG) * VWG;
        if (kk >= kn) continue;
#if ASYNC_B_K /* a unit-stride run inside the image row */
        if (SW == 1 && krun[kk]) {
            const int h = qh[c] + kh[kk], w0 = qw[c] + kw[kk], o = qo[c] + ko[kk];
            if (h >= 0 && h < H && w0 >= 0 && w0 + VWG <= W) {
                ASYNC_TRY(ASYNC_B_K, bs, B_AT(kk + q_, c), x + o)
            }
        }
#endif
        stage_run *t = SLOT(rb, one, mode, j);
        if (mode & FETCH) {
            const int h = qh[c] + kh[kk], w0 = qw[c] + kw[kk], o = qo[c] + ko[kk];
            if (krun[kk] && h >= 0 && h < H && w0 >= 0 && w0 + (VWG - 1) * SW < W)
                GATHER_ROW(B, t, x + o, SW);
#if VWG > 1
            else if (kcont[kk] && o >= xlo && o <= xhi - VWG) {
                GATHER_MASKED(B, t, x + o, run_in_image(*(__local const intg *)(kh + kk) + qh[c],
                                                        *(__local const intg *)(kw + kk) + qw[c], H, W));
            }
#endif
            else
                GATHER(B, t, x, in_image(qh[c] + kh[kk + q], qw[c] + kw[kk + q], H, W), qo[c] + ko[kk + q]);
        }
        if (mode & PUT) EACH_ELEM(t, q, x, PUT_B(bs, kk + q, c, x));
    }
}

#ifdef KERNEL_conv_bwd_weight
TILED_KERNEL
void conv_bwd_weight(GEOM, int KS, int S, __global const b_t *restrict x, __global const a_t *restrict gy,
                     __global c_t *restrict gw) {
    __local a_tile As TILE_ALIGNED;
    __local b_tile Bs TILE_ALIGNED;
    __local int qo[TN], qh[TN], qw[TN];                     /* per column (c, i, j): x offset, tap offsets */
    __local int ko[2][TK], ka[2][TK];                       /* bwd_rows of the slices in turn */
    __local int kh[2][TK] RUN_ALIGNED, kw[2][TK] RUN_ALIGNED;
    __local bool krun[2][TK], kcont[2][TK], arun[2][TK];
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * RTN + tx;
    const int row0 = GROUP_ID(1) * TM, col0 = get_group_id(0) * TN, z = GROUP_ID(2);
    const int g = z / S;
    const int kbeg = z % S * KS, kend = min(KS, NP - kbeg); /* this range's pixels [kbeg, kbeg + kend) */
    x += (size_t)g * Cg * HW;
    gy += (size_t)g * Og * P;
    gw += (size_t)z * Og * K;
    const int xlo = -g * Cg * HW, xhi = N * C * HW + xlo;
    for (int c = lid; c < TN; c += WG) {
        const int k = col0 + c, r = k % KK, i = r / KW * DH, j = r % KW * DW;
        qh[c] = k < K ? i : -FAR;
        qw[c] = j;
        qo[c] = k / KK * HW + i * W + j;
    }
    bwd_rows(ko[0], kh[0], kw[0], ka[0], krun[0], kcont[0], arun[0], 0, kbeg, kend, C, O, W, OW, SH, SW, PH, PW, P,
             HW, lid);
    FETCH_REGISTERS(ra, rb);
    realv acc[WM][NV];
    zero_acc(acc);
    barrier(CLK_LOCAL_MEM_FENCE);
/* the `mode` half of staging slice k0 (its rows' tables: s) */
#define BWD_STAGE(mode, k0, s)                                                                                  \
    do {                                                                                                        \
        gather_gy((__local local_t *)As, ra, mode, k0, kend, Og, row0, P, gy, ka[s], arun[s], lid);               \
        gather_x((__local local_t *)Bs, rb, mode, k0, kend, x, xlo, xhi, qo, qh, qw, ko[s], kh[s], kw[s], krun[s], \
                 kcont[s], H, W, SW, lid);                                                                      \
    } while (0)
    for (int k0 = 0; k0 < KS; k0 += TK) {
        const int s = (k0 / TK) & 1;
        if (FETCH_HERE(k0 == 0)) BWD_STAGE(FETCH, k0, s);
        BWD_STAGE(PUT_HALF, k0, s);
        bwd_rows(ko[s ^ 1], kh[s ^ 1], kw[s ^ 1], ka[s ^ 1], krun[s ^ 1], kcont[s ^ 1], arun[s ^ 1], k0 + TK, kbeg,
                 kend, C, O, W, OW, SH, SW, PH, PW, P, HW, lid); /* the next slice's */
        STAGED_BARRIER();
        if (PF == 2 && k0 + TK < KS) BWD_STAGE(FETCH, k0 + TK, s ^ 1); /* in flight during the multiply */
        MULTIPLY(As, Bs, k0);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#undef BWD_STAGE
    EACH_OUTPUT_VEC(Og, STORE_ACT_LANES(gw, gw, acc[i][v], -1, 0, (row0 + r) * K + col0 + c0 + q,
                                        col0 + c0 + q < K));
}
#endif

#ifndef RO
#define RO 1
#endif
#ifndef UNIT_SW
#define UNIT_SW 0 /* 1: SW is 1, so that neighbouring work-items' inputs are known to be neighbours */
#endif

/* Output pixels (ow, oh) = the global ids (0, 1), and RO output channels of a group (RO: a define, 1 to 8) per
 * work-item from global id 2 = n*G*OB + g*OB + b, so that each input element loaded serves RO multiply-adds,
 * neighbouring work-items read neighbouring input pixels and share their weights; taps outside the image are
 * skipped once per tap, not per channel. */
#ifndef OV
#define OV 1
#endif
#if OV == 1
typedef real realo;
#elif OV == 2 || OV == 4 || OV == 8 || OV == 16
typedef CLNN_CAT(REAL_T, OV) realo; /* one output channel's OV pixels: a vector, so each tap is one multiply-add */
#else
#error "OV must be 1, 2, 4, 8 or 16"
#endif
/* realo_lanes: a realo and its lanes, filled and emptied lane by lane, which CPU compilers make vector moves. As an
 * array of OV outputs PoCL vectorized them in mixed 8- and 4-wide pieces with shuffles. */
VEC_LANE_IO(realo, realo, real, OV)
/* conv_direct_fwd's multiply-adds of input channel c at the tap wt points to into ACC (its RO outputs), lane q of
 * x's vector under the tap being LANE (of e, x's element under output ow0: an index into xg, not a pointer, which
 * Intel's runtime vectorizes 14x faster) */
#define DIRECT_CHANNEL(ACC, c, LANE)                                                                      \
    do {                                                                                                  \
        const int e = ((c) * H + h) * W + ww;                                                             \
        realo_lanes xv;                                                                                   \
        _Pragma("unroll") for (int q = 0; q < OV; ++q) xv.s[q] = LANE;                                    \
        _Pragma("unroll") for (int r = 0; r < RO; ++r)                                                    \
            ACC[r] += xv.v * LOAD_A(wt, (size_t)(r < last ? r : last) * CKK + (size_t)(c) * KK);          \
    } while (0)
#if OV > 1
/* Vector outputs (PoCL): alternate input channels into two sums, 2*RO chains of multiply-adds in flight, where
 * RO chains waited on the multiply-add's latency (ResNet's stem input gradient, 8x3<-64 7x7 stride 2: 46 -> 31
 * ms). Intel's runtime (OV 1, vectorizing across work-items) ran two sums 2x slower, four alike. */
#define DIRECT_CHANNELS(LANE)                                                                             \
    int c = 0;                                                                                            \
    for (; c + 1 < Cg; c += 2) {                                                                          \
        DIRECT_CHANNEL(acc, c, LANE);                                                                     \
        DIRECT_CHANNEL(acc2, c + 1, LANE);                                                                \
    }                                                                                                     \
    if (c < Cg) DIRECT_CHANNEL(acc, c, LANE)
#else
/* kept rolled: RO independent multiply-adds a channel are enough in flight, and unrolled with their loads hoisted
 * the loop took 207 registers a work-item in clang's NVPTX build (72 rolled; Intel's runtime alike, 12.6 / 11.8 ms
 * on LeNet's conv2 input gradient) */
#define DIRECT_CHANNELS(LANE) _Pragma("unroll 1") for (int c = 0; c < Cg; ++c) DIRECT_CHANNEL(acc, c, LANE)
#endif
/* column w of a row of W, clamped into it */
inline int in_width(int w, int W) {
    return w < 0 ? 0 : w < W ? w : W - 1;
}
/* v, an element loaded at column w of a row of W, or 0 outside the row (the load happens either way) */
inline real in_row(real v, int w, int W) {
    return w >= 0 && w < W ? v : (real)0;
}
#ifdef KERNEL_conv_direct_fwd
__kernel void conv_direct_fwd(GEOM, YLAYOUT, __global const b_t *restrict x, __global const a_t *restrict w,
                              __global const store_t *restrict bias, int has_bias, int act, int keep,
                              __global c_t *pre, __global c_t *y) {
    const int ow0 = get_global_id(0) * OV, oh = get_global_id(1), z = get_global_id(2);
    if (ow0 >= OW) return;
    const int OB = (Og + RO - 1) / RO, n = z / (G * OB), g = z / OB % G;
    const int o0 = g * Og + z % OB * RO, last = min(RO, (g + 1) * Og - o0) - 1;
    const int SX = UNIT_SW ? 1 : SW, ih = oh * SH - PH, iw = ow0 * SX - PW;
    const size_t CKK = (size_t)Cg * KK;
    const long x0 = ((long)n * C + g * Cg) * H * W, xn = (long)N * C * H * W; /* xg's offset in x, x's size */
    __global const b_t *xg = x + x0;
    __global const a_t *wo = w + (size_t)o0 * CKK;
    realo acc[RO]; /* acc[r]: output channel o0 + r, pixels ow0 .. ow0 + OV - 1 */
#pragma unroll
    for (int r = 0; r < RO; ++r) acc[r] = 0;
#if OV > 1
    realo acc2[RO]; /* the odd input channels' */
#pragma unroll
    for (int r = 0; r < RO; ++r) acc2[r] = 0;
#endif
    for (int i = 0; i < KH; ++i) {
        const int h = ih + i * DH;
        if (h < 0 || h >= H) continue;
        for (int j = 0; j < KW; ++j) {
            const int ww = iw + j * DW;
            if (ww + (OV - 1) * SX < 0 || ww >= W) continue; /* every output's tap is in the padding */
            __global const a_t *wt = wo + i * KW + j;
            /* Loops of their own: the lanes wholly inside the row (a unit stride's one vector load a channel); or
             * reaching past it but not past x, loaded whole and zeroed outside the row; else lane by lane */
            if (OV == 1 || (ww >= 0 && ww + (OV - 1) * SX < W)) {
                DIRECT_CHANNELS(LOAD_B(xg, e + q * SX));
            } else if (x0 + (long)h * W + ww >= 0 && x0 + ((long)(Cg - 1) * H + h) * W + ww + (OV - 1) * SX < xn) {
                DIRECT_CHANNELS(in_row(LOAD_B(xg, e + q * SX), ww + q * SX, W));
            } else { /* each lane reads its column clamped into the row, zeroed outside it: no branch per lane */
                DIRECT_CHANNELS(in_row(LOAD_B(xg, e - ww + in_width(ww + q * SX, W)), ww + q * SX, W));
            }
        }
    }
    /* unrolled over the channels (acc's indices constants: no break out of the loop, which PoCL could not unroll and
     * said so in every build's log); the lanes' own store loop is left rolled */
#pragma unroll
    for (int r = 0; r < RO; ++r) {
        if (r > last) continue;
        const int o = o0 + r;
        const real b = has_bias ? LOAD(bias, o) : (real)0;
#if OV > 1
        const realo_lanes out = {acc[r] + acc2[r] + b};
#else
        const realo_lanes out = {acc[r] + b};
#endif
        const size_t y0 = (size_t)n * YN + (size_t)o * YO + oh * YR + ow0 * YC + Y0;
        if (!FUSED_ACT && YC == 1 && ow0 + OV <= OW) { /* a vector store */
#pragma unroll
            for (int q = 0; q < OV; ++q) STORE_C(y, y0 + q, out.s[q]);
        } else {
            for (int q = 0; q < OV && (OV == 1 || ow0 + q < OW); ++q)
                store_act(y, pre, y0 + (size_t)q * YC, out.s[q], act, keep);
        }
    }
}
#endif

#ifdef KERNEL_conv_direct_bwd_weight
__kernel void conv_direct_bwd_weight(GEOM, int KS, int S, __global const b_t *restrict x,
                                     __global const a_t *restrict gy, __global c_t *restrict part) {
    const int total = O * K, e = get_global_id(0) % total, s = get_global_id(0) / total;
    if (s >= S) return; /* e = (o*Cg + c)*KK + i*KW + j */
    const int j = e % KW, i = e / KW % KH, c = e / KK % Cg, o = e / K, ch = o / Og * Cg + c;
    /* the outputs whose tap lands inside a row: ow in [lo, hi), at x's column ow*SW + dw */
    const int dw = j * DW - PW, lo = dw >= 0 ? 0 : (SW - 1 - dw) / SW;
    const int hi = W - 1 - dw < 0 ? 0 : min(OW, (W - 1 - dw) / SW + 1), r1 = min(N * OH, (s + 1) * KS);
    realo_lanes sums = {(realo)0}; /* OV lanes: the outputs ow = lo + OV*m + q */
    real tail = 0;
    for (int r = s * KS; r < r1; ++r) { /* output rows r = n*OH + oh, in order */
        const int n = r / OH, oh = r % OH, h = oh * SH - PH + i * DH;
        if (h < 0 || h >= H) continue;
        const size_t g0 = ((size_t)n * O + o) * OH * OW + (size_t)oh * OW, x0 = (((size_t)n * C + ch) * H + h) * W + dw;
        int ow = lo;
#if OV > 1
        for (; ow + OV <= hi; ow += OV) {
            realo_lanes a, b;
#pragma unroll
            for (int q = 0; q < OV; ++q) {
                a.s[q] = LOAD_A(gy, g0 + ow + q);
                b.s[q] = LOAD_B(x, x0 + (size_t)(ow + q) * SW);
            }
            sums.v += a.v * b.v;
        }
#endif
        for (; ow < hi; ++ow) tail += LOAD_A(gy, g0 + ow) * LOAD_B(x, x0 + (size_t)ow * SW);
    }
#pragma unroll
    for (int q = 0; q < OV; ++q) tail += sums.s[q];
    STORE_C(part, (size_t)s * total + e, tail);
}
#endif
