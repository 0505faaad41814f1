// The optional fused ops of backend.h: each one's DEFAULT (src/backend/fused_defaults.cc)
// against the plain sequence of required ops written out here as the model calls it today
// (the spot in src/model/gpt.cc, src/parallel/tp/layers.cc or src/optim/optim.cc is named per
// case), BITWISE, on cpu and on cpu-guarded, with fp32, bf16 and fp16 rounding between the
// steps. Both sides run on device buffers of the backend under test (DeviceBuffer, filled with
// upload(), read back with download()), every tensor is compared byte for byte (inputs
// included: an op must not write what it only reads), and cpu-guarded's bits must equal cpu's.
// With a 16-bit precision the tensors the op rounds must hold 16-bit values afterwards, so
// that an equality of two unrounded results cannot pass for the rounded one.
// Also: neither backend offers any fused op, the flash-attention pair throws by default, and
// on cpu-guarded the defaults go through the checked ops (host memory is refused).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/device_buffer.h"
#include "backend_test_util.h"
#include "core/error.h"
#include "core/precision.h"

namespace weft {
namespace {

using test::randn;
using Vec = std::vector<float>;

Vec zeros(size_t n) { return Vec(n, 0.0f); }
Vec positive(size_t n, uint32_t seed) {  // |x| + 0.5: second moments
  Vec v = randn(n, seed);
  for (float& x : v) x = std::fabs(x) + 0.5f;
  return v;
}

// A case's fp32 tensors in device buffers of one backend.
class Bufs {
 public:
  Bufs(Backend& be, const std::vector<Vec>& ts) : be_(be) {
    for (const Vec& t : ts) bufs_.push_back(to_device(be, t, DType::kF32));
  }
  float* f(size_t k) { return bufs_.at(k).data<float>(); }
  std::vector<Vec> download() const {
    be_.synchronize();
    std::vector<Vec> out;
    for (const DeviceBuffer& b : bufs_) out.push_back(b.download<float>());
    return out;
  }

 private:
  Backend& be_;
  std::vector<DeviceBuffer> bufs_;
};

using Run = std::function<void(Backend&, Bufs&, Precision)>;

struct FusedCase {
  std::string name;
  std::vector<Vec> tensors;
  std::vector<size_t> rounded;  // tensors the op rounds to the precision (16-bit values after it)
  Run fused;                    // the fused op (its default on these backends)
  Run plain;                    // the model's sequence of required ops
};

constexpr float kEps = 1e-5f;

std::vector<FusedCase> layernorm_cases() {
  const int N = 9, C = 16, IN = 12;
  // residual, out, mean, rstd, a, b, w, bias
  const std::vector<Vec> rl = {zeros(N * C), zeros(N * C), zeros(N), zeros(N), randn(N * C, 1, 2.0f),
                               randn(N * C, 2), randn(C, 3), randn(C, 4)};
  // residual, out, mean, rstd, res, inp, w, bias, ln_w, ln_b
  const std::vector<Vec> mrl = {zeros(N * C), zeros(N * C),      zeros(N),      zeros(N),     randn(N * C, 5, 2.0f),
                                randn(N * IN, 6), randn(IN * C, 7, 0.3f), randn(C, 8), randn(C, 9), randn(C, 10)};
  return {
      // layers.cc, tp > 1: RowParallelLinear::forward's add(out, res, y) + round, then
      // SequenceParallelLayerNorm::forward's layernorm_forward + round.
      {"residual_layernorm_forward", rl, {0, 1},
       [=](Backend& be, Bufs& d, Precision p) {
         be.residual_layernorm_forward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), d.f(6), d.f(7), N, C, kEps, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.add(d.f(0), d.f(4), d.f(5), N * C);
         be.round_to(d.f(0), N * C, p);
         be.layernorm_forward(d.f(1), d.f(2), d.f(3), d.f(0), d.f(6), d.f(7), N, C, kEps);
         be.round_to(d.f(1), N * C, p);
       }},
      // The residual written over its first summand (allowed: add's out may alias).
      {"residual_layernorm_forward_in_place", rl, {1, 4},
       [=](Backend& be, Bufs& d, Precision p) {
         be.residual_layernorm_forward(d.f(4), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), d.f(6), d.f(7), N, C, kEps, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.add(d.f(4), d.f(4), d.f(5), N * C);
         be.round_to(d.f(4), N * C, p);
         be.layernorm_forward(d.f(1), d.f(2), d.f(3), d.f(4), d.f(6), d.f(7), N, C, kEps);
         be.round_to(d.f(1), N * C, p);
       }},
      // gpt.cc layer_forward at tp = 1: row_.forward(a.res2, x, a.atty, ...) (layers.cc
      // RowParallelLinear::forward: add_bias, matmul_forward accumulating, round) then
      // ln_.forward(a.ln2, ...) (layernorm_forward, round); likewise res3 and the next ln1 / lnf.
      {"matmul_residual_layernorm_forward", mrl, {0, 1},
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_residual_layernorm_forward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), d.f(6), d.f(7), d.f(8),
                                              d.f(9), N, IN, C, kEps, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.add_bias(d.f(0), d.f(4), d.f(7), N, C);
         be.matmul_forward(d.f(0), d.f(5), d.f(6), nullptr, N, IN, C, true);
         be.round_to(d.f(0), N * C, p);
         be.layernorm_forward(d.f(1), d.f(2), d.f(3), d.f(0), d.f(8), d.f(9), N, C, kEps);
         be.round_to(d.f(1), N * C, p);
       }},
      {"matmul_residual_layernorm_forward_no_bias", mrl, {0, 1},
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_residual_layernorm_forward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), d.f(6), nullptr, d.f(8),
                                              d.f(9), N, IN, C, kEps, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.add_bias(d.f(0), d.f(4), nullptr, N, C);
         be.matmul_forward(d.f(0), d.f(5), d.f(6), nullptr, N, IN, C, true);
         be.round_to(d.f(0), N * C, p);
         be.layernorm_forward(d.f(1), d.f(2), d.f(3), d.f(0), d.f(8), d.f(9), N, C, kEps);
         be.round_to(d.f(1), N * C, p);
       }},
  };
}

std::vector<FusedCase> gelu_cases() {
  const int N = 9, IN = 12, OUT = 20;
  // out, pre, inp, w, bias
  const std::vector<Vec> fwd = {zeros(N * OUT), zeros(N * OUT), randn(N * IN, 11), randn(IN * OUT, 12, 0.5f),
                                randn(OUT, 13)};
  // MLP backward: the product c_proj (IN = F, OUT = C) whose input was gelu(pre).
  // dinp, dw, dbias, dout, inp, w, pre
  const std::vector<Vec> bwd = {zeros(N * IN),      randn(IN * OUT, 14), randn(OUT, 15),    randn(N * OUT, 16),
                                randn(N * IN, 17), randn(IN * OUT, 18, 0.5f), randn(N * IN, 19, 2.0f)};
  return {
      // gpt.cc layer_forward: column_.forward(a.fch, a.ln2, ...) (layers.cc
      // ColumnParallelLinear::forward: matmul_forward, round), gelu_forward(a.fch_gelu, a.fch), rnd.
      {"matmul_gelu_forward", fwd, {0, 1},
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_gelu_forward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), N, IN, OUT, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_forward(d.f(1), d.f(2), d.f(3), d.f(4), N, IN, OUT, false);
         be.round_to(d.f(1), N * OUT, p);
         be.gelu_forward(d.f(0), d.f(1), N * OUT);
         be.round_to(d.f(0), N * OUT, p);
       }},
      {"matmul_gelu_forward_no_bias", fwd, {0, 1},
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_gelu_forward(d.f(0), d.f(1), d.f(2), d.f(3), nullptr, N, IN, OUT, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_forward(d.f(1), d.f(2), d.f(3), nullptr, N, IN, OUT, false);
         be.round_to(d.f(1), N * OUT, p);
         be.gelu_forward(d.f(0), d.f(1), N * OUT);
         be.round_to(d.f(0), N * OUT, p);
       }},
      // gpt.cc layer_backward: row_.backward(ws_.dF, lg.fcprojw, lg.fcprojb, ws_.dres,
      // a.fch_gelu, ...) (layers.cc RowParallelLinear::backward: matmul_backward, round), then
      // gelu_backward(ws_.dF, a.fch, ws_.dF) in place, rnd.
      {"matmul_gelu_backward", bwd, {0},
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_gelu_backward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), d.f(6), N, IN, OUT, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_backward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), N, IN, OUT);
         be.round_to(d.f(0), N * IN, p);
         be.gelu_backward(d.f(0), d.f(6), d.f(0), N * IN);
         be.round_to(d.f(0), N * IN, p);
       }},
      {"matmul_gelu_backward_no_dbias", bwd, {0},
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_gelu_backward(d.f(0), d.f(1), nullptr, d.f(3), d.f(4), d.f(5), d.f(6), N, IN, OUT, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.matmul_backward(d.f(0), d.f(1), nullptr, d.f(3), d.f(4), d.f(5), N, IN, OUT);
         be.round_to(d.f(0), N * IN, p);
         be.gelu_backward(d.f(0), d.f(6), d.f(0), N * IN);
         be.round_to(d.f(0), N * IN, p);
       }},
  };
}

std::vector<FusedCase> adamw_cases() {
  const int n = 5003, n1 = 1999;  // n1: a range boundary inside the buffer
  // p (master), copy, g, m, v
  const std::vector<Vec> t = {randn(n, 21), zeros(n), randn(n, 22), randn(n, 23, 0.1f), positive(n, 24)};
  return {
      // optim.cc AdamW::step with master weights, one range: adamw on the master, then
      // copy_device(params, master) and round_to(params).
      {"adamw_copy", t, {1},
       [=](Backend& be, Bufs& d, Precision p) {
         be.adamw_copy(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.75f, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.adamw(d.f(0), d.f(2), d.f(3), d.f(4), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.75f);
         be.copy_device(d.f(1), 0, d.f(0), 0, n * sizeof(float));
         be.round_to(d.f(1), n, p);
       }},
      // AdamW::step as it is: adamw per decay range (two here, decay on the first only), then
      // ONE copy and rounding of the whole buffer; the fused op per range gives the same bits
      // (the wiring replaces the loop's adamw by adamw_copy and drops the whole-buffer copy).
      {"adamw_copy_by_ranges", t, {1},
       [=](Backend& be, Bufs& d, Precision p) {
         be.adamw_copy(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), n1, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.75f, p);
         be.adamw_copy(d.f(0) + n1, d.f(1) + n1, d.f(2) + n1, d.f(3) + n1, d.f(4) + n1, n - n1, 1e-2f, 0.9f, 0.95f,
                       1e-8f, 0.0f, 3, 0.75f, p);
       },
       [=](Backend& be, Bufs& d, Precision p) {
         be.adamw(d.f(0), d.f(2), d.f(3), d.f(4), n1, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.75f);
         be.adamw(d.f(0) + n1, d.f(2) + n1, d.f(3) + n1, d.f(4) + n1, n - n1, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 3,
                  0.75f);
         be.copy_device(d.f(1), 0, d.f(0), 0, n * sizeof(float));
         be.round_to(d.f(1), n, p);
       }},
  };
}

const std::vector<FusedCase>& cases() {
  static const std::vector<FusedCase> table = [] {
    std::vector<FusedCase> t;
    for (auto part : {layernorm_cases, gelu_cases, adamw_cases}) {
      for (FusedCase& c : part()) t.push_back(std::move(c));
    }
    return t;
  }();
  return table;
}

std::vector<Vec> run(Backend& be, const FusedCase& c, const Run& fn, Precision p) {
  Bufs d(be, c.tensors);
  fn(be, d, p);
  return d.download();
}

bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using Param = std::tuple<size_t, std::string, Precision>;

class FusedOps : public ::testing::TestWithParam<Param> {};

std::string case_name(const ::testing::TestParamInfo<Param>& info) {
  const std::string& backend = std::get<1>(info.param);
  return test::param_name(backend + "_" + precision_name(std::get<2>(info.param)) + "_" +
                          cases()[std::get<0>(info.param)].name);
}

TEST_P(FusedOps, DefaultIsThePlainSequence) {
  const auto& [k, backend, p] = GetParam();
  const FusedCase& c = cases()[k];
  auto be = test::make_test_backend(backend);
  const std::vector<Vec> fused = run(*be, c, c.fused, p);
  const std::vector<Vec> plain = run(*be, c, c.plain, p);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t t = 0; t < fused.size(); ++t) {
    EXPECT_TRUE(same_bits(fused[t], plain[t])) << c.name << ": tensor " << t << " differs from the plain sequence";
  }
  // Not vacuous: what the op writes changed, and what it rounds holds 16-bit values.
  for (size_t t : c.rounded) {
    EXPECT_FALSE(same_bits(fused[t], c.tensors[t])) << c.name << ": tensor " << t << " was not written";
    if (p == Precision::kFp32) continue;
    for (size_t i = 0; i < fused[t].size(); ++i) {
      const float x = fused[t][i];
      ASSERT_EQ(round_to(p, x), x) << c.name << ": tensor " << t << "[" << i << "] is not a " << precision_name(p)
                                   << " value";
    }
  }
  // cpu-guarded gives cpu's bits.
  if (backend != "cpu") {
    auto cpu = make_cpu_backend();
    const std::vector<Vec> ref = run(*cpu, c, c.fused, p);
    for (size_t t = 0; t < fused.size(); ++t) {
      EXPECT_TRUE(same_bits(fused[t], ref[t])) << c.name << ": tensor " << t << " differs from cpu's";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, FusedOps,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values(std::string("cpu"), std::string("cpu-guarded")),
                                            ::testing::Values(Precision::kFp32, Precision::kBf16, Precision::kFp16)),
                         case_name);

// Every fused op with a default sequence has a case; kAttentionLse is checked below.
TEST(FusedOpsTable, CoversEveryOp) {
  std::set<std::string> names;
  for (const FusedCase& c : cases()) names.insert(c.name);
  for (FusedOp op : kFusedOps) {
    if (op == FusedOp::kAttentionLse) continue;
    EXPECT_TRUE(names.count(fused_op_name(op))) << fused_op_name(op) << " has no case";
  }
  std::set<std::string> all;
  for (FusedOp op : kFusedOps) all.insert(fused_op_name(op));
  EXPECT_EQ(all.size(), std::size(kFusedOps)) << "two fused ops share a name";
}

class FusedOpsOffers : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedOpsOffers, NoneOfferedAndFlashAttentionThrows) {
  auto be = test::make_test_backend(GetParam());
  for (FusedOp op : kFusedOps) EXPECT_FALSE(be->offers(op)) << fused_op_name(op);
  EXPECT_FALSE(be->attention_lse_supports(256, 4, Precision::kBf16));
  const int64_t B = 1, T = 4, C = 8, NH = 2;
  DeviceBuffer out(*be, DType::kF32, B * T * C), lse(*be, DType::kF32, B * NH * T),
      qkv(*be, DType::kF32, B * T * 3 * C), dqkv(*be, DType::kF32, B * T * 3 * C);
  try {
    be->attention_forward_lse(out.data<float>(), lse.data<float>(), qkv.data<float>(), B, T, C, NH);
    FAIL() << "attention_forward_lse did not throw";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("attention_forward_lse"), std::string::npos) << m;
    EXPECT_NE(m.find(be->name()), std::string::npos) << m;
    EXPECT_NE(m.find("offers(FusedOp::kAttentionLse)"), std::string::npos) << m;
  }
  EXPECT_THROW(be->attention_backward_lse(dqkv.data<float>(), out.data<float>(), qkv.data<float>(), out.data<float>(),
                                          lse.data<float>(), B, T, C, NH),
               RuntimeError);
}

INSTANTIATE_TEST_SUITE_P(Backends, FusedOpsOffers, ::testing::Values(std::string("cpu"), std::string("cpu-guarded")),
                         [](const auto& info) { return test::param_name(info.param); });

// On cpu-guarded the defaults run through the checked required ops: host memory given to a
// fused op is refused like host memory given to any op.
TEST(FusedOpsGuarded, HostMemoryIsRefused) {
  auto be = make_cpu_guarded_backend();
  const int N = 3, C = 8;
  DeviceBuffer res(*be, DType::kF32, N * C), out(*be, DType::kF32, N * C), mean(*be, DType::kF32, N),
      rstd(*be, DType::kF32, N), b(*be, DType::kF32, N * C), w(*be, DType::kF32, C), bias(*be, DType::kF32, C);
  Vec host_a = randn(N * C, 31);
  try {
    be->residual_layernorm_forward(res.data<float>(), out.data<float>(), mean.data<float>(), rstd.data<float>(),
                                   host_a.data(), b.data<float>(), w.data<float>(), bias.data<float>(), N, C, kEps,
                                   Precision::kFp32);
    FAIL() << "host memory was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu-guarded: add: argument 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
