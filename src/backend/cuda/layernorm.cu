// LayerNorm forward (optionally fused with the residual add) and backward, fp32 statistics
// whatever the storage type. Forward and the dinp part of backward: one warp per row. The
// dw/db reduction over rows is deterministic: column partials over fixed row chunks, then
// one ordered sum per column.
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each
constexpr int64_t kLnChunk = 128;  // rows per partial in the dw/db reduction

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b,
                                         const T* w, const T* bias, int64_t N, int C, float eps) {
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / gpu::kWarpSize;
  if (row >= N) return;
  const T* x = a + row * C;
  if (residual != nullptr) {
    // residual = a + b, rounded to T; the statistics are those of the stored residual, which
    // is what the backward pass reads as its input.
    T* r = residual + row * C;
    const T* y = b + row * C;
    for (int c = lane; c < C; c += gpu::kWarpSize) r[c] = from_f<T>(to_f(x[c]) + to_f(y[c]));
    gpu::sync_warp();
    x = r;
  }
  float s = 0.0f;
  for (int c = lane; c < C; c += gpu::kWarpSize) s += to_f(x[c]);
  const float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += gpu::kWarpSize) {
    const float d = to_f(x[c]) - m;
    v += d * d;
  }
  const float rs = rsqrtf(warp_sum(v) / C + eps);
  T* o = out + row * C;
  for (int c = lane; c < C; c += gpu::kWarpSize) o[c] = from_f<T>((to_f(x[c]) - m) * rs * to_f(w[c]) + to_f(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

template <typename T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* mean,
                                               const float* rstd, int64_t N, int C) {
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / gpu::kWarpSize;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* g = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float sd = 0.0f, sdn = 0.0f;
  for (int c = lane; c < C; c += gpu::kWarpSize) {
    const float n = (to_f(x[c]) - m) * r;
    const float d = to_f(w[c]) * to_f(g[c]);
    sd += d;
    sdn += d * n;
  }
  sd = warp_sum(sd) / C;
  sdn = warp_sum(sdn) / C;
  T* dx = dinp + row * C;
  for (int c = lane; c < C; c += gpu::kWarpSize) {
    const float n = (to_f(x[c]) - m) * r;
    const float d = to_f(w[c]) * to_f(g[c]);
    dx[c] = from_f<T>(to_f(dx[c]) + (d - sd - n * sdn) * r);
  }
}

// partial[chunk][0][c] = sum over the chunk's rows of n*g; partial[chunk][1][c] = sum of g.
template <typename T>
__global__ void layernorm_backward_partial_kernel(float* partial, const T* dout, const T* inp, const float* mean,
                                                  const float* rstd, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * kLnChunk, r1 = min(N, r0 + kLnChunk);
  float dw = 0.0f, db = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = to_f(dout[r * C + c]);
    dw += (to_f(inp[r * C + c]) - mean[r]) * rstd[r] * g;
    db += g;
  }
  float* p = partial + blockIdx.y * 2 * C;
  p[c] = dw;
  p[C + c] = db;
}

__global__ void layernorm_backward_finish_kernel(float* dw, float* db, const float* partial, int64_t chunks,
                                                 int64_t C) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    sw += partial[k * 2 * C + c];
    sb += partial[k * 2 * C + C + c];
  }
  dw[c] += sw;
  db[c] += sb;
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b, const T* w,
                       const T* bias, int64_t N, int64_t C, float eps, Stream s) {
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_forward_kernel<T><<<blocks, kRowsPerBlock * gpu::kWarpSize, 0, s>>>(out, mean, rstd, residual, a, b, w,
                                                                                bias, N, static_cast<int>(C), eps);
  WEFT_KERNEL_CHECK("layernorm_forward_kernel");
}

int64_t layernorm_backward_scratch(int64_t N, int64_t C) { return ((N + kLnChunk - 1) / kLnChunk) * 2 * C; }

template <typename T>
void layernorm_backward(T* dinp, float* dw, float* db, const T* dout, const T* inp, const T* w, const float* mean,
                        const float* rstd, int64_t N, int64_t C, float* scratch, Stream s) {
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_backward_dinp_kernel<T><<<blocks, kRowsPerBlock * gpu::kWarpSize, 0, s>>>(dinp, dout, inp, w, mean, rstd,
                                                                                      N, static_cast<int>(C));
  WEFT_KERNEL_CHECK("layernorm_backward_dinp_kernel");
  const int64_t chunks = (N + kLnChunk - 1) / kLnChunk;
  const dim3 grid(static_cast<unsigned>((C + 255) / 256), static_cast<unsigned>(chunks));
  layernorm_backward_partial_kernel<T><<<grid, 256, 0, s>>>(scratch, dout, inp, mean, rstd, N, C);
  WEFT_KERNEL_CHECK("layernorm_backward_partial_kernel");
  layernorm_backward_finish_kernel<<<static_cast<unsigned>((C + 255) / 256), 256, 0, s>>>(dw, db, scratch, chunks, C);
  WEFT_KERNEL_CHECK("layernorm_backward_finish_kernel");
}

#define WEFT_INSTANTIATE(T)                                                                                       \
  template void layernorm_forward<T>(T*, float*, float*, T*, const T*, const T*, const T*, const T*, int64_t,     \
                                     int64_t, float, Stream);                                                     \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*, const float*, \
                                      int64_t, int64_t, float*, Stream);
WEFT_INSTANTIATE(float)
WEFT_INSTANTIATE(bf16_t)
#undef WEFT_INSTANTIATE

}  // namespace weft::cuda::kern
