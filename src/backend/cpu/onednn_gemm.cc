#include "backend/cpu/onednn_gemm.h"

#include <fmt/format.h>

#include <bit>
#include <oneapi/dnnl/dnnl.hpp>
#include <map>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace weft {

namespace {

using dt = dnnl::memory::data_type;

// fp32 -> bf16, round to nearest even, NaN stays NaN (quiet): core/precision.h's f32_to_bf16,
// inline so that the conversion loop vectorises.
inline uint16_t to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t nan = (x >> 16) | 0x40u;
  const uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

// rows x cols stored with row stride ld -> dense rows x cols of bf16.
void convert_rows(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* d = dst + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) d[c] = to_bf16(s[c]);
  }
}

// The memory descriptor of op(X) (rows x cols as the product reads it) stored row-major with
// row stride ld: X itself, or X^T (stored cols x rows).
dnnl::memory::desc operand(int64_t rows, int64_t cols, bool trans, int64_t ld, dt type) {
  const dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

// alpha scales the product; beta != 0 adds beta times C's old values (the sum post-op).
dnnl::primitive_attr scale_and_sum(float alpha, float beta) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  return attr;
}

}  // namespace

// Primitives kept per shape at most (the bf16 products, which a model calls with its own fixed
// shapes); past the bound the cache starts afresh (a primitive is made again the same way: the
// same results).
constexpr size_t kMaxCachedPrimitives = 512;

// The fp32 products use one primitive per transposition, alpha and beta, with every dimension and
// stride given at run time (DNNL_RUNTIME_DIM_VAL): a graph network's products change their row
// count with every micro-batch, and a primitive made per shape cost a JIT compilation (0.1-0.3
// ms) each time. Such a primitive computes the same bits for the same shape on every call,
// whatever the thread count and the operands' alignment (measured for oneDNN 2.6's gemm:jit;
// products_test.cc checks the guarded backend's buffers against the cpu backend's). The bf16
// products keep a primitive per shape: oneDNN's run-time bf16 kernel gave other bits for other
// buffers.
struct OnednnGemm::Impl {
  using RuntimeKey = std::tuple<bool, bool, float, float>;  // trans a, trans b, alpha, beta
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c;
  };
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<RuntimeKey, dnnl::matmul> runtime;
  std::map<Key, Entry> cache;  // bf16, per shape
  // The native products: (trans a, trans b, M, N, K, lda, ldb, ldc, alpha, beta, C bf16, bias: 0 none, 1 f32, 2 bf16).
  using NativeKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, bool, int>;
  struct NativeEntry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c, bias;
  };
  std::map<NativeKey, NativeEntry> native;
  std::string last_kernel[2];
  std::vector<uint16_t> a16, b16;

  dnnl::matmul& runtime_entry(const RuntimeKey& k) {
    auto it = runtime.find(k);
    if (it != runtime.end()) return it->second;
    const auto [ta, tb, alpha, beta] = k;
    const int64_t R = DNNL_RUNTIME_DIM_VAL;
    const dnnl::memory::desc a({R, R}, dt::f32, ta ? dnnl::memory::dims{1, R} : dnnl::memory::dims{R, 1});
    const dnnl::memory::desc b({R, R}, dt::f32, tb ? dnnl::memory::dims{1, R} : dnnl::memory::dims{R, 1});
    const dnnl::memory::desc c({R, R}, dt::f32, dnnl::memory::dims{R, 1});
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), scale_and_sum(alpha, beta), eng);
      last_kernel[0] = pd.impl_info_str();
      return runtime.emplace(k, dnnl::matmul(pd)).first->second;
    } catch (const dnnl::error& err) {
      throw_runtime("oneDNN has no fp32 matmul with run-time shapes (trans {} {}): {}", ta, tb, err.what());
    }
  }

  // A bf16 product's primitive: its operands are converted into dense scratch, so their row
  // strides are their widths.
  Entry& entry(const Key& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    const auto [ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = k;
    Entry e;
    e.a = operand(M, K, ta, ta ? M : K, dt::bf16);
    e.b = operand(K, N, tb, tb ? K : N, dt::bf16);
    e.c = dnnl::memory::desc({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), scale_and_sum(alpha, beta), eng);
      last_kernel[1] = pd.impl_info_str();
      e.prim = dnnl::matmul(pd);
    } catch (const dnnl::error& err) {
      throw_runtime("oneDNN has no bf16 matmul for {}x{} @ {}x{} (trans {} {}): {}", M, K, K, N, ta, tb, err.what());
    }
    if (cache.size() >= kMaxCachedPrimitives) cache.clear();
    return cache.emplace(k, std::move(e)).first->second;
  }
};

OnednnGemm::OnednnGemm() : impl_(std::make_unique<Impl>()) {}

void OnednnGemm::to_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  convert_rows(dst, src, rows, cols, ld);
}

void OnednnGemm::gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, const void* bias,
                           bool bias_bf16, float beta, void* C, bool c_bf16, int64_t ldc) {
  Impl& s = *impl_;
  const int bias_kind = bias == nullptr ? 0 : bias_bf16 ? 2 : 1;
  const Impl::NativeKey key{trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta, c_bf16, bias_kind};
  auto it = s.native.find(key);
  if (it == s.native.end()) {
    Impl::NativeEntry e;
    e.a = operand(M, K, trans_a, lda, dt::bf16);
    e.b = operand(K, N, trans_b, ldb, dt::bf16);
    e.c = dnnl::memory::desc({M, N}, c_bf16 ? dt::bf16 : dt::f32, dnnl::memory::dims{ldc, 1});
    if (bias_kind > 0) e.bias = dnnl::memory::desc({1, N}, bias_kind == 2 ? dt::bf16 : dt::f32, dnnl::memory::dims{N, 1});
    const dnnl::primitive_attr attr = scale_and_sum(alpha, beta);
    try {
      const dnnl::matmul::desc d = bias_kind > 0 ? dnnl::matmul::desc(e.a, e.b, e.bias, e.c) : dnnl::matmul::desc(e.a, e.b, e.c);
      dnnl::matmul::primitive_desc pd(d, attr, s.eng);
      s.last_kernel[1] = pd.impl_info_str();
      e.prim = dnnl::matmul(pd);
    } catch (const dnnl::error& err) {
      throw_runtime("oneDNN has no bf16 matmul for {}x{} @ {}x{} (trans {} {}, {} output): {}", M, K, K, N, trans_a,
                    trans_b, c_bf16 ? "bf16" : "fp32", err.what());
    }
    if (s.native.size() >= kMaxCachedPrimitives) s.native.clear();
    it = s.native.emplace(key, std::move(e)).first;
  }
  Impl::NativeEntry& e = it->second;
  dnnl::memory am(e.a, s.eng, const_cast<uint16_t*>(A)), bm(e.b, s.eng, const_cast<uint16_t*>(B)), cm(e.c, s.eng, C);
  if (bias_kind > 0) {
    dnnl::memory biasm(e.bias, s.eng, const_cast<void*>(bias));
    e.prim.execute(s.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, cm}});
  } else {
    e.prim.execute(s.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  }
  s.strm.wait();
}
OnednnGemm::~OnednnGemm() = default;

void OnednnGemm::gemm(bool bf16, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum: C = beta C
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  Impl& s = *impl_;
  if (!bf16) {
    dnnl::matmul& prim = s.runtime_entry({trans_a, trans_b, alpha, beta});
    dnnl::memory am(operand(M, K, trans_a, lda, dt::f32), s.eng, const_cast<float*>(A)),
        bm(operand(K, N, trans_b, ldb, dt::f32), s.eng, const_cast<float*>(B)),
        cm(dnnl::memory::desc({M, N}, dt::f32, dnnl::memory::dims{ldc, 1}), s.eng, C);
    prim.execute(s.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    s.strm.wait();
    return;
  }
  Impl::Entry& e = s.entry({trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta});
  s.a16.resize(static_cast<size_t>(M * K));
  s.b16.resize(static_cast<size_t>(K * N));
  // Stored shapes: A is M x K (K x M when transposed), B is K x N (N x K).
  convert_rows(s.a16.data(), A, trans_a ? K : M, trans_a ? M : K, lda);
  convert_rows(s.b16.data(), B, trans_b ? N : K, trans_b ? K : N, ldb);
  dnnl::memory am(e.a, s.eng, s.a16.data()), bm(e.b, s.eng, s.b16.data()), cm(e.c, s.eng, C);
  e.prim.execute(s.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  s.strm.wait();
}

std::string OnednnGemm::kernel(bool bf16) const { return impl_->last_kernel[bf16]; }

bool OnednnGemm::native_bf16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

std::string OnednnGemm::version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string OnednnGemm::cpu_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace weft
