// The typed ops of backend.h: every op over 16-bit views (bf16, f16) against the same op over
// f32 views of the widened values with its 16-bit outputs rounded afterwards, BITWISE, on cpu
// and cpu-guarded. That is the contract's definition of a 16-bit operand (widen exactly on read,
// round to nearest even once on write) and what makes a run with real 16-bit tensors equal to
// the emulated one (round_to after every op). Two placements per op: the activations 16-bit
// (statistics and weight gradients f32, as a mixed-precision run stores them), and every tensor
// 16-bit (accumulating operands included). Every tensor is compared, inputs too (an op must
// not write what it only reads). Also: the staging pool counts as workspace and is freed,
// convert() round-trips, bad dtypes and a 16-bit table without its row count are refused, and
// cpu-guarded faults on a host read of a 16-bit buffer.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/device_buffer.h"
#include "backend_test_util.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/precision.h"
#include "core/view.h"

namespace weft {
namespace {

using test::randn;
using Vec = std::vector<float>;

// One tensor of a case: its values and whether it is an activation (16-bit in both placements)
// or a statistic / weight gradient (16-bit only when every tensor is).
struct Tensor {
  Vec v;
  bool act = true;
};
Tensor act(Vec v) { return {std::move(v), true}; }
Tensor stat(Vec v) { return {std::move(v), false}; }
Vec positive(size_t n, uint32_t seed) {
  Vec v = randn(n, seed);
  for (float& x : v) x = std::fabs(x) + 0.5f;
  return v;
}
// Probability-like rows: positive, each row of `cols` summing to one.
Vec rows_softmax(size_t rows, size_t cols, uint32_t seed) {
  Vec v = positive(rows * cols, seed);
  for (size_t r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (size_t c = 0; c < cols; ++c) s += v[r * cols + c];
    for (size_t c = 0; c < cols; ++c) v[r * cols + c] /= s;
  }
  return v;
}

using Run = std::function<void(Backend&, std::vector<View>&)>;
struct Case {
  std::string name;
  std::vector<Tensor> tensors;
  Run run;
  std::vector<int32_t> tokens = {};  // device int32 ids when the op takes some
};

float round_to_dtype(float x, DType dt) {
  return dt == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x)) : f16_to_f32(f32_to_f16(x));
}

// Device buffers of a case: tensor k in dtype dts[k], uploaded from host fp32 values.
class TypedBufs {
 public:
  TypedBufs(Backend& be, const std::vector<Vec>& vals, const std::vector<DType>& dts) : be_(be), dts_(dts) {
    for (size_t k = 0; k < vals.size(); ++k) {
      const Vec& v = vals[k];
      if (dts[k] == DType::kF32) {
        bufs_.push_back(to_device(be, v, DType::kF32));
      } else {
        std::vector<uint16_t> h(v.size());
        cast_to_16_ref(h.data(), v.data(), static_cast<int64_t>(v.size()), dts[k]);
        bufs_.push_back(to_device(be, h, dts[k]));
      }
      views_.push_back(View(bufs_.back().raw(), dts[k]));
    }
  }
  std::vector<View>& views() { return views_; }
  std::vector<Vec> download() const {
    be_.synchronize();
    std::vector<Vec> out;
    for (size_t k = 0; k < bufs_.size(); ++k) {
      if (dts_[k] == DType::kF32) {
        out.push_back(bufs_[k].download<float>());
      } else {
        const std::vector<uint16_t> h = bufs_[k].download<uint16_t>();
        Vec f(h.size());
        cast_from_16_ref(f.data(), h.data(), static_cast<int64_t>(h.size()), dts_[k], false);
        out.push_back(std::move(f));
      }
    }
    return out;
  }

 private:
  Backend& be_;
  std::vector<DType> dts_;
  std::vector<DeviceBuffer> bufs_;
  std::vector<View> views_;
};

std::vector<Case> cases() {
  const int64_t N = 6, C = 8, IN = 8, OUT = 12, B = 2, T = 3, NH = 2, V = 10, Vp = 12, S = 3, K = 5, R = 4;
  const int64_t vrows = 7;
  std::vector<Case> cs;
  cs.push_back({"gemm_nt", {act(randn(5 * 8, 1)), act(randn(6 * 8, 2)), act(randn(5 * 6, 3))},
                [](Backend& be, std::vector<View>& t) { be.gemm(false, true, 5, 6, 8, 0.5f, t[0], 8, t[1], 8, 1.0f,
                                                                t[2], 6); }});
  cs.push_back({"gemm_tn_strided", {act(randn(8 * 7, 4)), act(randn(8 * 9, 5)), act(randn(7 * 10, 6))},
                [](Backend& be, std::vector<View>& t) { be.gemm(true, false, 7, 6, 8, 1.0f, t[0], 7, t[1], 9, 0.0f,
                                                                t[2], 10); }});
  cs.push_back({"matmul_forward", {act(randn(N * OUT, 7)), act(randn(N * IN, 8)), act(randn(IN * OUT, 9)),
                                   act(randn(OUT, 10))},
                [=](Backend& be, std::vector<View>& t) { be.matmul_forward(t[0], t[1], t[2], t[3], N, IN, OUT,
                                                                           false); }});
  cs.push_back({"matmul_forward_accumulate", {act(randn(N * OUT, 11)), act(randn(N * IN, 12)),
                                              act(randn(IN * OUT, 13))},
                [=](Backend& be, std::vector<View>& t) { be.matmul_forward(t[0], t[1], t[2], nullptr, N, IN, OUT,
                                                                           true); }});
  cs.push_back({"matmul_backward",
                {act(randn(N * IN, 14)), stat(randn(IN * OUT, 15)), stat(randn(OUT, 16)), act(randn(N * OUT, 17)),
                 act(randn(N * IN, 18)), act(randn(IN * OUT, 19))},
                [=](Backend& be, std::vector<View>& t) { be.matmul_backward(t[0], t[1], t[2], t[3], t[4], t[5], N, IN,
                                                                            OUT); }});
  cs.push_back({"embedding_forward", {act(randn(B * T * C, 20)), act(randn(vrows * C, 21)), act(randn(T * C, 22))},
                [=](Backend& be, std::vector<View>& t) {
                  // tokens: the case's device ids, passed as the last view's data (run_typed)
                  be.embedding_forward(t[0], static_cast<const int32_t*>(t.back().data), t[1], t[2], B, T, C, 2, vrows);
                },
                {0, 3, 8, 2, 5, 9}});
  cs.push_back({"embedding_backward", {stat(randn(vrows * C, 23)), stat(randn(T * C, 24)), act(randn(B * T * C, 25))},
                [=](Backend& be, std::vector<View>& t) {
                  be.embedding_backward(t[0], t[1], t[2], static_cast<const int32_t*>(t.back().data), B, T, C, 2,
                                        vrows);
                },
                {0, 3, 8, 2, 5, 9}});
  cs.push_back({"layernorm_forward",
                {act(randn(N * C, 26)), stat(randn(N, 27)), stat(randn(N, 28)), act(randn(N * C, 29)),
                 act(randn(C, 30)), act(randn(C, 31))},
                [=](Backend& be, std::vector<View>& t) { be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], N,
                                                                              C, 1e-5f); }});
  cs.push_back({"layernorm_backward",
                {act(randn(N * C, 32)), stat(randn(C, 33)), stat(randn(C, 34)), act(randn(N * C, 35)),
                 act(randn(N * C, 36)), act(randn(C, 37)), stat(randn(N, 38)), stat(positive(N, 39))},
                [=](Backend& be, std::vector<View>& t) {
                  be.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], N, C);
                }});
  cs.push_back({"add_bias", {act(randn(N * C, 40)), act(randn(N * C, 41)), act(randn(C, 42))},
                [=](Backend& be, std::vector<View>& t) { be.add_bias(t[0], t[1], t[2], N, C); }});
  cs.push_back({"add_in_place", {act(randn(N * C, 43)), act(randn(N * C, 44))},
                [=](Backend& be, std::vector<View>& t) { be.add(t[0], t[0], t[1], N * C); }});
  cs.push_back({"gelu_forward", {act(randn(N * C, 45)), act(randn(N * C, 46, 3.0f))},
                [=](Backend& be, std::vector<View>& t) { be.gelu_forward(t[0], t[1], N * C); }});
  cs.push_back({"gelu_backward_in_place", {act(randn(N * C, 47)), act(randn(N * C, 48, 3.0f))},
                [=](Backend& be, std::vector<View>& t) { be.gelu_backward(t[0], t[1], t[0], N * C); }});
  for (bool causal : {true, false}) {
    cs.push_back({causal ? "attention_forward" : "bidir_attention_forward",
                  {act(randn(B * T * C, 49)), act(randn(B * NH * T * T, 50)), act(randn(B * T * 3 * C, 51))},
                  [=](Backend& be, std::vector<View>& t) {
                    if (causal) be.attention_forward(t[0], t[1], t[2], B, T, C, NH);
                    else be.bidir_attention_forward(t[0], t[1], t[2], B, T, C, NH);
                  }});
    cs.push_back({causal ? "attention_backward" : "bidir_attention_backward",
                  {act(randn(B * T * 3 * C, 52)), act(randn(B * T * C, 53)), act(randn(B * T * 3 * C, 54)),
                   act(rows_softmax(B * NH * T, T, 55))},
                  [=](Backend& be, std::vector<View>& t) {
                    if (causal) be.attention_backward(t[0], t[1], t[2], t[3], B, T, C, NH);
                    else be.bidir_attention_backward(t[0], t[1], t[2], t[3], B, T, C, NH);
                  }});
  }
  cs.push_back({"query_attention_forward",
                {act(randn(N * C, 56)), act(randn(N * NH * S, 57)), act(randn(C, 58)), act(randn(S * N * 2 * C, 59))},
                [=](Backend& be, std::vector<View>& t) { be.query_attention_forward(t[0], t[1], t[2], t[3], N, S, C,
                    NH); }});
  cs.push_back({"query_attention_backward",
                {stat(randn(C, 60)), act(randn(S * N * 2 * C, 61)), act(randn(N * C, 62)), act(randn(C, 63)),
                 act(randn(S * N * 2 * C, 64)), act(rows_softmax(N * NH, S, 65))},
                [=](Backend& be, std::vector<View>& t) {
                  be.query_attention_backward(t[0], t[1], t[2], t[3], t[4], t[5], N, S, C, NH);
                }});
  cs.push_back({"weighted_mse",
                {stat(randn(R, 66)), act(randn(R * K, 67)), act(randn(R * K, 68)), act(randn(R * K, 69)),
                 act(positive(K, 70))},
                [=](Backend& be, std::vector<View>& t) { be.weighted_mse(t[0], t[1], t[2], t[3], t[4], R, K,
                                                                         0.25f); }});
  cs.push_back({"softmax_cross_entropy", {act(randn(N * Vp, 71, 2.0f)), stat(randn(N, 72))},
                [=](Backend& be, std::vector<View>& t) {
                  be.softmax_cross_entropy(t[0], t[1], static_cast<const int32_t*>(t.back().data), N, V, Vp, 0.5f);
                },
                {1, 9, 0, 4, 7, 3}});
  // The vocabulary-parallel phases, one op a case (each rounds its own outputs).
  const std::vector<int32_t> tg = {1, 9, 0, 4, 7, 3};
  const auto targets = [](std::vector<View>& t) { return static_cast<const int32_t*>(t.back().data); };
  cs.push_back({"ce_row_max", {act(randn(N * Vp, 73, 2.0f)), stat(randn(N, 74))},
                [=](Backend& be, std::vector<View>& t) { be.ce_row_max(t[0], N, Vp, V, t[1]); }});
  cs.push_back({"ce_row_sumexp", {act(randn(N * Vp, 75, 2.0f)), stat(randn(N, 76, 2.0f)), stat(randn(N, 77))},
                [=](Backend& be, std::vector<View>& t) { be.ce_row_sumexp(t[0], N, Vp, V, t[1], t[2]); }});
  cs.push_back({"ce_target_logit", {act(randn(N * Vp, 78, 2.0f)), stat(randn(N, 79))},
                [=](Backend& be, std::vector<View>& t) { be.ce_target_logit(t[0], N, Vp, V, targets(t), 2, t[1]); },
                tg});
  cs.push_back({"ce_loss", {stat(randn(N, 80)), stat(randn(N, 81)), stat(positive(N, 82)), stat(randn(N, 83))},
                [=](Backend& be, std::vector<View>& t) { be.ce_loss(t[0], t[1], t[2], t[3], N); }});
  cs.push_back({"ce_grad", {act(randn(N * Vp, 84, 2.0f)), stat(randn(N, 85, 2.0f)), stat(positive(N, 86))},
                [=](Backend& be, std::vector<View>& t) { be.ce_grad(t[0], N, Vp, V, t[1], t[2], targets(t), 2, 0.5f); },
                tg});
  cs.push_back({"residual_layernorm_forward",
                {act(randn(N * C, 78)), act(randn(N * C, 79)), stat(randn(N, 80)), stat(randn(N, 81)),
                 act(randn(N * C, 82)), act(randn(N * C, 83)), act(randn(C, 84)), act(randn(C, 85))},
                [=](Backend& be, std::vector<View>& t) {
                  be.residual_layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], N, C, 1e-5f,
                                                Precision::kFp32);
                }});
  cs.push_back({"matmul_gelu_forward",
                {act(randn(N * OUT, 86)), act(randn(N * OUT, 87)), act(randn(N * IN, 88)), act(randn(IN * OUT, 89)),
                 act(randn(OUT, 90))},
                [=](Backend& be, std::vector<View>& t) {
                  be.matmul_gelu_forward(t[0], t[1], t[2], t[3], t[4], N, IN, OUT, Precision::kFp32);
                }});
  cs.push_back({"matmul_gelu_backward",
                {act(randn(N * IN, 91)), stat(randn(IN * OUT, 92)), stat(randn(OUT, 93)), act(randn(N * OUT, 94)),
                 act(randn(N * IN, 95)), act(randn(IN * OUT, 96)), act(randn(N * IN, 97))},
                [=](Backend& be, std::vector<View>& t) {
                  be.matmul_gelu_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], N, IN, OUT, Precision::kFp32);
                }});
  return cs;
}

enum class Placement { kActivations, kEverything };

// Runs a case with the chosen tensors in dt, the others f32; returns every tensor (widened).
std::vector<Vec> run_typed(Backend& be, const Case& c, const std::vector<Vec>& vals, const std::vector<DType>& dts) {
  TypedBufs bufs(be, vals, dts);
  DeviceBuffer tok;
  std::vector<View> views = bufs.views();
  if (!c.tokens.empty()) {
    tok = to_device(be, c.tokens, DType::kI32);
    views.push_back(View(tok.raw(), DType::kI32));
  }
  c.run(be, views);
  return bufs.download();
}

void check_case(Backend& be, const Case& c, DType dt, Placement where) {
  std::vector<DType> dts;
  std::vector<Vec> vals;
  for (const Tensor& t : c.tensors) {
    const bool typed = where == Placement::kEverything || t.act;
    dts.push_back(typed ? dt : DType::kF32);
    Vec v = t.v;
    if (typed) {
      for (float& x : v) x = round_to_dtype(x, dt);  // what a 16-bit tensor can hold
    }
    vals.push_back(std::move(v));
  }
  // The reference: every tensor f32 (the widened values), 16-bit outputs rounded afterwards.
  std::vector<Vec> ref = run_typed(be, c, vals, std::vector<DType>(dts.size(), DType::kF32));
  for (size_t k = 0; k < ref.size(); ++k) {
    if (dts[k] != DType::kF32) {
      for (float& x : ref[k]) x = round_to_dtype(x, dt);
    }
  }
  const std::vector<Vec> got = run_typed(be, c, vals, dts);
  for (size_t k = 0; k < ref.size(); ++k) {
    ASSERT_EQ(got[k].size(), ref[k].size());
    EXPECT_EQ(std::memcmp(got[k].data(), ref[k].data(), ref[k].size() * sizeof(float)), 0)
        << c.name << ": tensor " << k << " (" << dtype_name(dts[k]) << ") differs from the widened fp32 op, rounded";
  }
}

class TypedOps : public ::testing::TestWithParam<std::string> {};

TEST_P(TypedOps, SixteenBitViewsGiveTheRoundedFp32OpBitwise) {
  auto be = test::make_test_backend(GetParam());
  for (const Case& c : cases()) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (Placement where : {Placement::kActivations, Placement::kEverything}) {
        SCOPED_TRACE(c.name + " " + dtype_name(dt) + (where == Placement::kEverything ? " everything" : " activations"));
        check_case(*be, c, dt, where);
      }
    }
  }
}

// Self-attention over several blocks of query rows (backend/cpu/attention_16.h works in blocks
// of 64), causal and bidirectional, with every tensor 16-bit and with an f32 dout beside 16-bit
// q, k, v and probabilities (a tensor-parallel layer's): bitwise the rounded fp32 op, and the cpu
// backends read the 16-bit operands in place (nothing staged).
TEST_P(TypedOps, SelfAttentionOverBlocksMixesDtypesAndStagesNothing) {
  auto be = test::make_test_backend(GetParam());
  const int64_t B = 2, T = 70, C = 16, NH = 2;
  for (bool causal : {true, false}) {
    const Case fwd{"attention_forward",
                   {act(randn(B * T * C, 101)), act(randn(B * NH * T * T, 102)), act(randn(B * T * 3 * C, 103))},
                   [=](Backend& b, std::vector<View>& t) {
                     if (causal) b.attention_forward(t[0], t[1], t[2], B, T, C, NH);
                     else b.bidir_attention_forward(t[0], t[1], t[2], B, T, C, NH);
                   }};
    // dout is a statistic here: f32 in the activations placement, 16-bit in the other.
    const Case bwd{"attention_backward",
                   {act(randn(B * T * 3 * C, 104)), stat(randn(B * T * C, 105)), act(randn(B * T * 3 * C, 106)),
                    act(rows_softmax(B * NH * T, T, 107))},
                   [=](Backend& b, std::vector<View>& t) {
                     if (causal) b.attention_backward(t[0], t[1], t[2], t[3], B, T, C, NH);
                     else b.bidir_attention_backward(t[0], t[1], t[2], t[3], B, T, C, NH);
                   }};
    for (const Case* c : {&fwd, &bwd}) {
      for (DType dt : {DType::kBF16, DType::kF16}) {
        for (Placement where : {Placement::kActivations, Placement::kEverything}) {
          SCOPED_TRACE(c->name + (causal ? " causal " : " bidirectional ") + dtype_name(dt) +
                       (where == Placement::kEverything ? " everything" : " f32 dout"));
          check_case(*be, *c, dt, where);
          EXPECT_EQ(be->staging_high_water(), 0);
        }
      }
    }
  }
}

// LayerNorm's backward over more rows than threads, 16-bit everywhere and with f32 statistics
// and weight gradients: bitwise the rounded fp32 op, and nothing staged on the cpu backends
// (backend/cpu/layernorm_16.h).
TEST_P(TypedOps, LayerNormBackwardReadsSixteenBitInPlace) {
  auto be = test::make_test_backend(GetParam());
  const int64_t N = 37, C = 24;
  const Case c{"layernorm_backward",
               {act(randn(N * C, 111)), stat(randn(C, 112)), stat(randn(C, 113)), act(randn(N * C, 114)),
                act(randn(N * C, 115)), act(randn(C, 116)), stat(randn(N, 117)), stat(positive(N, 118))},
               [=](Backend& b, std::vector<View>& t) {
                 b.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], N, C);
               }};
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (Placement where : {Placement::kActivations, Placement::kEverything}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (where == Placement::kEverything ? " everything" : " activations"));
      check_case(*be, c, dt, where);
      EXPECT_EQ(be->staging_high_water(), 0);
    }
  }
}

TEST_P(TypedOps, StagingCountsAsWorkspaceAndIsFreed) {
  auto be = test::make_test_backend(GetParam());
  const int64_t n = 1000;
  const int64_t before = memory_tracker().snapshot()[MemCategory::kWorkspace];
  {
    DeviceBuffer a(*be, DType::kBF16, n), b(*be, DType::kBF16, n), o(*be, DType::kBF16, n);
    a.fill(1.5f);
    b.fill(-0.25f);
    be->add(View(o.raw(), DType::kBF16), View(a.raw(), DType::kBF16), View(b.raw(), DType::kBF16), n);
    EXPECT_EQ(be->staging_bytes(), 3 * n * 4);  // three staged operands, kept for the next call
    EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kWorkspace] - before, 3 * n * 4);
    const std::vector<uint16_t> h = o.download<uint16_t>();
    EXPECT_EQ(bf16_to_f32(h[0]), 1.25f);
    EXPECT_EQ(bf16_to_f32(h[n - 1]), 1.25f);
  }
  be->release_staging();
  EXPECT_EQ(be->staging_bytes(), 0);
  EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kWorkspace], before);
}

TEST_P(TypedOps, ConvertWidensAndRoundsLikeTheHostReference) {
  auto be = test::make_test_backend(GetParam());
  const Vec x = randn(257, 99, 1e3f);
  DeviceBuffer f = to_device(*be, x, DType::kF32), h(*be, DType::kBF16, 257), g(*be, DType::kF16, 257),
               back(*be, DType::kF32, 257);
  be->convert(View(h.raw(), DType::kBF16), f.data<float>(), 257);
  be->convert(View(g.raw(), DType::kF16), CView(h.raw(), DType::kBF16), 257);  // through fp32
  be->convert(back.data<float>(), CView(g.raw(), DType::kF16), 257);
  const Vec got = back.download<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = f16_to_f32(f32_to_f16(bf16_to_f32(f32_to_bf16(x[i]))));
    ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << i << ": " << x[i];
  }
}

TEST_P(TypedOps, BadDtypesAreRefusedNamingTheOp) {
  auto be = test::make_test_backend(GetParam());
  DeviceBuffer q(*be, DType::kI8, 16), f(*be, DType::kF32, 16), t(*be, DType::kBF16, 4 * 16);
  try {
    be->add(f.data<float>(), CView(q.raw(), DType::kI8), f.data<float>(), 16);
    FAIL() << "an int8 operand was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("add: operand 2 is i8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(be->convert(View(q.raw(), DType::kI8), f.data<float>(), 16), InputError);
  DeviceBuffer tok = to_device(*be, std::vector<int32_t>{0, 1}, DType::kI32);
  try {
    be->embedding_forward(f.data<float>(), tok.data<int32_t>(), CView(t.raw(), DType::kBF16), nullptr, 1, 2, 8);
    FAIL() << "a bf16 table without its row count was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("vrows"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, TypedOps, ::testing::Values("cpu", "cpu-guarded", "cpu-guarded-staged"),
                         [](const auto& info) { return test::param_name(info.param); });

// cpu-guarded fences a 16-bit buffer as it does an fp32 one: after a typed op wrote it, a host
// read faults.
TEST(TypedOpsDeathTest, HostReadOfABf16BufferFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto be = make_cpu_guarded_backend();
  DeviceBuffer a(*be, DType::kBF16, 2048, MemCategory::kActivations);
  a.fill(1.0f);
  be->gelu_forward(View(a.raw(), DType::kBF16), CView(a.raw(), DType::kBF16), 2048);
  EXPECT_EXIT({ [[maybe_unused]] volatile uint16_t x = a.data<uint16_t>()[5]; }, ::testing::KilledBySignal(SIGSEGV),
              "cpu-guarded: host access to device buffer 0x[0-9a-f]+ \\(4096 bytes, category activations\\)");
}

}  // namespace
}  // namespace weft
