// The thin runtime layer between weft and the GPU vendor's runtime: CUDA (NVIDIA) or, when
// the build defines WEFT_HIP, HIP (AMD, MI250X = gfx90a). Every runtime and device-intrinsic
// name that weft's GPU code uses outside plain kernel syntax (__global__, <<<>>>, threadIdx,
// __shared__, __syncthreads, __expf, __half2float, which HIP spells as CUDA does) is spelled
// here once for both vendors, so that the kernels (*.cu) and the backend compile from the same
// sources for either. The rest of the layer lives in files named for what they hold:
//
//   gpu_mma.h        tensor-core fragments: nvcuda::wmma, or weft's own over gfx90a MFMA
//   radix_sort.cuh   the stable radix sort of key/value pairs: CUB, or rocPRIM
//   gpu_blas.h/.cc   matrix products: cuBLAS/cuBLASLt, or hipBLAS/hipBLASLt
//   comm/nccl/nccl_api.h   collectives: NCCL, or RCCL (the same nccl* names)
//
//   CUDA                          HIP                                  here
//   cuda_runtime.h, cuda*         hip/hip_runtime.h, hip*              WEFT_GPU_NAME(Malloc) etc.
//   __nv_bfloat16 (cuda_bf16.h)   hip_bfloat16 (hip/hip_bfloat16.h)   bf16_t; bf16_to_float,
//                                 (ROCm 5.2 has no __hip_bfloat16)     float_to_bf16 (same rounding)
//   __shfl_xor_sync(mask, ..)     __shfl_xor(..)                       WEFT_SHFL_XOR
//   __syncwarp()                  wavefront fence + wave barrier       sync_warp()
//   warp of 32 lanes              wavefront of 64 lanes (gfx90a)       kWarpSize
//   163 KiB shared memory (sm_80) 64 KiB LDS per workgroup (gfx90a)    kMaxBlockSmemBytes
//
// Kernels take the warp width from kWarpSize and write reductions with WEFT_SHFL_XOR over
// log2(kWarpSize) steps; how each kernel maps lanes to rows and columns with 32- and 64-wide
// warps is said in that kernel's file.
//
// Every failing call becomes a RuntimeError naming the runtime, the call as written, the
// file and line and the runtime's error string:
//   "weft: CUDA error at src/backend/cuda/gpu_runtime.cc:31: cudaMalloc(&p, bytes):
//    out of memory (cudaErrorMemoryAllocation)"
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#if defined(WEFT_HIP)
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
// cuda<Name> -> hip<Name>: the runtime calls, types and enumerators weft uses have the same
// name after the prefix (the few that do not are written out in gpu_runtime.cc).
#define WEFT_GPU_NAME(name) hip##name
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define WEFT_GPU_NAME(name) cuda##name
#endif

// The call as text after macro expansion: WEFT_GPU_NAME(Malloc)(&p, n) reads hipMalloc(&p, n).
#define WEFT_GPU_STR_(...) #__VA_ARGS__
#define WEFT_GPU_STR(...) WEFT_GPU_STR_(__VA_ARGS__)

// True in a translation unit compiled by nvcc or hipcc (device code and launches allowed).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define WEFT_GPU_COMPILER 1
#else
#define WEFT_GPU_COMPILER 0
#endif

namespace weft::gpu {

#if defined(WEFT_HIP)
constexpr const char* kRuntimeName = "HIP";
// 2 bytes (member `data`), bit-identical to weft::cuda::bf16. hipcc translation units see ROCm's
// C++ struct, g++ ones the same-named C struct of the same header (as rocBLAS's host code does).
using bf16_t = hip_bfloat16;
#else
constexpr const char* kRuntimeName = "CUDA";
using bf16_t = __nv_bfloat16;  // 2 bytes, bit-identical to weft::cuda::bf16
#endif
using Stream = WEFT_GPU_NAME(Stream_t);
using Event = WEFT_GPU_NAME(Event_t);
using Error = WEFT_GPU_NAME(Error_t);
using GraphExec = WEFT_GPU_NAME(GraphExec_t);
constexpr Error kSuccess = WEFT_GPU_NAME(Success);

// Throws RuntimeError: "weft: <lib> error at <file>:<line>: <call>: <what>".
[[noreturn]] void throw_gpu_error(const char* lib, const char* call, const char* file, int line,
                                  const std::string& what);
std::string error_string(Error e);  // "out of memory (cudaErrorMemoryAllocation)"

#if defined(WEFT_HIP)
// gfx90a (MI250X) runs 64-wide wavefronts; RDNA's wave32 is not a target of this build.
constexpr int kWarpSize = 64;
constexpr int kMaxBlockSmemBytes = 64 * 1024;  // LDS per workgroup on gfx90a
#else
constexpr int kWarpSize = 32;
constexpr int kMaxBlockSmemBytes = 163 * 1024;  // opt-in dynamic shared memory on sm_80 (sm_90: 227 KiB)
#endif

#if WEFT_GPU_COMPILER
#if defined(WEFT_HIP)
#if defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE)
static_assert(__AMDGCN_WAVEFRONT_SIZE == kWarpSize, "weft's HIP kernels are written for 64-wide wavefronts");
#endif
#define WEFT_SHFL_XOR(v, lane_mask) __shfl_xor((v), (lane_mask))
// __syncwarp for a wavefront: its lanes run in lock step, so what is needed is the memory
// ordering of shared-memory (LDS) writes before reads by other lanes of the same wavefront,
// and a point the compiler may not move LDS accesses across. (ROCm >= 6.2 defines __syncwarp
// this way; ROCm 5.2 has none.)
__device__ __forceinline__ void sync_warp() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
__device__ __forceinline__ float bf16_to_float(bf16_t x) {
  return __uint_as_float(static_cast<uint32_t>(x.data) << 16);
}
// Round to nearest even; NaN becomes the canonical quiet NaN 0x7fff: bit for bit what CUDA's
// __float2bfloat16_rn gives (cvt.rn.bf16.f32), so both vendors store the same bf16 values.
__device__ __forceinline__ bf16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  bf16_t r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.data = 0x7fffu;
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.data = static_cast<uint16_t>(u >> 16);
  return r;
}
#else
#define WEFT_SHFL_XOR(v, lane_mask) __shfl_xor_sync(0xffffffffu, (v), (lane_mask))
__device__ __forceinline__ void sync_warp() { __syncwarp(); }
__device__ __forceinline__ float bf16_to_float(bf16_t x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16_t float_to_bf16(float f) { return __float2bfloat16_rn(f); }
#endif

// Opt a kernel into more dynamic shared memory than the default (48 KiB on NVIDIA).
template <typename Kernel>
inline void set_max_dynamic_smem(Kernel kernel, int bytes) {
  const Error e = WEFT_GPU_NAME(FuncSetAttribute)(reinterpret_cast<const void*>(kernel),
                                                  WEFT_GPU_NAME(FuncAttributeMaxDynamicSharedMemorySize), bytes);
  if (e != kSuccess) {
    throw_gpu_error(kRuntimeName, WEFT_GPU_STR(WEFT_GPU_NAME(FuncSetAttribute)(MaxDynamicSharedMemorySize)),
                    __FILE__, __LINE__, error_string(e));
  }
}
#endif  // WEFT_GPU_COMPILER

// --- devices ---
// Number of visible devices; 0 (and the reason in *why, if given) when none is usable:
// no driver, no device, CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES) empty. Never throws.
int device_count(std::string* why = nullptr);
// Selects the device of this process: `device`, or when negative the local rank (from the
// launcher: OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, PMI_LOCAL_RANK;
// 0 otherwise) modulo the device count. Returns the device chosen. Throws without devices.
int select_device(int device = -1);
int current_device();
std::string device_name(int device);
// PCI bus id ("0000:3B:00.0"): tells two ranks on one device apart from two devices. Empty on error.
std::string device_pci_bus_id(int device);
// Compute capability as major*10 + minor (80 for A100, 90 for H100; HIP reports gfx90a as 90
// too: compare it only on the same vendor).
int device_sm(int device);

// --- memory (raw and uncounted: for the backend's device_alloc_impl and the kernel-level
// tests; other code allocates through Backend::device_alloc or weft::DeviceBuffer in
// backend/device_buffer.h, which count the bytes) ---
void* device_malloc(size_t bytes);  // throws with the size and the free/total memory
void device_free(void* p) noexcept;  // errors are logged, never thrown (called from destructors)
void copy_h2d(void* dst, const void* src, size_t bytes, Stream s = nullptr);  // waits for completion
void copy_d2h(void* dst, const void* src, size_t bytes, Stream s = nullptr);  // waits for completion
void copy_d2d_async(void* dst, const void* src, size_t bytes, Stream s);
// rows x width bytes between pitched device buffers (cudaMemcpy2DAsync).
void copy_d2d_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                       Stream s);
void copy_h2d_async(void* dst, const void* src, size_t bytes, Stream s);  // src pinned for overlap
void copy_d2h_async(void* dst, const void* src, size_t bytes, Stream s);
void memset_async(void* dst, int value, size_t bytes, Stream s);
// True when p is device (or managed) memory.
bool is_device_pointer(const void* p);

// --- streams and events ---
Stream stream_create();  // non-blocking with respect to the legacy default stream
void stream_destroy(Stream s) noexcept;
void stream_sync(Stream s);
Event event_create(bool timing = false);
void event_destroy(Event e) noexcept;
void event_record(Event e, Stream s);
void stream_wait_event(Stream s, Event e);
bool event_query(Event e);  // true once complete; throws on an error
float event_elapsed_ms(Event start, Event end);
void device_sync();

// --- graphs (stream capture) ---
// Work enqueued on `s` between capture_begin and capture_end is recorded, not run; the
// returned executable graph replays it with graph_launch. capture_end returns null (and the
// reason in *why) when the capture was invalidated (an operation that cannot be captured,
// such as a synchronisation or an allocation); the stream is usable again either way.
void capture_begin(Stream s);
GraphExec capture_end(Stream s, std::string* why = nullptr) noexcept;
void graph_launch(GraphExec g, Stream s);
void graph_destroy(GraphExec g) noexcept;

}  // namespace weft::gpu

// The runtime's calls (cuda* / hip*). The name says CUDA for history: it checks HIP calls in a
// HIP build, and the message names the runtime.
#define WEFT_CUDA_CHECK(call)                                                                  \
  do {                                                                                         \
    const ::weft::gpu::Error weft_err_ = (call);                                               \
    if (weft_err_ != ::weft::gpu::kSuccess)                                                    \
      ::weft::gpu::throw_gpu_error(::weft::gpu::kRuntimeName, WEFT_GPU_STR(call), __FILE__,    \
                                   __LINE__, ::weft::gpu::error_string(weft_err_));            \
  } while (0)

// After a kernel launch: launch-configuration errors surface here (asynchronous faults at the
// next synchronising call).
#define WEFT_KERNEL_CHECK(name)                                                                \
  do {                                                                                         \
    const ::weft::gpu::Error weft_err_ = WEFT_GPU_NAME(GetLastError)();                        \
    if (weft_err_ != ::weft::gpu::kSuccess)                                                    \
      ::weft::gpu::throw_gpu_error(::weft::gpu::kRuntimeName, "launch of " name, __FILE__,     \
                                   __LINE__, ::weft::gpu::error_string(weft_err_));            \
  } while (0)
