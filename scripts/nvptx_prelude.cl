/* Definitions of the OpenCL built-ins clnn's kernels call, for clang's NVPTX target (PTX inspection only) */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define OVL __attribute__((overloadable, always_inline))
/* every helper inlined: under C99's `inline` rules clang calls an external definition where it declines to inline a
 * big one (ptxas: "Unresolved extern function"), and a call's stack would not be the kernel NVIDIA's runtime builds */
#define inline inline __attribute__((always_inline))
OVL size_t get_local_id(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_tid_x() : d == 1 ? __nvvm_read_ptx_sreg_tid_y() : __nvvm_read_ptx_sreg_tid_z(); }
OVL size_t get_group_id(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_ctaid_x() : d == 1 ? __nvvm_read_ptx_sreg_ctaid_y() : __nvvm_read_ptx_sreg_ctaid_z(); }
OVL size_t get_local_size(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_ntid_x() : d == 1 ? __nvvm_read_ptx_sreg_ntid_y() : __nvvm_read_ptx_sreg_ntid_z(); }
OVL size_t get_num_groups(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_nctaid_x() : d == 1 ? __nvvm_read_ptx_sreg_nctaid_y() : __nvvm_read_ptx_sreg_nctaid_z(); }
OVL size_t get_global_offset(uint d) { return 0; }
OVL size_t get_global_id(uint d) { return get_group_id(d) * get_local_size(d) + get_local_id(d); }
OVL int min(int a, int b) { return a < b ? a : b; }
OVL int max(int a, int b) { return a > b ? a : b; }
OVL void barrier(cl_mem_fence_flags f) { __nvvm_bar_sync(0); }
#define VLOAD_HALF(AS) \
OVL float vload_half(size_t i, AS const half *p) { return (float)p[i]; } \
OVL float2 vload_half2(size_t i, AS const half *p) { return (float2)((float)p[2 * i], (float)p[2 * i + 1]); } \
OVL float4 vload_half4(size_t i, AS const half *p) { return (float4)(vload_half2(2 * i, p), vload_half2(2 * i + 1, p)); } \
OVL float8 vload_half8(size_t i, AS const half *p) { return (float8)(vload_half4(2 * i, p), vload_half4(2 * i + 1, p)); } \
OVL void vstore_half(float f, size_t i, AS half *p) { p[i] = (half)f; } \
OVL void vstore_half2(float2 f, size_t i, AS half *p) { p[2 * i] = (half)f.x; p[2 * i + 1] = (half)f.y; } \
OVL void vstore_half4(float4 f, size_t i, AS half *p) { vstore_half2(f.lo, 2 * i, p); vstore_half2(f.hi, 2 * i + 1, p); } \
OVL void vstore_half8(float8 f, size_t i, AS half *p) { vstore_half4(f.lo, 2 * i, p); vstore_half4(f.hi, 2 * i + 1, p); }
VLOAD_HALF(__global)
VLOAD_HALF(__private)
VLOAD_HALF(__local)
#define CONVERT(n) \
OVL uint##n convert_uint##n(ushort##n v) { return __builtin_convertvector(v, uint##n); } \
OVL ushort##n convert_ushort##n(uint##n v) { return __builtin_convertvector(v, ushort##n); } \
OVL short##n convert_short##n(int##n v) { return __builtin_convertvector(v, short##n); } \
OVL int##n convert_int##n(int##n v) { return v; } \
OVL long##n convert_long##n(int##n v) { return __builtin_convertvector(v, long##n); }
CONVERT(2)
CONVERT(4)
CONVERT(8)
CONVERT(16)
/* vector forms of the built-ins below, lane by lane (clang's vectors index like arrays) */
#define LANES1(T, N, name) \
OVL T##N name(T##N x) { T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = name(x[i]); return r; }
#define LANES2(T, N, name) \
OVL T##N name(T##N x, T##N y) { T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = name(x[i], y[i]); return r; }
#define EACH_WIDTH(M, ...) M(__VA_ARGS__, 2) M(__VA_ARGS__, 3) M(__VA_ARGS__, 4) M(__VA_ARGS__, 8) M(__VA_ARGS__, 16)
#define VEC1(name, T, N) LANES1(T, N, name)
#define VEC2(name, T, N) LANES2(T, N, name) \
OVL T##N name(T##N x, T y) { return name(x, (T##N)(y)); }
/* float math as NVIDIA's approximate instructions (the kernels' registers and memory, not their rounding) */
OVL float sqrt(float x) { return __builtin_sqrtf(x); }
OVL float rsqrt(float x) { return __nvvm_rsqrt_approx_f(x); }
OVL float exp(float x) { return __nvvm_ex2_approx_f(x * 1.44269504f); }
OVL float log(float x) { return __nvvm_lg2_approx_f(x) * 0.69314718f; }
OVL float expm1(float x) { return exp(x) - 1.0f; }
OVL float log1p(float x) { return log(1.0f + x); }
OVL float pow(float x, float y) { return __nvvm_ex2_approx_f(y * __nvvm_lg2_approx_f(x)); }
OVL float tanh(float x) { return 1.0f - 2.0f / (exp(2.0f * x) + 1.0f); }
OVL float erfc(float x) { return 1.0f - tanh(1.2f * x); }
OVL float sin(float x) { return __nvvm_sin_approx_f(x); }
OVL float cos(float x) { return __nvvm_cos_approx_f(x); }
OVL float fabs(float x) { return __builtin_fabsf(x); }
OVL float fmin(float x, float y) { return __builtin_fminf(x, y); }
OVL float fmax(float x, float y) { return __builtin_fmaxf(x, y); }
OVL float fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
OVL float sign(float x) { return x > 0 ? 1.0f : x < 0 ? -1.0f : x; }
OVL int isnan(float x) { return x != x; }
OVL int isinf(float x) { return __builtin_fabsf(x) == __builtin_inff(); }
OVL float clamp(float x, float lo, float hi) { return fmin(fmax(x, lo), hi); }
OVL long min(long a, long b) { return a < b ? a : b; }
OVL float min(float a, float b) { return __builtin_fminf(a, b); }
OVL float max(float a, float b) { return __builtin_fmaxf(a, b); }
OVL long max(long a, long b) { return a > b ? a : b; }
EACH_WIDTH(VEC1, sqrt, float) EACH_WIDTH(VEC1, rsqrt, float) EACH_WIDTH(VEC1, exp, float)
EACH_WIDTH(VEC1, log, float) EACH_WIDTH(VEC1, expm1, float) EACH_WIDTH(VEC1, log1p, float)
EACH_WIDTH(VEC1, tanh, float) EACH_WIDTH(VEC1, erfc, float) EACH_WIDTH(VEC1, fabs, float)
EACH_WIDTH(VEC1, sign, float) EACH_WIDTH(VEC2, fmin, float) EACH_WIDTH(VEC2, fmax, float)
EACH_WIDTH(VEC2, pow, float)
#define VEC_TEST(name, N) \
OVL int##N name(float##N x) { int##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = name(x[i]) ? -1 : 0; return r; }
#define VEC_CLAMP(T, N) \
OVL T##N clamp(T##N x, T lo, T hi) { T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = clamp(x[i], lo, hi); return r; } \
OVL T##N clamp(T##N x, T##N lo, T##N hi) { T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = clamp(x[i], lo[i], hi[i]); return r; }
#define VEC_ANY(_, N) \
OVL int any(int##N x) { int r = 0; _Pragma("unroll") for (int i = 0; i < N; ++i) r |= x[i] < 0; return r; }
EACH_WIDTH(VEC_TEST, isnan) EACH_WIDTH(VEC_TEST, isinf) EACH_WIDTH(VEC_CLAMP, float) EACH_WIDTH(VEC_ANY, _)
OVL int any(int x) { return x < 0; }
/* half <-> float conversions (HALF_CONVERT's), and vloadn / vstoren of every element type and address space */
OVL half convert_half(float x) { return (half)x; }
OVL half convert_half_rte(float x) { return (half)x; }
OVL float convert_float(half x) { return (float)x; }
#define VEC_CVT(_, N) \
OVL half##N convert_half##N(float##N x) { return __builtin_convertvector(x, half##N); } \
OVL half##N convert_half##N##_rte(float##N x) { return __builtin_convertvector(x, half##N); } \
OVL float##N convert_float##N(half##N x) { return __builtin_convertvector(x, float##N); }
EACH_WIDTH(VEC_CVT, _)
#define VLOAD(T, AS, N) \
OVL T##N vload##N(size_t i, AS const T *p) { T##N r; _Pragma("unroll") for (int q = 0; q < N; ++q) r[q] = p[i * N + q]; return r; } \
OVL void vstore##N(T##N v, size_t i, AS T *p) { _Pragma("unroll") for (int q = 0; q < N; ++q) p[i * N + q] = v[q]; }
#define VLOADS(T, AS) EACH_WIDTH(VLOAD, T, AS)
VLOADS(float, __global) VLOADS(float, __local) VLOADS(float, __private)
VLOADS(half, __global) VLOADS(half, __local) VLOADS(half, __private)
VLOADS(uint, __global) VLOADS(uint, __local) VLOADS(uint, __private)
VLOADS(ushort, __global) VLOADS(ushort, __local) VLOADS(ushort, __private)
/* 32-bit integer atomics on global memory */
OVL int atomic_or(volatile __global int *p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
OVL int atomic_min(volatile __global int *p, int v) { return __atomic_fetch_min(p, v, __ATOMIC_RELAXED); }
