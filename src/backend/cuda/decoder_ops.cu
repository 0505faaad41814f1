// The decoder variants' kernels (backend.h, "the decoder variants' ops"), fp32, the CPU
// reference's formulas (backend/cpu/decoder_ops.cc): RMSNorm (a block per row), rotary positions
// in place, SwiGLU, and grouped-query attention's key/value expansion and its reduction. Sums over
// rows (RMSNorm's weight gradient) run in a fixed order: one thread per column over the rows.
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kThreads = 256;
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* w, int64_t C, float eps) {
  const int64_t i = blockIdx.x;
  const float* x = inp + i * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c] * x[c];
  s = block_reduce(s, SumOp{}, 0.0f);
  const float r = rsqrtf(s / static_cast<float>(C) + eps);
  float* o = out + i * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * r * w[c];
  if (threadIdx.x == 0) rstd[i] = r;
}

__global__ void rmsnorm_backward_dx_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                           const float* rstd, int64_t C) {
  const int64_t i = blockIdx.x;
  const float* x = inp + i * C;
  const float* g = dout + i * C;
  const float r = rstd[i];
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += w[c] * g[c] * x[c] * r;
  dot = block_reduce(dot, SumOp{}, 0.0f) / static_cast<float>(C);
  float* dx = dinp + i * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dx[c] += (w[c] * g[c] - x[c] * r * dot) * r;
}

__global__ void rmsnorm_backward_dw_kernel(float* dw, const float* dout, const float* inp, const float* rstd, int64_t N,
                                           int64_t C) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t i = 0; i < N; ++i) s += dout[i * C + c] * inp[i * C + c] * rstd[i];
  dw[c] += s;
}

__global__ void rope_kernel(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld,
                            int64_t heads, int64_t hd, int64_t rot, float sgn) {
  const int64_t half = rot / 2, n = N * heads * half;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k % half, h = (k / half) % heads, r = k / (half * heads), t = r % T;
    float* v = x + r * ld + h * hd;
    const float c = cos[t * half + i], s = sgn * sin[t * half + i];
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

__global__ void swiglu_forward_kernel(float* out, const float* pre, int64_t N, int64_t F) {
  const int64_t n = N * F;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / F, j = k % F;
    const float g = pre[i * 2 * F + j], u = pre[i * 2 * F + F + j];
    out[k] = g * sigmoid_f(g) * u;
  }
}

__global__ void gelu_erf_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    out[k] = 0.5f * inp[k] * (1.0f + erff(inp[k] * 0.70710678118654752f));
  }
}

__global__ void gelu_erf_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const float x = inp[k];
    const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f)), pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    dinp[k] = dout[k] * (cdf + x * pdf);
  }
}

__global__ void swiglu_backward_kernel(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F) {
  const int64_t n = N * F;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / F, j = k % F;
    const float g = pre[i * 2 * F + j], u = pre[i * 2 * F + F + j], d = dout[k], s = sigmoid_f(g);
    dpre[i * 2 * F + F + j] = d * g * s;
    dpre[i * 2 * F + j] = d * u * s * (1.0f + g * (1.0f - s));
  }
}

// One thread per element of qkv (N, 3C): q copied, k and v read from their kv head.
__global__ void expand_kv_kernel(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) {
  const int64_t C = heads * hd, KV = kv_heads * hd, g = heads / kv_heads, n = N * 3 * C;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / (3 * C), col = k % (3 * C);
    const float* src = qkvc + r * (C + 2 * KV);
    if (col < C) {
      qkv[k] = src[col];
    } else {
      const int64_t part = (col - C) / C, h = ((col - C) % C) / hd, i = col % hd;
      qkv[k] = src[C + part * KV + (h / g) * hd + i];
    }
  }
}

// One thread per element of dqkvc (N, C + 2KV): dq copied, a kv head's g copies summed in order.
__global__ void reduce_kv_kernel(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads,
                                 int64_t hd) {
  const int64_t C = heads * hd, KV = kv_heads * hd, g = heads / kv_heads, W = C + 2 * KV, n = N * W;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / W, col = k % W;
    const float* src = dqkv + r * 3 * C;
    if (col < C) {
      dqkvc[k] = src[col];
    } else {
      const int64_t part = (col - C) / KV, j = ((col - C) % KV) / hd, i = col % hd;
      const float* s0 = src + C + part * C + j * g * hd + i;
      float s = s0[0];
      for (int64_t m = 1; m < g; ++m) s += s0[m * hd];
      dqkvc[k] = s;
    }
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps,
                     Stream s) {
  if (N > 0) rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(out, rstd, inp, w, C, eps);
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int64_t C, Stream s) {
  if (N <= 0) return;
  rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(dinp, dout, inp, w, rstd, C);
  rmsnorm_backward_dw_kernel<<<grid_for(C, kThreads), kThreads, 0, s>>>(dw, dout, inp, rstd, N, C);
}

void rope(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads, int64_t hd,
          int64_t rot, bool inverse, Stream s) {
  const int64_t n = N * heads * (rot / 2);
  if (n > 0) rope_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, cos, sin, N, T, ld, heads, hd, rot, inverse ? -1.0f : 1.0f);
}

void swiglu_forward(float* out, const float* pre, int64_t N, int64_t F, Stream s) {
  if (N * F > 0) swiglu_forward_kernel<<<grid_for(N * F, kThreads), kThreads, 0, s>>>(out, pre, N, F);
}

void gelu_erf_forward(float* out, const float* inp, int64_t n, Stream s) {
  if (n > 0) gelu_erf_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, inp, n);
}

void gelu_erf_backward(float* dinp, const float* inp, const float* dout, int64_t n, Stream s) {
  if (n > 0) gelu_erf_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dinp, inp, dout, n);
}

void swiglu_backward(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F, Stream s) {
  if (N * F > 0) swiglu_backward_kernel<<<grid_for(N * F, kThreads), kThreads, 0, s>>>(dpre, pre, dout, N, F);
}

void expand_kv(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd, Stream s) {
  const int64_t n = N * 3 * heads * hd;
  if (n > 0) expand_kv_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(qkv, qkvc, N, heads, kv_heads, hd);
}

void reduce_kv(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd, Stream s) {
  const int64_t n = N * (heads + 2 * kv_heads) * hd;
  if (n > 0) reduce_kv_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dqkvc, dqkv, N, heads, kv_heads, hd);
}

}  // namespace weft::cuda::kern
