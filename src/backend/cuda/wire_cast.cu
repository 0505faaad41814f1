// 16-bit floats on the wire (Backend::encode_16 / decode_16, the bf16 and fp16 codecs of
// comm/codec.h): one thread per element, round to nearest even (__float2bfloat16_rn through
// gpu::float_to_bf16, __float2half_rn); decode widens exactly and accumulates with one fp32
// sum (__fadd_rn on CUDA; HIP: contraction off below, nothing here to contract anyway).
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace weft::cuda::kern {
namespace {

constexpr int kThreads = 256;

__global__ void encode_16_kernel(uint16_t* wire, const float* x, int64_t n, int kind) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (kind == 1) {
      const gpu::bf16_t b = gpu::float_to_bf16(x[i]);
      wire[i] = *reinterpret_cast<const uint16_t*>(&b);
    } else {
      const __half h = __float2half_rn(x[i]);
      wire[i] = *reinterpret_cast<const uint16_t*>(&h);
    }
  }
}

__global__ void decode_16_kernel(float* out, const uint16_t* wire, int64_t n, int kind, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint16_t w = wire[i];
    float v;
    if (kind == 1) {
      v = __uint_as_float(static_cast<unsigned>(w) << 16);
    } else {
      v = __half2float(*reinterpret_cast<const __half*>(&w));
    }
#if defined(__CUDACC__) && !defined(__HIPCC__)
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
#else
    out[i] = accumulate ? out[i] + v : v;
#endif
  }
}

}  // namespace

void encode_16(uint16_t* wire, const float* x, int64_t n, int kind, Stream s) {
  if (n == 0) return;
  encode_16_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(wire, x, n, kind);
  WEFT_KERNEL_CHECK("encode_16_kernel");
}

void decode_16(float* out, const uint16_t* wire, int64_t n, int kind, bool accumulate, Stream s) {
  if (n == 0) return;
  decode_16_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, wire, n, kind, accumulate);
  WEFT_KERNEL_CHECK("decode_16_kernel");
}

}  // namespace weft::cuda::kern
