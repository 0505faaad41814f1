#include "backend/cpu/onednn_gemm.h"

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

// Primitives kept per shape at most: a graph network's products change their row count with every
// micro-batch, so an unbounded cache would grow by one JIT-compiled kernel per batch; past the
// bound it starts afresh (a shape's primitive is made again the same way: the same results).
constexpr size_t kMaxCachedPrimitives = 512;

struct OnednnGemm::Impl {
  using Key = std::tuple<bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c;
  };
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<Key, Entry> cache;
  // The native products: (trans a, trans b, M, N, K, lda, ldb, ldc, alpha, beta, C bf16, bias: 0 none, 1 f32, 2 bf16).
  using NativeKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, bool, int>;
  struct NativeEntry {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c, bias;
  };
  std::map<NativeKey, NativeEntry> native;
  std::string last_kernel[2];
  std::vector<uint16_t> a16, b16;

  Entry& entry(const Key& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    const auto [bf16, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = k;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    // bf16 operands are converted into dense scratch: their row strides are their widths.
    Entry e;
    e.a = operand(M, K, ta, bf16 ? (ta ? M : K) : lda, in);
    e.b = operand(K, N, tb, bf16 ? (tb ? K : N) : ldb, in);
    e.c = dnnl::memory::desc({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
    const dnnl::primitive_attr attr = scale_and_sum(alpha, beta);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), attr, eng);
      last_kernel[bf16] = pd.impl_info_str();
      e.prim = dnnl::matmul(pd);
    } catch (const dnnl::error& err) {
      throw_runtime("oneDNN has no {} matmul for {}x{} @ {}x{} (trans {} {}): {}", bf16 ? "bf16" : "fp32", M, K, K,
                    N, ta, tb, err.what());
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
  Impl& s = *impl_;
  Impl::Entry& e = s.entry({bf16, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta});
  void* a = const_cast<float*>(A);
  void* b = const_cast<float*>(B);
  if (bf16) {
    s.a16.resize(static_cast<size_t>(M * K));
    s.b16.resize(static_cast<size_t>(K * N));
    // Stored shapes: A is M x K (K x M when transposed), B is K x N (N x K).
    convert_rows(s.a16.data(), A, trans_a ? K : M, trans_a ? M : K, lda);
    convert_rows(s.b16.data(), B, trans_b ? N : K, trans_b ? K : N, ldb);
    a = s.a16.data();
    b = s.b16.data();
  }
  dnnl::memory am(e.a, s.eng, a), bm(e.b, s.eng, b), cm(e.c, s.eng, C);
  e.prim.execute(s.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  s.strm.wait();
}

std::string OnednnGemm::kernel(bool bf16) const { return impl_->last_kernel[bf16]; }

bool OnednnGemm::native_bf16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
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
