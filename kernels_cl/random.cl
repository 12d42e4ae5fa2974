/* random.cl: counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
 *
 * Element i of a draw depends only on (seed, offset, i): results are reproducible for a seed and
 * independent of the launch shape or device. Each work-item makes four 32-bit words for elements
 * 4i..4i+3 from counter (i, offset_lo, offset_hi, 0) and key (seed_lo, seed_hi).
 * Kernels: uniform [0, 1); normal (Box-Muller, mean 0, std 1); dropout (y = x * mask / (1 - p),
 * mask = u >= p, and the 0/1 mask saved for backward).
 * Defines: the element type (clnn_dtype.h). The generator itself is philox.h.
 */
#include "clnn_dtype.h"
#include "philox.h"

inline float4 uniform4(uint i, uint2 seed, uint2 offset) {
    uint4 r = philox((uint4)(i, offset.x, offset.y, 0u), seed);
    return (float4)(to_unit(r.x), to_unit(r.y), to_unit(r.z), to_unit(r.w));
}

__kernel void uniform(int n, uint2 seed, uint2 offset, __global store_t *out) {
    int i = get_global_id(0);
    if (4 * i >= n) return;
    float4 u = uniform4(i, seed, offset);
    float v[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4 && 4 * i + k < n; ++k) STORE(out, 4 * i + k, v[k]);
}

__kernel void normal(int n, uint2 seed, uint2 offset, __global store_t *out) {
    int i = get_global_id(0);
    if (4 * i >= n) return;
    float4 u = uniform4(i, seed, offset);
    /* 1 - u is in (0, 1]: the log is finite */
    float r0 = sqrt(-2.0f * log(1.0f - u.x)), r1 = sqrt(-2.0f * log(1.0f - u.z));
    float t0 = 6.28318530717958647692f * u.y, t1 = 6.28318530717958647692f * u.w;
    float v[4] = {r0 * cos(t0), r0 * sin(t0), r1 * cos(t1), r1 * sin(t1)};
    for (int k = 0; k < 4 && 4 * i + k < n; ++k) STORE(out, 4 * i + k, v[k]);
}

__kernel void dropout(int n, uint2 seed, uint2 offset, real p, __global const store_t *x,
                      __global store_t *y, __global store_t *mask) {
    int i = get_global_id(0);
    if (4 * i >= n) return;
    float4 u = uniform4(i, seed, offset);
    float v[4] = {u.x, u.y, u.z, u.w};
    real scale = 1 / (1 - p);
    for (int k = 0; k < 4 && 4 * i + k < n; ++k) {
        real m = v[k] >= p ? 1 : 0;
        STORE(mask, 4 * i + k, m);
        STORE(y, 4 * i + k, LOAD(x, 4 * i + k) * m * scale);
    }
}
