/* philox.h: the counter-based generator every random kernel shares (included, never built alone):
 * Philox4x32-10 (Salmon et al., SC'11). philox(counter, key) gives four random 32-bit words that depend
 * only on its arguments; to_unit maps a word to a float in [0, 1).
 */
#ifndef CLNN_PHILOX_H
#define CLNN_PHILOX_H

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

inline uint4 philox(uint4 c, uint2 k) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        const ulong p0 = (ulong)PHILOX_M0 * c.x, p1 = (ulong)PHILOX_M1 * c.z; /* one widening multiply each */
        c = (uint4)((uint)(p1 >> 32) ^ c.y ^ k.x, (uint)p1, (uint)(p0 >> 32) ^ c.w ^ k.y, (uint)p0);
        k += (uint2)(PHILOX_W0, PHILOX_W1);
    }
    return c;
}

/* 24 random bits to a float in [0, 1) */
inline float to_unit(uint v) { return (float)(v >> 8) * (1.0f / 16777216.0f); }

#endif
