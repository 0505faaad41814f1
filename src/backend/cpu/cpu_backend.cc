// CPU backend: matrix products through BLAS (cblas_sgemm), everything else OpenMP loops.
// This is the reference implementation every other backend is checked against. The model's
// products (gemm, matmul_forward, matmul_backward) may instead run oneDNN (set_products): its fp32
// matmul (fp32 kernel "onednn") or, with MatmulMode::kFast on bf16 storage, its native bf16
// product on CPUs that have one (AVX512-BF16, AMX); the exact mode is the reference's sgemm.
// Its device memory is host memory: it keeps the device contract's defaults (backend.cc:
// aligned_alloc, memcpy, no-op synchronize), so the contract costs it nothing.
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention_16.h"
#include "backend/cpu/attention_products.h"
#include "backend/cpu/blas_kernels.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/indexed_ops.h"
#include "backend/cpu/decoder_ops.h"
#include "backend/cpu/gelu_ops.h"
#include "backend/cpu/pointwise_ops.h"
#include "backend/cpu/layernorm_16.h"
#include "backend/cpu/rows_16.h"
#include "backend/cpu/native_products.h"
#include "backend/cpu/onednn_gemm.h"
#include "core/error.h"
#include "core/precision.h"

namespace weft {
namespace {

// Splits [0, n) into `parts` contiguous chunks; returns chunk i's [begin, end).
inline std::pair<int64_t, int64_t> chunk(int64_t n, int parts, int i) {
  int64_t base = n / parts, rem = n % parts;
  int64_t b = i * base + std::min<int64_t>(i, rem);
  return {b, b + base + (i < rem ? 1 : 0)};
}

using cpu::vexp;

// Subnormal floats (below 1.2e-38) read and computed as zero on every thread of the OpenMP pool
// (x86: MXCSR's FTZ and DAZ; Arm: FPCR.FZ), as PyTorch's set_flush_denormal(True) and GPUs'
// fast paths: an operand or result in that range costs x86 a microcode assist of ~100 cycles,
// which made the graph networks' products (SchNet's Gaussian features) 2-5x slower, for values no
// float sum can see. The threads keep the mode; the pool is made once per process.
void flush_subnormals() {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp parallel
  _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
#elif defined(__aarch64__)
#pragma omp parallel
  {
    uint64_t fpcr = 0;
    asm volatile("mrs %0, fpcr" : "=r"(fpcr));
    fpcr |= uint64_t{1} << 24;  // FZ
    asm volatile("msr fpcr, %0" : : "r"(fpcr));
  }
#endif
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() { flush_subnormals(); }
  ~CpuBackend() override { release_staging(); }
  std::string name() const override { return "cpu"; }

  void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override {
    product(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  void set_products(const ProductSettings& s) override {
    if (!cpu_fp32_kernel_known(s.fp32_kernel)) {
      throw_input("unknown fp32 kernel '{}' for the cpu backend, expected one of: {}", s.fp32_kernel, kCpuFp32Kernels);
    }
    products_ = s;
    const bool bf16 = s.mode == MatmulMode::kFast && s.storage == Precision::kBf16 && OnednnGemm::native_bf16();
    product_ = bf16 ? Product::kOnednnBf16 : s.fp32_kernel == "onednn" ? Product::kOnednnF32 : Product::kOpenblas;
    att_gemm_ = s.fp32_kernel == "onednn" ? cpu::AttentionGemm::kOnednn : cpu::AttentionGemm::kOpenblas;
    att16_.set_gemm(att_gemm_);
    if (product_ != Product::kOpenblas && !onednn_) onednn_ = std::make_unique<OnednnGemm>();
    native_.reset();
    if (product_ == Product::kOnednnBf16) native_ = std::make_unique<NativeProducts>(*this, *onednn_);
  }

  // --- typed products: native bf16 (native_products.h) with matmul = fast on a bf16 CPU ---
  bool native_16bit_products() const override { return native_ != nullptr; }

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
            int64_t ldb, float beta, View C, int64_t ldc) override {
    if (native_ && NativeProducts::covers({A, B, C})) return native_->gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    Backend::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  void matmul_forward(View out, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                      bool accumulate) override {
    if (native_ && NativeProducts::covers({out, inp, w, bias})) {
      return native_->matmul_forward(out, inp, w, bias, N, IN, OUT, accumulate);
    }
    Backend::matmul_forward(out, inp, w, bias, N, IN, OUT, accumulate);
  }

  void matmul_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, int64_t N, int64_t IN,
                       int64_t OUT) override {
    if (native_ && dw.f32() && (!dbias || dbias.f32()) && NativeProducts::covers({dinp, dout, inp, w})) {
      return native_->matmul_backward(dinp, dw, dbias, dout, inp, w, N, IN, OUT);
    }
    Backend::matmul_backward(dinp, dw, dbias, dout, inp, w, N, IN, OUT);
  }

  void matmul_residual_layernorm_forward(View residual, View out, View mean, View rstd, CView res, CView inp, CView w,
                                         CView bias, CView ln_w, CView ln_b, int64_t N, int64_t IN, int64_t C,
                                         float eps, Precision p) override {
    if (native_ && NativeProducts::covers({residual, out, res, inp, w, bias, ln_w, ln_b})) {
      return native_->matmul_residual_layernorm_forward(residual, out, mean, rstd, res, inp, w, bias, ln_w, ln_b, N,
                                                        IN, C, eps, p);
    }
    Backend::matmul_residual_layernorm_forward(residual, out, mean, rstd, res, inp, w, bias, ln_w, ln_b, N, IN, C,
                                               eps, p);
  }

  std::string product_kernel() const override {
    if (product_ != Product::kOpenblas) {
      const std::string k = onednn_->kernel(product_ == Product::kOnednnBf16);
      return fmt::format("onednn {} matmul ({})", product_ == Product::kOnednnBf16 ? "bf16" : "fp32",
                         k.empty() ? OnednnGemm::cpu_isa() : k);
    }
    std::string s = fmt::format("openblas sgemm ({} kernels)", blas_kernels().core);
    if (products_.mode == MatmulMode::kFast && products_.storage != Precision::kFp32) {
      s += products_.storage == Precision::kFp16
               ? ": exact, this CPU backend has no native fp16 product"
               : fmt::format(": exact, this CPU has no native bf16 product (oneDNN sees {}; AVX512-BF16 or AMX needed)",
                             OnednnGemm::cpu_isa());
    }
    return s;
  }

  void matmul_forward_f32(float* out, const float* inp, const float* w, const float* bias,
                      int64_t N, int64_t IN, int64_t OUT, bool accumulate) override {
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
      if (accumulate) {
        add_bias_f32(out, out, bias, N, OUT);
      } else {
        add_bias_f32(out, nullptr, bias, N, OUT);
      }
      beta = 1.0f;
    }
    product(false, false, N, OUT, IN, 1.0f, inp, IN, w, OUT, beta, out, OUT);
  }

  void matmul_backward_f32(float* dinp, float* dw, float* dbias, const float* dout,
                       const float* inp, const float* w, int64_t N, int64_t IN,
                       int64_t OUT) override {
    if (dinp) {
      product(false, true, N, IN, OUT, 1.0f, dout, OUT, w, OUT, 0.0f, dinp, IN);
    }
    product(true, false, IN, OUT, N, 1.0f, inp, IN, dout, OUT, 1.0f, dw, OUT);
    if (dbias) {
#pragma omp parallel
      {
        // Named variables, not a structured binding: clang < 16 cannot use one inside an OpenMP region.
        const auto range = chunk(OUT, omp_get_num_threads(), omp_get_thread_num());
        const int64_t c0 = range.first, c1 = range.second;
        for (int64_t r = 0; r < N; ++r) {
          const float* row = dout + r * OUT;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) dbias[c] += row[c];
        }
      }
    }
  }

  void embedding_forward_f32(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t B, int64_t T, int64_t C, int64_t v0, int64_t vrows) override {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < B * T; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - v0;
      const bool mine = row >= 0 && row < vrows;
      const float* e = wte + (mine ? row : 0) * C;
      const float* p = wpe ? wpe + (i % T) * C : nullptr;
      float* o = out + i * C;
      if (mine && p) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
      } else if (mine) {
        std::memcpy(o, e, C * sizeof(float));
      } else if (p) {
        std::memcpy(o, p, C * sizeof(float));
      } else {
        std::memset(o, 0, C * sizeof(float));
      }
    }
  }

  void embedding_backward_f32(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C, int64_t v0, int64_t vrows) override {
    // Each thread owns a slice of the channels, so repeated tokens never race.
#pragma omp parallel
    {
      const auto range = chunk(C, omp_get_num_threads(), omp_get_thread_num());
      const int64_t c0 = range.first, c1 = range.second;
      for (int64_t i = 0; i < B * T; ++i) {
        const float* g = dout + i * C;
        const int64_t row = static_cast<int64_t>(tokens[i]) - v0;
        if (row >= 0 && row < vrows) {
          float* d = dwte + row * C;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
        }
        if (dwpe) {
          float* dp = dwpe + (i % T) * C;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) dp[c] += g[c];
        }
      }
    }
  }

  void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int64_t N, int64_t C, float eps) override {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += x[c];
      float m = s / C;
      float v = 0.0f;
#pragma omp simd reduction(+ : v)
      for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
      float r = 1.0f / std::sqrt(v / C + eps);
      float* o = out + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * r * w[c] + b[c];
      mean[i] = m;
      rstd[i] = r;
    }
  }

  void layernorm_backward_f32(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int64_t N,
                          int64_t C) override {
    int nt = omp_get_max_threads();
    scratch_.resize(static_cast<size_t>(nt) * 2 * C);
    std::fill(scratch_.begin(), scratch_.end(), 0.0f);
#pragma omp parallel
    {
      int tid = omp_get_thread_num();
      float* pdw = scratch_.data() + static_cast<size_t>(tid) * 2 * C;
      float* pdb = pdw + C;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < N; ++i) {
        cpu::layernorm_backward_row(dinp + i * C, pdw, pdb, inp + i * C, dout + i * C, w, mean[i], rstd[i], C);
      }
    }
    for (int t = 0; t < nt; ++t) {
      const float* pdw = scratch_.data() + static_cast<size_t>(t) * 2 * C;
      for (int64_t c = 0; c < C; ++c) {
        dw[c] += pdw[c];
        db[c] += pdw[C + c];
      }
    }
  }

  // On 16-bit operands it reads them in place (layernorm_16.h): no staging arena.
  void layernorm_backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean, CView rstd,
                          int64_t N, int64_t C) override {
    if (dinp.f32() && dw.f32() && db.f32() && dout.f32() && inp.f32() && w.f32() && mean.f32() && rstd.f32()) {
      return Backend::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    }
    ln16_.backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }

  void add_bias_f32(float* out, const float* inp, const float* bias, int64_t N, int64_t C) override {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      float* o = out + i * C;
      if (inp && bias) {
        const float* x = inp + i * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] = x[c] + bias[c];
      } else if (bias) {
        std::memcpy(o, bias, C * sizeof(float));
      } else if (inp != out) {
        std::memcpy(o, inp + i * C, C * sizeof(float));
      }
    }
  }

  void add_f32(float* out, const float* a, const float* b, int64_t n) override {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }

  void gelu_forward_f32(float* out, const float* inp, int64_t n) override { cpu::gelu_tanh_forward(out, inp, n); }

  void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cpu::gelu_tanh_backward(dinp, inp, dout, n);
  }

  // Causal attention per (b, h) with BLAS on row blocks of kBlock queries: block i only
  // multiplies against keys [0, end of block i), which skips most of the masked half.
  static constexpr int64_t kBlock = cpu::kAttBlock;

  void attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override {
    causal_attention_forward(out, att, qkv, nullptr, B, T, C, NH);
  }
  void attention_forward_alibi_f32(float* out, float* att, const float* qkv, const float* slopes, int64_t B, int64_t T,
                                   int64_t C, int64_t NH) override {
    causal_attention_forward(out, att, qkv, slopes, B, T, C, NH);
  }
  // slopes (NH, or null): ALiBi's bias slopes[h] (j - i) added to the scaled scores.
  void causal_attention_forward(float* out, float* att, const float* qkv, const float* slopes, int64_t B, int64_t T,
                                int64_t C, int64_t NH) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + bh * T * T;
      float* o = out + b * T * C + h * hs;
      for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
        const int64_t i1 = std::min(T, i0 + kBlock), rows = i1 - i0;
        // scores[i0:i1, 0:i1] = q[i0:i1] k[0:i1]^T * scale
        att_sgemm(false, true, rows, i1, hs, scale, q + i0 * C3, C3,
                    k, C3, 0.0f, a + i0 * T, T);
        for (int64_t i = i0; i < i1; ++i) {
          if (slopes != nullptr) {
            float* r = a + i * T;
            for (int64_t j = 0; j <= i; ++j) r[j] += slopes[h] * static_cast<float>(j - i);
          }
          cpu::softmax_row(a + i * T, i + 1, T);
        }
        // out[i0:i1] = att[i0:i1, 0:i1] v[0:i1]
        att_sgemm(false, false, rows, hs, i1, 1.0f, a + i0 * T, T, v,
                    C3, 0.0f, o + i0 * C, C);
      }
    }
  }

  void attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    int nt = omp_get_max_threads();
    scratch_.resize(static_cast<size_t>(nt) * kBlock * T);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      float* datt = scratch_.data() + static_cast<size_t>(omp_get_thread_num()) * kBlock * T;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + b * T * C3 + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + bh * T * T;
      const float* dO = dout + b * T * C + h * hs;
      for (int64_t t = 0; t < T; ++t) {
        std::memset(dk + t * C3, 0, hs * sizeof(float));
        std::memset(dv + t * C3, 0, hs * sizeof(float));
      }
      for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
        const int64_t i1 = std::min(T, i0 + kBlock), rows = i1 - i0;
        // dv[0:i1] += att[i0:i1, 0:i1]^T dO[i0:i1]
        att_sgemm(true, false, i1, hs, rows, 1.0f, a + i0 * T, T,
                    dO + i0 * C, C, 1.0f, dv, C3);
        // datt[rows, 0:i1] = dO[i0:i1] v[0:i1]^T
        att_sgemm(false, true, rows, i1, hs, 1.0f, dO + i0 * C, C, v,
                    C3, 0.0f, datt, T);
        // softmax backward: dscore = att * (datt - sum_j att*datt), times the 1/sqrt(hs) scale
        for (int64_t i = i0; i < i1; ++i) cpu::softmax_backward_causal_row(a + i * T, datt + (i - i0) * T, i, i1, scale);
        // dq[i0:i1] = dscore k[0:i1];  dk[0:i1] += dscore^T q[i0:i1]
        att_sgemm(false, false, rows, hs, i1, 1.0f, datt, T, k, C3,
                    0.0f, dq + i0 * C3, C3);
        att_sgemm(true, false, i1, hs, rows, 1.0f, datt, T,
                    q + i0 * C3, C3, 1.0f, dk, C3);
      }
    }
  }

  // Bidirectional attention per (b, h), in the same row blocks as the causal op (the backward's
  // scratch stays kBlock rows of T per thread); every block multiplies against all T keys.
  void bidir_attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                               int64_t NH) override {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + bh * T * T;
      float* o = out + b * T * C + h * hs;
      for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
        const int64_t i1 = std::min(T, i0 + kBlock), rows = i1 - i0;
        // scores[i0:i1, 0:T] = q[i0:i1] k^T * scale
        att_sgemm(false, true, rows, T, hs, scale, q + i0 * C3, C3, k, C3, 0.0f,
                    a + i0 * T, T);
        for (int64_t i = i0; i < i1; ++i) cpu::softmax_row(a + i * T, T, T);
        // out[i0:i1] = att[i0:i1, 0:T] v
        att_sgemm(false, false, rows, hs, T, 1.0f, a + i0 * T, T, v, C3, 0.0f,
                    o + i0 * C, C);
      }
    }
  }

  void bidir_attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                                int64_t T, int64_t C, int64_t NH) override {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    int nt = omp_get_max_threads();
    scratch_.resize(static_cast<size_t>(nt) * kBlock * T);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      float* datt = scratch_.data() + static_cast<size_t>(omp_get_thread_num()) * kBlock * T;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + b * T * C3 + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + bh * T * T;
      const float* dO = dout + b * T * C + h * hs;
      for (int64_t t = 0; t < T; ++t) {
        std::memset(dk + t * C3, 0, hs * sizeof(float));
        std::memset(dv + t * C3, 0, hs * sizeof(float));
      }
      for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
        const int64_t i1 = std::min(T, i0 + kBlock), rows = i1 - i0;
        // dv += att[i0:i1, 0:T]^T dO[i0:i1]
        att_sgemm(true, false, T, hs, rows, 1.0f, a + i0 * T, T, dO + i0 * C, C,
                    1.0f, dv, C3);
        // datt[rows, 0:T] = dO[i0:i1] v^T
        att_sgemm(false, true, rows, T, hs, 1.0f, dO + i0 * C, C, v, C3, 0.0f, datt,
                    T);
        // softmax backward: dscore = att * (datt - sum_j att*datt), times the 1/sqrt(hs) scale
        for (int64_t i = i0; i < i1; ++i) {
          cpu::softmax_backward_row(a + i * T, datt + (i - i0) * T, T, T, scale);
        }
        // dq[i0:i1] = dscore k;  dk += dscore^T q[i0:i1]
        att_sgemm(false, false, rows, hs, T, 1.0f, datt, T, k, C3, 0.0f,
                    dq + i0 * C3, C3);
        att_sgemm(true, false, T, hs, rows, 1.0f, datt, T, q + i0 * C3, C3, 1.0f, dk,
                    C3);
      }
    }
  }

  // Self-attention on 16-bit operands reads them in place (attention_16.h): no staging arena;
  // all-f32 calls run the fp32 kernels above.
  void attention_forward(View o, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) override {
    if (o.f32() && att.f32() && qkv.f32()) return Backend::attention_forward(o, att, qkv, B, T, C, NH);
    att16_.forward(o, att, qkv, B, T, C, NH, true);
  }
  void attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                          int64_t NH) override {
    if (dqkv.f32() && dout.f32() && qkv.f32() && att.f32()) {
      return Backend::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    }
    att16_.backward(dqkv, dout, qkv, att, B, T, C, NH, true);
  }
  void bidir_attention_forward(View o, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) override {
    if (o.f32() && att.f32() && qkv.f32()) return Backend::bidir_attention_forward(o, att, qkv, B, T, C, NH);
    att16_.forward(o, att, qkv, B, T, C, NH, false);
  }
  void bidir_attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                                int64_t NH) override {
    if (dqkv.f32() && dout.f32() && qkv.f32() && att.f32()) {
      return Backend::bidir_attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    }
    att16_.backward(dqkv, dout, qkv, att, B, T, C, NH, false);
  }

  // Indexed rows (graph networks): backend/cpu/indexed_ops.h.
  void gather_rows_f32(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C) override {
    cpu::gather_rows(out, x, idx, M, C);
  }
  void segment_reduce_f32(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets,
                          int64_t S, int64_t C, SegmentOp op, bool accumulate) override {
    cpu::segment_reduce(out, arg, x, perm, offsets, S, C, op, accumulate);
  }
  void segment_broadcast_f32(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S,
                             int64_t C, bool mean, bool accumulate) override {
    cpu::segment_broadcast(dx, dout, perm, offsets, S, C, mean, accumulate);
  }
  void segment_arg_backward_f32(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C) override {
    cpu::segment_arg_backward(dx, dout, arg, S, C);
  }
  void segment_std_f32(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets,
                       int64_t S, int64_t C, float var_floor) override {
    cpu::segment_std(out, x, mean, perm, offsets, S, C, var_floor);
  }
  void segment_std_backward_f32(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                                const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C) override {
    cpu::segment_std_backward(dx, dout, x, mean, std, perm, offsets, S, C);
  }
  void batchnorm_inference_f32(float* out, const float* x, const float* mean, const float* var, const float* w,
                               const float* b, int64_t N, int64_t C, float eps) override {
    cpu::batchnorm_inference(out, x, mean, var, w, b, N, C, eps);
  }
  void batchnorm_forward_f32(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                             int64_t N, int64_t C, float eps) override {
    cpu::batchnorm_forward(out, mean, rstd, x, w, b, N, C, eps);
  }
  void batchnorm_backward_f32(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                              const float* mean, const float* rstd, int64_t N, int64_t C) override {
    cpu::batchnorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
  }

  // Pointwise ops of the graph networks: backend/cpu/pointwise_ops.h.
  void activation_forward_f32(float* out, const float* inp, int64_t n, Activation a) override {
    cpu::activation_forward(out, inp, n, a);
  }
  void activation_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n, Activation a,
                               bool accumulate) override {
    cpu::activation_backward(dinp, inp, dout, n, a, accumulate);
  }
  void mul_f32(float* out, const float* a, const float* b, int64_t n, bool accumulate) override {
    cpu::mul(out, a, b, n, accumulate);
  }
  void scale_rows_f32(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate) override {
    cpu::scale_rows(out, x, s, N, C, accumulate);
  }

  // The decoder variants' ops: backend/cpu/decoder_ops.h.
  void rmsnorm_forward_f32(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                           float eps) override {
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward_f32(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, int64_t N, int64_t C) override {
    cpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  }
  void rope_f32(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads,
                int64_t hd, int64_t rot, bool inverse) override {
    cpu::rope(x, cos, sin, N, T, ld, heads, hd, rot, inverse);
  }
  void swiglu_forward_f32(float* out, const float* pre, int64_t N, int64_t F) override {
    cpu::swiglu_forward(out, pre, N, F);
  }
  void gelu_erf_forward_f32(float* out, const float* inp, int64_t n) override { cpu::gelu_erf_forward(out, inp, n); }
  void gelu_erf_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cpu::gelu_erf_backward(dinp, inp, dout, n);
  }
  void swiglu_backward_f32(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F) override {
    cpu::swiglu_backward(dpre, pre, dout, N, F);
  }
  void expand_kv_f32(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override {
    cpu::expand_kv(qkv, qkvc, N, heads, kv_heads, hd);
  }
  void reduce_kv_f32(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override {
    cpu::reduce_kv(dqkvc, dqkv, N, heads, kv_heads, hd);
  }

  // Query attention: one (n, h) row of S scores at a time, in the att row itself (no scratch).
  void query_attention_forward_f32(float* out, float* att, const float* q, const float* kv, int64_t N, int64_t S,
                               int64_t C, int64_t NH) override {
    const int64_t hs = C / NH, C2 = 2 * C, NC2 = N * C2;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for schedule(static)
    for (int64_t nh = 0; nh < N * NH; ++nh) {
      const int64_t n = nh / NH, h = nh % NH;
      const float* qh = q + h * hs;
      const float* kn = kv + n * C2 + h * hs;  // key of token s: kn + s * NC2; value: + C
      float* a = att + nh * S;
      float mx = -INFINITY;
      for (int64_t s = 0; s < S; ++s) {
        const float* ks = kn + s * NC2;
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int64_t i = 0; i < hs; ++i) d += qh[i] * ks[i];
        a[s] = d * scale;
        mx = std::max(mx, a[s]);
      }
      const float sum = cpu::exp_shifted_sum(a, S, mx);
      const float inv = 1.0f / sum;
      for (int64_t s = 0; s < S; ++s) a[s] *= inv;
      float* o = out + n * C + h * hs;
      std::fill(o, o + hs, 0.0f);
      for (int64_t s = 0; s < S; ++s) {
        const float as = a[s];
        const float* vs = kn + s * NC2 + C;
#pragma omp simd
        for (int64_t i = 0; i < hs; ++i) o[i] += as * vs[i];
      }
    }
  }

  // dq sums over the positions through per-thread partials (static schedule, added in thread
  // order: deterministic for a given thread count).
  void query_attention_backward_f32(float* dq, float* dkv, const float* dout, const float* q, const float* kv,
                                const float* att, int64_t N, int64_t S, int64_t C, int64_t NH) override {
    const int64_t hs = C / NH, C2 = 2 * C, NC2 = N * C2;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const int nt = omp_get_max_threads();
    // per thread: C floats of dq partial, then S floats of dscore
    const size_t per = static_cast<size_t>(C + S);
    scratch_.assign(static_cast<size_t>(nt) * per, 0.0f);
#pragma omp parallel
    {
      float* pdq = scratch_.data() + static_cast<size_t>(omp_get_thread_num()) * per;
      float* dz = pdq + C;
#pragma omp for schedule(static)
      for (int64_t nh = 0; nh < N * NH; ++nh) {
        const int64_t n = nh / NH, h = nh % NH;
        const float* qh = q + h * hs;
        const float* kn = kv + n * C2 + h * hs;
        float* dkn = dkv + n * C2 + h * hs;
        const float* a = att + nh * S;
        const float* g = dout + n * C + h * hs;
        // datt_s = dout . v_s;  dscore_s = a_s (datt_s - sum_j a_j datt_j) * scale
        float dot = 0.0f;
        for (int64_t s = 0; s < S; ++s) {
          const float* vs = kn + s * NC2 + C;
          float d = 0.0f;
#pragma omp simd reduction(+ : d)
          for (int64_t i = 0; i < hs; ++i) d += g[i] * vs[i];
          dz[s] = d;
          dot += a[s] * d;
        }
        float* pq = pdq + h * hs;
        for (int64_t s = 0; s < S; ++s) {
          const float z = a[s] * (dz[s] - dot) * scale, as = a[s];
          const float* ks = kn + s * NC2;
          float* dks = dkn + s * NC2;
          float* dvs = dks + C;
#pragma omp simd
          for (int64_t i = 0; i < hs; ++i) {
            dks[i] = z * qh[i];
            dvs[i] = as * g[i];
            pq[i] += z * ks[i];
          }
        }
      }
    }
    for (int t = 0; t < nt; ++t) {
      const float* pdq = scratch_.data() + static_cast<size_t>(t) * per;
      for (int64_t c = 0; c < C; ++c) dq[c] += pdq[c];
    }
  }

  void weighted_mse_f32(float* row_loss, float* grad, const float* pred, const float* target, const float* w, int64_t R,
                    int64_t K, float dloss) override {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const float* p = pred + r * K;
      const float* t = target + r * K;
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < K; ++k) {
        const double d = static_cast<double>(p[k]) - static_cast<double>(t[k]);
        s += static_cast<double>(w[k]) * d * d;
      }
      row_loss[r] = static_cast<float>(s);
      if (grad) {
        float* gr = grad + r * K;  // may alias p: each element is read before it is written
        const float c = 2.0f * dloss;
#pragma omp simd
        for (int64_t k = 0; k < K; ++k) gr[k] = c * w[k] * (p[k] - t[k]);
      }
    }
  }

  void softmax_cross_entropy_f32(float* logits, float* losses, const int32_t* targets, int64_t N,
                             int64_t V, int64_t Vp, float dloss) override {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      float* r = logits + i * Vp;
      const float mx = cpu::row_max(r, V);
      const float target_logit = r[targets[i]];
      float s = 0.0f;
      if (dloss != 0.0f) {
        s = cpu::exp_shifted_sum(r, V, mx);
        const float k = dloss / s;
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) r[j] *= k;
        r[targets[i]] -= dloss;
        for (int64_t j = V; j < Vp; ++j) r[j] = 0.0f;
      } else {
        s = cpu::sum_exp_shifted(r, V, mx);
      }
      losses[i] = std::log(s) + mx - target_logit;
    }
  }

  void ce_row_max_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, float* max) override {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      max[i] = cpu::row_max(logits + i * ld, cols);
    }
  }

  void ce_row_sumexp_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const float* max,
                     float* sum) override {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* r = logits + i * ld;
      sum[i] = cpu::sum_exp_shifted(r, cols, max[i]);
    }
  }

  void ce_target_logit_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets,
                       int64_t v0, float* tl) override {
    for (int64_t i = 0; i < N; ++i) {
      const int64_t j = static_cast<int64_t>(targets[i]) - v0;
      tl[i] = (j >= 0 && j < cols) ? logits[i * ld + j] : 0.0f;
    }
  }

  void ce_loss_f32(float* losses, const float* max, const float* sum, const float* tl, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) losses[i] = std::log(sum[i]) + max[i] - tl[i];
  }

  void ce_grad_f32(float* logits, int64_t N, int64_t ld, int64_t cols, const float* max, const float* sum,
               const int32_t* targets, int64_t v0, float dloss) override {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      float* r = logits + i * ld;
      cpu::exp_shifted_scaled(r, cols, max[i], dloss / sum[i]);
      for (int64_t j = cols; j < ld; ++j) r[j] = 0.0f;
      const int64_t t = static_cast<int64_t>(targets[i]) - v0;
      if (t >= 0 && t < cols) r[t] -= dloss;
    }
  }

  void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, int64_t t, float grad_scale) override {
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
    const float step = static_cast<float>(lr / bc1);
    const float rbc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float gi = g[i] * grad_scale;
      float mi = beta1 * m[i] + (1.0f - beta1) * gi;
      float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step * mi / (std::sqrt(vi) * rbc2 + eps);
    }
  }

  double sum_squares(const float* x, int64_t n) override {
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return s;
  }

  void round_to(float* x, int64_t n, Precision p) override {
    if (p == Precision::kBf16) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
    } else if (p == Precision::kFp16) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) x[i] = round_fp16(x[i]);
    }
  }

  void scale(float* x, float s, int64_t n) override {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }

  // Block quantization: the reference itself, on the device memory (host memory here).
  void quantize_blocks(void* wire, const float* x, int64_t n, const QuantSpec& q, float* residual) override {
    quantize_blocks_ref(static_cast<uint8_t*>(wire), x, n, q, residual);
  }
  void dequantize_blocks(float* out, const void* wire, int64_t n, const QuantSpec& q, bool accumulate) override {
    dequantize_blocks_ref(out, static_cast<const uint8_t*>(wire), n, q, accumulate);
  }
  // 16-bit casts (the wires' codecs and the typed ops' staging): the reference's bits, by
  // backend/cpu/rows_16.h's conversions in parallel chunks.
  void encode_16(void* wire, const float* x, int64_t n, DType dt) override {
    if (dt != DType::kBF16 && dt != DType::kF16) return cast_to_16_ref(static_cast<uint16_t*>(wire), x, n, dt);  // InputError
    cpu::in_chunks(n, [&](int64_t first, int64_t m) { cpu::narrow(wire, dt, first, x + first, m); });
  }
  void decode_16(float* out, const void* wire, int64_t n, DType dt, bool accumulate) override {
    if (dt != DType::kBF16 && dt != DType::kF16) {
      return cast_from_16_ref(out, static_cast<const uint16_t*>(wire), n, dt, accumulate);  // InputError
    }
    cpu::in_chunks(n, [&](int64_t first, int64_t m) { cpu::widen(out + first, wire, dt, first, m, accumulate); });
  }

 private:
  // Which library computes the model's products (set_products).
  enum class Product { kOpenblas, kOnednnF32, kOnednnBf16 };
  // C (M,N) = alpha op(A) op(B) + beta C through the chosen library (row-major).
  void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    if (product_ == Product::kOpenblas || M == 0 || N == 0 || K == 0) {
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                  lda, B, ldb, beta, C, ldc);
      return;
    }
    onednn_->gemm(product_ == Product::kOnednnBf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  // The fp32 products inside attention (attention_products.h): the run's fp32 kernel.
  void att_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) const {
    cpu::attention_sgemm(att_gemm_, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  Product product_ = Product::kOpenblas;
  cpu::AttentionGemm att_gemm_ = cpu::AttentionGemm::kOpenblas;
  std::unique_ptr<OnednnGemm> onednn_;  // made when a product needs it
  std::unique_ptr<NativeProducts> native_;  // the typed products with native bf16 (product_ kOnednnBf16)
  std::vector<float> scratch_;
  cpu::Attention16 att16_;
  cpu::LayerNorm16 ln16_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace weft
