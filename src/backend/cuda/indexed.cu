// Indexed-row kernels (backend.h "indexed rows", graph networks): gather, segment reductions and
// their backward, batch normalisation. One thread per (segment, column) walks the segment's rows
// in order and the batch-norm column sums run over chunks of kBatchNormChunk rows added in
// chunk order, as the CPU reference (backend/cpu/indexed_ops.cc): no atomics, reproducible.
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace weft::cuda::kern {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 64;  // backend.h kBatchNormChunk

__device__ __forceinline__ int64_t row_of(const int32_t* perm, int64_t k) { return perm ? perm[k] : k; }

__global__ void gather_rows_kernel(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C) {
  const int64_t n = M * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / C, c = i % C;
    out[i] = x[int64_t(idx[m]) * C + c];
  }
}

// op: 0 sum, 1 mean, 2 max, 3 min.
__global__ void segment_reduce_kernel(float* out, int32_t* arg, const float* x, const int32_t* perm,
                                      const int32_t* offsets, int64_t S, int64_t C, int op, bool accumulate) {
  const int64_t n = S * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i % C, k0 = offsets[s], k1 = offsets[s + 1];
    if (op <= 1) {
      float v = 0.0f;
      for (int64_t k = k0; k < k1; ++k) v += x[row_of(perm, k) * C + c];
      if (op == 1 && k1 > k0) v *= 1.0f / float(k1 - k0);
      out[i] = accumulate ? out[i] + v : v;
      continue;
    }
    float best = 0.0f;
    int32_t at = -1;
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r = row_of(perm, k);
      const float v = x[r * C + c];
      if (at < 0 || (op == 2 ? v > best : v < best)) best = v, at = int32_t(r);
    }
    out[i] = best;
    if (arg) arg[i] = at;
  }
}

__global__ void segment_broadcast_kernel(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets,
                                         int64_t S, int64_t C, bool mean, bool accumulate) {
  const int64_t n = S * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i % C, k0 = offsets[s], k1 = offsets[s + 1];
    const float inv = mean && k1 > k0 ? 1.0f / float(k1 - k0) : 1.0f;
    const float v = mean ? dout[i] * inv : dout[i];
    for (int64_t k = k0; k < k1; ++k) {
      float* r = dx + row_of(perm, k) * C + c;
      *r = accumulate ? *r + v : v;
    }
  }
}

__global__ void segment_arg_backward_kernel(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C) {
  const int64_t n = S * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t r = arg[i];
    if (r >= 0) dx[int64_t(r) * C + i % C] += dout[i];
  }
}

// One thread per (segment, column), as the CPU reference: the biased variance about the given
// mean in row order; 0 where it is not above var_floor.
__global__ void segment_std_kernel(float* out, const float* x, const float* mean, const int32_t* perm,
                                   const int32_t* offsets, int64_t S, int64_t C, float var_floor) {
  const int64_t n = S * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i % C, k0 = offsets[s], k1 = offsets[s + 1];
    const float inv = k1 > k0 ? 1.0f / float(k1 - k0) : 0.0f, m = mean[i];
    float v = 0.0f;
    for (int64_t k = k0; k < k1; ++k) {
      const float d = x[row_of(perm, k) * C + c] - m;
      v += d * d;
    }
    v *= inv;
    out[i] = v > var_floor ? sqrtf(v) : 0.0f;
  }
}

// A row belongs to one segment: (segment, column) threads write disjoint elements.
__global__ void segment_std_backward_kernel(float* dx, const float* dout, const float* x, const float* mean,
                                            const float* std, const int32_t* perm, const int32_t* offsets, int64_t S,
                                            int64_t C) {
  const int64_t n = S * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i % C, k0 = offsets[s], k1 = offsets[s + 1];
    const float sd = std[i];
    if (!(sd > 0.0f)) continue;
    const float g = dout[i] / (float(k1 - k0) * sd), m = mean[i];
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r = row_of(perm, k) * C + c;
      dx[r] += g * (x[r] - m);
    }
  }
}

__global__ void batchnorm_inference_kernel(float* out, const float* x, const float* mean, const float* var,
                                           const float* w, const float* b, int64_t N, int64_t C, float eps) {
  const int64_t n = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C;
    const float r = float(1.0 / sqrt(double(var[c]) + double(eps)));
    out[i] = x[i] * (r * w[c]) + (b[c] - mean[c] * r * w[c]);
  }
}

// part (chunks, C): per chunk of kChunk rows and column, the sum of f(x, dout, mean, rstd) in
// row order. which: 0 x, 1 (x - mean)^2, 2 dout, 3 dout * xhat.
__global__ void chunk_sums_kernel(double* part, const float* x, const float* dout, const float* mean,
                                  const float* rstd, int64_t N, int64_t C, int which) {
  const int64_t chunks = (N + kChunk - 1) / kChunk, n = chunks * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t q = i / C, c = i % C;
    double s = 0.0;
    for (int64_t r = q * kChunk; r < min(N, (q + 1) * kChunk); ++r) {
      const double v = x[r * C + c];
      if (which == 0) {
        s += v;
      } else if (which == 1) {
        const double d = v - double(mean[c]);
        s += d * d;
      } else if (which == 2) {
        s += double(dout[r * C + c]);
      } else {
        s += double(dout[r * C + c]) * double((x[r * C + c] - mean[c]) * rstd[c]);
      }
    }
    part[i] = s;
  }
}

// out (C) = the chunks' sums in chunk order.
__global__ void chunk_total_kernel(double* out, const double* part, int64_t chunks, int64_t C) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t q = 0; q < chunks; ++q) s += part[q * C + c];
    out[c] = s;
  }
}

__global__ void bn_mean_kernel(float* mean, const double* sum, int64_t N, int64_t C) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x)
    mean[c] = N > 0 ? float(sum[c] / double(N)) : 0.0f;
}

__global__ void bn_rstd_kernel(float* rstd, const double* sq, int64_t N, int64_t C, float eps) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    const double var = N > 0 ? sq[c] / double(N) : 0.0;
    rstd[c] = float(1.0 / sqrt(var + double(eps)));
  }
}

__global__ void bn_normalise_kernel(float* out, const float* x, const float* mean, const float* rstd, const float* w,
                                    const float* b, int64_t N, int64_t C) {
  const int64_t n = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C;
    out[i] = (x[i] - mean[c]) * rstd[c] * w[c] + b[c];
  }
}

// dw, db += the sums; mg, mgx (C) = their means times w, for dx.
__global__ void bn_param_grads_kernel(float* dw, float* db, float* mg, float* mgx, const double* sd, const double* sdx,
                                      const float* w, int64_t N, int64_t C) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    db[c] += float(sd[c]);
    dw[c] += float(sdx[c]);
    mg[c] = N > 0 ? float(sd[c] * double(w[c]) / double(N)) : 0.0f;
    mgx[c] = N > 0 ? float(sdx[c] * double(w[c]) / double(N)) : 0.0f;
  }
}

__global__ void bn_input_grad_kernel(float* dx, const float* dout, const float* x, const float* w, const float* mean,
                                     const float* rstd, const float* mg, const float* mgx, int64_t N, int64_t C) {
  const int64_t n = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C;
    const float xhat = (x[i] - mean[c]) * rstd[c];
    dx[i] += rstd[c] * (dout[i] * w[c] - mg[c] - xhat * mgx[c]);
  }
}

void column_total(double* out, double* part, const float* x, const float* dout, const float* mean, const float* rstd,
                  int64_t N, int64_t C, int which, Stream s) {
  const int64_t chunks = (N + kChunk - 1) / kChunk;
  if (chunks > 0) chunk_sums_kernel<<<grid_for(chunks * C, kThreads), kThreads, 0, s>>>(part, x, dout, mean, rstd, N, C, which);
  chunk_total_kernel<<<grid_for(C, kThreads), kThreads, 0, s>>>(out, part, chunks, C);
}

}  // namespace

void gather_rows(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C, Stream s) {
  if (M * C > 0) gather_rows_kernel<<<grid_for(M * C, kThreads), kThreads, 0, s>>>(out, x, idx, M, C);
}

void segment_reduce(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets, int64_t S,
                    int64_t C, int op, bool accumulate, Stream s) {
  if (S * C > 0) {
    segment_reduce_kernel<<<grid_for(S * C, kThreads), kThreads, 0, s>>>(out, arg, x, perm, offsets, S, C, op, accumulate);
  }
}

void segment_broadcast(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C,
                       bool mean, bool accumulate, Stream s) {
  if (S * C > 0) {
    segment_broadcast_kernel<<<grid_for(S * C, kThreads), kThreads, 0, s>>>(dx, dout, perm, offsets, S, C, mean, accumulate);
  }
}

void segment_arg_backward(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C, Stream s) {
  if (S * C > 0) segment_arg_backward_kernel<<<grid_for(S * C, kThreads), kThreads, 0, s>>>(dx, dout, arg, S, C);
}

void segment_std(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets, int64_t S,
                 int64_t C, float var_floor, Stream s) {
  if (S * C > 0) {
    segment_std_kernel<<<grid_for(S * C, kThreads), kThreads, 0, s>>>(out, x, mean, perm, offsets, S, C, var_floor);
  }
}

void segment_std_backward(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                          const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C, Stream s) {
  if (S * C > 0) {
    segment_std_backward_kernel<<<grid_for(S * C, kThreads), kThreads, 0, s>>>(dx, dout, x, mean, std, perm, offsets,
                                                                               S, C);
  }
}

void batchnorm_inference(float* out, const float* x, const float* mean, const float* var, const float* w,
                         const float* b, int64_t N, int64_t C, float eps, Stream s) {
  if (N * C > 0) {
    batchnorm_inference_kernel<<<grid_for(N * C, kThreads), kThreads, 0, s>>>(out, x, mean, var, w, b, N, C, eps);
  }
}

int64_t batchnorm_scratch(int64_t N, int64_t C) { return ((N + kChunk - 1) / kChunk) * C + 2 * C + 2 * C; }

void batchnorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int64_t C, float eps, double* scratch, Stream s) {
  if (C <= 0) return;
  double* part = scratch;
  double* sum = part + ((N + kChunk - 1) / kChunk) * C;
  double* sq = sum + C;
  column_total(sum, part, x, nullptr, nullptr, nullptr, N, C, 0, s);
  bn_mean_kernel<<<grid_for(C, kThreads), kThreads, 0, s>>>(mean, sum, N, C);
  column_total(sq, part, x, nullptr, mean, nullptr, N, C, 1, s);
  bn_rstd_kernel<<<grid_for(C, kThreads), kThreads, 0, s>>>(rstd, sq, N, C, eps);
  if (N > 0) bn_normalise_kernel<<<grid_for(N * C, kThreads), kThreads, 0, s>>>(out, x, mean, rstd, w, b, N, C);
}

void batchnorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C, double* scratch, Stream s) {
  if (C <= 0) return;
  double* part = scratch;
  double* sd = part + ((N + kChunk - 1) / kChunk) * C;
  double* sdx = sd + C;
  float* mg = reinterpret_cast<float*>(sdx + C);  // 2C floats in the last C doubles
  float* mgx = mg + C;
  column_total(sd, part, x, dout, mean, rstd, N, C, 2, s);
  column_total(sdx, part, x, dout, mean, rstd, N, C, 3, s);
  bn_param_grads_kernel<<<grid_for(C, kThreads), kThreads, 0, s>>>(dw, db, mg, mgx, sd, sdx, w, N, C);
  if (N > 0) {
    bn_input_grad_kernel<<<grid_for(N * C, kThreads), kThreads, 0, s>>>(dx, dout, x, w, mean, rstd, mg, mgx, N, C);
  }
}

}  // namespace weft::cuda::kern
