// The thin runtime layer between weft and the GPU vendor's libraries. Every CUDA runtime,
// cuBLAS/cuBLASLt and device-intrinsic name that weft's CUDA code uses outside plain kernel
// syntax (__global__, <<<>>>, threadIdx, __shared__, __syncthreads, which HIP accepts as is)
// is spelled here, once, so that a HIP build for AMD GPUs (MI250X) is a build-system change:
//
//   CUDA                        HIP (ROCm 6)                       note
//   cuda_runtime.h              hip/hip_runtime.h                  hipify-perl maps every cuda* call
//   cudaStream_t / cudaEvent_t  hipStream_t / hipEvent_t
//   __nv_bfloat16 (cuda_bf16.h) __hip_bfloat16 (hip/hip_bf16.h)    same bit layout
//   cublasLt.h                  hipblaslt/hipblaslt.h              epilogues BIAS/GELU_AUX/DGELU exist
//   cublas_v2.h                 hipblas/hipblas.h                  fp32 gemm of the reference path
//   nvcuda::wmma                rocwmma:: (rocwmma/rocwmma.hpp)    16x16x16 bf16 fragments, same calls
//   __shfl_xor_sync(mask,..)    __shfl_xor(..) (64-wide wavefront) WEFT_SHFL_XOR below
//   cub:: (CCCL)                hipcub::                           DeviceRadixSort only
//   nccl.h                      rccl.h                             same API (ncclCommSplit: RCCL >= 2.18)
//
// The warp size is 32 on NVIDIA and 64 on AMD (MI250X): kernels take it from kWarpSize and
// write reductions with WEFT_SHFL_XOR over log2(kWarpSize) steps. The flash-attention tiles
// assume 32-wide warps for their row ownership (a HIP port sets 64 and halves the warps).
//
// Every failing call becomes a RuntimeError naming the library, the call as written, the
// file and line and the library's error string:
//   "weft: CUDA error at src/backend/cuda/device_buffer.cc:31: cudaMalloc(&p, bytes):
//    out of memory (cudaErrorMemoryAllocation)"
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <mma.h>
#endif

namespace weft::gpu {

using Stream = cudaStream_t;
using Event = cudaEvent_t;
using bf16_t = __nv_bfloat16;  // device storage type of bf16 (2 bytes, bit-identical to weft::cuda::bf16)
using BlasLtHandle = cublasLtHandle_t;
using BlasHandle = cublasHandle_t;


// Throws RuntimeError: "weft: <lib> error at <file>:<line>: <call>: <what>".
[[noreturn]] void throw_gpu_error(const char* lib, const char* call, const char* file, int line,
                                  const std::string& what);
std::string cuda_error_string(cudaError_t e);      // "out of memory (cudaErrorMemoryAllocation)"
std::string cublas_error_string(cublasStatus_t s); // "CUBLAS_STATUS_NOT_SUPPORTED"

#if defined(__CUDACC__)
constexpr int kWarpSize = 32;
#define WEFT_SHFL_XOR(v, lane_mask) __shfl_xor_sync(0xffffffffu, (v), (lane_mask))
// Tensor-core fragments (HIP: namespace wmma = rocwmma;).
namespace wmma = nvcuda::wmma;
// Opt a kernel into more than 48 KiB of dynamic shared memory (HIP: hipFuncSetAttribute).
template <typename Kernel>
inline void set_max_dynamic_smem(Kernel kernel, int bytes) {
  const cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) throw_gpu_error("CUDA", "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__,
                                        __LINE__, cuda_error_string(e));
}
#endif

// --- devices ---
// Number of visible devices; 0 (and the reason in *why, if given) when none is usable:
// no driver, no device, CUDA_VISIBLE_DEVICES empty. Never throws.
int device_count(std::string* why = nullptr);
// Selects the device of this process: `device`, or when negative the local rank (from the
// launcher: OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, PMI_LOCAL_RANK;
// 0 otherwise) modulo the device count. Returns the device chosen. Throws without devices.
int select_device(int device = -1);
int current_device();
std::string device_name(int device);
// Compute capability as major*10 + minor (80 for A100, 90 for H100).
int device_sm(int device);

// --- memory (raw; prefer DeviceBuffer in device_buffer.h, which counts the bytes) ---
void* device_malloc(size_t bytes);  // throws with the size and the free/total memory
void device_free(void* p) noexcept;  // errors are logged, never thrown (called from destructors)
void copy_h2d(void* dst, const void* src, size_t bytes, Stream s = nullptr);  // waits for completion
void copy_d2h(void* dst, const void* src, size_t bytes, Stream s = nullptr);  // waits for completion
void copy_d2d_async(void* dst, const void* src, size_t bytes, Stream s);
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

// --- graphs (stream capture; HIP: hipStreamBeginCapture / hipGraphInstantiate / hipGraphLaunch) ---
// Work enqueued on `s` between capture_begin and capture_end is recorded, not run; the
// returned executable graph replays it with graph_launch. capture_end returns null (and the
// reason in *why) when the capture was invalidated (an operation that cannot be captured,
// such as a synchronisation or an allocation); the stream is usable again either way.
using GraphExec = cudaGraphExec_t;
void capture_begin(Stream s);
GraphExec capture_end(Stream s, std::string* why = nullptr) noexcept;
void graph_launch(GraphExec g, Stream s);
void graph_destroy(GraphExec g) noexcept;

}  // namespace weft::gpu

#define WEFT_CUDA_CHECK(call)                                                                  \
  do {                                                                                         \
    const cudaError_t weft_err_ = (call);                                                      \
    if (weft_err_ != cudaSuccess)                                                              \
      ::weft::gpu::throw_gpu_error("CUDA", #call, __FILE__, __LINE__,                          \
                                   ::weft::gpu::cuda_error_string(weft_err_));                 \
  } while (0)

#define WEFT_CUBLAS_CHECK(call)                                                                \
  do {                                                                                         \
    const cublasStatus_t weft_st_ = (call);                                                    \
    if (weft_st_ != CUBLAS_STATUS_SUCCESS)                                                     \
      ::weft::gpu::throw_gpu_error("cuBLAS", #call, __FILE__, __LINE__,                        \
                                   ::weft::gpu::cublas_error_string(weft_st_));                \
  } while (0)

// After a kernel launch: launch-configuration errors surface here (asynchronous faults at the
// next synchronising call).
#define WEFT_KERNEL_CHECK(name)                                                                \
  do {                                                                                         \
    const cudaError_t weft_err_ = cudaGetLastError();                                          \
    if (weft_err_ != cudaSuccess)                                                              \
      ::weft::gpu::throw_gpu_error("CUDA", "launch of " name, __FILE__, __LINE__,              \
                                   ::weft::gpu::cuda_error_string(weft_err_));                 \
  } while (0)
