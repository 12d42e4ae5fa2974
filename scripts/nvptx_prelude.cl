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
/* math as NVIDIA's approximate instructions (the kernels' registers and memory, not their rounding); double's
 * transcendentals through float's */
#define MATH(T) \
OVL T sqrt(T x) { return __builtin_sqrt(x); } \
OVL T rsqrt(T x) { return 1 / __builtin_sqrt(x); } \
OVL T exp(T x) { return (T)__nvvm_ex2_approx_f((float)x * 1.44269504f); } \
OVL T log(T x) { return (T)(__nvvm_lg2_approx_f((float)x) * 0.69314718f); } \
OVL T expm1(T x) { return exp(x) - 1; } \
OVL T log1p(T x) { return log(1 + x); } \
OVL T pow(T x, T y) { return (T)__nvvm_ex2_approx_f((float)y * __nvvm_lg2_approx_f((float)x)); } \
OVL T tanh(T x) { return 1 - 2 / (exp(2 * x) + 1); } \
OVL T erfc(T x) { return 1 - tanh((T)1.2 * x); } \
OVL T sin(T x) { return (T)__nvvm_sin_approx_f((float)x); } \
OVL T cos(T x) { return (T)__nvvm_cos_approx_f((float)x); } \
OVL T fabs(T x) { return x < 0 ? -x : x; } \
OVL T fmin(T x, T y) { return __builtin_fmin(x, y); } \
OVL T fmax(T x, T y) { return __builtin_fmax(x, y); } \
OVL T min(T x, T y) { return __builtin_fmin(x, y); } \
OVL T max(T x, T y) { return __builtin_fmax(x, y); } \
OVL T fma(T x, T y, T z) { return __builtin_fma(x, y, z); } \
OVL T sign(T x) { return x > 0 ? 1 : x < 0 ? -1 : x; } \
OVL int isnan(T x) { return x != x; } \
OVL int isinf(T x) { return fabs(x) == (T)__builtin_inff(); } \
OVL T clamp(T x, T lo, T hi) { return fmin(fmax(x, lo), hi); } \
EACH_WIDTH(VEC1, sqrt, T) EACH_WIDTH(VEC1, rsqrt, T) EACH_WIDTH(VEC1, exp, T) EACH_WIDTH(VEC1, log, T) \
EACH_WIDTH(VEC1, expm1, T) EACH_WIDTH(VEC1, log1p, T) EACH_WIDTH(VEC1, tanh, T) EACH_WIDTH(VEC1, erfc, T) \
EACH_WIDTH(VEC1, fabs, T) EACH_WIDTH(VEC1, sign, T) EACH_WIDTH(VEC2, fmin, T) EACH_WIDTH(VEC2, fmax, T) \
EACH_WIDTH(VEC2, pow, T) EACH_WIDTH(VEC_FMA, T) EACH_WIDTH(VEC_TEST, isnan, T) EACH_WIDTH(VEC_TEST, isinf, T) \
EACH_WIDTH(VEC_CLAMP, T)
#define VEC_FMA(T, N) \
OVL T##N fma(T##N x, T##N y, T##N z) { T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = fma(x[i], y[i], z[i]); return r; }
/* isnan / isinf of a vector: -1 where true, as OpenCL's relational functions (int lanes for float, long for double) */
#define VEC_TEST(name, T, N) \
OVL MASK_OF_##T##N name(T##N x) { MASK_OF_##T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = name(x[i]) ? -1 : 0; return r; }
#define VEC_CLAMP(T, N) \
OVL T##N clamp(T##N x, T lo, T hi) { T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = clamp(x[i], lo, hi); return r; } \
OVL T##N clamp(T##N x, T##N lo, T##N hi) { T##N r; _Pragma("unroll") for (int i = 0; i < N; ++i) r[i] = clamp(x[i], lo[i], hi[i]); return r; }
#define MASK_OF_float2 int2
#define MASK_OF_float3 int3
#define MASK_OF_float4 int4
#define MASK_OF_float8 int8
#define MASK_OF_float16 int16
#define MASK_OF_double2 long2
#define MASK_OF_double3 long3
#define MASK_OF_double4 long4
#define MASK_OF_double8 long8
#define MASK_OF_double16 long16
MATH(float)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
MATH(double)
OVL long min(long a, long b) { return a < b ? a : b; }
OVL long max(long a, long b) { return a > b ? a : b; }
/* any of a mask vector's lanes set (its top bit) */
#define VEC_ANY(T, N) \
OVL int any(T##N x) { int r = 0; _Pragma("unroll") for (int i = 0; i < N; ++i) r |= x[i] < 0; return r; }
EACH_WIDTH(VEC_ANY, int) EACH_WIDTH(VEC_ANY, short) EACH_WIDTH(VEC_ANY, long)
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
VLOADS(double, __global) VLOADS(double, __local) VLOADS(double, __private)
VLOADS(ulong, __global) VLOADS(ulong, __local) VLOADS(ulong, __private)
/* 32-bit integer atomics on global memory */
OVL int atomic_or(volatile __global int *p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
OVL int atomic_min(volatile __global int *p, int v) { return __atomic_fetch_min(p, v, __ATOMIC_RELAXED); }
