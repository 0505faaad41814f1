// The defaults of Backend's optional fused ops (backend.h, "optional fused ops"): each is the
// sequence of required ops the model calls today, in that order, with the same storage-precision
// roundings in between, so that on the cpu backend a fused op gives the plain sequence's bits
// (tests/backend/fused_ops_test.cc). Every call goes through the virtual required ops of
// `this`: on cpu-guarded each step is checked and fenced like any other op.
#include "backend/backend.h"

#include "core/error.h"

namespace weft {

const char* fused_op_name(FusedOp op) {
  switch (op) {
    case FusedOp::kResidualLayerNorm: return "residual_layernorm_forward";
    case FusedOp::kMatmulResidualLayerNorm: return "matmul_residual_layernorm_forward";
    case FusedOp::kMatmulGelu: return "matmul_gelu_forward";
    case FusedOp::kMatmulGeluBackward: return "matmul_gelu_backward";
    case FusedOp::kAttentionLse: return "attention_forward_lse";
    case FusedOp::kAdamwCopy: return "adamw_copy";
  }
  return "unknown fused op";
}

void Backend::residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd, const float* a,
                                         const float* b, const float* w, const float* bias, int64_t N, int64_t C,
                                         float eps, Precision p) {
  // layers.cc, tp > 1: RowParallelLinear::forward's `add(out, res, y)` + round, then
  // SequenceParallelLayerNorm::forward's layernorm_forward + round.
  add_f32(residual, a, b, N * C);
  round_to(residual, N * C, p);
  layernorm_forward_f32(out, mean, rstd, residual, w, bias, N, C, eps);
  round_to(out, N * C, p);
}

void Backend::matmul_residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd,
                                                const float* res, const float* inp, const float* w, const float* bias,
                                                const float* ln_w, const float* ln_b, int64_t N, int64_t IN, int64_t C,
                                                float eps, Precision p) {
  // layers.cc, tp = 1: RowParallelLinear::forward (the residual and the bias ride on the
  // product) + round, then SequenceParallelLayerNorm::forward's layernorm_forward + round.
  add_bias_f32(residual, res, bias, N, C);
  matmul_forward_f32(residual, inp, w, nullptr, N, IN, C, true);
  round_to(residual, N * C, p);
  layernorm_forward_f32(out, mean, rstd, residual, ln_w, ln_b, N, C, eps);
  round_to(out, N * C, p);
}

void Backend::matmul_gelu_forward_f32(float* out, float* pre, const float* inp, const float* w, const float* bias,
                                  int64_t N, int64_t IN, int64_t OUT, Precision p) {
  // gpt.cc layer_forward: ColumnParallelLinear::forward (c_fc) + round, gelu_forward + round.
  matmul_forward_f32(pre, inp, w, bias, N, IN, OUT, false);
  round_to(pre, N * OUT, p);
  gelu_forward_f32(out, pre, N * OUT);
  round_to(out, N * OUT, p);
}

void Backend::matmul_gelu_backward_f32(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                                   const float* w, const float* pre, int64_t N, int64_t IN, int64_t OUT, Precision p) {
  // gpt.cc layer_backward: RowParallelLinear::backward's matmul_backward + round (c_proj of
  // the MLP), then gelu_backward in place + round.
  WEFT_CHECK(dinp != nullptr, "{}: matmul_gelu_backward needs dinp", name());
  matmul_backward_f32(dinp, dw, dbias, dout, inp, w, N, IN, OUT);
  round_to(dinp, N * IN, p);
  gelu_backward_f32(dinp, pre, dinp, N * IN);
  round_to(dinp, N * IN, p);
}

void Backend::attention_forward_lse_f32(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                                    int64_t NH) {
  throw_runtime("backend '{}' does not offer attention_forward_lse (flash attention: no sequence of its required "
                "ops keeps only the log-sum-exp); ask offers(FusedOp::kAttentionLse) and use attention_forward "
                "with the (B,NH,T,T) probabilities otherwise",
                name());
}

void Backend::attention_backward_lse_f32(float* dqkv, const float* dout, const float* qkv, const float* out,
                                     const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH) {
  throw_runtime("backend '{}' does not offer attention_backward_lse (flash attention); ask "
                "offers(FusedOp::kAttentionLse) and use attention_backward with the probabilities otherwise",
                name());
}

void Backend::adamw_copy_f32(float* p, float* copy, const float* g, float* m, float* v, int64_t n, float lr,
                             float beta1,
                         float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                         Precision copy_precision) {
  // optim.cc AdamW::step with master weights: adamw on the master range, then the copy
  // (copy_device) rounded to the storage precision (round_to). Elementwise, so a range at a
  // time gives the bits of one copy and one rounding over the whole buffer.
  adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
  copy_device(copy, 0, p, 0, static_cast<size_t>(n) * sizeof(float));
  round_to(copy, n, copy_precision);
}

}  // namespace weft
