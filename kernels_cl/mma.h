/* NVIDIA's warp-level tensor-core product (PTX mma.sync), reached from OpenCL C through inline assembly: only NVIDIA's
 * OpenCL compiler takes PTX. One warp computes D = A B + D for a 16x8 tile over 16 k; lane l (g = l / 4, t = l % 4)
 * holds D's rows g and g + 8 at columns 2t, 2t + 1, A's at k-columns 2t, 2t + 1 (and + 8), B's column g at k-rows 2t,
 * 2t + 1 (and + 8). */
#ifndef CLNN_MMA_H
#define CLNN_MMA_H

/* d[0..3] (floats) += a b for the lane's fragments a[0..3], b[0..1]: pairs of TYPE ("f16" or "bf16") in uints */
#define MMA_16816(TYPE, d, a, b)                                                                                    \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 "                                    \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                 \
                 : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])                                          \
                 : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))

#endif
