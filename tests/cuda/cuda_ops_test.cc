// Every op of the CUDA backend against the CPU backend (the reference), by normalised error
// ||x - ref|| / ||ref|| with a tolerance per op and dtype:
//   fp32 ops                       1e-5 (products, attention, LayerNorm: summation order
//                                  differs), 1e-6 (elementwise; weighted_mse, whose row losses
//                                  sum in double on both), exact (embedding forward)
//   optional fused ops             against the CPU defaults: as the fp32 ops; 1e-4 where a
//                                  cuBLASLt GELU epilogue evaluates GELU; the bf16 tolerance
//                                  where a 16-bit storage precision rounds between the steps
//   bf16 ops (the typed ops on     inputs rounded to bf16 first so that both sides see the
//   bf16 views, cuda_typed.cc)     same values; 1e-2 for bf16 outputs (8 mantissa bits:
//                                  ~4e-3 per rounding, a few roundings deep), 2e-2 for
//                                  flash attention (P rounded to bf16 before P V), 1e-5 for
//                                  fp32 results computed from bf16 inputs (losses)
// Without a visible GPU every test is skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gpu_blas.h"
#include "backend/device_buffer.h"
#include "core/memory.h"
#include "core/precision.h"

namespace weft::cuda {
namespace {

using Vec = std::vector<float>;

double rel_err(const Vec& x, const Vec& ref) {
  EXPECT_EQ(x.size(), ref.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size() && i < ref.size(); ++i) {
    const double d = static_cast<double>(x[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);
}

Vec randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

Vec rounded(Vec v) {
  for (auto& x : v) x = round_bf16(x);
  return v;
}

std::vector<bf16> to_bf16_host(const Vec& v) {
  std::vector<bf16> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = to_bf16(v[i]);
  return r;
}

Vec to_f32_host(const std::vector<bf16>& v) {
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = to_float(v[i]);
  return r;
}

constexpr double kTolF32 = 1e-5;
constexpr double kTolElem = 1e-6;
constexpr double kTolBf16 = 1e-2;
constexpr double kTolFlash = 2e-2;

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible (" << why << ")";
    if (!gpu_) gpu_ = make_cuda_backend();
    if (!cpu_) cpu_ = make_cpu_backend();
  }
  static void TearDownTestSuite() {
    gpu_.reset();
    cpu_.reset();
  }

  // Device buffers of the backend (weft::DeviceBuffer): copies of host vectors (f32, bf16
  // rounded from f32, int32 tokens), uninitialised ones (zeroed when asked), and back to f32.
  DeviceBuffer up(const Vec& v) { return to_device(*gpu_, v, DType::kF32); }
  DeviceBuffer up16(const Vec& v) { return to_device(*gpu_, to_bf16_host(v), DType::kBF16); }
  DeviceBuffer up(const std::vector<int32_t>& v) { return to_device(*gpu_, v, DType::kI32); }
  DeviceBuffer dev_f32(int64_t n, bool zero = false) {
    DeviceBuffer d(*gpu_, DType::kF32, n);
    if (zero) d.zero();
    return d;
  }
  DeviceBuffer dev_bf16(int64_t n) { return DeviceBuffer(*gpu_, DType::kBF16, n); }
  static Vec down(const DeviceBuffer& d) {
    return d.dtype() == DType::kBF16 ? to_f32_host(d.download<bf16>()) : d.download<float>();
  }
  // A bf16 buffer as a typed view: the typed ops dispatch it to the bf16 kernels (cuda_typed.cc).
  static View v16(const DeviceBuffer& d) { return View(d.data<bf16>(), DType::kBF16); }

  // gemm against the cpu's for every transpose (alpha 0.7, beta 0.3), the operands' row strides
  // `pad` past their width, inputs rounded to bf16 when `bf16_inputs`, random from `seed` on:
  // within kTolF32.
  void expect_gemm_transposes(int64_t pad, bool bf16_inputs, uint32_t seed) {
    const int64_t M = 37, N = 53, K = 29;
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
        Vec A = randn(static_cast<size_t>((ta ? K : M) * lda), seed),
            B = randn(static_cast<size_t>((tb ? N : K) * ldb), seed + 1), C = randn(static_cast<size_t>(M * N), seed + 2);
        if (bf16_inputs) A = rounded(A), B = rounded(B);
        Vec ref = C;
        cpu_->gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, ref.data(), N);
        auto dA = up(A);
        auto dB = up(B);
        auto dC = up(C);
        gpu_->gemm(ta, tb, M, N, K, 0.7f, dA.data<float>(), lda, dB.data<float>(), ldb, 0.3f, dC.data<float>(), N);
        EXPECT_LT(rel_err(down(dC), ref), kTolF32) << "trans_a " << ta << " trans_b " << tb << " pad " << pad;
      }
    }
  }

  static std::unique_ptr<CudaBackend> gpu_;
  static std::unique_ptr<Backend> cpu_;
};
std::unique_ptr<CudaBackend> CudaOps::gpu_;
std::unique_ptr<Backend> CudaOps::cpu_;


// ---------------------------------------------------------------------------------------
// fp32

TEST_F(CudaOps, GemmAllTransposes) { expect_gemm_transposes(0, false, 1); }

TEST_F(CudaOps, MatmulForwardBackward) {
  const int64_t N = 70, IN = 48, OUT = 80;
  Vec inp = randn(N * IN, 4), w = randn(IN * OUT, 5, 0.1f), bias = randn(OUT, 6), out0 = randn(N * OUT, 7);
  for (int acc = 0; acc < 2; ++acc) {
    Vec ref = out0;
    cpu_->matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), N, IN, OUT, acc);
    auto di = up(inp);
    auto dw = up(w);
    auto db = up(bias);
    auto dout = up(out0);
    gpu_->matmul_forward(dout.data<float>(), di.data<float>(), dw.data<float>(), db.data<float>(), N, IN, OUT, acc);
    EXPECT_LT(rel_err(down(dout), ref), kTolF32) << "accumulate " << acc;
  }
  Vec g = randn(N * OUT, 8), dw0 = randn(IN * OUT, 9), db0 = randn(OUT, 10);
  Vec rdi(N * IN), rdw = dw0, rdb = db0;
  cpu_->matmul_backward(rdi.data(), rdw.data(), rdb.data(), g.data(), inp.data(), w.data(), N, IN, OUT);
  auto dg = up(g);
  auto di = up(inp);
  auto dwt = up(w);
  auto ddw = up(dw0);
  auto ddb = up(db0);
  DeviceBuffer ddi = dev_f32(N * IN);
  gpu_->matmul_backward(ddi.data<float>(), ddw.data<float>(), ddb.data<float>(), dg.data<float>(), di.data<float>(),
                        dwt.data<float>(), N, IN, OUT);
  EXPECT_LT(rel_err(down(ddi), rdi), kTolF32);
  EXPECT_LT(rel_err(down(ddw), rdw), kTolF32);
  EXPECT_LT(rel_err(down(ddb), rdb), kTolF32);
}

// --matmul fast on bf16 storage (backend.h set_products): gemm, matmul_forward and
// matmul_backward through cuBLASLt bf16 on copies rounded to bf16. On bf16 values the products
// are the cpu's exact ones up to fp32 summation order (including strided operands: lda past the
// width); values that are not bf16 are rounded first. The shared backend is reset after.
TEST_F(CudaOps, FastBf16ProductsMatchTheCpuOnBf16Values) {
  gpu_->set_products({Precision::kBf16, MatmulMode::kFast, ""});
  EXPECT_NE(gpu_->product_kernel().find("cublasLt bf16"), std::string::npos) << gpu_->product_kernel();
  expect_gemm_transposes(5, true, 11);
  const int64_t R = 70, IN = 48, OUT = 80;
  const Vec inp = rounded(randn(R * IN, 14)), w = rounded(randn(IN * OUT, 15, 0.1f)), bias = randn(OUT, 16),
            g = rounded(randn(R * OUT, 17)), dw0 = randn(IN * OUT, 18);
  Vec ref(R * OUT), rdi(R * IN), rdw = dw0;
  cpu_->matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), R, IN, OUT, false);
  cpu_->matmul_backward(rdi.data(), rdw.data(), nullptr, g.data(), inp.data(), w.data(), R, IN, OUT);
  auto di = up(inp);
  auto dwt = up(w);
  auto db = up(bias);
  auto dg = up(g);
  auto dout = up(Vec(R * OUT, 0.0f));
  auto ddi = up(Vec(R * IN, 0.0f));
  auto ddw = up(dw0);
  gpu_->matmul_forward(dout.data<float>(), di.data<float>(), dwt.data<float>(), db.data<float>(), R, IN, OUT, false);
  gpu_->matmul_backward(ddi.data<float>(), ddw.data<float>(), nullptr, dg.data<float>(), di.data<float>(),
                        dwt.data<float>(), R, IN, OUT);
  EXPECT_LT(rel_err(down(dout), ref), kTolF32);
  EXPECT_LT(rel_err(down(ddi), rdi), kTolF32);
  EXPECT_LT(rel_err(down(ddw), rdw), kTolF32);
  // Inputs that are not bf16 values: rounded first, so the result is the bf16 product's.
  const Vec raw = randn(R * IN, 19);
  Vec ref_raw(R * OUT);
  cpu_->matmul_forward(ref_raw.data(), raw.data(), w.data(), nullptr, R, IN, OUT, false);
  auto draw = up(raw);
  gpu_->matmul_forward(dout.data<float>(), draw.data<float>(), dwt.data<float>(), nullptr, R, IN, OUT, false);
  const double e = rel_err(down(dout), ref_raw);
  EXPECT_GT(e, kTolF32);
  EXPECT_LT(e, kTolBf16);
  gpu_->set_products({});
  EXPECT_EQ(gpu_->product_kernel(), "cublas sgemm (strict fp32)");
}

TEST_F(CudaOps, EmbeddingVocabParallel) {
  const int64_t B = 3, T = 17, C = 24, V = 40;
  std::vector<int32_t> tok(B * T);
  std::mt19937 gen(11);
  for (auto& t : tok) t = static_cast<int32_t>(gen() % 12);  // repeated tokens
  tok[5] = 39;
  const int64_t v0 = 4, vrows = 20;  // this rank holds rows [4, 24)
  Vec wte = randn(vrows * C, 12), wpe = randn(T * C, 13), g = randn(B * T * C, 14);
  Vec ref(B * T * C);
  cpu_->embedding_forward(ref.data(), tok.data(), wte.data(), wpe.data(), B, T, C, v0, vrows);
  auto dt = up(tok);
  auto dwte = up(wte);
  auto dwpe = up(wpe);
  DeviceBuffer dout = dev_f32(B * T * C);
  gpu_->embedding_forward(dout.data<float>(), dt.data<int32_t>(), dwte.data<float>(), dwpe.data<float>(), B, T, C, v0,
                          vrows);
  EXPECT_EQ(rel_err(down(dout), ref), 0.0);

  Vec rdwte = randn(vrows * C, 15), rdwpe = randn(T * C, 16);
  auto ddwte = up(rdwte);
  auto ddwpe = up(rdwpe);
  auto dg = up(g);
  cpu_->embedding_backward(rdwte.data(), rdwpe.data(), g.data(), tok.data(), B, T, C, v0, vrows);
  gpu_->embedding_backward(ddwte.data<float>(), ddwpe.data<float>(), dg.data<float>(), dt.data<int32_t>(), B, T, C, v0,
                           vrows);
  EXPECT_LT(rel_err(down(ddwte), rdwte), kTolElem);
  EXPECT_LT(rel_err(down(ddwpe), rdwpe), kTolElem);
  // Whole vocabulary (default v0/vrows) and no position table.
  Vec wte_all = randn(V * C, 17);
  Vec ref2(B * T * C);
  cpu_->embedding_forward(ref2.data(), tok.data(), wte_all.data(), nullptr, B, T, C);
  auto dwa = up(wte_all);
  gpu_->embedding_forward(dout.data<float>(), dt.data<int32_t>(), dwa.data<float>(), nullptr, B, T, C);
  EXPECT_EQ(rel_err(down(dout), ref2), 0.0);
}

TEST_F(CudaOps, EmbeddingBackwardIsDeterministic) {
  const int64_t B = 8, T = 256, C = 64, V = 50;
  std::vector<int32_t> tok(B * T);
  std::mt19937 gen(18);
  for (auto& t : tok) t = static_cast<int32_t>(gen() % V);
  Vec g = randn(B * T * C, 19);
  auto dt = up(tok);
  auto dg = up(g);
  DeviceBuffer a = dev_f32(V * C, true), b = dev_f32(V * C, true);
  gpu_->embedding_backward(a.data<float>(), nullptr, dg.data<float>(), dt.data<int32_t>(), B, T, C);
  gpu_->embedding_backward(b.data<float>(), nullptr, dg.data<float>(), dt.data<int32_t>(), B, T, C);
  Vec ha = down(a), hb = down(b);
  EXPECT_EQ(std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(float)), 0);
}

TEST_F(CudaOps, LayerNorm) {
  const int64_t N = 300, C = 200;  // N over one reduction chunk, C not a multiple of 32
  Vec x = randn(N * C, 20, 2.0f), w = randn(C, 21), b = randn(C, 22), g = randn(N * C, 23);
  Vec ro(N * C), rm(N), rr(N);
  cpu_->layernorm_forward(ro.data(), rm.data(), rr.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  auto dx = up(x);
  auto dw = up(w);
  auto db = up(b);
  DeviceBuffer o = dev_f32(N * C), m = dev_f32(N), r = dev_f32(N);
  gpu_->layernorm_forward(o.data<float>(), m.data<float>(), r.data<float>(), dx.data<float>(), dw.data<float>(),
                          db.data<float>(), N, C, 1e-5f);
  EXPECT_LT(rel_err(down(o), ro), kTolF32);
  EXPECT_LT(rel_err(down(m), rm), kTolF32);
  EXPECT_LT(rel_err(down(r), rr), kTolF32);
  Vec rdi = randn(N * C, 24), rdw = randn(C, 25), rdb = randn(C, 26);
  auto ddi = up(rdi);
  auto ddw = up(rdw);
  auto ddb = up(rdb);
  auto dg = up(g);
  cpu_->layernorm_backward(rdi.data(), rdw.data(), rdb.data(), g.data(), x.data(), w.data(), rm.data(), rr.data(), N,
                           C);
  gpu_->layernorm_backward(ddi.data<float>(), ddw.data<float>(), ddb.data<float>(), dg.data<float>(), dx.data<float>(),
                           dw.data<float>(), m.data<float>(), r.data<float>(), N, C);
  EXPECT_LT(rel_err(down(ddi), rdi), kTolF32);
  EXPECT_LT(rel_err(down(ddw), rdw), kTolF32);
  EXPECT_LT(rel_err(down(ddb), rdb), kTolF32);
}

// The indexed-row ops (graph networks, issue 33): gather exact, segment reductions with a
// permutation and empty segments (the chosen rows exact), their backward, batch normalisation,
// against the CPU reference.
TEST_F(CudaOps, IndexedRows) {
  const int64_t rows = 300, C = 37, S = 41, M = 500;
  const Vec x = randn(rows * C, 40), dout = randn(S * C, 41), w = randn(C, 42), b = randn(C, 43);
  std::vector<int32_t> idx(M), perm(rows), offsets{0};
  for (int64_t m = 0; m < M; ++m) idx[static_cast<size_t>(m)] = static_cast<int32_t>((m * 7919) % rows);
  for (int64_t r = 0; r < rows; ++r) perm[static_cast<size_t>(r)] = static_cast<int32_t>((r * 131) % rows);
  for (int64_t s = 1; s < S; ++s) offsets.push_back(static_cast<int32_t>(std::min<int64_t>(rows, s * s / 5)));
  offsets.push_back(static_cast<int32_t>(rows));
  auto dx = up(x), di = up(idx), dp = up(perm), doff = up(offsets), dd = up(dout);
  Vec rg(M * C);
  cpu_->gather_rows_f32(rg.data(), x.data(), idx.data(), M, C);
  DeviceBuffer g = dev_f32(M * C);
  gpu_->gather_rows_f32(g.data<float>(), dx.data<float>(), di.data<int32_t>(), M, C);
  EXPECT_EQ(down(g), rg);
  for (SegmentOp op : {SegmentOp::kSum, SegmentOp::kMean, SegmentOp::kMax, SegmentOp::kMin}) {
    Vec ro(S * C);
    std::vector<int32_t> ra(S * C);
    cpu_->segment_reduce_f32(ro.data(), ra.data(), x.data(), perm.data(), offsets.data(), S, C, op, false);
    DeviceBuffer o = dev_f32(S * C), a(*gpu_, DType::kI32, S * C);
    gpu_->segment_reduce_f32(o.data<float>(), a.data<int32_t>(), dx.data<float>(), dp.data<int32_t>(),
                             doff.data<int32_t>(), S, C, op, false);
    EXPECT_LT(rel_err(down(o), ro), kTolF32) << static_cast<int>(op);
    if (op == SegmentOp::kMax || op == SegmentOp::kMin) {
      EXPECT_EQ(a.download<int32_t>(), ra) << static_cast<int>(op);
      Vec rdx(rows * C, 0.5f);
      cpu_->segment_arg_backward_f32(rdx.data(), dout.data(), ra.data(), S, C);
      auto gdx = up(Vec(rows * C, 0.5f));
      gpu_->segment_arg_backward_f32(gdx.data<float>(), dd.data<float>(), a.data<int32_t>(), S, C);
      EXPECT_EQ(down(gdx), rdx);
    }
  }
  for (bool mean : {false, true}) {
    Vec rdx(rows * C, 0.25f);
    cpu_->segment_broadcast_f32(rdx.data(), dout.data(), perm.data(), offsets.data(), S, C, mean, true);
    auto gdx = up(Vec(rows * C, 0.25f));
    gpu_->segment_broadcast_f32(gdx.data<float>(), dd.data<float>(), dp.data<int32_t>(), doff.data<int32_t>(), S, C,
                                mean, true);
    EXPECT_LT(rel_err(down(gdx), rdx), kTolF32) << mean;
  }
  Vec ro(rows * C), rm(C), rr(C);
  cpu_->batchnorm_forward_f32(ro.data(), rm.data(), rr.data(), x.data(), w.data(), b.data(), rows, C, 1e-5f);
  auto dw = up(w), db = up(b);
  DeviceBuffer o = dev_f32(rows * C), m = dev_f32(C), r = dev_f32(C);
  gpu_->batchnorm_forward_f32(o.data<float>(), m.data<float>(), r.data<float>(), dx.data<float>(), dw.data<float>(),
                              db.data<float>(), rows, C, 1e-5f);
  EXPECT_LT(rel_err(down(o), ro), kTolF32);
  EXPECT_LT(rel_err(down(m), rm), kTolF32);
  const Vec gout = randn(rows * C, 44);
  Vec rdx(rows * C, 0.0f), rdw(C, 0.0f), rdb(C, 0.0f);
  cpu_->batchnorm_backward_f32(rdx.data(), rdw.data(), rdb.data(), gout.data(), x.data(), w.data(), rm.data(), rr.data(),
                               rows, C);
  auto gg = up(gout), gdx = dev_f32(rows * C, true), gdw = dev_f32(C, true), gdb = dev_f32(C, true);
  gpu_->batchnorm_backward_f32(gdx.data<float>(), gdw.data<float>(), gdb.data<float>(), gg.data<float>(), dx.data<float>(),
                               dw.data<float>(), m.data<float>(), r.data<float>(), rows, C);
  EXPECT_LT(rel_err(down(gdx), rdx), kTolF32);
  EXPECT_LT(rel_err(down(gdw), rdw), kTolF32);
  EXPECT_LT(rel_err(down(gdb), rdb), kTolF32);
  // PNA's std aggregator and its backward; batch normalisation with running statistics.
  Vec rmean(S * C), rsd(S * C);
  cpu_->segment_reduce_f32(rmean.data(), nullptr, x.data(), perm.data(), offsets.data(), S, C, SegmentOp::kMean, false);
  cpu_->segment_std_f32(rsd.data(), x.data(), rmean.data(), perm.data(), offsets.data(), S, C, 1e-5f);
  auto gmean = up(rmean);
  DeviceBuffer gsd = dev_f32(S * C);
  gpu_->segment_std_f32(gsd.data<float>(), dx.data<float>(), gmean.data<float>(), dp.data<int32_t>(), doff.data<int32_t>(),
                        S, C, 1e-5f);
  EXPECT_LT(rel_err(down(gsd), rsd), kTolF32);
  Vec rsx(rows * C, 0.5f);
  cpu_->segment_std_backward_f32(rsx.data(), dout.data(), x.data(), rmean.data(), rsd.data(), perm.data(), offsets.data(),
                                 S, C);
  auto gsx = up(Vec(rows * C, 0.5f)), gsd_ref = up(rsd);
  gpu_->segment_std_backward_f32(gsx.data<float>(), dd.data<float>(), dx.data<float>(), gmean.data<float>(),
                                 gsd_ref.data<float>(), dp.data<int32_t>(), doff.data<int32_t>(), S, C);
  EXPECT_LT(rel_err(down(gsx), rsx), kTolF32);
  Vec var(C);
  for (int64_t c = 0; c < C; ++c) var[static_cast<size_t>(c)] = 0.5f + 0.01f * static_cast<float>(c);
  Vec rbi(rows * C);
  cpu_->batchnorm_inference_f32(rbi.data(), x.data(), w.data(), var.data(), w.data(), b.data(), rows, C, 1e-5f);
  auto gvar = up(var);
  DeviceBuffer gbi = dev_f32(rows * C);
  gpu_->batchnorm_inference_f32(gbi.data<float>(), dx.data<float>(), dw.data<float>(), gvar.data<float>(),
                                dw.data<float>(), db.data<float>(), rows, C, 1e-5f);
  EXPECT_LT(rel_err(down(gbi), rbi), kTolF32);
}

// The graph networks' pointwise ops (activations and their derivatives, products, row scaling;
// writing and accumulating) against the CPU reference.
TEST_F(CudaOps, GraphPointwiseOps) {
  const int64_t N = 41, C = 29, n = N * C;
  const Vec x = randn(n, 60, 3.0f), d = randn(n, 61), base = randn(n, 62), rows = randn(N, 63);
  auto dx = up(x), dd = up(d), drows = up(rows);
  for (Activation act : {Activation::kRelu, Activation::kSilu, Activation::kShiftedSoftplus}) {
    Vec ref(n);
    cpu_->activation_forward_f32(ref.data(), x.data(), n, act);
    DeviceBuffer o = dev_f32(n);
    gpu_->activation_forward_f32(o.data<float>(), dx.data<float>(), n, act);
    EXPECT_LT(rel_err(down(o), ref), kTolElem) << static_cast<int>(act);
    Vec rg = base;
    cpu_->activation_backward_f32(rg.data(), x.data(), d.data(), n, act, true);
    auto gg = up(base);
    gpu_->activation_backward_f32(gg.data<float>(), dx.data<float>(), dd.data<float>(), n, act, true);
    EXPECT_LT(rel_err(down(gg), rg), kTolElem) << static_cast<int>(act);
  }
  Vec rm = base;
  cpu_->mul_f32(rm.data(), x.data(), d.data(), n, true);
  auto gm = up(base);
  gpu_->mul_f32(gm.data<float>(), dx.data<float>(), dd.data<float>(), n, true);
  EXPECT_LT(rel_err(down(gm), rm), kTolElem);
  Vec rs(n);
  cpu_->scale_rows_f32(rs.data(), x.data(), rows.data(), N, C, false);
  DeviceBuffer gs = dev_f32(n);
  gpu_->scale_rows_f32(gs.data<float>(), dx.data<float>(), drows.data<float>(), N, C, false);
  EXPECT_EQ(down(gs), rs);
}

TEST_F(CudaOps, Elementwise) {
  const int64_t N = 33, C = 65, n = N * C;
  Vec a = randn(n, 27, 2.0f), b = randn(n, 28), bias = randn(C, 29), g = randn(n, 30);
  auto da = up(a);
  auto db = up(b);
  auto dbias = up(bias);
  auto dg = up(g);
  DeviceBuffer o = dev_f32(n);
  Vec ref(n);
  cpu_->add_bias(ref.data(), a.data(), bias.data(), N, C);
  gpu_->add_bias(o.data<float>(), da.data<float>(), dbias.data<float>(), N, C);
  EXPECT_LT(rel_err(down(o), ref), kTolElem);
  cpu_->add(ref.data(), a.data(), b.data(), n);
  gpu_->add(o.data<float>(), da.data<float>(), db.data<float>(), n);
  EXPECT_LT(rel_err(down(o), ref), kTolElem);
  cpu_->gelu_forward(ref.data(), a.data(), n);
  gpu_->gelu_forward(o.data<float>(), da.data<float>(), n);
  EXPECT_LT(rel_err(down(o), ref), kTolElem);
  cpu_->gelu_backward(ref.data(), a.data(), g.data(), n);
  gpu_->gelu_backward(o.data<float>(), da.data<float>(), dg.data<float>(), n);
  EXPECT_LT(rel_err(down(o), ref), kTolElem);
  Vec s = a;
  cpu_->scale(s.data(), 0.37f, n);
  gpu_->scale(da.data<float>(), 0.37f, n);
  EXPECT_LT(rel_err(down(da), s), kTolElem);
}

TEST_F(CudaOps, AttentionFp32) {
  const int64_t B = 2, T = 70, C = 48, NH = 3;
  Vec qkv = randn(B * T * 3 * C, 31), g = randn(B * T * C, 32);
  Vec ro(B * T * C), ratt(B * NH * T * T), rd(B * T * 3 * C);
  cpu_->attention_forward(ro.data(), ratt.data(), qkv.data(), B, T, C, NH);
  cpu_->attention_backward(rd.data(), g.data(), qkv.data(), ratt.data(), B, T, C, NH);
  auto dq = up(qkv);
  auto dg = up(g);
  DeviceBuffer o = dev_f32(B * T * C), att = dev_f32(B * NH * T * T), d = dev_f32(B * T * 3 * C);
  gpu_->attention_forward(o.data<float>(), att.data<float>(), dq.data<float>(), B, T, C, NH);
  gpu_->attention_backward(d.data<float>(), dg.data<float>(), dq.data<float>(), att.data<float>(), B, T, C, NH);
  EXPECT_LT(rel_err(down(o), ro), kTolF32);
  EXPECT_LT(rel_err(down(att), ratt), kTolF32);
  EXPECT_LT(rel_err(down(d), rd), kTolF32);
}

// The decoder variants' ops (backend.h) against the cpu's: RMSNorm, rotary positions, SwiGLU,
// the kv heads' expansion and reduction, ALiBi's attention, the exact GELU; and the pitched copy
// the replicated kv heads' gradient sums use.
TEST_F(CudaOps, DecoderVariantOps) {
  const int64_t N = 40, C = 48, T = 10, NH = 4, KVH = 2, hd = 12, F = 37;
  Vec x = randn(N * C, 91), w = randn(C, 92), g = randn(N * C, 93);
  Vec ro(N * C), rr(N), rdx(N * C), rdw(C, 0.0f);
  cpu_->rmsnorm_forward_f32(ro.data(), rr.data(), x.data(), w.data(), N, C, 1e-5f);
  cpu_->rmsnorm_backward_f32(rdx.data(), rdw.data(), g.data(), x.data(), w.data(), rr.data(), N, C);
  auto dx = up(x);
  auto dw = up(w);
  auto dg = up(g);
  DeviceBuffer o = dev_f32(N * C), r = dev_f32(N), gdx = dev_f32(N * C, true), gdw = dev_f32(C, true);
  gpu_->rmsnorm_forward_f32(o.data<float>(), r.data<float>(), dx.data<float>(), dw.data<float>(), N, C, 1e-5f);
  gpu_->rmsnorm_backward_f32(gdx.data<float>(), gdw.data<float>(), dg.data<float>(), dx.data<float>(), dw.data<float>(),
                             r.data<float>(), N, C);
  EXPECT_LT(rel_err(down(o), ro), kTolF32);
  EXPECT_LT(rel_err(down(gdx), rdx), kTolF32);
  EXPECT_LT(rel_err(down(gdw), rdw), kTolF32);
  // Rotary positions on q and k (2 NH heads of hd, 8 of them turning), then their inverse.
  Vec qk = randn(N * 3 * C, 94), cs = randn(T * 4, 95), sn = randn(T * 4, 96);
  Vec rq = qk;
  cpu_->rope_f32(rq.data(), cs.data(), sn.data(), N, T, 3 * C, 2 * NH, hd, 8, false);
  auto dqk = up(qk);
  auto dcs = up(cs);
  auto dsn = up(sn);
  gpu_->rope_f32(dqk.data<float>(), dcs.data<float>(), dsn.data<float>(), N, T, 3 * C, 2 * NH, hd, 8, false);
  EXPECT_LT(rel_err(down(dqk), rq), kTolElem);
  // SwiGLU.
  Vec pre = randn(N * 2 * F, 97), gf = randn(N * F, 98), rs(N * F), rdp(N * 2 * F);
  cpu_->swiglu_forward_f32(rs.data(), pre.data(), N, F);
  cpu_->swiglu_backward_f32(rdp.data(), pre.data(), gf.data(), N, F);
  auto dpre = up(pre);
  auto dgf = up(gf);
  DeviceBuffer so = dev_f32(N * F), sd = dev_f32(N * 2 * F);
  gpu_->swiglu_forward_f32(so.data<float>(), dpre.data<float>(), N, F);
  gpu_->swiglu_backward_f32(sd.data<float>(), dpre.data<float>(), dgf.data<float>(), N, F);
  EXPECT_LT(rel_err(down(so), rs), kTolElem);
  EXPECT_LT(rel_err(down(sd), rdp), kTolElem);
  // The kv heads: expanded (copies: bitwise) and reduced.
  const int64_t W = C + 2 * KVH * hd;
  Vec c = randn(N * W, 99), y = randn(N * 3 * C, 100), re(N * 3 * C), rk(N * W);
  cpu_->expand_kv_f32(re.data(), c.data(), N, NH, KVH, hd);
  cpu_->reduce_kv_f32(rk.data(), y.data(), N, NH, KVH, hd);
  auto dc = up(c);
  auto dy = up(y);
  DeviceBuffer ge = dev_f32(N * 3 * C), gk = dev_f32(N * W);
  gpu_->expand_kv_f32(ge.data<float>(), dc.data<float>(), N, NH, KVH, hd);
  gpu_->reduce_kv_f32(gk.data<float>(), dy.data<float>(), N, NH, KVH, hd);
  EXPECT_EQ(down(ge), re);
  EXPECT_LT(rel_err(down(gk), rk), kTolElem);
  // ALiBi's attention (4 samples of T = 10), its probabilities and output.
  const Vec slopes = {0.25f, 1.0f / 16, 1.0f / 64, 1.0f / 256};
  const int64_t B = N / T;
  Vec qkv = randn(N * 3 * C, 101), ao(N * C), aatt(B * NH * T * T);
  cpu_->attention_forward_alibi_f32(ao.data(), aatt.data(), qkv.data(), slopes.data(), B, T, C, NH);
  auto dqkv = up(qkv);
  auto dsl = up(slopes);
  DeviceBuffer go = dev_f32(N * C), gatt = dev_f32(B * NH * T * T);
  gpu_->attention_forward_alibi_f32(go.data<float>(), gatt.data<float>(), dqkv.data<float>(), dsl.data<float>(), B, T, C,
                                    NH);
  EXPECT_LT(rel_err(down(go), ao), kTolF32);
  EXPECT_LT(rel_err(down(gatt), aatt), kTolF32);
  // The exact GELU and its backward (in place over the gradient).
  Vec ge_ref(N * C), gb_ref = g;
  cpu_->gelu_erf_forward_f32(ge_ref.data(), x.data(), N * C);
  cpu_->gelu_erf_backward_f32(gb_ref.data(), x.data(), gb_ref.data(), N * C);
  DeviceBuffer gef = dev_f32(N * C);
  gpu_->gelu_erf_forward_f32(gef.data<float>(), dx.data<float>(), N * C);
  gpu_->gelu_erf_backward_f32(dg.data<float>(), dx.data<float>(), dg.data<float>(), N * C);
  EXPECT_LT(rel_err(down(gef), ge_ref), kTolElem);
  EXPECT_LT(rel_err(down(dg), gb_ref), kTolElem);
  // Columns [5, 12) of an (N, C) matrix into a packed (N, 7) one and back into another matrix.
  DeviceBuffer packed = dev_f32(N * 7), back = dev_f32(N * C, true);
  gpu_->copy_device_2d(packed.data<float>(), 7 * 4, dx.data<float>() + 5, C * 4, 7 * 4, N);
  gpu_->copy_device_2d(back.data<float>() + 5, C * 4, packed.data<float>(), 7 * 4, 7 * 4, N);
  const Vec pk = down(packed), bk = down(back);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < C; ++j) {
      const bool in = j >= 5 && j < 12;
      EXPECT_EQ(bk[i * C + j], in ? x[i * C + j] : 0.0f);
      if (in) EXPECT_EQ(pk[i * 7 + j - 5], x[i * C + j]);
    }
  }
}

TEST_F(CudaOps, BidirAttentionFp32) {
  const int64_t B = 2, T = 70, C = 48, NH = 3;
  Vec qkv = randn(B * T * 3 * C, 131), g = randn(B * T * C, 132);
  Vec ro(B * T * C), ratt(B * NH * T * T), rd(B * T * 3 * C);
  cpu_->bidir_attention_forward(ro.data(), ratt.data(), qkv.data(), B, T, C, NH);
  cpu_->bidir_attention_backward(rd.data(), g.data(), qkv.data(), ratt.data(), B, T, C, NH);
  auto dq = up(qkv);
  auto dg = up(g);
  DeviceBuffer o = dev_f32(B * T * C), att = dev_f32(B * NH * T * T), d = dev_f32(B * T * 3 * C);
  gpu_->bidir_attention_forward(o.data<float>(), att.data<float>(), dq.data<float>(), B, T, C, NH);
  gpu_->bidir_attention_backward(d.data<float>(), dg.data<float>(), dq.data<float>(), att.data<float>(), B, T, C, NH);
  EXPECT_LT(rel_err(down(o), ro), kTolF32);
  EXPECT_LT(rel_err(down(att), ratt), kTolF32);
  EXPECT_LT(rel_err(down(d), rd), kTolF32);
}

// Shapes: NH > 1 and 1; S = 1; S above the kernel's warps per block; hs above its 128 threads;
// N above the 256-row chunks of the ordered dq sum; non-powers of two. dq accumulates onto
// random values; dkv starts as garbage (written).
TEST_F(CudaOps, QueryAttentionFp32) {
  struct Shape {
    int64_t N, S, C, NH;
  };
  for (const Shape sh : {Shape{7, 5, 12, 3}, Shape{300, 13, 320, 2}, Shape{33, 1, 40, 8}, Shape{5, 48, 96, 1}}) {
    const int64_t N = sh.N, S = sh.S, C = sh.C, NH = sh.NH;
    Vec q = randn(C, 133), kv = randn(S * N * 2 * C, 134), g = randn(N * C, 135), dq0 = randn(C, 136);
    Vec ro(N * C), ratt(N * NH * S), rdq = dq0, rdkv(S * N * 2 * C);
    cpu_->query_attention_forward(ro.data(), ratt.data(), q.data(), kv.data(), N, S, C, NH);
    cpu_->query_attention_backward(rdq.data(), rdkv.data(), g.data(), q.data(), kv.data(), ratt.data(), N, S, C, NH);
    auto dqv = up(q);
    auto dkvin = up(kv);
    auto dg = up(g);
    auto ddq = up(dq0);
    auto ddkv = up(Vec(S * N * 2 * C, 123.0f));
    DeviceBuffer o = dev_f32(N * C), att = dev_f32(N * NH * S);
    gpu_->query_attention_forward(o.data<float>(), att.data<float>(), dqv.data<float>(), dkvin.data<float>(), N, S, C,
                                  NH);
    gpu_->query_attention_backward(ddq.data<float>(), ddkv.data<float>(), dg.data<float>(), dqv.data<float>(),
                                   dkvin.data<float>(), att.data<float>(), N, S, C, NH);
    const std::string what = "N " + std::to_string(N) + " S " + std::to_string(S) + " C " + std::to_string(C) +
                             " NH " + std::to_string(NH);
    EXPECT_LT(rel_err(down(o), ro), kTolF32) << what;
    EXPECT_LT(rel_err(down(att), ratt), kTolF32) << what;
    EXPECT_LT(rel_err(down(ddq), rdq), kTolF32) << what;
    EXPECT_LT(rel_err(down(ddkv), rdkv), kTolF32) << what;
  }
}

// R above the kernel's 65536 blocks (grid-stride rows); losses only; grad aliasing pred.
TEST_F(CudaOps, WeightedMse) {
  const int64_t R = 70001, K = 37;
  const float dloss = 0.37f;
  Vec pred = randn(R * K, 137), target = randn(R * K, 138), w = randn(K, 139);
  for (auto& x : w) x = std::fabs(x) + 0.1f;
  Vec rl(R), rg(R * K);
  cpu_->weighted_mse(rl.data(), rg.data(), pred.data(), target.data(), w.data(), R, K, dloss);
  auto dp = up(pred);
  auto dt = up(target);
  auto dw = up(w);
  DeviceBuffer loss = dev_f32(R), grad = dev_f32(R * K);
  gpu_->weighted_mse(loss.data<float>(), grad.data<float>(), dp.data<float>(), dt.data<float>(), dw.data<float>(), R, K,
                     dloss);
  EXPECT_LT(rel_err(down(loss), rl), kTolElem);
  EXPECT_LT(rel_err(down(grad), rg), kTolElem);
  DeviceBuffer loss2 = dev_f32(R);
  gpu_->weighted_mse(loss2.data<float>(), nullptr, dp.data<float>(), dt.data<float>(), dw.data<float>(), R, K, dloss);
  EXPECT_EQ(rel_err(down(loss2), down(loss)), 0.0);
  gpu_->weighted_mse(loss2.data<float>(), dp.data<float>(), dp.data<float>(), dt.data<float>(), dw.data<float>(), R, K,
                     dloss);  // in place
  EXPECT_EQ(rel_err(down(loss2), down(loss)), 0.0);
  EXPECT_EQ(rel_err(down(dp), down(grad)), 0.0);
}

TEST_F(CudaOps, SoftmaxCrossEntropy) {
  const int64_t N = 9, V = 1000, Vp = 1024;
  Vec logits = randn(N * Vp, 33, 3.0f);
  std::vector<int32_t> tgt(N);
  for (int64_t i = 0; i < N; ++i) tgt[i] = static_cast<int32_t>((i * 97) % V);
  auto dt = up(tgt);
  for (float dloss : {0.0f, 1.0f / N}) {
    Vec ref = logits, rl(N);
    cpu_->softmax_cross_entropy(ref.data(), rl.data(), tgt.data(), N, V, Vp, dloss);
    auto dl = up(logits);
    DeviceBuffer losses = dev_f32(N);
    gpu_->softmax_cross_entropy(dl.data<float>(), losses.data<float>(), dt.data<int32_t>(), N, V, Vp, dloss);
    EXPECT_LT(rel_err(down(losses), rl), kTolF32) << "dloss " << dloss;
    EXPECT_LT(rel_err(down(dl), ref), kTolF32) << "dloss " << dloss;
  }
}

TEST_F(CudaOps, VocabParallelCrossEntropyPhases) {
  const int64_t N = 7, ld = 72, cols = 64, v0 = 128;
  Vec logits = randn(N * ld, 34, 2.0f);
  std::vector<int32_t> tgt = {128, 130, 191, 5, 200, 150, 129};
  Vec rmax(N), rsum(N), rtl(N);
  cpu_->ce_row_max(logits.data(), N, ld, cols, rmax.data());
  for (auto& m : rmax) m += 0.5f;  // a "global" max above the local one, as after the all-reduce
  cpu_->ce_row_sumexp(logits.data(), N, ld, cols, rmax.data(), rsum.data());
  cpu_->ce_target_logit(logits.data(), N, ld, cols, tgt.data(), v0, rtl.data());
  Vec rg = logits;
  cpu_->ce_grad(rg.data(), N, ld, cols, rmax.data(), rsum.data(), tgt.data(), v0, 0.25f);

  auto dl = up(logits);
  auto dt = up(tgt);
  auto dmax = up(rmax);
  DeviceBuffer mx = dev_f32(N), sum = dev_f32(N), tl = dev_f32(N);
  gpu_->ce_row_max(dl.data<float>(), N, ld, cols, mx.data<float>());
  Vec local_max = down(mx);
  for (int64_t i = 0; i < N; ++i) EXPECT_FLOAT_EQ(local_max[i] + 0.5f, rmax[i]);
  gpu_->ce_row_sumexp(dl.data<float>(), N, ld, cols, dmax.data<float>(), sum.data<float>());
  gpu_->ce_target_logit(dl.data<float>(), N, ld, cols, dt.data<int32_t>(), v0, tl.data<float>());
  gpu_->ce_grad(dl.data<float>(), N, ld, cols, dmax.data<float>(), sum.data<float>(), dt.data<int32_t>(), v0, 0.25f);
  EXPECT_LT(rel_err(down(sum), rsum), kTolF32);
  EXPECT_EQ(rel_err(down(tl), rtl), 0.0);
  EXPECT_LT(rel_err(down(dl), rg), kTolF32);
}

TEST_F(CudaOps, AdamWSumSquaresScale) {
  const int64_t n = 10007;
  Vec p = randn(n, 35), g = randn(n, 36), m = randn(n, 37, 0.1f), v = rounded(randn(n, 38, 0.1f));
  for (auto& x : v) x = std::fabs(x);
  auto dp = up(p);
  auto dg = up(g);
  auto dm = up(m);
  auto dv = up(v);
  DeviceBuffer p16 = dev_bf16(n);
  cpu_->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
  gpu_->adamw_copy(dp.data<float>(), v16(p16), dg.data<float>(), dm.data<float>(), dv.data<float>(), n, 1e-3f, 0.9f,
                   0.95f, 1e-8f, 0.1f, 3, 0.5f, Precision::kBf16);
  Vec gp = down(dp);
  EXPECT_LT(rel_err(gp, p), kTolElem);
  EXPECT_LT(rel_err(down(dm), m), kTolElem);
  EXPECT_LT(rel_err(down(dv), v), kTolElem);
  EXPECT_EQ(rel_err(down(p16), rounded(gp)), 0.0);  // the compute copy is the rounded master
  const double ref = cpu_->sum_squares(g.data(), n);
  EXPECT_NEAR(gpu_->sum_squares(dg.data<float>(), n), ref, 1e-9 * ref);
}

// ---------------------------------------------------------------------------------------
// optional fused ops (backend.h): the CUDA overrides against the CPU backend's defaults (the
// model's plain sequences). fp32: other summation orders, kTolF32; the cuBLASLt GELU
// epilogues evaluate GELU and its derivative their own way: 1e-4. With a 16-bit storage
// precision the CUDA backend runs the default sequence on its own ops: kTolBf16 (a few
// values round to the neighbouring 16-bit value). flash attention: CudaFlash below.

constexpr double kTolEpilogue = 1e-4;

TEST_F(CudaOps, FusedOpsAreOffered) {
  for (FusedOp op : kFusedOps) EXPECT_TRUE(gpu_->offers(op)) << fused_op_name(op);
  EXPECT_TRUE(gpu_->attention_lse_supports(768, 12, Precision::kBf16));   // hs 64
  EXPECT_TRUE(gpu_->attention_lse_supports(256, 2, Precision::kBf16));    // hs 128
  EXPECT_FALSE(gpu_->attention_lse_supports(768, 12, Precision::kFp32));  // bf16 inside: not for fp32 storage
  EXPECT_FALSE(gpu_->attention_lse_supports(96, 3, Precision::kBf16));    // hs 32
}

TEST_F(CudaOps, FusedResidualLayerNorm) {
  const int64_t N = 300, C = 200, IN = 96;
  Vec a = randn(N * C, 70, 2.0f), b = randn(N * C, 71), w = randn(C, 72), bias = randn(C, 73);
  Vec inp = randn(N * IN, 74), pw = randn(IN * C, 75, 0.2f), pb = randn(C, 76);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    const double tol = p == Precision::kFp32 ? kTolF32 : kTolBf16;
    const char* pn = precision_name(p);
    {
      Vec rres(N * C), rout(N * C), rm(N), rr(N);
      cpu_->residual_layernorm_forward(rres.data(), rout.data(), rm.data(), rr.data(), a.data(), b.data(), w.data(),
                                       bias.data(), N, C, 1e-5f, p);
      auto da = up(a);
      auto db = up(b);
      auto dw = up(w);
      auto dbias = up(bias);
      DeviceBuffer res = dev_f32(N * C), out = dev_f32(N * C), m = dev_f32(N), r = dev_f32(N);
      gpu_->residual_layernorm_forward(res.data<float>(), out.data<float>(), m.data<float>(), r.data<float>(),
                                       da.data<float>(), db.data<float>(), dw.data<float>(), dbias.data<float>(), N, C,
                                       1e-5f, p);
      EXPECT_LT(rel_err(down(res), rres), tol) << pn;
      EXPECT_LT(rel_err(down(out), rout), tol) << pn;
      EXPECT_LT(rel_err(down(m), rm), tol) << pn;
      EXPECT_LT(rel_err(down(r), rr), tol) << pn;
    }
    {
      Vec rres(N * C), rout(N * C), rm(N), rr(N);
      cpu_->matmul_residual_layernorm_forward(rres.data(), rout.data(), rm.data(), rr.data(), a.data(), inp.data(),
                                              pw.data(), pb.data(), w.data(), bias.data(), N, IN, C, 1e-5f, p);
      auto da = up(a);
      auto di = up(inp);
      auto dpw = up(pw);
      auto dpb = up(pb);
      auto dw = up(w);
      auto dbias = up(bias);
      DeviceBuffer out = dev_f32(N * C), m = dev_f32(N), r = dev_f32(N);
      // The residual written over res (allowed: it may alias res).
      gpu_->matmul_residual_layernorm_forward(da.data<float>(), out.data<float>(), m.data<float>(), r.data<float>(),
                                              da.data<float>(), di.data<float>(), dpw.data<float>(), dpb.data<float>(),
                                              dw.data<float>(), dbias.data<float>(), N, IN, C, 1e-5f, p);
      EXPECT_LT(rel_err(down(da), rres), tol) << pn;
      EXPECT_LT(rel_err(down(out), rout), tol) << pn;
      EXPECT_LT(rel_err(down(m), rm), tol) << pn;
      EXPECT_LT(rel_err(down(r), rr), tol) << pn;
    }
  }
}

TEST_F(CudaOps, FusedMatmulGelu) {
  // OUT 80 and F 80: the epilogue paths (aux leading dimension a multiple of 8); 81: the
  // default sequence on the GPU's ops.
  for (int64_t OUT : {int64_t{80}, int64_t{81}}) {
    for (Precision p : {Precision::kFp32, Precision::kBf16}) {
      const int64_t N = 70, IN = 48;
      const double tol = p == Precision::kBf16 ? kTolBf16 : OUT % 8 == 0 ? kTolEpilogue : kTolF32;
      const std::string what = std::string(precision_name(p)) + " OUT " + std::to_string(OUT);
      Vec inp = randn(N * IN, 77), w = randn(IN * OUT, 78, 0.3f), bias = randn(OUT, 79);
      Vec rout(N * OUT), rpre(N * OUT);
      cpu_->matmul_gelu_forward(rout.data(), rpre.data(), inp.data(), w.data(), bias.data(), N, IN, OUT, p);
      auto di = up(inp);
      auto dw = up(w);
      auto db = up(bias);
      DeviceBuffer out = dev_f32(N * OUT), pre = dev_f32(N * OUT);
      gpu_->matmul_gelu_forward(out.data<float>(), pre.data<float>(), di.data<float>(), dw.data<float>(),
                                db.data<float>(), N, IN, OUT, p);
      EXPECT_LT(rel_err(down(pre), rpre), tol) << what;
      EXPECT_LT(rel_err(down(out), rout), tol) << what;

      // The backward of the next product (IN2 = OUT, the MLP's F; OUT2 = 48), input gelu(pre).
      const int64_t IN2 = OUT, OUT2 = 48;
      Vec g = randn(N * OUT2, 80), w2 = randn(IN2 * OUT2, 81, 0.3f), dw0 = randn(IN2 * OUT2, 82), db0 = randn(OUT2, 83);
      Vec rdi(N * IN2), rdw = dw0, rdb = db0;
      cpu_->matmul_gelu_backward(rdi.data(), rdw.data(), rdb.data(), g.data(), rout.data(), w2.data(), rpre.data(), N,
                                 IN2, OUT2, p);
      auto dg = up(g);
      auto dw2 = up(w2);
      auto ddw = up(dw0);
      auto ddb = up(db0);
      auto dinp = up(rout);
      auto dpre = up(rpre);
      DeviceBuffer ddi = dev_f32(N * IN2);
      gpu_->matmul_gelu_backward(ddi.data<float>(), ddw.data<float>(), ddb.data<float>(), dg.data<float>(),
                                 dinp.data<float>(), dw2.data<float>(), dpre.data<float>(), N, IN2, OUT2, p);
      EXPECT_LT(rel_err(down(ddi), rdi), tol) << what;
      EXPECT_LT(rel_err(down(ddw), rdw), kTolF32) << what;
      EXPECT_LT(rel_err(down(ddb), rdb), kTolF32) << what;
    }
  }
}

TEST_F(CudaOps, FusedAdamwCopy) {
  const int64_t n = 10007;
  for (Precision prec : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    Vec p = randn(n, 84), g = randn(n, 85), m = randn(n, 86, 0.1f), v = randn(n, 87, 0.1f), copy(n);
    for (auto& x : v) x = std::fabs(x);
    auto dp = up(p);
    auto dg = up(g);
    auto dm = up(m);
    auto dv = up(v);
    DeviceBuffer dc = dev_f32(n);
    cpu_->adamw_copy(p.data(), copy.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f,
                     prec);
    gpu_->adamw_copy(dp.data<float>(), dc.data<float>(), dg.data<float>(), dm.data<float>(), dv.data<float>(), n, 1e-3f,
                     0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f, prec);
    const Vec gp = down(dp);
    EXPECT_LT(rel_err(gp, p), kTolElem) << precision_name(prec);
    EXPECT_LT(rel_err(down(dm), m), kTolElem) << precision_name(prec);
    EXPECT_LT(rel_err(down(dv), v), kTolElem) << precision_name(prec);
    // The copy is exactly the GPU's own master weights rounded (as round_to would).
    Vec want = gp;
    for (auto& x : want) x = round_to(prec, x);
    EXPECT_EQ(rel_err(down(dc), want), 0.0) << precision_name(prec);
  }
}

// ---------------------------------------------------------------------------------------
// bf16

TEST_F(CudaOps, GemmBf16) {
  const int64_t M = 64, N = 96, K = 80;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      Vec A = rounded(randn(M * K, 40)), B = rounded(randn(K * N, 41)), C = randn(M * N, 42);
      Vec ref = C;
      cpu_->gemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 1.0f, ref.data(), N);
      auto dA = up16(A);
      auto dB = up16(B);
      auto dC = up(C);
      gpu_->gemm(ta, tb, M, N, K, 1.0f, v16(dA), lda, v16(dB), ldb, 1.0f, dC.data<float>(), N);
      EXPECT_LT(rel_err(down(dC), ref), kTolF32) << "fp32 C, trans " << ta << tb;  // fp32 accumulation
      Vec ref16(M * N, 0.0f);
      cpu_->gemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, ref16.data(), N);
      DeviceBuffer dC16 = dev_bf16(M * N);
      gpu_->gemm(ta, tb, M, N, K, 1.0f, v16(dA), lda, v16(dB), ldb, 0.0f, v16(dC16), N);
      EXPECT_LT(rel_err(down(dC16), ref16), kTolBf16) << "bf16 C, trans " << ta << tb;
    }
  }
}

TEST_F(CudaOps, MatmulBf16Epilogues) {
  const int64_t N = 128, IN = 64, OUT = 192;
  Vec inp = rounded(randn(N * IN, 43)), w = rounded(randn(IN * OUT, 44, 0.1f)), bias = rounded(randn(OUT, 45));
  Vec pre(N * OUT), act(N * OUT);
  cpu_->matmul_forward(pre.data(), inp.data(), w.data(), bias.data(), N, IN, OUT, false);
  cpu_->gelu_forward(act.data(), pre.data(), N * OUT);
  auto di = up16(inp);
  auto dw = up16(w);
  auto db = up16(bias);
  DeviceBuffer out = dev_bf16(N * OUT), dpre = dev_bf16(N * OUT);
  gpu_->matmul_forward(v16(out), v16(di), v16(dw), v16(db), N, IN, OUT, false);
  EXPECT_LT(rel_err(down(out), pre), kTolBf16);
  gpu_->matmul_gelu_forward(v16(out), v16(dpre), v16(di), v16(dw), v16(db), N, IN, OUT, Precision::kBf16);
  EXPECT_LT(rel_err(down(dpre), pre), kTolBf16);
  EXPECT_LT(rel_err(down(out), act), kTolBf16);

  // Backward of the next layer (IN2 = OUT) through the fused GELU: dinp = (g w2^T) * gelu'(pre).
  const int64_t OUT2 = 48;
  Vec w2 = rounded(randn(OUT * OUT2, 46, 0.1f)), g = rounded(randn(N * OUT2, 47));
  const Vec prer = rounded(pre), actr = rounded(act);
  Vec rda(N * OUT), rdw = randn(OUT * OUT2, 48), rdb = randn(OUT2, 49);
  auto ddw = up(rdw);
  auto ddb = up(rdb);
  cpu_->matmul_backward(rda.data(), rdw.data(), rdb.data(), g.data(), actr.data(), w2.data(), N, OUT, OUT2);
  cpu_->gelu_backward(rda.data(), prer.data(), rda.data(), N * OUT);
  auto dw2 = up16(w2);
  auto dg = up16(g);
  auto dact = up16(actr);
  auto dpr = up16(prer);
  DeviceBuffer dda = dev_bf16(N * OUT);
  gpu_->matmul_gelu_backward(v16(dda), ddw.data<float>(), ddb.data<float>(), v16(dg), v16(dact), v16(dw2), v16(dpr), N,
                             OUT, OUT2, Precision::kBf16);
  EXPECT_LT(rel_err(down(dda), rda), kTolBf16);
  EXPECT_LT(rel_err(down(ddw), rdw), kTolF32);  // fp32 C from bf16 inputs
  EXPECT_LT(rel_err(down(ddb), rdb), kTolF32);
}

TEST_F(CudaOps, LayerNormBf16WithResidual) {
  const int64_t N = 256, C = 768;
  Vec a = rounded(randn(N * C, 50)), b = rounded(randn(N * C, 51)), w = rounded(randn(C, 52)),
      bias = rounded(randn(C, 53)), g = rounded(randn(N * C, 54));
  Vec res(N * C);
  for (int64_t i = 0; i < N * C; ++i) res[i] = round_bf16(a[i] + b[i]);
  Vec ro(N * C), rm(N), rr(N);
  cpu_->layernorm_forward(ro.data(), rm.data(), rr.data(), res.data(), w.data(), bias.data(), N, C, 1e-5f);
  auto da = up16(a);
  auto dbb = up16(b);
  auto dw = up16(w);
  auto dbias = up16(bias);
  DeviceBuffer dres = dev_bf16(N * C), o = dev_bf16(N * C);
  DeviceBuffer m = dev_f32(N), r = dev_f32(N);
  gpu_->residual_layernorm_forward(v16(dres), v16(o), m.data<float>(), r.data<float>(), v16(da), v16(dbb), v16(dw),
                                   v16(dbias), N, C, 1e-5f, Precision::kBf16);
  EXPECT_EQ(rel_err(down(dres), res), 0.0);
  EXPECT_LT(rel_err(down(o), ro), kTolBf16);
  EXPECT_LT(rel_err(down(m), rm), kTolF32);
  EXPECT_LT(rel_err(down(r), rr), kTolF32);

  Vec rdi = rounded(randn(N * C, 55)), rdw = randn(C, 56), rdb = randn(C, 57);
  auto ddi = up16(rdi);
  auto ddw = up(rdw);
  auto ddb = up(rdb);
  auto dg = up16(g);
  cpu_->layernorm_backward(rdi.data(), rdw.data(), rdb.data(), g.data(), res.data(), w.data(), rm.data(), rr.data(), N,
                           C);
  gpu_->layernorm_backward(v16(ddi), ddw.data<float>(), ddb.data<float>(), v16(dg), v16(dres), v16(dw), m.data<float>(),
                           r.data<float>(), N, C);
  EXPECT_LT(rel_err(down(ddi), rdi), kTolBf16);
  EXPECT_LT(rel_err(down(ddw), rdw), kTolF32 * 10);
  EXPECT_LT(rel_err(down(ddb), rdb), kTolF32);
}

TEST_F(CudaOps, CrossEntropyBf16) {
  const int64_t N = 16, V = 50257, Vp = 50304;
  Vec logits = rounded(randn(N * Vp, 58, 2.0f));
  std::vector<int32_t> tgt(N);
  for (int64_t i = 0; i < N; ++i) tgt[i] = static_cast<int32_t>((i * 7919) % V);
  Vec ref = logits, rl(N);
  cpu_->softmax_cross_entropy(ref.data(), rl.data(), tgt.data(), N, V, Vp, 1.0f / N);
  auto dl = up16(logits);
  auto dt = up(tgt);
  DeviceBuffer losses = dev_f32(N);
  gpu_->softmax_cross_entropy(v16(dl), losses.data<float>(), dt.data<int32_t>(), N, V, Vp, 1.0f / N);
  EXPECT_LT(rel_err(down(losses), rl), kTolF32);
  EXPECT_LT(rel_err(down(dl), ref), kTolBf16);
}

TEST_F(CudaOps, EmbeddingBf16) {
  const int64_t B = 4, T = 64, C = 96, V = 100;
  std::vector<int32_t> tok(B * T);
  std::mt19937 gen(59);
  for (auto& t : tok) t = static_cast<int32_t>(gen() % V);
  Vec wte = rounded(randn(V * C, 60)), wpe = rounded(randn(T * C, 61)), g = rounded(randn(B * T * C, 62));
  Vec ref(B * T * C);
  cpu_->embedding_forward(ref.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  auto dt = up(tok);
  auto dwte = up16(wte);
  auto dwpe = up16(wpe);
  auto dg = up16(g);
  DeviceBuffer out = dev_bf16(B * T * C);
  gpu_->embedding_forward(v16(out), dt.data<int32_t>(), v16(dwte), v16(dwpe), B, T, C);
  EXPECT_LT(rel_err(down(out), ref), kTolBf16);
  Vec rdwte(V * C, 0.0f), rdwpe(T * C, 0.0f);
  cpu_->embedding_backward(rdwte.data(), rdwpe.data(), g.data(), tok.data(), B, T, C);
  DeviceBuffer ddwte = dev_f32(V * C, true), ddwpe = dev_f32(T * C, true);
  gpu_->embedding_backward(ddwte.data<float>(), ddwpe.data<float>(), v16(dg), dt.data<int32_t>(), B, T, C);
  EXPECT_LT(rel_err(down(ddwte), rdwte), kTolElem);
  EXPECT_LT(rel_err(down(ddwpe), rdwpe), kTolElem);
}

// A dtype pattern the bf16 kernels do not cover (bf16 activations, fp32 LayerNorm weights: the
// GPT's storage policy) goes to Backend's default: staged through the backend's fp32 arena
// (decode_16 / encode_16 kernels) around its fp32 kernels. Against the cpu's typed op on the same
// views: the fp32 tolerance on the fp32 statistics, the bf16 one on the bf16 output.
TEST_F(CudaOps, TypedOpsStageTheOtherPatterns) {
  const int64_t N = 64, C = 96;
  const Vec x = rounded(randn(N * C, 67)), w = randn(C, 68), b = randn(C, 69);
  std::vector<uint16_t> x16(x.size()), ro16(N * C);
  cast_to_16_ref(x16.data(), x.data(), N * C, DType::kBF16);
  Vec rm(N), rr(N);
  cpu_->layernorm_forward(View(ro16.data(), DType::kBF16), rm.data(), rr.data(), CView(x16.data(), DType::kBF16),
                          w.data(), b.data(), N, C, 1e-5f);
  Vec ro(N * C);
  cast_from_16_ref(ro.data(), ro16.data(), N * C, DType::kBF16, false);
  auto dx = up16(x);
  auto dw = up(w);
  auto db = up(b);
  DeviceBuffer o = dev_bf16(N * C);
  DeviceBuffer m = dev_f32(N), r = dev_f32(N);
  gpu_->layernorm_forward(v16(o), m.data<float>(), r.data<float>(), v16(dx), dw.data<float>(), db.data<float>(), N, C,
                          1e-5f);
  EXPECT_LT(rel_err(down(o), ro), kTolBf16);
  EXPECT_LT(rel_err(down(m), rm), kTolF32);
  EXPECT_LT(rel_err(down(r), rr), kTolF32);
  EXPECT_GE(gpu_->staging_high_water(), 2 * N * C);  // x and out staged
}

struct FlashShape {
  int64_t B, T, C, NH;
};

void PrintTo(const FlashShape& s, std::ostream* os) {
  *os << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH;
}

class CudaFlash : public CudaOps, public ::testing::WithParamInterface<FlashShape> {};

// lse reference: log sum_j exp(scale q.k_j) over j <= i, in double; qkv (B,T,3C).
Vec lse_reference(const Vec& qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  Vec rlse(B * NH * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv.data() + (b * T + i) * 3 * C + h * hs;
        double mx = -1e300;
        std::vector<double> s(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = qkv.data() + (b * T + j) * 3 * C + C + h * hs;
          double d = 0.0;
          for (int64_t e = 0; e < hs; ++e) d += static_cast<double>(q[e]) * k[e];
          s[j] = d / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (double x : s) sum += std::exp(x - mx);
        rlse[(b * NH + h) * T + i] = static_cast<float>(mx + std::log(sum));
      }
  return rlse;
}

// The normalised error of each of q, k, v's parts of a (B*T, 3C) gradient against the reference.
void expect_qkv_parts_near(const Vec& got, const Vec& ref, int64_t N, int64_t C, double tol, const char* what) {
  for (int part = 0; part < 3; ++part) {
    Vec x, r;
    for (int64_t row = 0; row < N; ++row)
      for (int64_t c = 0; c < C; ++c) {
        x.push_back(got[row * 3 * C + part * C + c]);
        r.push_back(ref[row * 3 * C + part * C + c]);
      }
    EXPECT_LT(rel_err(x, r), tol) << what << ": part " << "qkv"[part];
  }
}

TEST_P(CudaFlash, ForwardBackwardAgainstCpu) {
  const auto [B, T, C, NH] = GetParam();
  Vec qkv = rounded(randn(B * T * 3 * C, 63)), g = rounded(randn(B * T * C, 64));
  Vec ro(B * T * C), ratt(B * NH * T * T), rd(B * T * 3 * C);
  cpu_->attention_forward(ro.data(), ratt.data(), qkv.data(), B, T, C, NH);
  cpu_->attention_backward(rd.data(), g.data(), qkv.data(), ratt.data(), B, T, C, NH);
  const Vec rlse = lse_reference(qkv, B, T, C, NH);
  auto dq = up16(qkv);
  auto dg = up16(g);
  DeviceBuffer o = dev_bf16(B * T * C), d = dev_bf16(B * T * 3 * C), d2 = dev_bf16(B * T * 3 * C);
  DeviceBuffer lse = dev_f32(B * NH * T);
  gpu_->attention_forward_lse(v16(o), lse.data<float>(), v16(dq), B, T, C, NH);
  EXPECT_LT(rel_err(down(o), ro), kTolFlash);
  EXPECT_LT(rel_err(down(lse), rlse), 1e-4);
  gpu_->attention_backward_lse(v16(d), v16(dg), v16(dq), v16(o), lse.data<float>(), B, T, C, NH);
  // The backward reads the forward's bf16 output for D = rowsum(dO O): compare per part.
  const Vec gd = down(d);
  expect_qkv_parts_near(gd, rd, B * T, C, kTolFlash, "attention_backward_lse (bf16)");
  gpu_->attention_backward_lse(v16(d2), v16(dg), v16(dq), v16(o), lse.data<float>(), B, T, C, NH);
  const Vec gd2 = down(d2);
  EXPECT_EQ(std::memcmp(gd.data(), gd2.data(), gd.size() * sizeof(float)), 0) << "backward not deterministic";
}

// The optional fused pair attention_forward_lse / attention_backward_lse: the same flash
// kernels behind fp32 pointers (bf16 in scratch). Inputs are bf16 values, so the conversion is
// exact and the bf16 path's tolerances apply; the results equal the typed ops' on bf16 views (the bf16 kernels) bit for bit.
TEST_P(CudaFlash, Fp32InterfaceLseAgainstCpu) {
  const auto [B, T, C, NH] = GetParam();
  ASSERT_TRUE(gpu_->offers(FusedOp::kAttentionLse));
  ASSERT_TRUE(gpu_->attention_lse_supports(C, NH, Precision::kBf16));
  Vec qkv = rounded(randn(B * T * 3 * C, 65)), g = rounded(randn(B * T * C, 66));
  Vec ro(B * T * C), ratt(B * NH * T * T), rd(B * T * 3 * C);
  cpu_->attention_forward(ro.data(), ratt.data(), qkv.data(), B, T, C, NH);
  cpu_->attention_backward(rd.data(), g.data(), qkv.data(), ratt.data(), B, T, C, NH);
  auto dq = up(qkv);
  auto dg = up(g);
  DeviceBuffer o = dev_f32(B * T * C), lse = dev_f32(B * NH * T), d = dev_f32(B * T * 3 * C);
  gpu_->attention_forward_lse(o.data<float>(), lse.data<float>(), dq.data<float>(), B, T, C, NH);
  const Vec go = down(o);
  EXPECT_LT(rel_err(go, ro), kTolFlash);
  EXPECT_LT(rel_err(down(lse), lse_reference(qkv, B, T, C, NH)), 1e-4);
  gpu_->attention_backward_lse(d.data<float>(), dg.data<float>(), dq.data<float>(), o.data<float>(), lse.data<float>(),
                               B, T, C, NH);
  const Vec gd = down(d);
  expect_qkv_parts_near(gd, rd, B * T, C, kTolFlash, "attention_backward_lse");
  // The typed ops on bf16 views of the same values (the bf16 kernels): the same bits.
  auto dq16 = up16(qkv);
  auto dg16 = up16(g);
  DeviceBuffer o16 = dev_bf16(B * T * C), d16 = dev_bf16(B * T * 3 * C);
  DeviceBuffer lse16 = dev_f32(B * NH * T);
  gpu_->attention_forward_lse(v16(o16), lse16.data<float>(), v16(dq16), B, T, C, NH);
  gpu_->attention_backward_lse(v16(d16), v16(dg16), v16(dq16), v16(o16), lse16.data<float>(), B, T, C, NH);
  EXPECT_EQ(rel_err(go, down(o16)), 0.0);
  EXPECT_EQ(rel_err(gd, down(d16)), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFlash,
                         ::testing::Values(FlashShape{2, 64, 128, 2},    // one tile, hs 64
                                           FlashShape{2, 130, 128, 2},   // ragged last tile
                                           FlashShape{1, 200, 256, 2},   // hs 128
                                           FlashShape{1, 1024, 768, 12}  // gpt2-124m
                                           ),
                         [](const auto& info) {
                           const FlashShape& s = info.param;
                           std::string name = "B";  // appended piece by piece: GCC 12's -Wrestrict
                           name += std::to_string(s.B);  // misfires on "literal" + std::string&&
                           name += "_T";
                           name += std::to_string(s.T);
                           name += "_C";
                           name += std::to_string(s.C);
                           name += "_NH";
                           name += std::to_string(s.NH);
                           return name;
                         });

TEST_F(CudaOps, DeviceBufferCountsBytes) {
  const int64_t before = memory_tracker().snapshot()[MemCategory::kActivations];
  {
    DeviceBuffer b(*gpu_, DType::kBF16, 1000, MemCategory::kActivations);
    EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kActivations] - before, 2000);
  }
  EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kActivations], before);
}

// The backend's own scratch (the cuBLASLt workspace, the reduction buffer, the scratch that
// grows on demand) comes from its device_alloc: counted as workspace while it lives, and all
// of it returned when the backend goes.
TEST_F(CudaOps, BackendScratchCountsAsWorkspace) {
  const int64_t before = memory_tracker().snapshot()[MemCategory::kWorkspace];
  {
    auto be = make_cuda_backend();
    const int64_t made = memory_tracker().snapshot()[MemCategory::kWorkspace] - before;
    EXPECT_GT(made, static_cast<int64_t>(gpu::Blas::kWorkspaceBytes));  // the Lt workspace and the reduction
    const int64_t N = 300, C = 200;
    auto x = to_device(*be, randn(N * C, 90), DType::kF32);
    auto w = to_device(*be, randn(C, 91), DType::kF32);
    auto g = to_device(*be, randn(N * C, 92), DType::kF32);
    DeviceBuffer dx(*be, DType::kF32, N * C), dw(*be, DType::kF32, C), db(*be, DType::kF32, C);
    DeviceBuffer m(*be, DType::kF32, N), r(*be, DType::kF32, N), o(*be, DType::kF32, N * C);
    be->layernorm_forward(o.data<float>(), m.data<float>(), r.data<float>(), x.data<float>(), w.data<float>(),
                          w.data<float>(), N, C, 1e-5f);
    be->layernorm_backward(dx.data<float>(), dw.data<float>(), db.data<float>(), g.data<float>(), x.data<float>(),
                           w.data<float>(), m.data<float>(), r.data<float>(), N, C);  // grows the scratch
    be->synchronize();
    EXPECT_GT(memory_tracker().snapshot()[MemCategory::kWorkspace] - before, made);
  }
  EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kWorkspace], before);
}

}  // namespace
}  // namespace weft::cuda
