// The fp32 attention kernels that keep the probabilities: the row kernels of the reference
// self-attention (causal or bidirectional; the Backend interface's attention with att), whose
// products around them are cuBLAS calls in cuda_backend.cc, and query attention (one learned
// query per head over S tokens at each position: ClimaX's variable aggregation), whole.
#include <cmath>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kThreads = 256;

// Row r of (BH*T, T): query i = r % T keeps columns [0, i] when causal (the rest become 0),
// all T columns otherwise.
template <bool kCausal>
__global__ void softmax_kernel(float* att, int64_t T, float scale) {
  float* row = att + blockIdx.x * T;
  const int64_t last = kCausal ? int64_t(blockIdx.x % T) : T - 1;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, row[j] * scale);
  m = block_reduce(m, MaxOp{}, -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    const float e = expf(row[j] * scale - m);
    row[j] = e;
    s += e;
  }
  s = block_reduce(s, SumOp{}, 0.0f);
  const float inv = 1.0f / s;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= last ? row[j] * inv : 0.0f;
}

// Causal rows with ALiBi: row r = (bh, i), head h = bh % NH; score j <= i plus slopes[h] (j - i).
__global__ void softmax_alibi_kernel(float* att, int64_t T, int64_t NH, const float* slopes) {
  float* row = att + blockIdx.x * T;
  const int64_t last = int64_t(blockIdx.x % T);
  const float slope = slopes[(blockIdx.x / T) % NH];
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    row[j] += slope * static_cast<float>(j - last);
    m = fmaxf(m, row[j]);
  }
  m = block_reduce(m, MaxOp{}, -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    const float e = expf(row[j] - m);
    row[j] = e;
    s += e;
  }
  s = block_reduce(s, SumOp{}, 0.0f);
  const float inv = 1.0f / s;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= last ? row[j] * inv : 0.0f;
}

template <bool kCausal>
__global__ void softmax_backward_kernel(float* datt, const float* att, int64_t T, float scale) {
  float* dr = datt + blockIdx.x * T;
  const float* ar = att + blockIdx.x * T;
  const int64_t last = kCausal ? int64_t(blockIdx.x % T) : T - 1;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) dot += ar[j] * dr[j];
  dot = block_reduce(dot, SumOp{}, 0.0f);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) dr[j] = j <= last ? ar[j] * (dr[j] - dot) * scale : 0.0f;
}

// Query attention: one block per (position n, head h), kQThreads threads (a multiple of the
// warp width on either vendor). Dot products of length hs = C/NH: one warp per token s, its
// lanes over the head's columns. The S scores live in the block's att row (global memory:
// S is not bounded); __syncthreads orders the block's global writes before its reads.
constexpr int kQThreads = 128;

__global__ void query_attention_forward_kernel(float* out, float* att, const float* q, const float* kv, int64_t N,
                                               int64_t S, int64_t C, int64_t NH, float scale) {
  const int64_t nh = blockIdx.x, n = nh / NH, h = nh % NH, hs = C / NH, NC2 = N * 2 * C;
  const float* qh = q + h * hs;
  const float* kn = kv + n * 2 * C + h * hs;  // key of token s: kn + s * NC2; its value: + C
  float* a = att + nh * S;
  const int lane = threadIdx.x % gpu::kWarpSize, warp = threadIdx.x / gpu::kWarpSize;
  const int nwarps = blockDim.x / gpu::kWarpSize;
  for (int64_t s = warp; s < S; s += nwarps) {
    const float* ks = kn + s * NC2;
    float d = 0.0f;
    for (int64_t i = lane; i < hs; i += gpu::kWarpSize) d += qh[i] * ks[i];
    d = warp_sum(d);
    if (lane == 0) a[s] = d * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int64_t s = threadIdx.x; s < S; s += blockDim.x) m = fmaxf(m, a[s]);
  m = block_reduce(m, MaxOp{}, -INFINITY);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
    const float e = expf(a[s] - m);
    a[s] = e;
    sum += e;
  }
  sum = block_reduce(sum, SumOp{}, 0.0f);
  const float inv = 1.0f / sum;
  for (int64_t s = threadIdx.x; s < S; s += blockDim.x) a[s] *= inv;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float o = 0.0f;
    for (int64_t s = 0; s < S; ++s) o += a[s] * kn[s * NC2 + C + i];
    out[n * C + h * hs + i] = o;
  }
}

// Backward per (n, h): datt_s = dout . v_s into dz (N*NH*S scratch), then
// dz_s = a_s (datt_s - sum_j a_j datt_j) * scale; dk_s = dz_s q_h and dv_s = a_s dout (written);
// this position's share of dq_h, sum_s dz_s k_s, into partial (N,C) (written; summed over n
// in order afterwards: no atomics).
__global__ void query_attention_backward_kernel(float* partial, float* dkv, float* dz, const float* dout,
                                                const float* q, const float* kv, const float* att, int64_t N,
                                                int64_t S, int64_t C, int64_t NH, float scale) {
  const int64_t nh = blockIdx.x, n = nh / NH, h = nh % NH, hs = C / NH, NC2 = N * 2 * C;
  const float* qh = q + h * hs;
  const float* kn = kv + n * 2 * C + h * hs;
  float* dkn = dkv + n * 2 * C + h * hs;
  const float* a = att + nh * S;
  const float* g = dout + n * C + h * hs;
  float* z = dz + nh * S;
  const int lane = threadIdx.x % gpu::kWarpSize, warp = threadIdx.x / gpu::kWarpSize;
  const int nwarps = blockDim.x / gpu::kWarpSize;
  for (int64_t s = warp; s < S; s += nwarps) {
    const float* vs = kn + s * NC2 + C;
    float d = 0.0f;
    for (int64_t i = lane; i < hs; i += gpu::kWarpSize) d += g[i] * vs[i];
    d = warp_sum(d);
    if (lane == 0) z[s] = d;
  }
  __syncthreads();
  float dot = 0.0f;
  for (int64_t s = threadIdx.x; s < S; s += blockDim.x) dot += a[s] * z[s];
  dot = block_reduce(dot, SumOp{}, 0.0f);
  for (int64_t s = threadIdx.x; s < S; s += blockDim.x) z[s] = a[s] * (z[s] - dot) * scale;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    const float qi = qh[i], gi = g[i];
    float pq = 0.0f;
    for (int64_t s = 0; s < S; ++s) {
      const float zs = z[s];
      dkn[s * NC2 + i] = zs * qi;
      dkn[s * NC2 + C + i] = a[s] * gi;
      pq += zs * kn[s * NC2 + i];
    }
    partial[n * C + h * hs + i] = pq;
  }
}

}  // namespace

void softmax_rows(float* att, int64_t BH, int64_t T, float scale, bool causal, Stream s) {
  if (BH * T == 0) return;
  if (causal) {
    softmax_kernel<true><<<static_cast<unsigned>(BH * T), kThreads, 0, s>>>(att, T, scale);
  } else {
    softmax_kernel<false><<<static_cast<unsigned>(BH * T), kThreads, 0, s>>>(att, T, scale);
  }
  WEFT_KERNEL_CHECK("softmax_kernel");
}

void softmax_rows_alibi(float* att, int64_t BH, int64_t T, int64_t NH, const float* slopes, Stream s) {
  if (BH * T == 0) return;
  softmax_alibi_kernel<<<static_cast<unsigned>(BH * T), kThreads, 0, s>>>(att, T, NH, slopes);
  WEFT_KERNEL_CHECK("softmax_alibi_kernel");
}

void softmax_backward_rows(float* datt, const float* att, int64_t BH, int64_t T, float scale, bool causal, Stream s) {
  if (BH * T == 0) return;
  if (causal) {
    softmax_backward_kernel<true><<<static_cast<unsigned>(BH * T), kThreads, 0, s>>>(datt, att, T, scale);
  } else {
    softmax_backward_kernel<false><<<static_cast<unsigned>(BH * T), kThreads, 0, s>>>(datt, att, T, scale);
  }
  WEFT_KERNEL_CHECK("softmax_backward_kernel");
}

void query_attention_forward(float* out, float* att, const float* q, const float* kv, int64_t N, int64_t S, int64_t C,
                             int64_t NH, Stream s) {
  if (N * NH == 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  query_attention_forward_kernel<<<static_cast<unsigned>(N * NH), kQThreads, 0, s>>>(out, att, q, kv, N, S, C, NH,
                                                                                    scale);
  WEFT_KERNEL_CHECK("query_attention_forward_kernel");
}

int64_t query_attention_backward_scratch(int64_t N, int64_t S, int64_t C, int64_t NH) {
  return N * C + N * NH * S + column_sum_scratch(N, C);
}

void query_attention_backward(float* dq, float* dkv, const float* dout, const float* q, const float* kv,
                              const float* att, int64_t N, int64_t S, int64_t C, int64_t NH, float* scratch,
                              Stream s) {
  if (N * NH == 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  float* partial = scratch;        // (N,C)
  float* dz = partial + N * C;     // (N,NH,S)
  float* colsum = dz + N * NH * S;  // column_sum_scratch(N, C)
  query_attention_backward_kernel<<<static_cast<unsigned>(N * NH), kQThreads, 0, s>>>(partial, dkv, dz, dout, q, kv,
                                                                                     att, N, S, C, NH, scale);
  WEFT_KERNEL_CHECK("query_attention_backward_kernel");
  column_sum_accumulate<float>(dq, partial, N, C, colsum, s);
}

}  // namespace weft::cuda::kern
