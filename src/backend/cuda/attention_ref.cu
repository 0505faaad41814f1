// Row kernels of the fp32 reference attention (the Backend interface's attention with the
// probabilities kept in att): the products around them are cuBLAS calls in cuda_backend.cc.
#include <cmath>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kThreads = 256;

// Row r of (BH*T, T): query i = r % T keeps columns [0, i]; the rest become 0.
__global__ void causal_softmax_kernel(float* att, int64_t T, float scale) {
  float* row = att + blockIdx.x * T;
  const int64_t i = blockIdx.x % T;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, row[j] * scale);
  m = block_reduce(m, MaxOp{}, -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float e = expf(row[j] * scale - m);
    row[j] = e;
    s += e;
  }
  s = block_reduce(s, SumOp{}, 0.0f);
  const float inv = 1.0f / s;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= i ? row[j] * inv : 0.0f;
}

__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int64_t T, float scale) {
  float* dr = datt + blockIdx.x * T;
  const float* ar = att + blockIdx.x * T;
  const int64_t i = blockIdx.x % T;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += ar[j] * dr[j];
  dot = block_reduce(dot, SumOp{}, 0.0f);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) dr[j] = j <= i ? ar[j] * (dr[j] - dot) * scale : 0.0f;
}

}  // namespace

void causal_softmax_rows(float* att, int64_t BH, int64_t T, float scale, Stream s) {
  if (BH * T == 0) return;
  causal_softmax_kernel<<<static_cast<unsigned>(BH * T), kThreads, 0, s>>>(att, T, scale);
  WEFT_KERNEL_CHECK("causal_softmax_kernel");
}

void causal_softmax_backward_rows(float* datt, const float* att, int64_t BH, int64_t T, float scale, Stream s) {
  if (BH * T == 0) return;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(BH * T), kThreads, 0, s>>>(datt, att, T, scale);
  WEFT_KERNEL_CHECK("causal_softmax_backward_kernel");
}

}  // namespace weft::cuda::kern
