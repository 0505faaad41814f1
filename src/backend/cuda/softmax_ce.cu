// Softmax cross-entropy over the vocabulary without a probability buffer: one block per
// row reads the logits once for the running (max, sum of exp) pair and once more to write
// the gradient in place. The vocabulary-parallel phases (ce_*) are the same pieces apart.
#include <cmath>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kCeThreads = 512;

// Block-wide (max, sum exp(x - max)) over row[0, cols). All threads get both.
template <typename T>
__device__ __forceinline__ void row_max_sumexp(const T* row, int64_t cols, float& M, float& S) {
  float m = -INFINITY, s = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float x = to_f(row[j]);
    if (x > m) {
      s = s * __expf(m - x) + 1.0f;
      m = x;
    } else {
      s += __expf(x - m);
    }
  }
  M = block_reduce(m, MaxOp{}, -INFINITY);
  s = (m == -INFINITY) ? 0.0f : s * __expf(m - M);
  S = block_reduce(s, SumOp{}, 0.0f);
}

template <typename T>
__global__ void softmax_ce_kernel(T* logits, float* losses, const int32_t* targets, int64_t V, int64_t Vp,
                                  float dloss) {
  T* row = logits + blockIdx.x * Vp;
  const int64_t tgt = targets[blockIdx.x];
  const float tl = to_f(row[tgt]);  // read by every thread before any write (block_reduce syncs)
  float M, S;
  row_max_sumexp(row, V, M, S);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(S) + M - tl;
  if (dloss == 0.0f) return;
  const float k = dloss / S;
  for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x) {
    float g = 0.0f;
    if (j < V) g = __expf(to_f(row[j]) - M) * k - (j == tgt ? dloss : 0.0f);
    row[j] = from_f<T>(g);
  }
}

template <typename T>
__global__ void ce_row_max_kernel(const T* logits, int64_t ld, int64_t cols, float* max) {
  const T* row = logits + blockIdx.x * ld;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, to_f(row[j]));
  m = block_reduce(m, MaxOp{}, -INFINITY);
  if (threadIdx.x == 0) max[blockIdx.x] = m;
}

template <typename T>
__global__ void ce_row_sumexp_kernel(const T* logits, int64_t ld, int64_t cols, const float* max, float* sum) {
  const T* row = logits + blockIdx.x * ld;
  const float m = max[blockIdx.x];
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += __expf(to_f(row[j]) - m);
  s = block_reduce(s, SumOp{}, 0.0f);
  if (threadIdx.x == 0) sum[blockIdx.x] = s;
}

template <typename T>
__global__ void ce_target_logit_kernel(const T* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets,
                                       int64_t v0, float* tl) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  const int64_t j = static_cast<int64_t>(targets[i]) - v0;
  tl[i] = (j >= 0 && j < cols) ? to_f(logits[i * ld + j]) : 0.0f;
}

template <typename T>
__global__ void ce_grad_kernel(T* logits, int64_t ld, int64_t cols, const float* max, const float* sum,
                               const int32_t* targets, int64_t v0, float dloss) {
  T* row = logits + blockIdx.x * ld;
  const float m = max[blockIdx.x], k = dloss / sum[blockIdx.x];
  const int64_t t = static_cast<int64_t>(targets[blockIdx.x]) - v0;
  for (int64_t j = threadIdx.x; j < ld; j += blockDim.x) {
    float g = 0.0f;
    if (j < cols) g = __expf(to_f(row[j]) - m) * k - (j == t ? dloss : 0.0f);
    row[j] = from_f<T>(g);
  }
}

}  // namespace

template <typename T>
void softmax_cross_entropy(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           float dloss, Stream s) {
  if (N == 0) return;
  softmax_ce_kernel<T><<<static_cast<unsigned>(N), kCeThreads, 0, s>>>(logits, losses, targets, V, Vp, dloss);
  WEFT_KERNEL_CHECK("softmax_ce_kernel");
}
template <typename T> void ce_row_max(const T* logits, int64_t N, int64_t ld, int64_t cols, float* max, Stream s) {
  if (N == 0) return;
  ce_row_max_kernel<T><<<static_cast<unsigned>(N), kCeThreads, 0, s>>>(logits, ld, cols, max);
  WEFT_KERNEL_CHECK("ce_row_max_kernel");
}
template <typename T>
void ce_row_sumexp(const T* logits, int64_t N, int64_t ld, int64_t cols, const float* max, float* sum, Stream s) {
  if (N == 0) return;
  ce_row_sumexp_kernel<T><<<static_cast<unsigned>(N), kCeThreads, 0, s>>>(logits, ld, cols, max, sum);
  WEFT_KERNEL_CHECK("ce_row_sumexp_kernel");
}
template <typename T>
void ce_target_logit(const T* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                     float* tl, Stream s) {
  if (N == 0) return;
  ce_target_logit_kernel<T><<<grid_for(N, 256), 256, 0, s>>>(logits, N, ld, cols, targets, v0, tl);
  WEFT_KERNEL_CHECK("ce_target_logit_kernel");
}
template <typename T>
void ce_grad(T* logits, int64_t N, int64_t ld, int64_t cols, const float* max, const float* sum,
             const int32_t* targets, int64_t v0, float dloss, Stream s) {
  if (N == 0) return;
  ce_grad_kernel<T><<<static_cast<unsigned>(N), kCeThreads, 0, s>>>(logits, ld, cols, max, sum, targets, v0, dloss);
  WEFT_KERNEL_CHECK("ce_grad_kernel");
}

__global__ void ce_loss_kernel(float* losses, const float* max, const float* sum, const float* tl, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) losses[i] = logf(sum[i]) + max[i] - tl[i];
}

void ce_loss(float* losses, const float* max, const float* sum, const float* tl, int64_t n, Stream s) {
  if (n == 0) return;
  ce_loss_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(losses, max, sum, tl, n);
  WEFT_KERNEL_CHECK("ce_loss_kernel");
}

#define WEFT_INSTANTIATE(T)                                                                                    \
  template void softmax_cross_entropy<T>(T*, float*, const int32_t*, int64_t, int64_t, int64_t, float, Stream); \
  template void ce_row_max<T>(const T*, int64_t, int64_t, int64_t, float*, Stream);                            \
  template void ce_row_sumexp<T>(const T*, int64_t, int64_t, int64_t, const float*, float*, Stream);           \
  template void ce_target_logit<T>(const T*, int64_t, int64_t, int64_t, const int32_t*, int64_t, float*, Stream); \
  template void ce_grad<T>(T*, int64_t, int64_t, int64_t, const float*, const float*, const int32_t*, int64_t,  \
                           float, Stream);
WEFT_INSTANTIATE(float)
WEFT_INSTANTIATE(bf16_t)
#undef WEFT_INSTANTIATE

}  // namespace weft::cuda::kern
