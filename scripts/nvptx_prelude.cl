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
