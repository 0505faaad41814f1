// Pointwise kernels of the graph networks (backend.h "pointwise ops"): activations and their
// derivatives, elementwise products, row scaling; one element per thread, the CPU reference's
// formulas (backend/cpu/pointwise_ops.cc).
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kThreads = 256;
constexpr float kLog2 = 0.69314718055994530942f;

// act: 0 ReLU, 1 SiLU, 2 shifted softplus (backend.h Activation's order).
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float act_value(float x, int act) {
  if (act == 0) return x > 0.0f ? x : 0.0f;
  if (act == 1) return x * sigmoid_f(x);
  return (x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x))) - kLog2;
}
__device__ __forceinline__ float act_derivative(float x, int act) {
  if (act == 0) return x > 0.0f ? 1.0f : 0.0f;
  const float s = sigmoid_f(x);
  return act == 1 ? s * (1.0f + x * (1.0f - s)) : s;
}

__global__ void activation_forward_kernel(float* out, const float* inp, int64_t n, int act) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = act_value(inp[i], act);
}

__global__ void activation_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n, int act,
                                           bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = act_derivative(inp[i], act) * dout[i];
    dinp[i] = accumulate ? dinp[i] + g : g;
  }
}

__global__ void mul_kernel(float* out, const float* a, const float* b, int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = a[i] * b[i];
    out[i] = accumulate ? out[i] + v : v;
  }
}

__global__ void scale_rows_kernel(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate) {
  const int64_t n = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i] * s[i / C];
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace

void activation_forward(float* out, const float* inp, int64_t n, int act, Stream s) {
  if (n > 0) activation_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, inp, n, act);
}

void activation_backward(float* dinp, const float* inp, const float* dout, int64_t n, int act, bool accumulate,
                         Stream s) {
  if (n > 0) activation_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dinp, inp, dout, n, act, accumulate);
}

void mul(float* out, const float* a, const float* b, int64_t n, bool accumulate, Stream s) {
  if (n > 0) mul_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, a, b, n, accumulate);
}

void scale_rows(float* out, const float* x, const float* sc, int64_t N, int64_t C, bool accumulate, Stream s) {
  if (N * C > 0) scale_rows_kernel<<<grid_for(N * C, kThreads), kThreads, 0, s>>>(out, x, sc, N, C, accumulate);
}

}  // namespace weft::cuda::kern
