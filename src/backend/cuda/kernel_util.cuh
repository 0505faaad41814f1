// Device helpers shared by the .cu files: fp32 <-> storage conversions, warp and block
// reductions, launch arithmetic. Only for nvcc (or hipcc) translation units.
#pragma once
#include <cstdint>

#include "backend/cuda/gpu_runtime.h"

namespace weft::cuda::kern {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(gpu::bf16_t x) { return gpu::bf16_to_float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ gpu::bf16_t from_f<gpu::bf16_t>(float x) { return gpu::float_to_bf16(x); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = gpu::kWarpSize / 2; o > 0; o >>= 1) v += WEFT_SHFL_XOR(v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = gpu::kWarpSize / 2; o > 0; o >>= 1) v += WEFT_SHFL_XOR(v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = gpu::kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, WEFT_SHFL_XOR(v, o));
  return v;
}

// Block-wide reductions for blockDim.x a multiple of the warp size, at most 1024 threads
// (32 warps of 32 lanes, or 16 wavefronts of 64: part[] holds one value per warp either way).
// Every thread gets the result. Contains __syncthreads: call from all threads.
template <typename V, typename Op>
__device__ __forceinline__ V block_reduce(V v, Op op, V identity) {
  __shared__ V part[32];
  const int lane = threadIdx.x % gpu::kWarpSize, warp = threadIdx.x / gpu::kWarpSize;
  const int nwarps = blockDim.x / gpu::kWarpSize;
#pragma unroll
  for (int o = gpu::kWarpSize / 2; o > 0; o >>= 1) v = op(v, WEFT_SHFL_XOR(v, o));
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nwarps ? part[lane] : identity;
#pragma unroll
  for (int o = gpu::kWarpSize / 2; o > 0; o >>= 1) v = op(v, WEFT_SHFL_XOR(v, o));
  return v;
}
struct SumOp {
  template <typename V> __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65536) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

__device__ __forceinline__ float gelu_f(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

}  // namespace weft::cuda::kern
