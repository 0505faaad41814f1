#include "backend/cpu/attention_16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/attention_products.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/rows_16.h"

namespace weft::cpu {
namespace {

// One head's rows of a (T, ld) tensor, columns [col, col + hs), packed into d (T, hs).
void pack_head(float* d, CView x, int64_t first, int64_t T, int64_t ld, int64_t hs) {
  for (int64_t t = 0; t < T; ++t) widen(d + t * hs, x.data, x.dtype, first + t * ld, hs);
}
void unpack_head(View x, int64_t first, int64_t ld, const float* s, int64_t rows, int64_t hs) {
  for (int64_t t = 0; t < rows; ++t) narrow(x.data, x.dtype, first + t * ld, s + t * hs, hs);
}

}  // namespace

void Attention16::forward(View out, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH, bool causal) {
  const char* op = causal ? "attention_forward" : "bidir_attention_forward";
  check_float_dtype(out.dtype, op, "the output");
  check_float_dtype(att.dtype, op, "the probabilities");
  check_float_dtype(qkv.dtype, op, "qkv");
  const int64_t hs = C / NH, C3 = 3 * C, Bk = kAttBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  int64_t stride = 0;
  float* base = scratch_.get(3 * T * hs + Bk * T + Bk * hs, &stride);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* q = base + static_cast<int64_t>(omp_get_thread_num()) * stride;
    float *k = q + T * hs, *v = k + T * hs, *S = v + T * hs, *O = S + Bk * T;
    const int64_t row0 = b * T * C3 + h * hs;
    pack_head(q, qkv, row0, T, C3, hs);
    pack_head(k, qkv, row0 + C, T, C3, hs);
    pack_head(v, qkv, row0 + 2 * C, T, C3, hs);
    for (int64_t i0 = 0; i0 < T; i0 += Bk) {
      const int64_t i1 = std::min(T, i0 + Bk), rows = i1 - i0, cols = causal ? i1 : T;
      // S[rows, 0:cols] = q[i0:i1] k[0:cols]^T * scale, its rows' softmax, out = S v[0:cols]
      attention_sgemm(gemm_, false, true, rows, cols, hs, scale, q + i0 * hs, hs, k, hs, 0.0f, S, T);
      for (int64_t i = i0; i < i1; ++i) softmax_row(S + (i - i0) * T, causal ? i + 1 : T, T);
      attention_sgemm(gemm_, false, false, rows, hs, cols, 1.0f, S, T, v, hs, 0.0f, O, hs);
      for (int64_t i = i0; i < i1; ++i) narrow(att.data, att.dtype, (bh * T + i) * T, S + (i - i0) * T, T);
      unpack_head(out, (b * T + i0) * C + h * hs, C, O, rows, hs);
    }
  }
}

void Attention16::backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C, int64_t NH,
                           bool causal) {
  const char* op = causal ? "attention_backward" : "bidir_attention_backward";
  check_float_dtype(dqkv.dtype, op, "dqkv");
  check_float_dtype(dout.dtype, op, "dout");
  check_float_dtype(qkv.dtype, op, "qkv");
  check_float_dtype(att.dtype, op, "the probabilities");
  const int64_t hs = C / NH, C3 = 3 * C, Bk = kAttBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  int64_t stride = 0;
  float* base = scratch_.get(6 * T * hs + 2 * Bk * T + Bk * hs, &stride);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* q = base + static_cast<int64_t>(omp_get_thread_num()) * stride;
    float *k = q + T * hs, *v = k + T * hs, *dO = v + T * hs, *dk = dO + T * hs, *dv = dk + T * hs;
    float *A = dv + T * hs, *D = A + Bk * T, *dq = D + Bk * T;
    const int64_t row0 = b * T * C3 + h * hs;
    pack_head(q, qkv, row0, T, C3, hs);
    pack_head(k, qkv, row0 + C, T, C3, hs);
    pack_head(v, qkv, row0 + 2 * C, T, C3, hs);
    pack_head(dO, dout, b * T * C + h * hs, T, C, hs);
    std::fill(dk, dk + 2 * T * hs, 0.0f);  // dk, dv
    for (int64_t i0 = 0; i0 < T; i0 += Bk) {
      const int64_t i1 = std::min(T, i0 + Bk), rows = i1 - i0, cols = causal ? i1 : T;
      for (int64_t i = i0; i < i1; ++i) widen(A + (i - i0) * T, att.data, att.dtype, (bh * T + i) * T, cols);
      // dv[0:cols] += A^T dO[i0:i1]; D = dO[i0:i1] v[0:cols]^T, the softmax backward of its rows
      attention_sgemm(gemm_, true, false, cols, hs, rows, 1.0f, A, T, dO + i0 * hs, hs, 1.0f, dv, hs);
      attention_sgemm(gemm_, false, true, rows, cols, hs, 1.0f, dO + i0 * hs, hs, v, hs, 0.0f, D, T);
      for (int64_t i = i0; i < i1; ++i) {
        if (causal) {
          softmax_backward_causal_row(A + (i - i0) * T, D + (i - i0) * T, i, cols, scale);
        } else {
          softmax_backward_row(A + (i - i0) * T, D + (i - i0) * T, T, T, scale);
        }
      }
      // dq[i0:i1] = D k[0:cols]; dk[0:cols] += D^T q[i0:i1]
      attention_sgemm(gemm_, false, false, rows, hs, cols, 1.0f, D, T, k, hs, 0.0f, dq, hs);
      attention_sgemm(gemm_, true, false, cols, hs, rows, 1.0f, D, T, q + i0 * hs, hs, 1.0f, dk, hs);
      unpack_head(dqkv, row0 + i0 * C3, C3, dq, rows, hs);
    }
    unpack_head(dqkv, row0 + C, C3, dk, T, hs);
    unpack_head(dqkv, row0 + 2 * C, C3, dv, T, hs);
  }
}

}  // namespace weft::cpu
