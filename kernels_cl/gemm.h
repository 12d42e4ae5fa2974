/* gemm.h: the tiled GEMM's building blocks, shared by gemm.cl and conv.cl: the tunables and their defaults, the
 * staging of a row- or column-strided operand's tile into local memory (stage_a, stage_b; with PF, a slice's loads
 * apart from its stores: PF 2 around the multiply of the slice before) and the register-blocked multiply of one
 * staged k-slice (MULTIPLY; with MMA, warp-wide products of half pairs: NVIDIA's tensor cores). gemm.cl's banner
 * describes the tile scheme and the defines (TM, TN, TK, WM, WN, VW, VWG, VWA, APAD, DB); and the fused epilogue's
 * store (store_act), which applies an activation given as a unary.h code and writes C's type (c_t: store_t, or
 * float32 with C_F32).
 */
#ifndef CLNN_GEMM_H
#define CLNN_GEMM_H
#include "clnn_dtype.h"
#include "clnn_shape.h"
#include "mma.h"

#ifndef TM
#define TM 64
#endif
#ifndef TN
#define TN 64
#endif
#ifndef TK
#define TK 32
#endif
#ifndef WM
#define WM 4
#endif
#ifndef WN
#define WN 16
#endif
#ifndef VW
#define VW 8
#endif
#ifndef VWG
#define VWG VW
#endif
#ifndef VWA
#define VWA 1
#endif
#ifndef APAD
#define APAD 0
#endif
#ifndef DB
#define DB 0
#endif

/* a tiled kernel's qualifiers. Intel's CPU runtime runs a tile's work-items one after another, each on its
 * explicit vectors; its second copy of each kernel, vectorized across work-items, goes unused with the CPU
 * tiles (TN/WN items across, not a multiple of its 16 lanes) and made the build 2.5x slower: not built */
#ifdef cl_intel_vec_len_hint
#define TILED_KERNEL __kernel __attribute__((reqd_work_group_size(RTN, RTM, 1), intel_vec_len_hint(1)))
#else
#define TILED_KERNEL __kernel __attribute__((reqd_work_group_size(RTN, RTM, 1)))
#endif

#define RTM (TM / WM) /* work-group height */
#define RTN (TN / WN) /* work-group width */
#define NV (WN / VW)  /* vectors per work-item row */
#define WG (RTM * RTN)
#define LDA (TK + APAD) /* As row length */
#if WM % VWA
#error "VWA must divide WM"
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#if VW == 1
typedef real realv;
#else
typedef CAT(REAL_T, VW) realv;
#endif
/* A's local tile (a_tile), element (r, kk) of it seen as `__local local_t *` (AS_AT), and the tile row of a
 * work-item's i-th accumulator row (ACC_ROW(i)). VWA = 1: row-major, TM x LDA, rows ty + i*RTM, each read alone
 * per k. VWA > 1: k-major, TK x (TM/VWA + APAD) vectors of VWA neighbouring rows, rows (ty + u*RTM)*VWA + q
 * for i = u*VWA + q: the multiply reads a work-item's WM rows in WM/VWA vector loads, as it reads B's columns
 * VW at a time (local-memory load instructions per k: WM/VWA + NV instead of WM + NV). B's tile (b_tile) is
 * row-major, TK x TN. The staging writes element (r, kk) of A's as PUT_A(as, r, kk, v), (kk, c) of B's as
 * PUT_B(bs, kk, c, v), and a run *t of its registers (stage_run: VWG `real`s) along a row as PUT_A_RUN(as, r,
 * kk, t), PUT_B_RUN(bs, kk, c, t).
 *
 * MMA = 1: the multiply runs as warp-wide 16x8x16 products of half (or bf16) pairs with float32 accumulation:
 * NVIDIA's tensor cores through inline PTX (mma.sync; MMA_PTX = 1, which the host sets for NVIDIA's runtime
 * only), or the same products in plain OpenCL C on any other device (MMA_PTX = 0: a device posing as an NVIDIA
 * GPU runs this path, and tests force it everywhere). The work-group's warps (32 work-items in order of lid) each
 * own an (8*WM) x (4*WN) block of the tile, WM/2 x NV products of 16 x 8 (VW = 2, NV = WN/2): lane l of a
 * warp holds rows g, g+8 (g = l/4) and columns 2t, 2t+1 (t = l%4) of each, so acc[2u + h][v] is row 16u + 8h + g
 * and columns 8v + 2t, + 1 of its warp's block (ACC_ROW, ACC_COL). The tiles are kept in local memory as the
 * stored 16-bit values (local_t ushort), rows padded by 8 (MMA_PAD), 16-byte aligned: staging moves the bits as
 * read (stage_t ushort: no widening and narrowing; a float32 operand's are rounded once, store_bits), a run that
 * lies along a local row in 16-byte stores (PUT_A_RUN, PUT_B_RUN). A product reads A's pairs along k (rows g, g+8
 * at 2t, 2t+1 and + 8) as one 32-bit load each, and B's (column g at rows 2t, 2t+1 and + 8) as two 16-bit loads,
 * each lane of a warp from its own bank. Needs half or bf16 storage, VW 2, VWA 1, an even WM, TM % (8*WM) ==
 * TN % (4*WN) == TK % 16 == 0 (matmul.config_problem). */
#ifndef MMA
#define MMA 0
#endif
#ifndef MMA_PTX
#define MMA_PTX 0
#endif
#ifndef LDSM
#define LDSM 0
#endif
#define MMA_LDSM (MMA_PTX && LDSM) /* the mma row's LDSM: fragments by PTX's ldmatrix, on NVIDIA's runtime only */
#if MMA
#if !(STORE_HALF || STORE_BF16) || VW != 2 || VWA != 1 || WM % 2 || TM % (8 * WM) || TN % (4 * WN) || TK % 16
#error "MMA needs half or bf16 storage, VW 2, VWA 1, an even WM and TM % (8*WM) == TN % (4*WN) == TK % 16 == 0"
#endif
#define MMA_PAD 8
#define LDA_MMA (TK + MMA_PAD)
#define LDB_MMA (TN + MMA_PAD)
typedef ushort local_t;
typedef ushort stage_t;
#define STAGE_T ushort
typedef uint4 a_tile[TM][LDA_MMA / 8]; /* 16-byte aligned rows: whole runs stored at once, pairs read as uints */
typedef uint4 b_tile[TK][LDB_MMA / 8];
#if STORE_BF16
inline float mma_value(ushort h) { return as_float((uint)h << 16); }
#else
inline float mma_value(ushort h) { return vload_half(0, (__private const half *)&h); }
#endif
#define PUT_A(as, r, kk, v) ((as)[(r) * LDA_MMA + (kk)] = (v))
#define PUT_B(bs, kk, c, v) ((bs)[(kk) * LDB_MMA + (c)] = (v))
/* PUT_RUN(tile, at, t): the run *t into tile[at .. at+VWG) (at a multiple of VWG): whole, or halves of 16 */
#if VWG == 16
#define PUT_RUN(tile, at, t)                                                                                \
    do {                                                                                                    \
        *(__local ushort8 *)((tile) + (at)) = (t)->lo;                                                      \
        *(__local ushort8 *)((tile) + (at) + 8) = (t)->hi;                                                  \
    } while (0)
#else
#define PUT_RUN(tile, at, t) (*(__local stage_run *)((tile) + (at)) = *(t))
#endif
#define PUT_A_RUN(as, r, kk, t) PUT_RUN(as, (r) * LDA_MMA + (kk), t)
#define PUT_B_RUN(bs, kk, c, t) PUT_RUN(bs, (kk) * LDB_MMA + (c), t)
#define WARPS_M (TM / (8 * WM))                                 /* warps along the tile's rows */
#define MMA_ROW0 (lid / 32 % WARPS_M * (8 * WM) + lid % 32 / 4) /* the lane's first row: its warp's block, g */
#define MMA_COL0 (lid / 32 / WARPS_M * (4 * WN))                /* the lane's warp's first column */
#define ACC_ROW(i) (MMA_ROW0 + (i) / 2 * 16 + (i) % 2 * 8)
#define ACC_COL(v) (MMA_COL0 + (v) * 8 + lid % 4 * 2)
#else
typedef real local_t;
typedef real stage_t;
#define STAGE_T REAL_T
#if VWA > 1
typedef CAT(REAL_T, VWA) reala;
#define LDA_V (TM / VWA + APAD) /* k-row length in vectors */
typedef reala a_tile[TK][LDA_V];
#define AS_AT(r, kk) ((kk) * (LDA_V * VWA) + (r))
#define ACC_ROW(i) ((ty + (i) / VWA * RTM) * VWA + (i) % VWA)
#else
typedef real a_tile[TM][LDA];
#define AS_AT(r, kk) ((r) * LDA + (kk))
#define ACC_ROW(i) (ty + (i) * RTM)
#endif
typedef realv b_tile[TK][TN / VW]; /* realv keeps its rows vector-aligned */
#define PUT_A(as, r, kk, v) ((as)[AS_AT(r, kk)] = (v))
#define PUT_B(bs, kk, c, v) ((bs)[(kk) * TN + (c)] = (v))
#define PUT_A_RUN(as, r, kk, t) EACH_ELEM(t, q, x, PUT_A(as, r, kk + q, x))
#define PUT_B_RUN(bs, kk, c, t) EACH_ELEM(t, q, x, PUT_B(bs, kk, c + q, x))
#define ACC_COL(v) ((tx + (v) * RTN) * VW) /* the tile column of the work-item's accumulator vector v */
#endif

/* Built-ins such as vloadN and mad are out-of-line calls on some CPU runtimes (PoCL), so the hot
 * paths use plain loads and `a * b + c`, which the compiler contracts to an FMA where it has one. */
#pragma OPENCL FP_CONTRACT ON

/* Operand storage: A_F32, B_F32, D_F32 = 1 read that operand as float32 and round each element to
 * store_t's precision as it is loaded, so the result equals the product of operands cast to store_t
 * first, bit for bit (clnn.autocast's half GEMM of float32 tensors, without a cast pass). Only with
 * half or bf16 storage. */
#ifndef A_F32
#define A_F32 0
#endif
#ifndef B_F32
#define B_F32 0
#endif
#ifndef D_F32
#define D_F32 0
#endif
/* C_F32 = 1: the result C (and P) is float32, each element rounded to store_t's precision as it is stored:
 * bit for bit the half result widened, without the half tensor and the widening copy (the float32
 * gradient of a float32 parameter under clnn.autocast). Only with half or bf16 storage. */
#ifndef C_F32
#define C_F32 0
#endif
#if (A_F32 || B_F32 || D_F32 || C_F32) && !STORE_HALF && !STORE_BF16
#error "A_F32, B_F32, D_F32 and C_F32 round float32 operands or results to half or bf16 storage only"
#endif
#if STORE_HALF && HALF_SOFT
inline real round_store(float f) { return half_bits_to_float(float_to_half_bits(f)); }
#elif STORE_HALF && HALF_CONVERT
inline real round_store(float f) { return convert_float(convert_half_rte(f)); }
#elif STORE_HALF
inline real round_store(float f) {
    ushort h; /* a half variable needs cl_khr_fp16; its storage does not */
    vstore_half(f, 0, (__private half *)&h);
    return vload_half(0, (__private const half *)&h);
}
#elif STORE_BF16
/* bf16_to_float(float_to_bf16(f)) of n elements (n empty: one) without leaving float's registers; NaN told by its
 * bits, with ?: (neither isnan nor select: PoCL calls them out of line, clnn_dtype.h) */
#define BF16_ROUND(n)                                                                                       \
    inline CAT(float, n) CAT(bf16_round, n)(CAT(float, n) f) {                                              \
        const CAT(uint, n) u = CAT(as_uint, n)(f);                                                          \
        const CAT(float, n) r = CAT(as_float, n)((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);           \
        return (u & 0x7FFFFFFFu) > 0x7F800000u ? CAT(as_float, n)((u & 0x80000000u) | 0x7FC00000u) : r;     \
    }
BF16_ROUND()
inline real round_store(float f) { return bf16_round(f); }
#endif

#if MMA /* store_bits(f): f rounded to its stored bits (a float32 operand's elements, staged for the warp products) */
#if STORE_HALF && MMA_PTX
inline ushort store_bits(float f) { /* NVIDIA has no cl_khr_fp16: PTX's conversion, not vstore_half through memory */
    ushort h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#elif STORE_HALF && HALF_SOFT
inline ushort store_bits(float f) { return float_to_half_bits(f); }
#elif STORE_HALF && HALF_CONVERT
inline ushort store_bits(float f) { return as_ushort(convert_half_rte(f)); }
#elif STORE_HALF
inline ushort store_bits(float f) {
    ushort h;
    vstore_half(f, 0, (__private half *)&h);
    return h;
}
#else
inline ushort store_bits(float f) { return (ushort)(as_uint(bf16_round(f)) >> 16); }
#endif
#endif

/* n elements at once: vec_widen<n>(bits) widens n stored elements (as read raw, RAW_T: a half's or bf16's
 * 16 bits) to real, vec_load<n>(p) reads and widens them (p aligned to n elements), vec_narrow<n>(v) rounds them
 * to their stored bits, vec_store<n>(p, v) narrows and stores, vec_round<n>(f) is round_store of each (half and
 * bf16 storage only) */
#if STORE_HALF || STORE_BF16
#define RAW_T ushort
#define RAW(p, i) (((__global const ushort *)(p))[i])
#define VEC_LOAD_RAW(n, p) (*(__global const CAT(ushort, n) *)(p))
#else
#define RAW_T STORE_T
#define RAW(p, i) ((p)[i])
#define VEC_LOAD_RAW(n, p) (*(__global const CAT(STORE_T, n) *)(p))
#endif
#if STORE_HALF && HALF_SOFT
#define VEC_CONVERSIONS(n)                                                                                  \
    inline CAT(float, n) CAT(vec_widen, n)(CAT(ushort, n) h) { return CAT(half_bits_to_float, n)(h); }      \
    inline CAT(float, n) CAT(vec_load, n)(__global const half *p) { return CAT(vec_widen, n)(VEC_LOAD_RAW(n, p)); } \
    inline CAT(ushort, n) CAT(vec_narrow, n)(CAT(float, n) v) { return CAT(float_to_half_bits, n)(v); }   \
    inline void CAT(vec_store, n)(__global half *p, CAT(float, n) v) {                                      \
        *(__global CAT(ushort, n) *)p = CAT(float_to_half_bits, n)(v);                                      \
    }                                                                                                       \
    inline CAT(float, n) CAT(vec_round, n)(CAT(float, n) f) {                                               \
        return CAT(half_bits_to_float, n)(CAT(float_to_half_bits, n)(f));                                   \
    }
#elif STORE_HALF && HALF_CONVERT
#define VEC_CONVERSIONS(n)                                                                                  \
    inline CAT(float, n) CAT(vec_widen, n)(CAT(ushort, n) h) { return CAT(convert_float, n)(CAT(as_half, n)(h)); } \
    inline CAT(float, n) CAT(vec_load, n)(__global const half *p) { return CAT(vload_half, n)(0, p); }       \
    inline CAT(ushort, n) CAT(vec_narrow, n)(CAT(float, n) v) {                                             \
        return CAT(as_ushort, n)(CAT(CAT(convert_half, n), _rte)(v));                                       \
    }                                                                                                       \
    inline void CAT(vec_store, n)(__global half *p, CAT(float, n) v) { CAT(vstore_half, n)(v, 0, p); }      \
    inline CAT(float, n) CAT(vec_round, n)(CAT(float, n) f) {                                               \
        return CAT(convert_float, n)(CAT(CAT(convert_half, n), _rte)(f));                                   \
    }
#elif STORE_HALF
#define VEC_CONVERSIONS(n)                                                                                  \
    inline CAT(float, n) CAT(vec_widen, n)(CAT(ushort, n) h) {                                              \
        return CAT(vload_half, n)(0, (__private const half *)&h);                                           \
    }                                                                                                       \
    inline CAT(float, n) CAT(vec_load, n)(__global const half *p) { return CAT(vload_half, n)(0, p); }       \
    inline CAT(ushort, n) CAT(vec_narrow, n)(CAT(float, n) v) {                                             \
        CAT(ushort, n) h;                                                                                   \
        CAT(vstore_half, n)(v, 0, (__private half *)&h);                                                    \
        return h;                                                                                           \
    }                                                                                                       \
    inline void CAT(vec_store, n)(__global half *p, CAT(float, n) v) { CAT(vstore_half, n)(v, 0, p); }      \
    inline CAT(float, n) CAT(vec_round, n)(CAT(float, n) f) {                                               \
        ushort h[n];                                                                                        \
        CAT(vstore_half, n)(f, 0, (__private half *)h);                                                     \
        return CAT(vload_half, n)(0, (__private const half *)h);                                            \
    }
#elif STORE_BF16
#define VEC_CONVERSIONS(n)                                                                                  \
    inline CAT(float, n) CAT(vec_widen, n)(CAT(ushort, n) h) {                                              \
        return CAT(as_float, n)(CAT(convert_uint, n)(h) << 16);                                             \
    }                                                                                                       \
    inline CAT(float, n) CAT(vec_load, n)(__global const bf16 *p) { return CAT(vec_widen, n)(VEC_LOAD_RAW(n, p)); } \
    BF16_ROUND(n)                                                                                           \
    inline CAT(float, n) CAT(vec_round, n)(CAT(float, n) f) { return CAT(bf16_round, n)(f); }               \
    inline CAT(ushort, n) CAT(vec_narrow, n)(CAT(float, n) v) {                                             \
        return CAT(convert_ushort, n)(CAT(as_uint, n)(CAT(vec_round, n)(v)) >> 16);                         \
    }                                                                                                       \
    inline void CAT(vec_store, n)(__global bf16 *p, CAT(float, n) v) {                                      \
        *(__global CAT(ushort, n) *)p = CAT(vec_narrow, n)(v);                                              \
    }
#else
#define VEC_CONVERSIONS(n)                                                                                  \
    inline CAT(REAL_T, n) CAT(vec_widen, n)(CAT(REAL_T, n) v) { return v; }                                 \
    inline CAT(REAL_T, n) CAT(vec_load, n)(__global const store_t *p) { return VEC_LOAD_RAW(n, p); }         \
    inline CAT(REAL_T, n) CAT(vec_narrow, n)(CAT(REAL_T, n) v) { return v; }                                \
    inline void CAT(vec_store, n)(__global store_t *p, CAT(REAL_T, n) v) { *(__global CAT(REAL_T, n) *)p = v; }
#endif
#if VWG > 1
VEC_CONVERSIONS(VWG)
#endif
#if VW > 1 && VW != VWG
VEC_CONVERSIONS(VW)
#endif

/* C_REAL = 1: C is a k-split's buffer of `real` partials, stored unrounded (gemm_sum rounds their sum once) */
#ifndef C_REAL
#define C_REAL 0
#endif
#if C_REAL
typedef real c_t;
#define STORE_C(p, i, v) ((p)[i] = (v))
#define STORE_C_VEC(p, v) (*(__global realv *)(p) = (v))
#elif C_F32
typedef float c_t;
#define STORE_C(p, i, v) ((p)[i] = round_store((float)(v)))
#define STORE_C_VEC(p, v) (*(__global realv *)(p) = CAT(vec_round, VW)(v))
#else
typedef store_t c_t;
#define STORE_C STORE
#define STORE_C_VEC CAT(vec_store, VW)
#endif
/* Per operand X (A, B): its element type X_t, LOAD_X(p, i) (one element, as real), and for staging (stage_t:
 * `real`, or with MMA the stored bits): X_STAGE(p, i) (one element), its raw element type X_RAW_T, X_RAW(p, i)
 * (the stored bits, or a float32 operand's float), X_STAGE_RAW (a vector of VWG raw elements) and X_VLOAD(p) (VWG
 * aligned elements). A float32 operand's elements are rounded to store_t: round_store's value, or its bits */
#if MMA && MMA_PTX && STORE_HALF && VWG > 1
/* VWG float32 elements rounded to their half bits by store_bits, element by element */
inline CAT(ushort, VWG) stage_bits(CAT(float, VWG) f) {
    const union { CAT(float, VWG) v; float s[VWG]; } in = {f};
    union { CAT(ushort, VWG) v; ushort s[VWG]; } out;
#pragma unroll
    for (int q = 0; q < VWG; ++q) out.s[q] = store_bits(in.s[q]);
    return out.v;
}
#define F32_STAGE_RAW stage_bits
#elif MMA
#define F32_STAGE_RAW CAT(vec_narrow, VWG)
#endif
#if MMA
#define F32_STAGE(p, i) store_bits((p)[i])
#define STORED_STAGE RAW
#define STORED_STAGE_RAW /* the bits as read */
#define STORED_VLOAD(p) VEC_LOAD_RAW(VWG, p)
#else
#define F32_STAGE(p, i) round_store((p)[i])
#define F32_STAGE_RAW CAT(vec_round, VWG)
#define STORED_STAGE LOAD
#define STORED_STAGE_RAW CAT(vec_widen, VWG)
#define STORED_VLOAD CAT(vec_load, VWG)
#endif
#define F32_VLOAD(p) F32_STAGE_RAW(*(__global const CAT(float, VWG) *)(p))
#if A_F32
typedef float a_t;
#define LOAD_A(p, i) round_store((p)[i])
#define A_RAW_T float
#define A_RAW(p, i) ((p)[i])
#define A_STAGE F32_STAGE
#define A_STAGE_RAW F32_STAGE_RAW
#define A_VLOAD F32_VLOAD
#else
typedef store_t a_t;
#define LOAD_A LOAD
#define A_RAW_T RAW_T
#define A_RAW RAW
#define A_STAGE STORED_STAGE
#define A_STAGE_RAW STORED_STAGE_RAW
#define A_VLOAD STORED_VLOAD
#endif
#if B_F32
typedef float b_t;
#define LOAD_B(p, i) round_store((p)[i])
#define B_RAW_T float
#define B_RAW(p, i) ((p)[i])
#define B_STAGE F32_STAGE
#define B_STAGE_RAW F32_STAGE_RAW
#define B_VLOAD F32_VLOAD
#else
typedef store_t b_t;
#define LOAD_B LOAD
#define B_RAW_T RAW_T
#define B_RAW RAW
#define B_STAGE STORED_STAGE
#define B_STAGE_RAW STORED_STAGE_RAW
#define B_VLOAD STORED_VLOAD
#endif
#if D_F32
typedef float d_t;
#define LOAD_D(p, i) round_store((p)[i])
#define LOAD_D_VEC(p) CAT(vec_round, VW)(*(__global const realv *)(p))
#else
typedef store_t d_t;
#define LOAD_D LOAD
#define LOAD_D_VEC CAT(vec_load, VW)
#endif

/* FUSED_ACT = 1: the stores apply the kernel's act and keep arguments (nn.Sequential's fused activation); 0: they
 * ignore them and store plainly, the build of most products. A 200x300x100 product's first call (its programs' builds)
 * took 1.1-1.4 s on Intel's runtime with a switch over unary.h's codes in every program's stores, 0.55-0.65 s without;
 * PoCL 3.6-3.8 and 2.5-2.7 s (Zen 3). ACT_CODE (GPUs: matmul.act_defines): the one unary.h code a FUSED_ACT program
 * applies where its act argument is not negative (a k-split's partials take -1), so the stores build that activation
 * alone: with a switch over act, clang's NVPTX build of conv_fwd's fused tile took 153 registers a work-item (one
 * 256-item work-group an SM) where its plain build took 122. Without it (CPUs) one program serves every activation */
#ifndef FUSED_ACT
#define FUSED_ACT 0
#endif
#ifdef ACT_CODE
#define ACT_OF(act) ACT_CODE
#else
#define ACT_OF(act) (act)
#endif
#if FUSED_ACT && VW > 1
#define UNARY_VEC realv /* apply_unary_vec: the activation of a whole vector, a vector exp per vector on CPUs, where */
#endif                  /* lane by lane PoCL called its scalar exp once per element (a GEMM + GELU 2.7x the GEMM) */
#include "unary.h"

/* ACT_VEC(v, act): the realv v with act (ACT_OF) applied to each lane (a negative act, or no FUSED_ACT: v) */
#if FUSED_ACT && VW > 1
#define ACT_VEC(v, act) ((act) < 0 ? (v) : apply_unary_vec(ACT_OF(act), v, 0, 0))
#elif FUSED_ACT
#define ACT_VEC(v, act) ((act) < 0 ? (v) : apply_unary(ACT_OF(act), v, 0, 0))
#else
#define ACT_VEC(v, act) (v)
#endif

/* C[i] = act(v) for a unary.h code act (ACT_OF; any negative act: none); with keep, also P[i] = v, the pre-activation
 * that the backward of an activation other than relu differentiates at (FUSED_ACT: else C[i] = v) */
inline void store_act(__global c_t *C, __global c_t *P, size_t i, real v, int act, int keep) {
#if FUSED_ACT
    if (keep) STORE_C(P, i, v);
    STORE_C(C, i, act < 0 ? v : apply_unary(ACT_OF(act), v, 0, 0));
#else
    STORE_C(C, i, v);
#endif
}

/* store_act_vec(C, P, v, act, keep): store_act of each lane of the realv v to the aligned C[0..VW) (and P[0..VW)),
 * rounded to C's storage as whole vectors */
#if VW > 1
inline void store_act_vec(__global c_t *C, __global c_t *P, realv v, int act, int keep) {
    if (FUSED_ACT && keep) STORE_C_VEC(P, v);
    STORE_C_VEC(C, ACT_VEC(v, act));
}
#endif

/* LANES_UNROLL: the pragma of loops over a vector's lanes in a store. Unrolled on GPUs; a loop on CPUs (tuning's
 * storage ROLL_LANES), whose builds an epilogue of WM * NV vectors of lanes, each with its bounds check, had
 * dominated: PoCL built a CPU GEMM tile in 7.4-9.1 s, 3.7-4.1 s with the lanes in loops (Zen 3), at the same speed */
#if ROLL_LANES
#define LANES_UNROLL _Pragma("unroll 1")
#else
#define LANES_UNROLL _Pragma("unroll")
#endif

/* store_act(DST, PRE, OFF, lane q of VAL, ACT, KEEP) for the VW lanes q of the realv VAL where COND holds (COND
 * and OFF: expressions of q), the activation applied to VAL as a whole */
#define STORE_ACT_LANES(DST, PRE, VAL, ACT, KEEP, OFF, COND)                                                \
    do {                                                                                                    \
        union { realv v; real s[VW]; } in_ = {VAL}, out_ = {ACT_VEC(in_.v, ACT)};                           \
        LANES_UNROLL for (int q = 0; q < VW; ++q) {                                                         \
            if (!(COND)) continue;                                                                          \
            if (FUSED_ACT && (KEEP)) STORE_C(PRE, OFF, in_.s[q]);                                           \
            STORE_C(DST, OFF, out_.s[q]);                                                                   \
        }                                                                                                   \
    } while (0)

/* stage_run: a run of VWG staged elements (stage_t) as one vector, held between FETCH and PUT (a register array of
 * scalars kept 16-bit values unpacked, a register each, in clang's NVPTX build of the MMA tile), its elements seen
 * through run_elems. SET_RUN(t, val): *t = val, element by element: PoCL 3.0 built conv_bwd_weight with PF wrong
 * when its gathers stored whole vectors into the registers fetched ahead (gy's; garbage in the weight gradient,
 * where Intel's runtime and Oclgrind ran it right), and NVIDIA's compiler (clang's NVPTX build) makes the same
 * registers of both. EACH_ELEM(t, q, x, BODY): BODY for each element x = (*t)[q] */
#if VWG > 1
typedef CAT(STAGE_T, VWG) stage_run;
#else
typedef stage_t stage_run;
#endif
typedef union { stage_run v; stage_t s[VWG]; } run_elems;
#define SET_RUN(t, val)                                                                                     \
    do {                                                                                                    \
        const run_elems set_ = {val};                                                                       \
        _Pragma("unroll") for (int q_ = 0; q_ < VWG; ++q_) ((run_elems *)(t))->s[q_] = set_.s[q_];          \
    } while (0)
#define EACH_ELEM(t, q, x, BODY)                                                                            \
    do {                                                                                                    \
        const run_elems elems_ = {*(t)};                                                                    \
        _Pragma("unroll") for (int q = 0; q < VWG; ++q) {                                                   \
            const stage_t x = elems_.s[q];                                                                  \
            BODY;                                                                                           \
        }                                                                                                   \
    } while (0)

/* GATHER(X, t, p, COND, OFF): the run *t = operand X's elements p[OFF] as staged where COND holds, else 0, for
 * q < VWG (OFF and COND are expressions of q): the elements are read raw one at a time, then staged (widened,
 * rounded) as one vector, so the per-element part is a plain move in every storage type. LOAD_RUN(X, t, p, vec): the
 * run p[0..VWG), one aligned vector load when `vec`. */
#if VWG > 1
#define GATHER(X, t, p, COND, OFF)                                                                          \
    do {                                                                                                    \
        union { CAT(X##_RAW_T, VWG) v; X##_RAW_T s[VWG]; } raw_;                                            \
        _Pragma("unroll") for (int q = 0; q < VWG; ++q) raw_.s[q] = (COND) ? X##_RAW(p, OFF) : 0;           \
        SET_RUN(t, X##_STAGE_RAW(raw_.v));                                                                  \
    } while (0)
/* GATHER_MASKED(X, t, p, OK): the run *t = p[q] where lane q of the int vector OK is -1, 0 where it is 0: every
 * element is read (p[0..VWG) must lie inside the buffer), so the reads are one vector load and the zeroing one
 * select (a lane's own test compiled to a masked scalar move per lane on PoCL) */
#if MMA || USE_FP16
#define STAGE_MASK_T short /* the signed integer of stage_t's size: a select's mask */
#elif USE_FP64
#define STAGE_MASK_T long
#else
#define STAGE_MASK_T int
#endif
#define GATHER_MASKED(X, t, p, OK)                                                                          \
    do {                                                                                                    \
        union { CAT(X##_RAW_T, VWG) v; X##_RAW_T s[VWG]; } raw_;                                            \
        _Pragma("unroll") for (int q = 0; q < VWG; ++q) raw_.s[q] = X##_RAW(p, q);                          \
        const stage_run v_ = X##_STAGE_RAW(raw_.v);                                                         \
        SET_RUN(t, CAT(convert_, CAT(STAGE_MASK_T, VWG))(OK) ? v_ : (stage_run)0);                          \
    } while (0)
#define LOAD_RUN(X, t, p, vec)                                                                              \
    do {                                                                                                    \
        if (vec)                                                                                            \
            SET_RUN(t, X##_VLOAD(p));                                                                       \
        else                                                                                                \
            GATHER(X, t, p, true, q);                                                                       \
    } while (0)
#else
#define GATHER(X, t, p, COND, OFF)                                                                          \
    do {                                                                                                    \
        const int q = 0;                                                                                    \
        *(t) = (COND) ? X##_STAGE(p, OFF) : (stage_t)0;                                                     \
    } while (0)
#define LOAD_RUN(X, t, p, vec) (*(t) = X##_STAGE(p, 0))
#endif

/* whether runs of `p` along its contiguous axis, `stride` elements apart, all start on n-element boundaries */
#define runs_aligned_to(p, stride, n) ((n) > 1 && (stride) % (n) == 0 && (size_t)(p) % ((n) * sizeof(*(p))) == 0)
#define runs_aligned(p, stride) runs_aligned_to(p, stride, VWG) /* for LOAD_RUN */
#define stores_aligned(p, stride) runs_aligned_to(p, stride, VW) /* for STORE_C_VEC, LOAD_D_VEC */

/* Staging a k-slice in two halves: FETCH reads the operand from global memory into the work-item's registers,
 * PUT writes them into the local tile; STAGE does both, run by run. PF, how far ahead of its local stores a slice's
 * global loads are issued:
 *   0: run by run (STAGE, in a loop): CPUs, and GPU tiles whose other resident work-groups cover the waits;
 *   1: all of a slice's runs, then their stores (FETCH, PUT): a work-item waits on global memory once a slice, not
 *      once a run, for the registers of its runs and their addresses. In clang's NVPTX build of the warp-product
 *      tile (one work-group an SM), PF 0 issued a global load, then the local store waiting on it, 8 times a slice;
 *   2: a slice ahead: the kernels fetch slice k+1 before multiplying slice k and put it after, so the loads' latency
 *      hides behind the same work-group's arithmetic, for the registers held across it (GPUs, whose work-groups
 *      start in step and, over a short k, have no time to drift apart and cover each other's waits).
 * With PF, a work-item holds A_RUNS and B_RUNS runs of VWG elements of a slice. An operand strided along both axes,
 * or read along k in a slice whose length VWG does not divide, is staged element by element, wholly in the PUT half
 * (a loop over its elements indexing the registers would put them in memory: a stack frame of 64-128 bytes, every
 * run stored and reloaded, in clang's NVPTX build of the MMA tile) */
#ifndef PF
#define PF 0
#endif
#define FETCH 1
#define PUT 2
#define STAGE (FETCH | PUT)
/* ASYNC = 1 (PF 0): the runs that are plain copies (raw stage_t elements of 4 or 8 bytes, or the warp-product
 * tile's 16-bit bits; no operand widened or rounded) go from global to local memory without a register between: on
 * NVIDIA's runtime from compute capability 8.0 by PTX's `cp.async` (ASYNC_PTX, which the host sets there), the
 * work-item moving on at once, so a slice's copies are in flight together (PF 1's overlap without its registers)
 * and, with DB, during the multiply of the slice before; elsewhere as plain copies of the same bytes (the path the
 * tests check on every device). A run that lands along a local row, 16-byte aligned, goes in 16-byte copies
 * (ASYNC_WHOLE: A's along k in a row-major tile, MMA's or VWA 1's; A's along its rows in the k-major one, VWA > 1;
 * B's along its columns), one that lands across rows element by element (ASYNC_EACH, 4 or 8 bytes: A's along k with
 * VWA > 1, along its rows with VWA 1, B's along k); runs that an edge cuts, rows or columns past the operand, and
 * the warp-product tile's runs across rows are staged as without ASYNC. STAGED_BARRIER, the barrier before a staged
 * slice is read, waits for the work-item's copies first. The kernels' local tiles are TILE_ALIGNED. */
#ifndef ASYNC
#define ASYNC 0
#endif
#ifndef ASYNC_PTX
#define ASYNC_PTX 0
#endif
#if ASYNC && PF
#error "ASYNC stages run by run: PF 0"
#endif
#define TILE_ALIGNED __attribute__((aligned(16)))
#if MMA
#define STAGE_BYTES 2 /* sizeof(stage_t), for the preprocessor */
#elif USE_FP64
#define STAGE_BYTES 8
#else
#define STAGE_BYTES 4
#endif
#if STAGE_BYTES >= 4
#define EACH_BYTES STAGE_BYTES /* an ASYNC_EACH copy's bytes */
#else
#define EACH_BYTES 4 /* none: ASYNC_EACH needs elements of 4 bytes or more */
#endif
#define ASYNC_WHOLE 1
#define ASYNC_EACH 2
#define ASYNC_RAW (ASYNC && (MMA || !(STORE_HALF || STORE_BF16))) /* staged as stored: no widening */
/* how a run that lies along a local row of `row` elements is copied: whole, where the row and the run keep 16-byte
 * alignment, else element by element (not 16-bit elements) */
#define ASYNC_ALONG(row)                                                                                    \
    (!ASYNC_RAW ? 0                                                                                         \
     : (VWG * STAGE_BYTES % 16 == 0 && (row) * STAGE_BYTES % 16 == 0) ? ASYNC_WHOLE                          \
     : STAGE_BYTES >= 4 ? ASYNC_EACH : 0)
#define ASYNC_ACROSS (ASYNC_RAW && STAGE_BYTES >= 4 ? ASYNC_EACH : 0) /* a run across local rows */
#if MMA
#define ASYNC_A_K (A_F32 ? 0 : ASYNC_ALONG(LDA_MMA)) /* A's runs along k, along its rows (M), B's along N, along k */
#define ASYNC_A_M 0
#define ASYNC_B_N (B_F32 ? 0 : ASYNC_ALONG(LDB_MMA))
#define ASYNC_B_K 0
#define A_AT(r, kk) ((r) * LDA_MMA + (kk)) /* element (r, kk) of A's local tile, (kk, c) of B's */
#define B_AT(kk, c) ((kk) * LDB_MMA + (c))
#else
#define ASYNC_A_K (VWA == 1 ? ASYNC_ALONG(AS_AT(1, 0)) : ASYNC_ACROSS)
#define ASYNC_A_M (VWA > 1 ? ASYNC_ALONG(AS_AT(0, 1)) : ASYNC_ACROSS)
#define ASYNC_B_N ASYNC_ALONG(TN)
#define ASYNC_B_K ASYNC_ACROSS
#define A_AT AS_AT
#define B_AT(kk, c) ((kk) * TN + (c))
#endif
#if ASYNC_RAW && ASYNC_PTX
#define STR_(x) #x
#define STR(x) STR_(x)
/* one copy of BYTES (4, 8 or 16; CACHE "ca", or "cg" for 16: not through L1) from global src to local dst. A __local
 * pointer's integer value is its address in the shared window, as cp.async's .shared operand takes it */
#define CP_ASYNC(CACHE, BYTES, dst, src)                                                                    \
    asm volatile("cp.async." CACHE ".shared.global [%0], [%1], " STR(BYTES) ";"                           \
                 :                                                                                          \
                 : "r"((uint)(size_t)(dst)), "l"((ulong)(src))                                              \
                 : "memory")
#define ASYNC_WAIT() asm volatile("cp.async.wait_all;" ::: "memory")
#else
typedef uint copy4_t;
typedef uint2 copy8_t;
typedef uint4 copy16_t;
#define CP_ASYNC(CACHE, BYTES, dst, src)                                                                    \
    (*(__local CAT(CAT(copy, BYTES), _t) *)(dst) = *(__global const CAT(CAT(copy, BYTES), _t) *)(src))
#define ASYNC_WAIT() ((void)0)
#endif
/* ASYNC_RUN(HOW, tile, AT, src): the run of VWG elements at global src into the local tile at its elements AT (an
 * expression of q_, the run's element), ASYNC_WHOLE (AT(0) on, 16-byte aligned) or ASYNC_EACH, in a loop: unrolled,
 * ptxas gave gemm's float32 row 150 registers a work-item for its 124 (one 256-item work-group an SM, not two) */
#define ASYNC_RUN(HOW, tile, AT, src)                                                                       \
    do {                                                                                                    \
        if ((HOW) == ASYNC_WHOLE) {                                                                         \
            const int q_ = 0;                                                                               \
            _Pragma("unroll") for (int o_ = 0; o_ < VWG * STAGE_BYTES; o_ += 16)                           \
                CP_ASYNC("cg", 16, (__local uchar *)((tile) + (AT)) + o_, (__global const uchar *)(src) + o_); \
        } else {                                                                                            \
            _Pragma("unroll 1") for (int q_ = 0; q_ < VWG; ++q_)                                           \
                CP_ASYNC("ca", EACH_BYTES, (tile) + (AT), (src) + q_);                                      \
        }                                                                                                   \
    } while (0)
/* ASYNC_TRY(HOW, tile, AT, src): in a staging loop, the run at src copied as ASYNC_RUN, and the loop continued, where
 * the layout's HOW (ASYNC_A_K, ..., 0: none) allows it at src: whole from a 16-byte aligned start, else element by
 * element where elements are 4 or 8 bytes (a gather's run starts anywhere, and an operand's where its base or stride
 * leaves it). An if-else (its `continue` is the loop's): use it in braces */
#define ASYNC_TRY(HOW, tile, AT, src)                                                                       \
    if ((HOW) == ASYNC_WHOLE && (size_t)(src) % 16 == 0) {                                                  \
        ASYNC_RUN(ASYNC_WHOLE, tile, AT, src);                                                              \
        continue;                                                                                           \
    } else if ((HOW) && ASYNC_ACROSS) {                                                                     \
        ASYNC_RUN(ASYNC_EACH, tile, AT, src);                                                               \
        continue;                                                                                           \
    }
#define STAGED_BARRIER()                                                                                    \
    do {                                                                                                    \
        ASYNC_WAIT();                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                       \
    } while (0)

/* a kernel's slice k0: FETCH it there (PF 1, or PF 2's first slice: `first`), then PUT_HALF */
#define FETCH_HERE(first) (PF == 1 || (PF == 2 && (first)))
#define PUT_HALF (PF ? PUT : STAGE)
#define A_RUNS ((TM * TK / VWG + WG - 1) / WG)
#define B_RUNS ((TK * TN / VWG + WG - 1) / WG)
/* FETCH_REGISTERS(ra, rb): a kernel's registers for its A and B operands' fetched runs; staging run by run (PF 0)
 * keeps each run in the staging function's own (`one`: a kernel-wide array would live across the barriers, which
 * CPU runtimes that run a work-group's items in loops store per work-item in memory) */
#if PF
#define FETCH_REGISTERS(ra, rb) stage_run ra[A_RUNS], rb[B_RUNS]
#else
#define FETCH_REGISTERS(ra, rb) stage_run *ra = 0, *rb = 0
#endif
/* the register of a work-item's j-th run of a slice: its own in regs when fetched apart, one (a staging function's)
 * run by run */
#define SLOT(regs, one, mode, j) ((mode) == STAGE ? &(one) : (regs) + (j))
/* EACH_RUN(j, e, total, runs): a work-item's runs j = 0, 1, .. at e = lid + j*WG < total, at most
 * `runs` (a constant). With PF, the loop is unrolled to that bound: the registers' indices must be constants
 * (a private array indexed at run time lives in memory), so its count is that constant and `total` a test in it
 * (as a second exit it kept PoCL's LLVM from unrolling: "loop not unrolled") */
#if PF
#define EACH_RUN(j, e, total, runs)                                                                         \
    _Pragma("unroll") for (int j = 0, e = lid; j < (runs); ++j, e += WG) if (e < (total))
#else
#define EACH_RUN(j, e, total, runs) for (int j = 0, e = lid; e < (total); ++j, e += WG)
#endif

/* The `mode` half (FETCH, PUT or STAGE) of staging op(A)'s rows [row0, row0+TM) x k-columns [k0, k0+TK) into as
 * (an a_tile) through the registers ra, zeros past the edges; only the first kn columns of a short last slice are
 * read by the multiply. */
inline void stage_a(__local local_t *as, stage_run *ra, int mode, int k0, int kend, int M, int row0,
                    __global const a_t *A, int a_rs, int a_cs, bool a_vec, int lid) {
    const int kn = max(0, min(TK, kend - k0));
    stage_run one;
    if (a_cs == 1 && kn % VWG == 0) { /* runs along k; rows past M (an edge tile's) staged as zeros */
        EACH_RUN(j, e, TM * TK / VWG, A_RUNS) {
            const int r = e / (TK / VWG), kk = e % (TK / VWG) * VWG;
            if (kk >= kn) continue;
#if ASYNC_A_K
            if (row0 + r < M) {
                ASYNC_TRY(ASYNC_A_K, as, A_AT(r, kk + q_), A + (size_t)(row0 + r) * a_rs + k0 + kk)
            }
#endif
            stage_run *t = SLOT(ra, one, mode, j);
            if (mode & FETCH) {
                if (row0 + r < M) {
                    LOAD_RUN(A, t, A + (size_t)(row0 + r) * a_rs + k0 + kk, a_vec);
                    PREFETCH_AT(A + (size_t)(row0 + r) * a_rs + k0 + kk + TK);
                } else {
                    SET_RUN(t, (stage_run)0);
                }
            }
            if (mode & PUT) PUT_A_RUN(as, r, kk, t);
        }
    } else if (a_rs == 1) { /* runs along the rows; one that M cuts is gathered element by element */
        EACH_RUN(j, e, kn * (TM / VWG), A_RUNS) {
            const int kk = e / (TM / VWG), r = e % (TM / VWG) * VWG;
#if ASYNC_A_M
            if (row0 + r + VWG <= M) {
                ASYNC_TRY(ASYNC_A_M, as, A_AT(r + q_, kk), A + (size_t)(k0 + kk) * a_cs + row0 + r)
            }
#endif
            stage_run *t = SLOT(ra, one, mode, j);
            if (mode & FETCH) {
                __global const a_t *p = A + (size_t)(k0 + kk) * a_cs + row0 + r;
                if (row0 + r + VWG <= M)
                    LOAD_RUN(A, t, p, a_vec);
                else
                    GATHER(A, t, p, row0 + r + q < M, q);
                PREFETCH_AT(p + (size_t)TK * a_cs);
            }
            if (mode & PUT) EACH_ELEM(t, q, x, PUT_A(as, r + q, kk, x));
        }
    } else if (mode & PUT) { /* element by element, all in the PUT half */
        if (a_cs == 1) {
            for (int e = lid; e < TM * TK; e += WG) {
                const int r = e / TK, kk = e % TK, gi = row0 + r, gk = k0 + kk;
                PUT_A(as, r, kk, (gi < M && gk < kend) ? A_STAGE(A, gi * a_rs + gk) : (stage_t)0);
            }
        } else {
            for (int e = lid; e < TM * kn; e += WG) {
                const int kk = e / TM, r = e % TM, gi = row0 + r;
                PUT_A(as, r, kk, gi < M ? A_STAGE(A, gi * a_rs + (k0 + kk) * a_cs) : (stage_t)0);
            }
        }
    }
}

/* The `mode` half of staging op(B)'s k-rows [k0, k0+TK) x columns [col0, col0+TN) into bs (TK x TN) through the
 * registers rb, as stage_a. */
inline void stage_b(__local local_t *bs, stage_run *rb, int mode, int k0, int kend, int N, int col0,
                    __global const b_t *B, int b_rs, int b_cs, bool b_vec, int lid) {
    const int kn = max(0, min(TK, kend - k0));
    stage_run one;
    if (b_cs == 1) { /* runs along the columns; one that N cuts is gathered element by element */
        EACH_RUN(j, e, kn * (TN / VWG), B_RUNS) {
            const int kk = e / (TN / VWG), c = e % (TN / VWG) * VWG;
#if ASYNC_B_N
            if (col0 + c + VWG <= N) {
                ASYNC_TRY(ASYNC_B_N, bs, B_AT(kk, c + q_), B + (size_t)(k0 + kk) * b_rs + col0 + c)
            }
#endif
            stage_run *t = SLOT(rb, one, mode, j);
            if (mode & FETCH) {
                __global const b_t *p = B + (size_t)(k0 + kk) * b_rs + col0 + c;
                if (col0 + c + VWG <= N)
                    LOAD_RUN(B, t, p, b_vec);
                else
                    GATHER(B, t, p, col0 + c + q < N, q);
                PREFETCH_AT(p + (size_t)TK * b_rs);
            }
            if (mode & PUT) PUT_B_RUN(bs, kk, c, t);
        }
    } else if (b_rs == 1 && kn % VWG == 0) { /* runs along k; columns past N staged as zeros */
        EACH_RUN(j, e, TK * TN / VWG, B_RUNS) {
            const int c = e / (TK / VWG), kk = e % (TK / VWG) * VWG;
            if (kk >= kn) continue;
#if ASYNC_B_K
            if (col0 + c < N) {
                ASYNC_TRY(ASYNC_B_K, bs, B_AT(kk + q_, c), B + (size_t)(col0 + c) * b_cs + k0 + kk)
            }
#endif
            stage_run *t = SLOT(rb, one, mode, j);
            if (mode & FETCH) {
                if (col0 + c < N) {
                    LOAD_RUN(B, t, B + (size_t)(col0 + c) * b_cs + k0 + kk, b_vec);
                    PREFETCH_AT(B + (size_t)(col0 + c) * b_cs + k0 + kk + TK);
                } else {
                    SET_RUN(t, (stage_run)0);
                }
            }
            if (mode & PUT) EACH_ELEM(t, q, x, PUT_B(bs, kk + q, c, x));
        }
    } else if (mode & PUT) { /* element by element, all in the PUT half */
        for (int e = lid; e < TK * TN; e += WG) {
            const int c = e / TK, kk = e % TK, gj = col0 + c, gk = k0 + kk;
            PUT_B(bs, kk, c, (gj < N && gk < kend) ? B_STAGE(B, gk * b_rs + gj * b_cs) : (stage_t)0);
        }
    }
}

/* acc += A's rows at k-column kk * Bs[kk][columns] for the work-item's WM x WN block */
#if VWA > 1
#define MAC_STEP(As, Bs, kk)                                                  \
    do {                                                                      \
        realv b[NV];                                                          \
        _Pragma("unroll") for (int v = 0; v < NV; ++v) b[v] = Bs[kk][tx + v * RTN]; \
        _Pragma("unroll") for (int u = 0; u < WM / VWA; ++u) {                \
            union { reala v; real s[VWA]; } a_ = {As[kk][ty + u * RTM]};      \
            _Pragma("unroll") for (int q = 0; q < VWA; ++q) {                 \
                const realv a = (realv)a_.s[q];                               \
                _Pragma("unroll") for (int v = 0; v < NV; ++v) acc[u * VWA + q][v] += a * b[v]; \
            }                                                                 \
        }                                                                     \
    } while (0)
#else
#define MAC_STEP(As, Bs, kk)                                                  \
    do {                                                                      \
        realv b[NV];                                                          \
        _Pragma("unroll") for (int v = 0; v < NV; ++v) b[v] = Bs[kk][tx + v * RTN]; \
        _Pragma("unroll") for (int i = 0; i < WM; ++i) {                      \
            const realv a = (realv)As[ty + i * RTM][kk];                      \
            _Pragma("unroll") for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v]; \
        }                                                                     \
    } while (0)
#endif

/* KU > 0: the multiply of a full slice unrolled KU k-steps at a time (0: as the compiler chooses). On an H200,
 * NVIDIA's compiler kept the 128x128 tile's 16-step slice rolled in 158 registers a work-item (one 256-item
 * work-group an SM); unrolled, 123 (two): 24.5 -> 37.3 TFLOP/s at 4096^3 (tuning.py's gemm rows) */
#ifndef KU
#define KU 0
#endif
#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#if KU
#define K_UNROLL PRAGMA(unroll KU)
#else
#define K_UNROLL
#endif

#if MMA
#if STORE_BF16
#define MMA_TYPE "bf16"
#else
#define MMA_TYPE "f16"
#endif

#if MMA_LDSM /* a full k-step's fragments by ldmatrix: 6 loads for WM 8, NV 4, where the lanes' own take 32 */
/* ldmatrix .x4 (.trans): four 8x8 blocks of 16-bit values, each lane addressing one block row (lanes 8i .. 8i+7: block
 * i's rows 0-7, 16-byte aligned: the tiles' rows are, MMA_PAD keeps them on distinct banks); a lane receives row l/4,
 * columns 2(l%4), +1 of each (.trans: of each block transposed). A __local pointer's integer value is its address in
 * the shared window, as ldmatrix's .shared operand takes it */
#define LDSM_X4(TRANS, d0, d1, d2, d3, p)                                                                   \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" TRANS ".shared.b16 {%0, %1, %2, %3}, [%4];"              \
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)                                                   \
                 : "r"((uint)(size_t)(p)))
#define LDSM_X2(TRANS, d0, d1, p)                                                                           \
    asm volatile("ldmatrix.sync.aligned.m8n8.x2" TRANS ".shared.b16 {%0, %1}, [%2];"                       \
                 : "=r"(d0), "=r"(d1)                                                                       \
                 : "r"((uint)(size_t)(p)))

/* the fragments of a full k-step at kk for lane l of the warp whose block starts at row0, col0: A's 16x16 blocks u
 * (lane l addresses row l%16 at k (l/16)*8: blocks rows 0-7 / 8-15 at k 0-7, then at k 8-15, mma's a0..a3), B's
 * pairs of 16x8 blocks v, v+1 transposed (lane l addresses k-row l%16 at column (l/16)*8: b[v][0], b[v][1],
 * b[v+1][0], b[v+1][1]), an odd NV's last one with .x2 */
inline void ldsm_fragments(uint a[WM / 2][4], uint b[NV][2], __local const ushort *as, __local const ushort *bs, int kk,
                           int row0, int col0, int l) {
#pragma unroll
    for (int u = 0; u < WM / 2; ++u)
        LDSM_X4("", a[u][0], a[u][1], a[u][2], a[u][3], as + (row0 + u * 16 + l % 16) * LDA_MMA + kk + l / 16 * 8);
#pragma unroll
    for (int v = 0; v + 1 < NV; v += 2)
        LDSM_X4(".trans", b[v][0], b[v][1], b[v + 1][0], b[v + 1][1],
                bs + (kk + l % 16) * LDB_MMA + col0 + v * 8 + l / 16 * 8);
#if NV % 2
    LDSM_X2(".trans", b[NV - 1][0], b[NV - 1][1], bs + (kk + l % 16) * LDB_MMA + col0 + (NV - 1) * 8);
#endif
}
#endif

/* acc += the warp's products over the 16 k-columns kk .. kk+15 of the staged tiles as, bs (a_tile, b_tile), columns
 * from kn on read as zeros (a short last slice's, whose staging leaves them stale; a full slice's constant kn
 * leaves no test) */
inline void mma_step(realv acc[WM][NV], __local const ushort *as, __local const ushort *bs, int kk, int kn, int lid) {
    const int g = lid % 32 / 4, t2 = lid % 4 * 2, row0 = MMA_ROW0 - g, col0 = MMA_COL0;
#if MMA_PTX
    const bool whole = kk + 16 <= kn;
    uint a[WM / 2][4], b[NV][2];
#if MMA_LDSM
    if (whole) {
        ldsm_fragments(a, b, as, bs, kk, row0, col0, lid % 32);
    } else
#endif
    {
#pragma unroll
        for (int u = 0; u < WM / 2; ++u)
#pragma unroll
            for (int h = 0; h < 4; ++h) { /* rows r, r+8, r, r+8 at k-columns 2t (+1), 2t (+1), 2t+8 (+9), 2t+8 (+9) */
                const int r = row0 + u * 16 + h % 2 * 8 + g, k = kk + t2 + h / 2 * 8;
                const uint pair = *(__local const uint *)(as + r * LDA_MMA + k);
                a[u][h] = whole || k + 1 < kn ? pair : k < kn ? pair & 0xFFFFu : 0u;
            }
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = col0 + v * 8 + g, k = kk + t2 + h * 8;
                const uint lo = whole || k < kn ? bs[k * LDB_MMA + c] : 0u;
                const uint hi = whole || k + 1 < kn ? bs[(k + 1) * LDB_MMA + c] : 0u;
                b[v][h] = hi << 16 | lo;
            }
    }
#pragma unroll
    for (int u = 0; u < WM / 2; ++u)
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            float d[4] = {acc[2 * u][v].x, acc[2 * u][v].y, acc[2 * u + 1][v].x, acc[2 * u + 1][v].y};
            MMA_16816(MMA_TYPE, d, a[u], b[v]);
            acc[2 * u][v] = (realv)(d[0], d[1]);
            acc[2 * u + 1][v] = (realv)(d[2], d[3]);
        }
#else /* OpenCL C: each k-column's values of the lane's rows and column pairs widened once, then their products */
    for (int k = kk; k < min(kk + 16, kn); ++k) {
        float a[WM];
        realv b[NV];
#pragma unroll
        for (int i = 0; i < WM; ++i) a[i] = mma_value(as[(row0 + i / 2 * 16 + i % 2 * 8 + g) * LDA_MMA + k]);
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            const int c = col0 + v * 8 + t2;
            b[v] = (realv)(mma_value(bs[k * LDB_MMA + c]), mma_value(bs[k * LDB_MMA + c + 1]));
        }
#pragma unroll
        for (int i = 0; i < WM; ++i)
#pragma unroll
            for (int v = 0; v < NV; ++v) acc[i][v] += a[i] * b[v];
    }
#endif
}

#define MULTIPLY(As, Bs, k0)                                                                              \
    do {                                                                                                  \
        __local const ushort *as_ = (__local const ushort *)(As), *bs_ = (__local const ushort *)(Bs);    \
        if ((k0) + TK <= kend) {                                                                          \
            _Pragma("unroll") for (int kk = 0; kk < TK; kk += 16) mma_step(acc, as_, bs_, kk, TK, lid);    \
        } else {                                                                                          \
            for (int kk = 0; kk < kend - (k0); kk += 16) mma_step(acc, as_, bs_, kk, kend - (k0), lid);   \
        }                                                                                                 \
    } while (0)
#else
/* one staged k-slice: a constant trip count for full slices (a run-time one costs ~20 % on PoCL) */
#define MULTIPLY(As, Bs, k0)                                                  \
    do {                                                                      \
        if ((k0) + TK <= kend)                                                \
            K_UNROLL for (int kk = 0; kk < TK; ++kk) MAC_STEP(As, Bs, kk);    \
        else                                                                  \
            for (int kk = 0; kk < kend - (k0); ++kk) MAC_STEP(As, Bs, kk);    \
    } while (0)
#endif

#endif
