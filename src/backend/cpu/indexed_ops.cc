#include "backend/cpu/indexed_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace weft::cpu {
namespace {

int64_t row_of(const int32_t* perm, int64_t k) { return perm ? perm[k] : k; }

// Per column, sums over the N rows of f(row, column) by chunks of kBatchNormChunk rows, the
// chunks' partial sums added in order: out (C).
template <class F>
void column_sums(double* out, int64_t N, int64_t C, F&& f) {
  const int64_t chunks = (N + kBatchNormChunk - 1) / kBatchNormChunk;
  std::vector<double> part(static_cast<size_t>(std::max<int64_t>(chunks, 1) * C), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < chunks; ++q) {
    double* p = part.data() + q * C;
    for (int64_t i = q * kBatchNormChunk; i < std::min(N, (q + 1) * kBatchNormChunk); ++i) {
      for (int64_t c = 0; c < C; ++c) p[c] += f(i, c);
    }
  }
  std::fill(out, out + C, 0.0);
  for (int64_t q = 0; q < chunks; ++q) {
    for (int64_t c = 0; c < C; ++c) out[c] += part[static_cast<size_t>(q * C + c)];
  }
}

}  // namespace

void gather_rows(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(out + m * C, x + static_cast<int64_t>(idx[m]) * C, static_cast<size_t>(C) * sizeof(float));
  }
}

void segment_reduce(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets, int64_t S,
                    int64_t C, SegmentOp op, bool accumulate) {
  if (accumulate && (op == SegmentOp::kMax || op == SegmentOp::kMin)) {
    throw_input("segment_reduce: accumulate is for sum and mean, not max or min");
  }
  // Per column the segment's rows in order, as one running value each: the rows are read whole
  // (contiguous, vectorised over the columns), the additions and comparisons per column in the
  // same order as a column-by-column walk.
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(C));
    std::vector<int32_t> at(static_cast<size_t>(C));
#pragma omp for schedule(dynamic, 16)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t k0 = offsets[s], k1 = offsets[s + 1];
      float* o = out + s * C;
      float* a = acc.data();
      std::fill(acc.begin(), acc.end(), 0.0f);
      if (op == SegmentOp::kSum || op == SegmentOp::kMean) {
        for (int64_t k = k0; k < k1; ++k) {
          const float* r = x + row_of(perm, k) * C;
          for (int64_t c = 0; c < C; ++c) a[c] += r[c];
        }
        const float inv = op == SegmentOp::kMean && k1 > k0 ? 1.0f / static_cast<float>(k1 - k0) : 1.0f;
        for (int64_t c = 0; c < C; ++c) {
          const float v = a[c] * inv;
          o[c] = accumulate ? o[c] + v : v;
        }
        continue;
      }
      const bool max = op == SegmentOp::kMax;
      int32_t* t = at.data();
      std::fill(at.begin(), at.end(), -1);
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t row = row_of(perm, k);
        const float* r = x + row * C;
        for (int64_t c = 0; c < C; ++c) {
          const float v = r[c];
          if (t[c] < 0 || (max ? v > a[c] : v < a[c])) a[c] = v, t[c] = static_cast<int32_t>(row);
        }
      }
      std::copy(a, a + C, o);
      if (arg) std::copy(t, t + C, arg + s * C);
    }
  }
}

void segment_broadcast(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C,
                       bool mean, bool accumulate) {
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t s = 0; s < S; ++s) {
    const int64_t k0 = offsets[s], k1 = offsets[s + 1];
    const float inv = mean && k1 > k0 ? 1.0f / static_cast<float>(k1 - k0) : 1.0f;
    const float* d = dout + s * C;
    for (int64_t k = k0; k < k1; ++k) {
      float* r = dx + row_of(perm, k) * C;
      for (int64_t c = 0; c < C; ++c) {
        const float v = mean ? d[c] * inv : d[c];
        r[c] = accumulate ? r[c] + v : v;
      }
    }
  }
}

void segment_arg_backward(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C) {
  // A row belongs to one segment: the segments write disjoint elements.
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t c = 0; c < C; ++c) {
      const int32_t r = arg[s * C + c];
      if (r >= 0) dx[static_cast<int64_t>(r) * C + c] += dout[s * C + c];
    }
  }
}

void segment_std(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets, int64_t S,
                 int64_t C, float var_floor) {
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(C));
#pragma omp for schedule(dynamic, 16)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t k0 = offsets[s], k1 = offsets[s + 1];
      const float inv = k1 > k0 ? 1.0f / static_cast<float>(k1 - k0) : 0.0f;
      const float* m = mean + s * C;
      float* v = acc.data();
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t k = k0; k < k1; ++k) {  // per column the rows in order
        const float* r = x + row_of(perm, k) * C;
        for (int64_t c = 0; c < C; ++c) {
          const float d = r[c] - m[c];
          v[c] += d * d;
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        const float var = v[c] * inv;
        out[s * C + c] = var > var_floor ? std::sqrt(var) : 0.0f;
      }
    }
  }
}

void segment_std_backward(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                          const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C) {
#pragma omp parallel
  {
    std::vector<float> g(static_cast<size_t>(C));
#pragma omp for schedule(dynamic, 16)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t k0 = offsets[s], k1 = offsets[s + 1];
      const float* m = mean + s * C;
      for (int64_t c = 0; c < C; ++c) {  // 0 where the std is 0: no gradient
        const float sd = std[s * C + c];
        g[static_cast<size_t>(c)] = sd > 0.0f ? dout[s * C + c] / (static_cast<float>(k1 - k0) * sd) : 0.0f;
      }
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t r = row_of(perm, k) * C;
        for (int64_t c = 0; c < C; ++c) dx[r + c] += g[static_cast<size_t>(c)] * (x[r + c] - m[c]);
      }
    }
  }
}

void batchnorm_inference(float* out, const float* x, const float* mean, const float* var, const float* w,
                         const float* b, int64_t N, int64_t C, float eps) {
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const float r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + static_cast<double>(eps)));
    scale[static_cast<size_t>(c)] = r * w[c];
    shift[static_cast<size_t>(c)] = b[c] - mean[c] * r * w[c];
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * scale[static_cast<size_t>(c)] + shift[static_cast<size_t>(c)];
  }
}

void batchnorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int64_t C, float eps) {
  std::vector<double> sum(static_cast<size_t>(C)), sq(static_cast<size_t>(C));
  column_sums(sum.data(), N, C, [&](int64_t i, int64_t c) { return static_cast<double>(x[i * C + c]); });
  for (int64_t c = 0; c < C; ++c) mean[c] = N > 0 ? static_cast<float>(sum[static_cast<size_t>(c)] / static_cast<double>(N)) : 0.0f;
  column_sums(sq.data(), N, C, [&](int64_t i, int64_t c) {
    const double d = static_cast<double>(x[i * C + c]) - mean[c];
    return d * d;
  });
  for (int64_t c = 0; c < C; ++c) {
    const double var = N > 0 ? sq[static_cast<size_t>(c)] / static_cast<double>(N) : 0.0;
    rstd[c] = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = (x[i * C + c] - mean[c]) * rstd[c] * w[c] + b[c];
  }
}

void batchnorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C) {
  // xhat = (x - mean) rstd; db = sum dout, dw = sum dout xhat; with g = dout w:
  // dx = rstd (g - mean(g) - xhat mean(g xhat)) over the N rows.
  std::vector<double> sd(static_cast<size_t>(C)), sdx(static_cast<size_t>(C));
  column_sums(sd.data(), N, C, [&](int64_t i, int64_t c) { return static_cast<double>(dout[i * C + c]); });
  column_sums(sdx.data(), N, C, [&](int64_t i, int64_t c) {
    return static_cast<double>(dout[i * C + c]) * ((x[i * C + c] - mean[c]) * rstd[c]);
  });
  std::vector<float> mg(static_cast<size_t>(C)), mgx(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    db[c] += static_cast<float>(sd[static_cast<size_t>(c)]);
    dw[c] += static_cast<float>(sdx[static_cast<size_t>(c)]);
    mg[static_cast<size_t>(c)] = N > 0 ? static_cast<float>(sd[static_cast<size_t>(c)] * w[c] / static_cast<double>(N)) : 0.0f;
    mgx[static_cast<size_t>(c)] = N > 0 ? static_cast<float>(sdx[static_cast<size_t>(c)] * w[c] / static_cast<double>(N)) : 0.0f;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[i * C + c] - mean[c]) * rstd[c];
      dx[i * C + c] += rstd[c] * (dout[i * C + c] * w[c] - mg[static_cast<size_t>(c)] - xhat * mgx[static_cast<size_t>(c)]);
    }
  }
}

}  // namespace weft::cpu
