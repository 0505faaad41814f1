// Every op of backend.h on cpu-guarded against cpu, bitwise (ggml's test-backend-ops: one
// table of ops, each run on every backend and compared with the CPU reference). Each case's
// tensors are copied into device buffers through the contract on both backends, the op runs
// on device pointers (some of them interior pointers), and every tensor is copied back and
// compared byte for byte, inputs included (an op must not write what it only reads).
// Shapes follow cpu_ops_test.cc, where the CPU ops are checked against references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/device_buffer.h"
#include "backend_test_util.h"

namespace weft {
namespace {

using test::randn;

// A tensor of a case: its host contents before the op.
struct Tensor {
  DType dt = DType::kF32;
  std::vector<float> f;
  std::vector<int32_t> i;
};
Tensor F(std::vector<float> v) { return {DType::kF32, std::move(v), {}}; }
Tensor I(std::vector<int32_t> v) { return {DType::kI32, {}, std::move(v)}; }
Tensor zeros(size_t n) { return F(std::vector<float>(n, 0.0f)); }
Tensor positive(size_t n, uint32_t seed) {  // |x| + 0.5: variances, reciprocal std
  std::vector<float> v = randn(n, seed);
  for (float& x : v) x = std::fabs(x) + 0.5f;
  return F(std::move(v));
}

// A case's tensors in device buffers of one backend.
class Bufs {
 public:
  Bufs(Backend& be, const std::vector<Tensor>& ts) : be_(be) {
    for (const Tensor& t : ts) {
      bufs_.push_back(t.dt == DType::kF32 ? to_device(be, t.f, t.dt) : to_device(be, t.i, t.dt));
    }
  }
  float* f(size_t k) { return bufs_.at(k).data<float>(); }
  const int32_t* i(size_t k) { return bufs_.at(k).data<int32_t>(); }
  // Every tensor's bytes, after the op.
  std::vector<std::vector<uint8_t>> bytes() const {
    be_.synchronize();
    std::vector<std::vector<uint8_t>> out;
    for (const DeviceBuffer& b : bufs_) out.push_back(test::read_bytes(be_, b));
    return out;
  }
  double ret = 0.0;  // the value of an op that returns one

 private:
  Backend& be_;
  std::vector<DeviceBuffer> bufs_;
};

struct OpCase {
  std::string name;
  std::vector<Tensor> tensors;
  std::function<void(Backend&, Bufs&)> run;
};

std::vector<OpCase> matmul_cases() {
  const int N = 7, IN = 5, OUT = 6;
  auto x = randn(N * IN, 1), w = randn(IN * OUT, 2), b = randn(OUT, 3), dy = randn(N * OUT, 4);
  std::vector<float> packed = x;  // inp | w | bias | out in one buffer: interior pointers
  packed.insert(packed.end(), w.begin(), w.end());
  packed.insert(packed.end(), b.begin(), b.end());
  packed.resize(packed.size() + N * OUT, 0.0f);
  return {
      {"gemm_nn", {F(randn(12, 5)), F(randn(15, 6)), F(randn(20, 7))},
       [](Backend& be, Bufs& d) { be.gemm(false, false, 4, 5, 3, 0.5f, d.f(0), 3, d.f(1), 5, 0.25f, d.f(2), 5); }},
      {"gemm_tt", {F(randn(12, 8)), F(randn(15, 9)), zeros(20)},
       [](Backend& be, Bufs& d) { be.gemm(true, true, 4, 5, 3, 1.0f, d.f(0), 4, d.f(1), 3, 0.0f, d.f(2), 5); }},
      {"matmul_forward", {zeros(N * OUT), F(x), F(w), F(b)},
       [=](Backend& be, Bufs& d) { be.matmul_forward(d.f(0), d.f(1), d.f(2), d.f(3), N, IN, OUT, false); }},
      {"matmul_forward_accumulate_nobias", {F(randn(N * OUT, 10)), F(x), F(w)},
       [=](Backend& be, Bufs& d) { be.matmul_forward(d.f(0), d.f(1), d.f(2), nullptr, N, IN, OUT, true); }},
      {"matmul_forward_interior", {F(packed)},
       [=](Backend& be, Bufs& d) {
         float* p = d.f(0);
         be.matmul_forward(p + N * IN + IN * OUT + OUT, p, p + N * IN, p + N * IN + IN * OUT, N, IN, OUT, true);
       }},
      {"matmul_backward", {zeros(N * IN), F(randn(IN * OUT, 11)), F(randn(OUT, 12)), F(dy), F(x), F(w)},
       [=](Backend& be, Bufs& d) {
         be.matmul_backward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), N, IN, OUT);
       }},
      {"matmul_backward_no_dinp_dbias", {F(randn(IN * OUT, 13)), F(dy), F(x), F(w)},
       [=](Backend& be, Bufs& d) {
         be.matmul_backward(nullptr, d.f(0), nullptr, d.f(1), d.f(2), d.f(3), N, IN, OUT);
       }},
  };
}

std::vector<OpCase> embedding_layernorm_cases() {
  const int B = 2, T = 5, C = 6, V = 7, LN = 5, LC = 16;
  const std::vector<int32_t> tok = {3, 1, 3, 0, 6, 6, 6, 2, 1, 3};
  return {
      {"embedding_forward", {zeros(B * T * C), I(tok), F(randn(V * C, 14)), F(randn(T * C, 15))},
       [=](Backend& be, Bufs& d) { be.embedding_forward(d.f(0), d.i(1), d.f(2), d.f(3), B, T, C); }},
      {"embedding_forward_vocab_parallel", {zeros(B * T * C), I(tok), F(randn(3 * C, 16))},
       [=](Backend& be, Bufs& d) { be.embedding_forward(d.f(0), d.i(1), d.f(2), nullptr, B, T, C, 2, 3); }},
      {"embedding_backward", {F(randn(V * C, 17)), F(randn(T * C, 18)), F(randn(B * T * C, 19)), I(tok)},
       [=](Backend& be, Bufs& d) { be.embedding_backward(d.f(0), d.f(1), d.f(2), d.i(3), B, T, C); }},
      {"embedding_backward_vocab_parallel", {F(randn(3 * C, 20)), F(randn(B * T * C, 21)), I(tok)},
       [=](Backend& be, Bufs& d) { be.embedding_backward(d.f(0), nullptr, d.f(1), d.i(2), B, T, C, 2, 3); }},
      {"layernorm_forward",
       {zeros(LN * LC), zeros(LN), zeros(LN), F(randn(LN * LC, 22, 2.0f)), F(randn(LC, 23)), F(randn(LC, 24))},
       [=](Backend& be, Bufs& d) { be.layernorm_forward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), LN, LC, 1e-5f); }},
      {"layernorm_backward",
       {F(randn(LN * LC, 25)), F(randn(LC, 26)), F(randn(LC, 27)), F(randn(LN * LC, 28)), F(randn(LN * LC, 29)),
        F(randn(LC, 30)), F(randn(LN, 31)), positive(LN, 32)},
       [=](Backend& be, Bufs& d) {
         be.layernorm_backward(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), d.f(6), d.f(7), LN, LC);
       }},
  };
}

std::vector<OpCase> elementwise_cases() {
  const int N = 9, C = 13, n = 70001;  // n: several OpenMP chunks
  return {
      {"add_bias", {zeros(N * C), F(randn(N * C, 33)), F(randn(C, 34))},
       [=](Backend& be, Bufs& d) { be.add_bias(d.f(0), d.f(1), d.f(2), N, C); }},
      {"add_bias_bias_only", {zeros(N * C), F(randn(C, 35))},
       [=](Backend& be, Bufs& d) { be.add_bias(d.f(0), nullptr, d.f(1), N, C); }},
      {"add_bias_copy", {zeros(N * C), F(randn(N * C, 36))},
       [=](Backend& be, Bufs& d) { be.add_bias(d.f(0), d.f(1), nullptr, N, C); }},
      {"add_aliased", {F(randn(n, 37)), F(randn(n, 38))},
       [=](Backend& be, Bufs& d) { be.add(d.f(0), d.f(0), d.f(1), n); }},
      {"gelu_forward", {zeros(n), F(randn(n, 39, 3.0f))},
       [=](Backend& be, Bufs& d) { be.gelu_forward(d.f(0), d.f(1), n); }},
      {"gelu_backward_aliased", {F(randn(n, 40, 3.0f)), F(randn(n, 41))},
       [=](Backend& be, Bufs& d) { be.gelu_backward(d.f(1), d.f(0), d.f(1), n); }},
  };
}

std::vector<OpCase> attention_cases() {
  const int B = 2, T = 130, C = 8, NH = 2;  // T crosses the CPU kernel's 64-row blocks
  const int b = 1, t = 70, c = 4, nh = 2;
  return {
      {"attention_forward", {zeros(B * T * C), zeros(B * NH * T * T), F(randn(B * T * 3 * C, 42))},
       [=](Backend& be, Bufs& d) { be.attention_forward(d.f(0), d.f(1), d.f(2), B, T, C, NH); }},
      {"attention_forward_backward",
       {zeros(b * t * c), zeros(b * nh * t * t), F(randn(b * t * 3 * c, 43)), F(std::vector<float>(b * t * 3 * c, 9.0f)),
        F(randn(b * t * c, 44))},
       [=](Backend& be, Bufs& d) {
         be.attention_forward(d.f(0), d.f(1), d.f(2), b, t, c, nh);
         be.attention_backward(d.f(3), d.f(4), d.f(2), d.f(1), b, t, c, nh);
       }},
  };
}

// The Vision Transformer's ops (tests/backend/vit_ops_test.cc checks them against references).
std::vector<OpCase> vit_cases() {
  const int B = 2, T = 130, C = 8, NH = 2;  // T crosses the CPU kernel's 64-row blocks
  const int b = 1, t = 70, c = 4, nh = 2;
  const int N = 7, S = 5, QC = 12, QNH = 3, R = 9, K = 37;
  std::vector<float> q_kv = randn(QC, 56);  // q | kv in one buffer: interior pointers
  const std::vector<float> kv = randn(S * N * 2 * QC, 57);
  q_kv.insert(q_kv.end(), kv.begin(), kv.end());
  std::vector<float> w = randn(K, 58);
  for (float& x : w) x = std::fabs(x);
  return {
      {"bidir_attention_forward", {zeros(B * T * C), zeros(B * NH * T * T), F(randn(B * T * 3 * C, 59))},
       [=](Backend& be, Bufs& d) { be.bidir_attention_forward(d.f(0), d.f(1), d.f(2), B, T, C, NH); }},
      {"bidir_attention_forward_backward",
       {zeros(b * t * c), zeros(b * nh * t * t), F(randn(b * t * 3 * c, 60)),
        F(std::vector<float>(b * t * 3 * c, 9.0f)), F(randn(b * t * c, 61))},
       [=](Backend& be, Bufs& d) {
         be.bidir_attention_forward(d.f(0), d.f(1), d.f(2), b, t, c, nh);
         be.bidir_attention_backward(d.f(3), d.f(4), d.f(2), d.f(1), b, t, c, nh);
       }},
      {"query_attention_forward_backward",
       {zeros(N * QC), zeros(N * QNH * S), F(q_kv), F(randn(QC, 62)), F(std::vector<float>(S * N * 2 * QC, 9.0f)),
        F(randn(N * QC, 63))},
       [=](Backend& be, Bufs& d) {
         const float* q = d.f(2);
         const float* kvp = d.f(2) + QC;
         be.query_attention_forward(d.f(0), d.f(1), q, kvp, N, S, QC, QNH);
         be.query_attention_backward(d.f(3), d.f(4), d.f(5), q, kvp, d.f(1), N, S, QC, QNH);
       }},
      {"query_attention_single_token",
       {zeros(N * QC), zeros(N * QNH), F(randn(QC, 64)), F(randn(N * 2 * QC, 65)), F(randn(QC, 66)),
        zeros(N * 2 * QC), F(randn(N * QC, 67))},
       [=](Backend& be, Bufs& d) {
         be.query_attention_forward(d.f(0), d.f(1), d.f(2), d.f(3), N, 1, QC, QNH);
         be.query_attention_backward(d.f(4), d.f(5), d.f(6), d.f(2), d.f(3), d.f(1), N, 1, QC, QNH);
       }},
      {"weighted_mse", {zeros(R), zeros(R * K), F(randn(R * K, 68)), F(randn(R * K, 69)), F(w)},
       [=](Backend& be, Bufs& d) { be.weighted_mse(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), R, K, 0.25f); }},
      {"weighted_mse_loss_only", {zeros(R), F(randn(R * K, 70)), F(randn(R * K, 71)), F(w)},
       [=](Backend& be, Bufs& d) { be.weighted_mse(d.f(0), nullptr, d.f(1), d.f(2), d.f(3), R, K, 0.25f); }},
      {"weighted_mse_grad_aliases_pred", {zeros(R), F(randn(R * K, 72)), F(randn(R * K, 73)), F(w)},
       [=](Backend& be, Bufs& d) { be.weighted_mse(d.f(0), d.f(1), d.f(1), d.f(2), d.f(3), R, K, 0.25f); }},
  };
}

std::vector<OpCase> cross_entropy_cases() {
  const int N = 4, V = 37, Vp = 40, ld = 40, cols = 37, v0 = 10, off = 8;
  const std::vector<int32_t> tgt = {0, 36, 5, 17}, shard_tgt = {12, 3, 46, 30};
  std::vector<float> logits = randn(off + N * ld, 45, 3.0f);  // starts `off` floats in: interior
  return {
      {"softmax_cross_entropy", {F(randn(N * Vp, 46, 3.0f)), zeros(N), I(tgt)},
       [=](Backend& be, Bufs& d) { be.softmax_cross_entropy(d.f(0), d.f(1), d.i(2), N, V, Vp, 0.125f); }},
      {"softmax_cross_entropy_loss_only", {F(randn(N * Vp, 47, 3.0f)), zeros(N), I(tgt)},
       [=](Backend& be, Bufs& d) { be.softmax_cross_entropy(d.f(0), d.f(1), d.i(2), N, V, Vp, 0.0f); }},
      {"ce_phases", {F(logits), zeros(N), zeros(N), zeros(N), I(shard_tgt)},
       [=](Backend& be, Bufs& d) {
         float* lg = d.f(0) + off;
         be.ce_row_max(lg, N, ld, cols, d.f(1));
         be.ce_row_sumexp(lg, N, ld, cols, d.f(1), d.f(2));
         be.ce_target_logit(lg, N, ld, cols, d.i(4), v0, d.f(3));
         be.ce_grad(lg, N, ld, cols, d.f(1), d.f(2), d.i(4), v0, 0.25f);
       }},
  };
}

std::vector<OpCase> optimizer_precision_cases() {
  const int n = 5003;
  return {
      {"adamw", {F(randn(n, 48)), F(randn(n, 49)), F(randn(n, 50, 0.1f)), positive(n, 51)},
       [=](Backend& be, Bufs& d) { be.adamw(d.f(0), d.f(1), d.f(2), d.f(3), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.75f); }},
      {"sum_squares", {F(randn(n, 52))}, [=](Backend& be, Bufs& d) { d.ret = be.sum_squares(d.f(0), n); }},
      {"scale", {F(randn(n, 53))}, [=](Backend& be, Bufs& d) { be.scale(d.f(0), 0.3f, n); }},
      {"round_to_bf16", {F(randn(n, 54))}, [=](Backend& be, Bufs& d) { be.round_to(d.f(0), n, Precision::kBf16); }},
      {"round_to_fp16", {F(randn(n, 55, 3e4f))},  // some overflow to inf
       [=](Backend& be, Bufs& d) { be.round_to(d.f(0), n, Precision::kFp16); }},
  };
}

std::vector<OpCase> decoder_cases() {
  // RMSNorm, rotary positions (partial, inverse), SwiGLU, grouped-query attention's kv heads, ALiBi.
  const int N = 6, C = 8, T = 3, NH = 4, KVH = 2, hs = 4, Fh = 5;
  const int QKV = NH * hs + 2 * KVH * hs;
  return {
      {"rmsnorm_forward", {zeros(N * C), zeros(N), F(randn(N * C, 60)), F(randn(C, 61))},
       [=](Backend& be, Bufs& d) { be.rmsnorm_forward_f32(d.f(0), d.f(1), d.f(2), d.f(3), N, C, 1e-5f); }},
      {"rmsnorm_backward", {F(randn(N * C, 62)), F(randn(C, 63)), F(randn(N * C, 64)), F(randn(N * C, 65)),
                            F(randn(C, 66)), positive(N, 67)},
       [=](Backend& be, Bufs& d) { be.rmsnorm_backward_f32(d.f(0), d.f(1), d.f(2), d.f(3), d.f(4), d.f(5), N, C); }},
      {"rope", {F(randn(N * 3 * NH * hs, 68)), F(randn(T * 2, 69)), F(randn(T * 2, 70))},
       [=](Backend& be, Bufs& d) { be.rope_f32(d.f(0), d.f(1), d.f(2), N, T, 3 * NH * hs, 2 * NH, hs, 4, false); }},
      {"rope_inverse_partial", {F(randn(N * 3 * NH * hs, 71)), F(randn(T, 72)), F(randn(T, 73))},
       [=](Backend& be, Bufs& d) { be.rope_f32(d.f(0), d.f(1), d.f(2), N, T, 3 * NH * hs, 2 * NH, hs, 2, true); }},
      {"swiglu_forward", {zeros(N * Fh), F(randn(N * 2 * Fh, 74))},
       [=](Backend& be, Bufs& d) { be.swiglu_forward_f32(d.f(0), d.f(1), N, Fh); }},
      {"swiglu_backward", {zeros(N * 2 * Fh), F(randn(N * 2 * Fh, 75)), F(randn(N * Fh, 76))},
       [=](Backend& be, Bufs& d) { be.swiglu_backward_f32(d.f(0), d.f(1), d.f(2), N, Fh); }},
      {"expand_kv", {zeros(N * 3 * NH * hs), F(randn(N * QKV, 77))},
       [=](Backend& be, Bufs& d) { be.expand_kv_f32(d.f(0), d.f(1), N, NH, KVH, hs); }},
      {"reduce_kv", {zeros(N * QKV), F(randn(N * 3 * NH * hs, 78))},
       [=](Backend& be, Bufs& d) { be.reduce_kv_f32(d.f(0), d.f(1), N, NH, KVH, hs); }},
      // 2 samples of T = 3 (N = 6 rows), 4 heads of 4.
      {"attention_forward_alibi", {zeros(N * NH * hs), zeros(2 * NH * T * T), F(randn(N * 3 * NH * hs, 79)), positive(NH, 80)},
       [=](Backend& be, Bufs& d) { be.attention_forward_alibi_f32(d.f(0), d.f(1), d.f(2), d.f(3), 2, T, NH * hs, NH); }},
      {"gelu_erf_forward", {zeros(N * Fh), F(randn(N * Fh, 81))},
       [=](Backend& be, Bufs& d) { be.gelu_erf_forward_f32(d.f(0), d.f(1), N * Fh); }},
      {"gelu_erf_backward", {zeros(N * Fh), F(randn(N * Fh, 82)), F(randn(N * Fh, 83))},
       [=](Backend& be, Bufs& d) { be.gelu_erf_backward_f32(d.f(0), d.f(1), d.f(2), N * Fh); }},
      {"copy_device_2d", {zeros(N * 3), F(randn(N * C, 84))},
       [=](Backend& be, Bufs& d) { be.copy_device_2d(d.f(0), 3 * 4, d.f(1) + 2, C * 4, 3 * 4, N); }},
  };
}

const std::vector<OpCase>& op_table() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> t;
    for (auto part : {matmul_cases, embedding_layernorm_cases, elementwise_cases, attention_cases, vit_cases,
                      cross_entropy_cases, optimizer_precision_cases, decoder_cases}) {
      for (OpCase& c : part()) t.push_back(std::move(c));
    }
    return t;
  }();
  return table;
}

struct Outcome {
  std::vector<std::vector<uint8_t>> tensors;
  double ret;
};

Outcome run_case(Backend& be, const OpCase& c) {
  Bufs d(be, c.tensors);
  c.run(be, d);
  return {d.bytes(), d.ret};
}

class GuardedOps : public ::testing::TestWithParam<size_t> {};

TEST_P(GuardedOps, BitwiseEqualToCpu) {
  const OpCase& c = op_table()[GetParam()];
  auto cpu = make_cpu_backend();
  auto guarded = make_cpu_guarded_backend();
  const Outcome ref = run_case(*cpu, c);
  const Outcome got = run_case(*guarded, c);
  ASSERT_EQ(got.tensors.size(), ref.tensors.size());
  for (size_t k = 0; k < ref.tensors.size(); ++k) {
    EXPECT_TRUE(got.tensors[k] == ref.tensors[k]) << c.name << ": tensor " << k << " differs";
  }
  EXPECT_EQ(std::memcmp(&got.ret, &ref.ret, sizeof(double)), 0) << c.name << ": " << got.ret << " vs " << ref.ret;
}

INSTANTIATE_TEST_SUITE_P(Table, GuardedOps, ::testing::Range<size_t>(0, op_table().size()),
                         [](const auto& info) { return op_table()[info.param].name; });

// The table names every op of backend.h at least once.
TEST(GuardedOpsTable, CoversEveryOp) {
  std::string names;
  for (const OpCase& c : op_table()) names += c.name + " ";
  for (const char* op : {"gemm", "matmul_forward", "matmul_backward", "embedding_forward", "embedding_backward",
                         "layernorm_forward", "layernorm_backward", "add_bias", "add", "gelu_forward",
                         "gelu_backward", "attention_forward", "attention_forward_backward",
                         "bidir_attention_forward", "bidir_attention_forward_backward",
                         "query_attention_forward_backward", "weighted_mse", "softmax_cross_entropy", "ce_phases",
                         "adamw", "sum_squares", "scale", "round_to", "rmsnorm_forward", "rmsnorm_backward", "rope",
                         "swiglu_forward", "swiglu_backward", "expand_kv", "reduce_kv", "attention_forward_alibi",
                         "gelu_erf_forward", "gelu_erf_backward", "copy_device_2d"}) {
    EXPECT_NE(names.find(op), std::string::npos) << op;
  }
}

}  // namespace
}  // namespace weft
