// Elementwise kernels, the dbias column sum, AdamW, the sum of squares and the weighted squared
// error (ClimaX's latitude-weighted MSE).
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void add_bias_kernel(T* out, const T* inp, const T* bias, int64_t N, int64_t C) {
  const int64_t n = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = inp ? to_f(inp[i]) : 0.0f;
    const float b = bias ? to_f(bias[i % C]) : 0.0f;
    out[i] = from_f<T>(x + b);
  }
}

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(gelu_f(to_f(inp[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dinp[i] = from_f<T>(gelu_grad_f(to_f(inp[i])) * to_f(dout[i]));
}

template <typename T>
__global__ void scale_kernel(T* x, float a, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_f<T>(to_f(x[i]) * a);
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f<D>(to_f(src[i]));
}

// Column sums in two deterministic passes: block (cx, r) sums rows [r*rows_per, ...) of
// columns [cx*256, ...) into partial[r][col]; then one thread per column adds the partials
// in order into dbias.
constexpr int64_t kColRowsPer = 256;

template <typename T>
__global__ void column_partial_kernel(float* partial, const T* dout, int64_t N, int64_t OUT) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= OUT) return;
  const int64_t r0 = blockIdx.y * kColRowsPer;
  const int64_t r1 = min(N, r0 + kColRowsPer);
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) s += to_f(dout[r * OUT + col]);
  partial[blockIdx.y * OUT + col] = s;
}

__global__ void column_finish_kernel(float* dbias, const float* partial, int64_t chunks, int64_t OUT) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= OUT) return;
  float s = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) s += partial[c * OUT + col];
  dbias[col] += s;
}

// x rounded through 16-bit storage: kind 1 = bf16, 2 = fp16; otherwise x.
__device__ __forceinline__ float round_kind(float x, int kind) {
  if (kind == 1) return to_f(from_f<bf16_t>(x));
  if (kind == 2) return __half2float(__float2half_rn(x));
  return x;
}

__global__ void round_kernel(float* x, int64_t n, int kind) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = round_kind(x[i], kind);
}

__global__ void adamw_kernel(float* p, bf16_t* p16, float* pcopy, int copy_kind, const float* g, float* m, float* v,
                             int64_t n, float beta1, float beta2, float eps, float decay, float step, float rbc2,
                             float grad_scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay - step * mi / (sqrtf(vi) * rbc2 + eps);
    p[i] = pi;
    if (p16) p16[i] = from_f<bf16_t>(pi);
    if (pcopy) pcopy[i] = round_kind(pi, copy_kind);
  }
}

constexpr int kSumBlocks = 1024;

template <typename T>
__global__ void sum_squares_partial_kernel(const T* x, int64_t n, double* partial) {
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double xi = to_f(x[i]);
    s += xi * xi;
  }
  s = block_reduce(s, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_finish_kernel(const double* partial, int count, double* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_reduce(s, SumOp{}, 0.0);
  if (threadIdx.x == 0) *out = s;
}

// Weighted squared error: one block per row (grid-stride over rows), the row's loss summed in
// double (block_reduce); the gradient written elementwise by the thread that read pred, so grad
// may alias pred.
__global__ void weighted_mse_kernel(float* row_loss, float* grad, const float* pred, const float* target,
                                    const float* w, int64_t R, int64_t K, float c) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const float p = pred[r * K + k], t = target[r * K + k], wk = w[k];
      const double d = static_cast<double>(p) - static_cast<double>(t);
      acc += static_cast<double>(wk) * d * d;
      if (grad) grad[r * K + k] = c * wk * (p - t);
    }
    acc = block_reduce(acc, SumOp{}, 0.0);
    if (threadIdx.x == 0) row_loss[r] = static_cast<float>(acc);
  }
}

}  // namespace

template <typename T> void add_bias(T* out, const T* inp, const T* bias, int64_t N, int64_t C, Stream s) {
  if (N * C == 0) return;
  if (!bias && inp == out) return;
  add_bias_kernel<<<grid_for(N * C, kThreads), kThreads, 0, s>>>(out, inp, bias, N, C);
  WEFT_KERNEL_CHECK("add_bias_kernel");
}
template <typename T> void add(T* out, const T* a, const T* b, int64_t n, Stream s) {
  if (n == 0) return;
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, a, b, n);
  WEFT_KERNEL_CHECK("add_kernel");
}
template <typename T> void gelu_forward(T* out, const T* inp, int64_t n, Stream s) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, inp, n);
  WEFT_KERNEL_CHECK("gelu_forward_kernel");
}
template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, Stream s) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dinp, inp, dout, n);
  WEFT_KERNEL_CHECK("gelu_backward_kernel");
}
template <typename T> void scale(T* x, float a, int64_t n, Stream s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, a, n);
  WEFT_KERNEL_CHECK("scale_kernel");
}
void convert(bf16_t* dst, const float* src, int64_t n, Stream s) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dst, src, n);
  WEFT_KERNEL_CHECK("convert_kernel");
}
void convert(float* dst, const bf16_t* src, int64_t n, Stream s) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dst, src, n);
  WEFT_KERNEL_CHECK("convert_kernel");
}

void round_through(float* x, int64_t n, int kind, Stream s) {
  if (n == 0) return;
  round_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, n, kind);
  WEFT_KERNEL_CHECK("round_kernel");
}

int64_t column_sum_scratch(int64_t N, int64_t OUT) { return ((N + kColRowsPer - 1) / kColRowsPer) * OUT; }

template <typename T>
void column_sum_accumulate(float* dbias, const T* dout, int64_t N, int64_t OUT, float* scratch, Stream s) {
  if (N == 0 || OUT == 0) return;
  const int64_t chunks = (N + kColRowsPer - 1) / kColRowsPer;
  const dim3 grid(static_cast<unsigned>((OUT + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
  column_partial_kernel<<<grid, kThreads, 0, s>>>(scratch, dout, N, OUT);
  WEFT_KERNEL_CHECK("column_partial_kernel");
  column_finish_kernel<<<static_cast<unsigned>((OUT + kThreads - 1) / kThreads), kThreads, 0, s>>>(dbias, scratch,
                                                                                                   chunks, OUT);
  WEFT_KERNEL_CHECK("column_finish_kernel");
}

void adamw(float* p, bf16_t* p16, float* pcopy, int copy_kind, const float* g, float* m, float* v, int64_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, float step, float rbc2,
           float grad_scale, Stream s) {
  if (n == 0) return;
  const float decay = 1.0f - lr * weight_decay;
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(p, p16, pcopy, copy_kind, g, m, v, n, beta1, beta2, eps,
                                                          decay, step, rbc2, grad_scale);
  WEFT_KERNEL_CHECK("adamw_kernel");
}

int64_t sum_squares_scratch() { return kSumBlocks; }

template <typename T> void sum_squares(const T* x, int64_t n, double* out, double* scratch, Stream s) {
  const unsigned blocks = grid_for(n, kThreads, kSumBlocks);
  sum_squares_partial_kernel<<<blocks, kThreads, 0, s>>>(x, n, scratch);
  WEFT_KERNEL_CHECK("sum_squares_partial_kernel");
  sum_finish_kernel<<<1, 1024, 0, s>>>(scratch, static_cast<int>(blocks), out);
  WEFT_KERNEL_CHECK("sum_finish_kernel");
}

void weighted_mse(float* row_loss, float* grad, const float* pred, const float* target, const float* w, int64_t R,
                  int64_t K, float dloss, Stream s) {
  if (R == 0) return;
  const unsigned blocks = static_cast<unsigned>(R < 65536 ? R : 65536);
  weighted_mse_kernel<<<blocks, kThreads, 0, s>>>(row_loss, grad, pred, target, w, R, K, 2.0f * dloss);
  WEFT_KERNEL_CHECK("weighted_mse_kernel");
}

#define WEFT_INSTANTIATE(T)                                                                                \
  template void add_bias<T>(T*, const T*, const T*, int64_t, int64_t, Stream);                             \
  template void add<T>(T*, const T*, const T*, int64_t, Stream);                                           \
  template void gelu_forward<T>(T*, const T*, int64_t, Stream);                                            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, Stream);                                 \
  template void scale<T>(T*, float, int64_t, Stream);                                                      \
  template void column_sum_accumulate<T>(float*, const T*, int64_t, int64_t, float*, Stream);              \
  template void sum_squares<T>(const T*, int64_t, double*, double*, Stream);
WEFT_INSTANTIATE(float)
WEFT_INSTANTIATE(bf16_t)
#undef WEFT_INSTANTIATE

}  // namespace weft::cuda::kern
