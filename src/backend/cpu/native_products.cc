#include "backend/cpu/native_products.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace weft {
namespace {

bool is_bf16(CView v) { return v.data != nullptr && v.dtype == DType::kBF16; }

}  // namespace

bool NativeProducts::covers(std::initializer_list<CView> operands) {
  for (const CView& v : operands) {
    if (v.data != nullptr && v.dtype != DType::kF32 && v.dtype != DType::kBF16) return false;
  }
  return true;
}

void NativeProducts::product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda,
                             CView B, int64_t ldb, CView bias, float beta, View C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // C = beta C (+ bias): an empty sum, as the staged default computes it
    WEFT_CHECK(!bias, "native product: a bias with an empty sum");
    be_.Backend::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool a32 = A.f32(), b32 = B.f32();
  const auto b16 = [](CView v) { return static_cast<const uint16_t*>(v.data); };
  const auto f32 = [](CView v) { return static_cast<const float*>(v.data); };
  if (!a32 && !b32) {
    g_.gemm_bf16(ta, tb, M, N, K, alpha, b16(A), lda, b16(B), ldb, bias.data, is_bf16(bias), beta, C.data, is_bf16(C),
                 ldc);
    return;
  }
  const NativeChunks ch = native_product_chunks(M, N, K, a32, b32, is_bf16(C), be_.staging_chunk());
  float* const base = be_.staging_for_op(ch.acc + (ch.bf16 + 1) / 2);
  uint16_t* arena = reinterpret_cast<uint16_t*>(base + ch.acc);
  const float* af = a32 ? f32(A) : nullptr;
  const float* bf = b32 ? f32(B) : nullptr;
  if (ch.by_k) {
    // op(A)[:, k0..] (M x k) and op(B)[k0.., :] (k x N): converted if f32, else in place; the
    // chunks' products summed into C (the first with beta and the bias), a bf16 C through an
    // fp32 copy (the arena's first M N elements) rounded once at the end.
    const bool acc = ch.acc > 0;
    uint16_t* const c16 = static_cast<uint16_t*>(C.data);
    if (acc && beta != 0.0f) {
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t j = 0; j < N; ++j) base[r * N + j] = std::bit_cast<float>(static_cast<uint32_t>(c16[r * ldc + j]) << 16);
      }
    }
    for (int64_t k0 = 0; k0 < K; k0 += ch.n) {
      const int64_t k = std::min(ch.n, K - k0);
      const uint16_t* ap;
      int64_t ald = lda;
      if (a32) {
        uint16_t* d = arena;
        if (ta) {
          OnednnGemm::to_bf16(d, af + k0 * lda, k, M, lda);  // stored rows k0.. (K x M)
          ald = M;
        } else {
          OnednnGemm::to_bf16(d, af + k0, M, k, lda);
          ald = k;
        }
        ap = d;
      } else {
        ap = b16(A) + (ta ? k0 * lda : k0);
      }
      const uint16_t* bp;
      int64_t bld = ldb;
      if (b32) {
        uint16_t* d = arena + (a32 ? M * k : 0);
        if (tb) {
          OnednnGemm::to_bf16(d, bf + k0, N, k, ldb);  // stored N x K: columns k0..
          bld = k;
        } else {
          OnednnGemm::to_bf16(d, bf + k0 * ldb, k, N, ldb);
          bld = N;
        }
        bp = d;
      } else {
        bp = b16(B) + (tb ? k0 : k0 * ldb);
      }
      const bool first = k0 == 0;
      g_.gemm_bf16(ta, tb, M, N, k, alpha, ap, ald, bp, bld, first ? bias.data : nullptr, is_bf16(bias),
                   first ? beta : 1.0f, acc ? static_cast<void*>(base) : C.data, !acc && is_bf16(C), acc ? N : ldc);
    }
    if (acc) {
      for (int64_t r = 0; r < M; ++r) OnednnGemm::to_bf16(c16 + r * ldc, base + r * N, 1, N, N);
    }
    return;
  }
  if (a32) {
    // op(A)'s rows m0.. (stored rows, or stored columns when transposed) -> dense bf16; B whole.
    const int64_t mc = ch.n;
    const uint16_t* bp = b16(B);
    int64_t bld = ldb;
    if (b32) {
      uint16_t* bc = arena + mc * K;
      OnednnGemm::to_bf16(bc, bf, tb ? N : K, tb ? K : N, ldb);
      bp = bc;
      bld = tb ? K : N;
    }
    for (int64_t m0 = 0; m0 < M; m0 += mc) {
      const int64_t m = std::min(mc, M - m0);
      if (ta) {
        OnednnGemm::to_bf16(arena, af + m0, K, m, lda);  // K stored rows, m of their columns
      } else {
        OnednnGemm::to_bf16(arena, af + m0 * lda, m, K, lda);
      }
      g_.gemm_bf16(ta, tb, m, N, K, alpha, arena, ta ? m : K, bp, bld, bias.data, is_bf16(bias), beta,
                   C.at(m0 * ldc).data, is_bf16(C), ldc);
    }
    return;
  }
  // An f32 B: op(B)'s columns n0.. -> dense bf16, C's columns n0.. (and the bias's).
  const int64_t nc = ch.n;
  for (int64_t n0 = 0; n0 < N; n0 += nc) {
    const int64_t n = std::min(nc, N - n0);
    if (tb) {
      OnednnGemm::to_bf16(arena, bf + n0 * ldb, n, K, ldb);
    } else {
      OnednnGemm::to_bf16(arena, bf + n0, K, n, ldb);
    }
    g_.gemm_bf16(ta, tb, M, n, K, alpha, b16(A), lda, arena, tb ? K : n, bias ? bias.at(n0).data : nullptr,
                 is_bf16(bias), beta, C.at(n0).data, is_bf16(C), ldc);
  }
}

void NativeProducts::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda,
                          CView B, int64_t ldb, float beta, View C, int64_t ldc) {
  product(ta, tb, M, N, K, alpha, A, lda, B, ldb, CView(), beta, C, ldc);
}

void NativeProducts::matmul_forward(View out, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                                    bool accumulate) {
  if (IN == 0 && bias) {  // no product: out (+)= bias, as the staged default
    be_.Backend::matmul_forward(out, inp, w, bias, N, IN, OUT, accumulate);
    return;
  }
  product(false, false, N, OUT, IN, 1.0f, inp, IN, w, OUT, bias, accumulate ? 1.0f : 0.0f, out, OUT);
}

void NativeProducts::column_sums(float* dbias, CView dout, int64_t N, int64_t OUT) {
  // dbias (OUT) += the column sums of dout (N, OUT), each thread a slice of the columns.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c0 = OUT * t / nt, c1 = OUT * (t + 1) / nt;
    if (dout.f32()) {
      const float* d = static_cast<const float*>(dout.data);
      for (int64_t r = 0; r < N; ++r) {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) dbias[c] += d[r * OUT + c];
      }
    } else {
      const uint16_t* d = static_cast<const uint16_t*>(dout.data);
      for (int64_t r = 0; r < N; ++r) {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          dbias[c] += std::bit_cast<float>(static_cast<uint32_t>(d[r * OUT + c]) << 16);
        }
      }
    }
  }
}

void NativeProducts::matmul_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, int64_t N,
                                     int64_t IN, int64_t OUT) {
  WEFT_CHECK(dw.f32() && (!dbias || dbias.f32()), "native matmul_backward: the weight gradients are fp32");
  // dinp (N,IN) = dout (N,OUT) @ w^T; dw (IN,OUT) += inp^T @ dout; dbias += column sums of dout.
  if (dinp) product(false, true, N, IN, OUT, 1.0f, dout, OUT, w, OUT, CView(), 0.0f, dinp, IN);
  product(true, false, IN, OUT, N, 1.0f, inp, IN, dout, OUT, CView(), 1.0f, dw, OUT);
  if (dbias) column_sums(static_cast<float*>(dbias.data), dout, N, OUT);
}

void NativeProducts::matmul_residual_layernorm_forward(View residual, View out, View mean, View rstd, CView res,
                                                       CView inp, CView w, CView bias, CView ln_w, CView ln_b,
                                                       int64_t N, int64_t IN, int64_t C, float eps, Precision p) {
  // A chunk of the residual's rows summed in fp32 in the arena, its f32 input rows rounded to
  // bf16 after them, an f32 weight rounded whole after those; each chunk rounded once into
  // `residual` (f32: round_to(p), as the fp32 form).
  if (N <= 0 || IN <= 0 || C <= 0) {  // no product: the default's sequence
    be_.Backend::matmul_residual_layernorm_forward(residual, out, mean, rstd, res, inp, w, bias, ln_w, ln_b, N, IN, C,
                                                   eps, p);
    return;
  }
  const bool inp32 = inp.f32(), w32 = w.f32();
  const int64_t row16 = 2 * C + (inp32 ? IN : 0);
  const int64_t rc = staging_chunk_rows(N, row16, 2 * be_.staging_chunk());
  float* r = be_.staging_for_op(native_residual_staging(N, IN, C, inp32, w32, be_.staging_chunk()));
  uint16_t* rows16 = reinterpret_cast<uint16_t*>(r + rc * C);
  const uint16_t* wp = static_cast<const uint16_t*>(w.data);
  if (w32) {
    uint16_t* wc = rows16 + (inp32 ? rc * IN : 0);
    OnednnGemm::to_bf16(wc, static_cast<const float*>(w.data), IN, C, C);
    wp = wc;
  }
  for (int64_t r0 = 0; r0 < N; r0 += rc) {
    const int64_t n = std::min(rc, N - r0);
    if (res.f32()) {
      be_.copy_device(r, 0, res.data, view_offset(DType::kF32, r0 * C), static_cast<size_t>(n * C) * sizeof(float));
    } else {
      be_.decode_16(r, res.at(r0 * C).data, n * C, res.dtype, false);
    }
    const uint16_t* ip = static_cast<const uint16_t*>(inp.at(r0 * IN).data);
    if (inp32) {
      OnednnGemm::to_bf16(rows16, static_cast<const float*>(inp.data) + r0 * IN, n, IN, IN);
      ip = rows16;
    }
    g_.gemm_bf16(false, false, n, C, IN, 1.0f, ip, IN, wp, C, bias.data, is_bf16(bias), 1.0f, r, false, C);
    if (residual.f32()) {
      be_.copy_device(residual.data, view_offset(DType::kF32, r0 * C), r, 0, static_cast<size_t>(n * C) * sizeof(float));
    } else {
      be_.encode_16(residual.at(r0 * C).data, r, n * C, residual.dtype);
    }
  }
  if (residual.f32() && p != Precision::kFp32) be_.round_to(static_cast<float*>(residual.data), N * C, p);
  be_.layernorm_forward(out, mean, rstd, residual, ln_w, ln_b, N, C, eps);
  if (out.f32() && p != Precision::kFp32) be_.round_to(static_cast<float*>(out.data), N * C, p);
}

}  // namespace weft
