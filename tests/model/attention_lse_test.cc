// The one GPT uses flash attention (Backend's optional kAttentionLse pair) where its backend
// offers it. The backend here is test-only: the CPU backend with every op, copy and fill
// delegated to it (device memory is host memory, as on cpu), plus a plain reference of the
// pair: the forward computes the causal attention output and lse[b,h,t] = log sum_{s<=t}
// exp(q_t . k_s / sqrt(hs)) in double; the backward rebuilds P = exp(score - lse) into a
// (B,NH,T,T) scratch and calls the CPU backend's attention_backward with it. So the GPT on it
// computes the same math as on cpu in another summation order, and it stashes the (B,NH,T)
// log-sum-exp instead of the (B,NH,T,T) probabilities. Checked:
//   - losses and gradients agree with the GPT on cpu to 1e-5 relative (fp32: the two
//     attention paths differ by float rounding only), with no recompute, selective and full
//     recompute, and on two pipeline stages with three micro-batches in flight;
//   - the model never calls the probabilities' attention_forward/backward on this backend;
//   - the stash is the description's (GptRunSpec::attention_lse) and smaller than cpu's by
//     exactly L (B NH T T - B NH T) floats; selective recompute stashes what none does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/backend_test_util.h"
#include "backend/backend.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_description.h"

namespace weft {
namespace {

class LseBackend final : public Backend {
 public:
  LseBackend() : cpu_(make_cpu_backend()) {}
  std::string name() const override { return "cpu-lse (test)"; }
  int probs_forward_calls = 0, probs_backward_calls = 0, lse_forward_calls = 0, lse_backward_calls = 0;

  // --- the device contract: the CPU backend's (device_alloc_impl/free_impl: the same host defaults) ---
  void copy_to_device(void* dst, size_t dst_offset, const void* src, size_t bytes) override {
    cpu_->copy_to_device(dst, dst_offset, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t src_offset, size_t bytes) override {
    cpu_->copy_to_host(dst, src, src_offset, bytes);
  }
  void copy_device(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) override {
    cpu_->copy_device(dst, dst_offset, src, src_offset, bytes);
  }
  void fill(void* dst, DType dt, int64_t first, int64_t count, float value) override {
    cpu_->fill(dst, dt, first, count, value);
  }
  void synchronize() override { cpu_->synchronize(); }
  bool is_device_memory(const void* p) const override { return cpu_->is_device_memory(p); }
  bool begin_host_access(void* p, size_t bytes) override { return cpu_->begin_host_access(p, bytes); }
  void end_host_access(void* p, size_t bytes) override { cpu_->end_host_access(p, bytes); }

  // --- required ops ---
  void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc) override {
    cpu_->gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void matmul_forward_f32(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IN,
                      int64_t OUT, bool accumulate) override {
    cpu_->matmul_forward(out, inp, w, bias, N, IN, OUT, accumulate);
  }
  void matmul_backward_f32(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int64_t N, int64_t IN, int64_t OUT) override {
    cpu_->matmul_backward(dinp, dw, dbias, dout, inp, w, N, IN, OUT);
  }
  void embedding_forward_f32(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                             int64_t T,
                         int64_t C, int64_t v0, int64_t vrows) override {
    cpu_->embedding_forward(out, tokens, wte, wpe, B, T, C, v0, vrows);
  }
  void embedding_backward_f32(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                          int64_t C, int64_t v0, int64_t vrows) override {
    cpu_->embedding_backward(dwte, dwpe, dout, tokens, B, T, C, v0, vrows);
  }
  void rmsnorm_forward_f32(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                           float eps) override {
    cpu_->rmsnorm_forward_f32(out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward_f32(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, int64_t N, int64_t C) override {
    cpu_->rmsnorm_backward_f32(dinp, dw, dout, inp, w, rstd, N, C);
  }
  void attention_forward_alibi_f32(float* out, float* att, const float* qkv, const float* slopes, int64_t B, int64_t T,
                                   int64_t C, int64_t NH) override {
    cpu_->attention_forward_alibi_f32(out, att, qkv, slopes, B, T, C, NH);
  }
  void gelu_erf_forward_f32(float* out, const float* inp, int64_t n) override { cpu_->gelu_erf_forward_f32(out, inp, n); }
  void gelu_erf_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cpu_->gelu_erf_backward_f32(dinp, inp, dout, n);
  }
  void rope_f32(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads,
                int64_t hd, int64_t rot, bool inverse) override {
    cpu_->rope_f32(x, cos, sin, N, T, ld, heads, hd, rot, inverse);
  }
  void swiglu_forward_f32(float* out, const float* pre, int64_t N, int64_t F) override {
    cpu_->swiglu_forward_f32(out, pre, N, F);
  }
  void swiglu_backward_f32(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F) override {
    cpu_->swiglu_backward_f32(dpre, pre, dout, N, F);
  }
  void expand_kv_f32(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override {
    cpu_->expand_kv_f32(qkv, qkvc, N, heads, kv_heads, hd);
  }
  void reduce_kv_f32(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override {
    cpu_->reduce_kv_f32(dqkvc, dqkv, N, heads, kv_heads, hd);
  }
  void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override {
    cpu_->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  }
  void layernorm_backward_f32(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) override {
    cpu_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void gather_rows_f32(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C) override {
    cpu_->gather_rows_f32(out, x, idx, M, C);
  }
  void segment_reduce_f32(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets,
                          int64_t S, int64_t C, SegmentOp op, bool accumulate) override {
    cpu_->segment_reduce_f32(out, arg, x, perm, offsets, S, C, op, accumulate);
  }
  void segment_broadcast_f32(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S,
                             int64_t C, bool mean, bool accumulate) override {
    cpu_->segment_broadcast_f32(dx, dout, perm, offsets, S, C, mean, accumulate);
  }
  void segment_arg_backward_f32(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C) override {
    cpu_->segment_arg_backward_f32(dx, dout, arg, S, C);
  }
  void segment_std_f32(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets,
                       int64_t S, int64_t C, float var_floor) override {
    cpu_->segment_std_f32(out, x, mean, perm, offsets, S, C, var_floor);
  }
  void segment_std_backward_f32(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                                const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C) override {
    cpu_->segment_std_backward_f32(dx, dout, x, mean, std, perm, offsets, S, C);
  }
  void batchnorm_inference_f32(float* out, const float* x, const float* mean, const float* var, const float* w,
                               const float* b, int64_t N, int64_t C, float eps) override {
    cpu_->batchnorm_inference_f32(out, x, mean, var, w, b, N, C, eps);
  }
  void batchnorm_forward_f32(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                             int64_t N, int64_t C, float eps) override {
    cpu_->batchnorm_forward_f32(out, mean, rstd, x, w, b, N, C, eps);
  }
  void batchnorm_backward_f32(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                              const float* mean, const float* rstd, int64_t N, int64_t C) override {
    cpu_->batchnorm_backward_f32(dx, dw, db, dout, x, w, mean, rstd, N, C);
  }
  void activation_forward_f32(float* out, const float* inp, int64_t n, Activation a) override {
    cpu_->activation_forward_f32(out, inp, n, a);
  }
  void activation_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n, Activation a,
                               bool accumulate) override {
    cpu_->activation_backward_f32(dinp, inp, dout, n, a, accumulate);
  }
  void mul_f32(float* out, const float* a, const float* b, int64_t n, bool accumulate) override {
    cpu_->mul_f32(out, a, b, n, accumulate);
  }
  void scale_rows_f32(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate) override {
    cpu_->scale_rows_f32(out, x, s, N, C, accumulate);
  }
  void add_bias_f32(float* out, const float* inp, const float* bias, int64_t N, int64_t C) override {
    cpu_->add_bias(out, inp, bias, N, C);
  }
  void add_f32(float* out, const float* a, const float* b, int64_t n) override { cpu_->add(out, a, b, n); }
  void gelu_forward_f32(float* out, const float* inp, int64_t n) override { cpu_->gelu_forward(out, inp, n); }
  void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cpu_->gelu_backward(dinp, inp, dout, n);
  }
  void attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) override {
    ++probs_forward_calls;
    cpu_->attention_forward(out, att, qkv, B, T, C, NH);
  }
  void attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                          int64_t C, int64_t NH) override {
    ++probs_backward_calls;
    cpu_->attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  }
  void bidir_attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                               int64_t NH) override {
    cpu_->bidir_attention_forward(out, att, qkv, B, T, C, NH);
  }
  void bidir_attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                                int64_t T, int64_t C, int64_t NH) override {
    cpu_->bidir_attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  }
  void query_attention_forward_f32(float* out, float* att, const float* q, const float* kv, int64_t N, int64_t S,
                               int64_t C, int64_t NH) override {
    cpu_->query_attention_forward(out, att, q, kv, N, S, C, NH);
  }
  void query_attention_backward_f32(float* dq, float* dkv, const float* dout, const float* q, const float* kv,
                                const float* att, int64_t N, int64_t S, int64_t C, int64_t NH) override {
    cpu_->query_attention_backward(dq, dkv, dout, q, kv, att, N, S, C, NH);
  }
  void weighted_mse_f32(float* row_loss, float* grad, const float* pred, const float* target, const float* w, int64_t R,
                    int64_t K, float dloss) override {
    cpu_->weighted_mse(row_loss, grad, pred, target, w, R, K, dloss);
  }
  void softmax_cross_entropy_f32(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                             float dloss) override {
    cpu_->softmax_cross_entropy(logits, losses, targets, N, V, Vp, dloss);
  }
  void ce_row_max_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, float* max) override {
    cpu_->ce_row_max(logits, N, ld, cols, max);
  }
  void ce_row_sumexp_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const float* max,
                     float* sum) override {
    cpu_->ce_row_sumexp(logits, N, ld, cols, max, sum);
  }
  void ce_target_logit_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                       float* tl) override {
    cpu_->ce_target_logit(logits, N, ld, cols, targets, v0, tl);
  }
  void ce_loss_f32(float* losses, const float* max, const float* sum, const float* tl, int64_t n) override {
    cpu_->ce_loss(losses, max, sum, tl, n);
  }
  void ce_grad_f32(float* logits, int64_t N, int64_t ld, int64_t cols, const float* max, const float* sum,
               const int32_t* targets, int64_t v0, float dloss) override {
    cpu_->ce_grad(logits, N, ld, cols, max, sum, targets, v0, dloss);
  }
  void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
             float weight_decay, int64_t t, float grad_scale) override {
    cpu_->adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
  }
  double sum_squares(const float* x, int64_t n) override { return cpu_->sum_squares(x, n); }
  void scale(float* x, float s, int64_t n) override { cpu_->scale(x, s, n); }
  void round_to(float* x, int64_t n, Precision p) override { cpu_->round_to(x, n, p); }

  // --- optional fused ops: the CPU backend's (its defaults) but for the flash pair ---
  bool offers(FusedOp op) const override { return op == FusedOp::kAttentionLse; }
  void residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd, const float* a,
                                  const float* b, const float* w, const float* bias, int64_t N, int64_t C, float eps,
                                  Precision p) override {
    cpu_->residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias, N, C, eps, p);
  }
  void matmul_residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd, const float* res,
                                         const float* inp, const float* w, const float* bias, const float* ln_w,
                                         const float* ln_b, int64_t N, int64_t IN, int64_t C, float eps,
                                         Precision p) override {
    cpu_->matmul_residual_layernorm_forward(residual, out, mean, rstd, res, inp, w, bias, ln_w, ln_b, N, IN, C, eps,
                                            p);
  }
  void matmul_gelu_forward_f32(float* out, float* pre, const float* inp, const float* w, const float* bias, int64_t N,
                           int64_t IN, int64_t OUT, Precision p) override {
    cpu_->matmul_gelu_forward(out, pre, inp, w, bias, N, IN, OUT, p);
  }
  void matmul_gelu_backward_f32(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                                const float* w,
                            const float* pre, int64_t N, int64_t IN, int64_t OUT, Precision p) override {
    cpu_->matmul_gelu_backward(dinp, dw, dbias, dout, inp, w, pre, N, IN, OUT, p);
  }
  void adamw_copy_f32(float* p, float* copy, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                  Precision copy_precision) override {
    cpu_->adamw_copy(p, copy, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale, copy_precision);
  }

  // The reference flash pair. qkv (B,T,3C): q, k, v of head h at columns h hs, C + h hs, 2C + h hs.
  void attention_forward_lse_f32(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH) override {
    ++lse_forward_calls;
    const int64_t hs = C / NH;
    std::vector<double> s(static_cast<size_t>(T)), o(static_cast<size_t>(hs));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          double mx = -INFINITY;
          for (int64_t j = 0; j <= t; ++j) {
            s[static_cast<size_t>(j)] = score(qkv, b, h, t, j, T, C, hs);
            mx = std::max(mx, s[static_cast<size_t>(j)]);
          }
          double sum = 0.0;
          for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[static_cast<size_t>(j)] - mx);
          const double l = mx + std::log(sum);
          std::fill(o.begin(), o.end(), 0.0);
          for (int64_t j = 0; j <= t; ++j) {
            const double p = std::exp(s[static_cast<size_t>(j)] - l);
            const float* v = qkv + (b * T + j) * 3 * C + 2 * C + h * hs;
            for (int64_t d = 0; d < hs; ++d) o[static_cast<size_t>(d)] += p * v[d];
          }
          float* y = out + (b * T + t) * C + h * hs;
          for (int64_t d = 0; d < hs; ++d) y[d] = static_cast<float>(o[static_cast<size_t>(d)]);
          lse[(b * NH + h) * T + t] = static_cast<float>(l);
        }
      }
    }
  }
  void attention_backward_lse_f32(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              int64_t B, int64_t T, int64_t C, int64_t NH) override {
    ++lse_backward_calls;
    const int64_t hs = C / NH;
    std::vector<float> P(static_cast<size_t>(B * NH * T * T), 0.0f);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const double l = lse[(b * NH + h) * T + t];
          float* row = P.data() + ((b * NH + h) * T + t) * T;
          for (int64_t j = 0; j <= t; ++j) row[j] = static_cast<float>(std::exp(score(qkv, b, h, t, j, T, C, hs) - l));
        }
      }
    }
    cpu_->attention_backward(dqkv, dout, qkv, P.data(), B, T, C, NH);  // P is host memory: device memory on cpu
  }

 private:
  // q_t . k_j / sqrt(hs) of head h, in double.
  static double score(const float* qkv, int64_t b, int64_t h, int64_t t, int64_t j, int64_t T, int64_t C,
                      int64_t hs) {
    const float* q = qkv + (b * T + t) * 3 * C + h * hs;
    const float* k = qkv + (b * T + j) * 3 * C + C + h * hs;
    double d = 0.0;
    for (int64_t i = 0; i < hs; ++i) d += static_cast<double>(q[i]) * k[i];
    return d / std::sqrt(static_cast<double>(hs));
  }

  std::unique_ptr<Backend> cpu_;
};

const ModelConfig kCfg = make_model_config("lse", 4, 2, 32, 16, 301);
constexpr int64_t kB = 2, kT = 16, kM = 3;

struct Case {
  const char* name;
  Recompute recompute;
  int full_layers;
  bool stages;  // two pipeline stages, three micro-batches in flight (GPipe order)
};

struct Result {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;  // per stage
  std::vector<int64_t> stash, slot, workspace, described_stash, described_workspace;  // per stage (bytes)
  bool lse = false;
};

Result run(Backend& be, const Case& c) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int32_t> tok(0, kCfg.vocab_size - 1);
  std::vector<int32_t> in(kM * kB * kT), tg(kM * kB * kT);
  for (auto& x : in) x = tok(rng);
  for (auto& x : tg) x = tok(rng);
  const float scale = 1.0f / static_cast<float>(kM * kB * kT);
  const std::vector<StageSpec> cut = c.stages ? std::vector<StageSpec>{{0, 2, true, false}, {2, 2, false, true}}
                                              : std::vector<StageSpec>{StageSpec{}};
  const int slots = c.stages ? static_cast<int>(kM) : 1;
  std::vector<std::unique_ptr<GPT>> st;
  for (const auto& s : cut) {
    st.push_back(std::make_unique<GPT>(kCfg, be, true, 1, 0, s));
    st.back()->init(3);
    st.back()->set_recompute(c.recompute, c.full_layers);
    st.back()->reserve(kB, kT, true, 0, slots);
    st.back()->zero_grads();
  }
  Result r;
  r.lse = st[0]->attention_lse();
  if (!c.stages) {
    for (int m = 0; m < kM; ++m) {
      r.losses.push_back(st[0]->forward_backward(in.data() + m * kB * kT, tg.data() + m * kB * kT, kB, kT, scale));
    }
    r.losses.push_back(st[0]->forward_loss(in.data(), tg.data(), kB, kT));
  } else {
    for (int m = 0; m < kM; ++m) {
      st[0]->stage_forward(m, in.data() + m * kB * kT, nullptr, kB, kT, true);
      st[1]->stage_forward(m, nullptr, st[0]->stage_output(m), kB, kT, true);
    }
    for (int m = 0; m < kM; ++m) {
      r.losses.push_back(st[1]->stage_backward(m, nullptr, tg.data() + m * kB * kT, nullptr, kB, kT, scale));
      st[0]->stage_backward(m, in.data() + m * kB * kT, nullptr, st[1]->stage_input_grad(), kB, kT, scale);
    }
  }
  for (size_t i = 0; i < st.size(); ++i) {
    GPT& g = *st[i];
    r.grads.emplace_back(static_cast<size_t>(g.num_params()));
    g.download_grads(r.grads.back().data());
    r.stash.push_back(g.activation_bytes());
    r.slot.push_back(g.stash_bytes_per_slot());
    r.workspace.push_back(g.workspace_bytes());
    GptRunSpec spec{.model = kCfg, .B = kB, .T = kT, .recompute = c.recompute, .recompute_layers = c.full_layers,
                    .stage = cut[i], .attention_lse = g.attention_lse()};
    const GptDescription d(spec);
    r.described_stash.push_back(d.stash_bytes());
    r.described_workspace.push_back(d.workspace_bytes());
  }
  return r;
}


class AttentionLse : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionLse, LossAndGradientsFollowTheProbabilitiesPath) {
  const Case& c = GetParam();
  auto cpu = make_cpu_backend();
  LseBackend lse;
  const Result ref = run(*cpu, c);
  const Result got = run(lse, c);
  EXPECT_FALSE(ref.lse) << "the cpu backend offers no flash attention";
  ASSERT_TRUE(got.lse) << "the GPT did not take the offered flash attention";
  EXPECT_EQ(lse.probs_forward_calls, 0);
  EXPECT_EQ(lse.probs_backward_calls, 0);
  // Each layer's forward per micro-batch (again in backward where fully recomputed; once more
  // for the whole model's forward_loss) and its backward per micro-batch.
  const int L = kCfg.n_layer, M = static_cast<int>(kM);
  const int recomputed = c.recompute != Recompute::kFull ? 0 : c.full_layers < 0 ? L : c.full_layers;
  EXPECT_EQ(lse.lse_forward_calls, M * L + M * recomputed + (c.stages ? 0 : L));
  EXPECT_EQ(lse.lse_backward_calls, M * L);

  ASSERT_EQ(got.losses.size(), ref.losses.size());
  double worst_loss = 0.0;
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    const double e = std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]);
    EXPECT_LE(e, 1e-5) << "loss " << i << ": " << got.losses[i] << " vs " << ref.losses[i];
    worst_loss = std::max(worst_loss, e);
  }
  double worst_tensor = 0.0, worst_all = 0.0;
  std::string worst_name;
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (size_t s = 0; s < ref.grads.size(); ++s) {
    ASSERT_EQ(got.grads[s].size(), ref.grads[s].size());
    const int64_t n = static_cast<int64_t>(ref.grads[s].size());
    const double all = test::rel_l2(got.grads[s].data(), ref.grads[s].data(), n);
    EXPECT_LE(all, 1e-5) << "stage " << s << ": whole gradient buffer";
    worst_all = std::max(worst_all, all);
    const StageSpec part = c.stages ? (s == 0 ? StageSpec{0, 2, true, false} : StageSpec{2, 2, false, true})
                                    : StageSpec{};
    const ParamLayout layout = param_layout(kCfg, 1, 0, part);
    for (const ParamTensor& t : layout.tensors()) {
      const double e = test::rel_l2(got.grads[s].data() + t.offset, ref.grads[s].data() + t.offset, t.numel);
      EXPECT_LE(e, 1e-5) << "stage " << s << ": gradient of " << t.name;
      if (e > worst_tensor) worst_tensor = e, worst_name = t.name;
    }
  }
  std::printf("%s: loss relative error %.3g; gradients: whole buffer %.3g, worst tensor %.3g (%s)\n", c.name,
              worst_loss, worst_all, worst_tensor, worst_name.c_str());

  // The memory is the description's, with the log-sum-exp in place of the probabilities.
  for (size_t s = 0; s < ref.stash.size(); ++s) {
    const int64_t slots = c.stages ? kM : 1;
    EXPECT_EQ(got.slot[s], got.described_stash[s]) << "stage " << s;
    EXPECT_EQ(got.stash[s], slots * got.described_stash[s]) << "stage " << s;
    EXPECT_EQ(got.workspace[s], got.described_workspace[s]) << "stage " << s;
    EXPECT_EQ(ref.slot[s], ref.described_stash[s]) << "stage " << s;
    EXPECT_EQ(ref.workspace[s], ref.described_workspace[s]) << "stage " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionLse,
                         ::testing::Values(Case{"none", Recompute::kNone, -1, false},
                                           Case{"selective", Recompute::kSelective, -1, false},
                                           Case{"full", Recompute::kFull, -1, false},
                                           Case{"full_first_layer", Recompute::kFull, 1, false},
                                           Case{"stages", Recompute::kNone, -1, true},
                                           Case{"stages_full", Recompute::kFull, -1, true}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(AttentionLseMemory, StashKeepsTheLogSumExpInsteadOfTheProbabilities) {
  auto cpu = make_cpu_backend();
  LseBackend lse;
  const Result ref = run(*cpu, {"none", Recompute::kNone, -1, false});
  const Result got = run(lse, {"none", Recompute::kNone, -1, false});
  const Result sel = run(lse, {"selective", Recompute::kSelective, -1, false});
  const Result full = run(lse, {"full", Recompute::kFull, -1, false});
  const Result ref_full = run(*cpu, {"full", Recompute::kFull, -1, false});
  // Independently of the description: L layers of (B,NH,T,T) probabilities become (B,NH,T) lse.
  const int64_t L = kCfg.n_layer, NH = kCfg.n_head;
  const int64_t probs = kB * NH * kT * kT, lse_elems = kB * NH * kT;
  std::printf("stash per slot: probabilities %lld bytes, log-sum-exp %lld bytes (%lld saved); selective %lld\n",
              static_cast<long long>(ref.slot[0]), static_cast<long long>(got.slot[0]),
              static_cast<long long>(ref.slot[0] - got.slot[0]), static_cast<long long>(sel.slot[0]));
  EXPECT_EQ(got.slot[0], got.described_stash[0]);
  EXPECT_EQ(got.stash[0], got.slot[0]);
  EXPECT_EQ(ref.slot[0] - got.slot[0], L * (probs - lse_elems) * 4);
  EXPECT_LT(got.slot[0], ref.slot[0]);
  // Selective recompute has nothing to recompute: the stash and the workspace of no recompute.
  EXPECT_EQ(sel.slot[0], got.slot[0]);
  EXPECT_EQ(sel.workspace[0], got.workspace[0]);
  // Full recompute stashes the layers' outputs only (as on cpu); its workspace holds one
  // rematerialised layer with its lse: smaller than cpu's by one layer's (probabilities - lse).
  EXPECT_EQ(full.slot[0], ref_full.slot[0]);
  EXPECT_EQ(ref_full.workspace[0] - full.workspace[0], (probs - lse_elems) * 4);
  // Without recompute the workspace holds no attention statistics at all.
  EXPECT_EQ(got.workspace[0], ref.workspace[0]);
}

TEST(AttentionLseMemory, PlannerDescriptionKeepsTheProbabilities) {
  // The planner builds its GptRunSpec without a backend: attention_lse defaults to false.
  const GptRunSpec spec{.model = kCfg, .B = kB, .T = kT};
  EXPECT_FALSE(spec.attention_lse);
  GptRunSpec with = spec;
  with.attention_lse = true;
  const int64_t L = kCfg.n_layer, NH = kCfg.n_head;
  EXPECT_EQ(GptDescription(spec).stash_elems() - GptDescription(with).stash_elems(),
            L * (kB * NH * kT * kT - kB * NH * kT));
  GptRunSpec sel = with;
  sel.recompute = Recompute::kSelective;
  EXPECT_EQ(GptDescription(sel).stash_elems(), GptDescription(with).stash_elems());
  EXPECT_EQ(GptDescription(sel).workspace_elems(), GptDescription(with).workspace_elems());
  EXPECT_EQ(GptDescription(sel).recompute_flops_per_token(), 0.0);
}

}  // namespace
}  // namespace weft
