// The model's matrix products under Backend::set_products (core/precision.h ProductSettings):
// the exact mode is the reference's product bit for bit whatever the storage; the cpu backend's
// oneDNN fp32 product and its native bf16 product (MatmulMode::kFast on a CPU with AVX512-BF16
// or AMX) match OpenBLAS's within float tolerance on matmul_forward / matmul_backward (bias,
// accumulation, the weight gradient's +=); without a native bf16 product the fast mode says so
// and stays exact; cpu-guarded gives cpu's bits in every mode; unknown names are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/onednn_gemm.h"
#include "backend/device_buffer.h"
#include "backend_test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/precision.h"

namespace weft {
namespace {

using test::randn;
using test::rel_l2;
using Vec = std::vector<float>;

// One layer's forward (with bias, then accumulated into) and backward (dinp, dw += , dbias +=)
// of inputs rounded to `storage`, on a backend with the given products.
struct LayerResult {
  Vec out, acc, dinp, dw, db;
};

struct Shape {
  int64_t N, IN, OUT;
};

Vec rounded(Vec v, Precision p) {
  for (float& x : v) x = round_to(p, x);
  return v;
}

LayerResult run_layer(Backend& be, const Shape& s, Precision storage, bool round_inputs = true) {
  const auto in = [&](size_t n, uint32_t seed) { return round_inputs ? rounded(randn(n, seed), storage) : randn(n, seed); };
  const Vec x = in(s.N * s.IN, 1), w = in(s.IN * s.OUT, 2), b = in(s.OUT, 3), dout = in(s.N * s.OUT, 4);
  DeviceBuffer X = to_device(be, x, DType::kF32), W = to_device(be, w, DType::kF32), B = to_device(be, b, DType::kF32),
               D = to_device(be, dout, DType::kF32);
  DeviceBuffer out(be, DType::kF32, s.N * s.OUT), acc = to_device(be, randn(s.N * s.OUT, 5), DType::kF32),
      dinp(be, DType::kF32, s.N * s.IN), dw = to_device(be, randn(s.IN * s.OUT, 6), DType::kF32),
      db = to_device(be, randn(s.OUT, 7), DType::kF32);
  be.matmul_forward(out.data<float>(), X.data<float>(), W.data<float>(), B.data<float>(), s.N, s.IN, s.OUT, false);
  be.matmul_forward(acc.data<float>(), X.data<float>(), W.data<float>(), nullptr, s.N, s.IN, s.OUT, true);
  be.matmul_backward(dinp.data<float>(), dw.data<float>(), db.data<float>(), D.data<float>(), X.data<float>(),
                     W.data<float>(), s.N, s.IN, s.OUT);
  be.synchronize();
  return {out.download<float>(), acc.download<float>(), dinp.download<float>(), dw.download<float>(),
          db.download<float>()};
}

LayerResult run_layer(const std::string& backend, const ProductSettings& ps, const Shape& s, bool round_inputs = true) {
  auto be = test::make_test_backend(backend);
  be->set_products(ps);
  return run_layer(*be, s, ps.storage, round_inputs);
}

void expect_bitwise(const LayerResult& a, const LayerResult& b, const std::string& what) {
  EXPECT_EQ(a.out, b.out) << what;
  EXPECT_EQ(a.acc, b.acc) << what;
  EXPECT_EQ(a.dinp, b.dinp) << what;
  EXPECT_EQ(a.dw, b.dw) << what;
  EXPECT_EQ(a.db, b.db) << what;
}

// The worst normalised error of any output against the reference's.
double worst_error(const LayerResult& a, const LayerResult& ref) {
  double e = 0;
  const auto one = [&](const Vec& x, const Vec& r) { e = std::max(e, rel_l2(x.data(), r.data(), static_cast<int64_t>(r.size()))); };
  one(a.out, ref.out);
  one(a.acc, ref.acc);
  one(a.dinp, ref.dinp);
  one(a.dw, ref.dw);
  one(a.db, ref.db);
  return e;
}

// Odd sizes (no multiple of a vector width) and a GPT-like block.
const Shape kShapes[] = {{37, 19, 23}, {64, 96, 288}, {256, 128, 512}};

TEST(Products, ExactModeIsTheReferenceProductOnEveryStorage) {
  for (const Shape& s : kShapes) {
    for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      const LayerResult ref = run_layer("cpu", {p, MatmulMode::kExact, ""}, s);
      auto plain = make_cpu_backend();  // never set: the reference as it was
      expect_bitwise(run_layer(*plain, s, p), ref, precision_name(p));
      expect_bitwise(run_layer("cpu", {p, MatmulMode::kExact, "openblas"}, s), ref, "openblas named");
      // An fp32 run computes the same in the fast mode (there is no 16-bit operand).
      if (p == Precision::kFp32) expect_bitwise(run_layer("cpu", {p, MatmulMode::kFast, ""}, s), ref, "fp32 fast");
      // fp16: the cpu backend has no native fp16 product; fast stays exact.
      if (p == Precision::kFp16) expect_bitwise(run_layer("cpu", {p, MatmulMode::kFast, ""}, s), ref, "fp16 fast");
    }
  }
  auto be = make_cpu_backend();
  be->set_products({Precision::kFp16, MatmulMode::kFast, ""});
  EXPECT_NE(be->product_kernel().find("no native fp16 product"), std::string::npos) << be->product_kernel();
}

TEST(Products, OnednnFp32MatchesOpenblas) {
  double worst = 0;
  for (const Shape& s : kShapes) {
    const LayerResult ref = run_layer("cpu", {}, s);
    const LayerResult d = run_layer("cpu", {Precision::kFp32, MatmulMode::kExact, "onednn"}, s);
    worst = std::max(worst, worst_error(d, ref));
    EXPECT_EQ(d.db, ref.db);  // the bias gradient is the backend's own loop either way
  }
  EXPECT_LT(worst, 1e-6);
  std::printf("oneDNN fp32 vs OpenBLAS sgemm: worst normalised error %.3g\n", worst);
  auto be = make_cpu_backend();
  be->set_products({Precision::kFp32, MatmulMode::kExact, "onednn"});
  run_layer(*be, kShapes[0], Precision::kFp32);
  EXPECT_NE(be->product_kernel().find("onednn fp32 matmul"), std::string::npos) << be->product_kernel();
}

// Attention's own products (the scores, the weighted sums, their gradients) follow the fp32
// kernel too (backend/cpu/attention_products.h): oneDNN's within float tolerance of OpenBLAS's,
// causal and bidirectional, fp32 and 16-bit (bf16: widened into the per-thread scratch) tensors;
// the default is OpenBLAS's bits.
TEST(Products, AttentionFollowsTheFp32Kernel) {
  const int64_t B = 2, T = 70, C = 48, NH = 3;  // T: two blocks, the second partial
  struct Out {
    Vec out, att, dqkv;
  };
  const auto run = [&](const std::string& kernel, DType dt, bool causal) {
    auto be = make_cpu_backend();
    if (!kernel.empty()) be->set_products({dt == DType::kF32 ? Precision::kFp32 : Precision::kBf16, MatmulMode::kExact, kernel});
    const Vec qkv = rounded(randn(B * T * 3 * C, 11), Precision::kBf16), dout = rounded(randn(B * T * C, 12), Precision::kBf16);
    // The inputs in dt (the bf16-rounded values: exact in both), the outputs widened back.
    const auto up = [&](const Vec& v) {
      if (dt == DType::kF32) return to_device(*be, v, dt);
      std::vector<bf16> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_bf16(v[i]);
      return to_device(*be, h, dt);
    };
    const auto down = [&](const DeviceBuffer& d) {
      if (dt == DType::kF32) return d.download<float>();
      const std::vector<bf16> h = d.download<bf16>();
      Vec f(h.size());
      for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_float(h[i]);
      return f;
    };
    DeviceBuffer Q = up(qkv), D = up(dout);
    DeviceBuffer out(*be, dt, B * T * C), att(*be, dt, B * NH * T * T), dqkv(*be, dt, B * T * 3 * C);
    if (causal) {
      be->attention_forward(View(out.raw(), dt), View(att.raw(), dt), CView(Q.raw(), dt), B, T, C, NH);
      be->attention_backward(View(dqkv.raw(), dt), CView(D.raw(), dt), CView(Q.raw(), dt), CView(att.raw(), dt), B, T, C, NH);
    } else {
      be->bidir_attention_forward(View(out.raw(), dt), View(att.raw(), dt), CView(Q.raw(), dt), B, T, C, NH);
      be->bidir_attention_backward(View(dqkv.raw(), dt), CView(D.raw(), dt), CView(Q.raw(), dt), CView(att.raw(), dt), B, T, C,
                                   NH);
    }
    be->synchronize();
    return Out{down(out), down(att), down(dqkv)};
  };
  double worst = 0;
  for (const DType dt : {DType::kF32, DType::kBF16}) {
    for (const bool causal : {true, false}) {
      const Out ref = run("", dt, causal), named = run("openblas", dt, causal), d = run("onednn", dt, causal);
      EXPECT_EQ(named.out, ref.out);
      EXPECT_EQ(named.dqkv, ref.dqkv);
      for (const auto& [x, r] : {std::pair{&d.out, &ref.out}, {&d.att, &ref.att}, {&d.dqkv, &ref.dqkv}}) {
        worst = std::max(worst, rel_l2(x->data(), r->data(), static_cast<int64_t>(r->size())));
      }
    }
  }
  // bf16 outputs: one rounding of a value that differs in its last fp32 bits, at most 2^-8.
  EXPECT_LT(worst, 5e-3);
  EXPECT_GT(worst, 0.0);  // another summation order: oneDNN computed them
  std::printf("attention on oneDNN fp32 vs OpenBLAS sgemm: worst normalised error %.3g\n", worst);
}

TEST(Products, FastBf16IsTheNativeProductWithinFloatTolerance) {
  auto be = make_cpu_backend();
  be->set_products({Precision::kBf16, MatmulMode::kFast, ""});
  const std::string kernel = be->product_kernel();
  std::printf("bf16 fast product on this CPU (oneDNN ISA %s): %s\n", OnednnGemm::cpu_isa().c_str(), kernel.c_str());
  for (const Shape& s : kShapes) {
    const LayerResult ref = run_layer("cpu", {Precision::kBf16, MatmulMode::kExact, ""}, s);
    const LayerResult fast = run_layer("cpu", {Precision::kBf16, MatmulMode::kFast, ""}, s);
    if (!OnednnGemm::native_bf16()) {
      // No native product: the fast mode is the exact one, and says why.
      expect_bitwise(fast, ref, "fast without native bf16");
      EXPECT_NE(kernel.find("no native bf16 product"), std::string::npos) << kernel;
      continue;
    }
    EXPECT_NE(kernel.find("onednn bf16 matmul"), std::string::npos) << kernel;
    // The same exact bf16 x bf16 terms summed in fp32 in another order.
    const double e = worst_error(fast, ref);
    EXPECT_LT(e, 1e-5) << s.N << "x" << s.IN << "x" << s.OUT;
    // Inputs that are not bf16 values are rounded first: the product of the rounded inputs.
    const LayerResult raw = run_layer("cpu", {Precision::kBf16, MatmulMode::kFast, ""}, s, /*round_inputs=*/false);
    const LayerResult raw_exact = run_layer("cpu", {Precision::kFp32, MatmulMode::kExact, ""}, s, false);
    EXPECT_LT(worst_error(raw, raw_exact), 2e-2);
    EXPECT_GT(worst_error(raw, raw_exact), 1e-5);  // the rounding does happen
    std::printf("%ldx%ldx%ld: bf16 fast vs exact %.3g\n", static_cast<long>(s.N), static_cast<long>(s.IN),
                static_cast<long>(s.OUT), e);
  }
}

// bf16 tensors as stored: the native product reads them in place (nothing staged) and writes a
// bf16 output directly; an f32 operand (the residual stream's gradient) is rounded to bf16 a
// chunk at a time in the arena, exactly native_product_staging's elements. Against the exact
// product of the same bf16 values (staged, OpenBLAS): float tolerance.
struct TypedLayer {
  Vec out, dinp, dw, db;
  int64_t staged = 0;  // the most one call staged (fp32 elements)
};

std::vector<uint16_t> bf16s(const Vec& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return h;
}
Vec widen(const std::vector<uint16_t>& h) {
  Vec v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_to_f32(h[i]);
  return v;
}

TypedLayer run_typed(MatmulMode mode, const Shape& s, bool f32_dout, int64_t chunk) {
  auto be = make_cpu_backend();
  be->set_products({Precision::kBf16, mode, ""});
  be->set_staging_chunk(chunk);
  DeviceBuffer X = to_device(*be, bf16s(randn(s.N * s.IN, 1)), DType::kBF16);
  DeviceBuffer W = to_device(*be, bf16s(randn(s.IN * s.OUT, 2)), DType::kBF16);
  DeviceBuffer Bi = to_device(*be, bf16s(randn(s.OUT, 3)), DType::kBF16);
  const Vec d = randn(s.N * s.OUT, 4);
  DeviceBuffer D = f32_dout ? to_device(*be, d, DType::kF32) : to_device(*be, bf16s(d), DType::kBF16);
  DeviceBuffer out(*be, DType::kBF16, s.N * s.OUT), dinp(*be, DType::kBF16, s.N * s.IN);
  DeviceBuffer dw = to_device(*be, randn(s.IN * s.OUT, 6), DType::kF32), db = to_device(*be, randn(s.OUT, 7), DType::kF32);
  const CView x(X.raw(), DType::kBF16), w(W.raw(), DType::kBF16), b(Bi.raw(), DType::kBF16);
  const CView dout(D.raw(), f32_dout ? DType::kF32 : DType::kBF16);
  be->matmul_forward(View(out.raw(), DType::kBF16), x, w, b, s.N, s.IN, s.OUT, false);
  be->matmul_backward(View(dinp.raw(), DType::kBF16), dw.data<float>(), db.data<float>(), dout, x, w, s.N, s.IN, s.OUT);
  be->synchronize();
  return {widen(out.download<uint16_t>()), widen(dinp.download<uint16_t>()), dw.download<float>(),
          db.download<float>(), be->staging_high_water()};
}

TEST(Products, NativeBf16ReadsStoredTensorsInPlace) {
  // The native product needs AVX512-BF16 or AMX. On another CPU the fast mode is the exact one:
  // the backend says it has no native product and gives the exact bits, staging as exact does.
  auto probe = make_cpu_backend();
  probe->set_products({Precision::kBf16, MatmulMode::kFast, ""});
  EXPECT_EQ(probe->native_16bit_products(), OnednnGemm::native_bf16());
  if (!OnednnGemm::native_bf16()) {
    for (const Shape& s : kShapes) {
      const TypedLayer ref = run_typed(MatmulMode::kExact, s, true, kStagingChunk);
      const TypedLayer fast = run_typed(MatmulMode::kFast, s, true, kStagingChunk);
      EXPECT_EQ(fast.out, ref.out);
      EXPECT_EQ(fast.dinp, ref.dinp);
      EXPECT_EQ(fast.dw, ref.dw);
      EXPECT_EQ(fast.db, ref.db);
      EXPECT_EQ(fast.staged, ref.staged);
    }
    return;
  }
  for (const Shape& s : kShapes) {
    for (bool f32_dout : {false, true}) {
      for (int64_t chunk : {kStagingChunk, int64_t{100}}) {
        SCOPED_TRACE(fmt::format("{}x{}x{} f32 dout {} chunk {}", s.N, s.IN, s.OUT, f32_dout, chunk));
        const TypedLayer ref = run_typed(MatmulMode::kExact, s, f32_dout, chunk);
        const TypedLayer fast = run_typed(MatmulMode::kFast, s, f32_dout, chunk);
        const auto err = [](const Vec& a, const Vec& r) { return rel_l2(a.data(), r.data(), static_cast<int64_t>(r.size())); };
        EXPECT_LT(err(fast.out, ref.out), 4e-3);  // one bf16 rounding of the outputs apart at most
        EXPECT_LT(err(fast.dinp, ref.dinp), 4e-3);
        // An f32 dout is rounded to bf16 by the native product only.
        EXPECT_LT(err(fast.dw, ref.dw), f32_dout ? 4e-3 : 1e-5);
        EXPECT_LT(err(fast.db, ref.db), 1e-5);
        // Nothing staged but the bf16 copies of the f32 dout, by the chunks the description counts.
        const int64_t expect = f32_dout ? std::max(native_product_staging(s.N, s.IN, s.OUT, true, false, true, chunk),
                                                   native_product_staging(s.IN, s.OUT, s.N, false, true, false, chunk))
                                        : 0;
        EXPECT_EQ(fast.staged, expect);
        EXPECT_GT(ref.staged, 0);  // the exact product widens them
      }
    }
  }
}

TEST(Products, GuardedGivesTheCpuBitsInEveryMode) {
  const ProductSettings modes[] = {{Precision::kBf16, MatmulMode::kExact, ""},
                                   {Precision::kBf16, MatmulMode::kFast, ""},
                                   {Precision::kFp32, MatmulMode::kExact, "onednn"}};
  for (const ProductSettings& m : modes) {
    const LayerResult a = run_layer("cpu", m, kShapes[1]);
    expect_bitwise(run_layer("cpu-guarded", m, kShapes[1]), a, std::string(matmul_mode_name(m.mode)) + m.fp32_kernel);
    auto g = test::make_test_backend("cpu-guarded");
    g->set_products(m);
    EXPECT_EQ(g->products().mode, m.mode);
  }
}

TEST(Products, UnknownNamesAreRefused) {
  auto be = make_cpu_backend();
  try {
    be->set_products({Precision::kFp32, MatmulMode::kExact, "mkl"});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown fp32 kernel 'mkl' for the cpu backend, expected one of: openblas, onednn"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_matmul_mode("fast"), MatmulMode::kFast);
  EXPECT_THROW(parse_matmul_mode("turbo"), InputError);
}

}  // namespace
}  // namespace weft
