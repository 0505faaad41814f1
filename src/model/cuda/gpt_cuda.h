// GPT-2 training on one GPU with everything on the device, the way llm.c's train_gpt2.cu
// does it: fp32 master parameters and a bf16 compute copy in the flat layout of
// model/params.h (tp = 1), fp32 gradients and AdamW moments, bf16 activations of one
// micro-batch and bf16 activation gradients, tokens and targets in device buffers.
//
// Two precisions:
//   kBf16  the fast path: cuBLASLt bf16 products with bias / GELU epilogues, LayerNorm fused
//          with the residual add, flash attention (no (B,NH,T,T) probabilities, lse kept for
//          backward), cross-entropy on bf16 logits without a probability buffer, weight
//          gradients accumulated in fp32, AdamW writing the bf16 copy in the same pass.
//   kFp32  the check path: fp32 activations and the Backend interface's fp32 ops (strict
//          fp32 cuBLAS, reference attention with probabilities), exactly the CPU GPT's
//          sequence of ops, so that loss and every gradient match model/gpt.cc to fp32
//          rounding (tests/cuda/gpt_cuda_test.cc).
// The math is model/gpt.cc's (Hugging Face GPT2LMHeadModel, tied head, padded vocabulary
// rows outside the softmax). Only the whole model on one device (no tp/pp/sp, no recompute).
//
// Steps: forward_backward uploads the tokens, runs forward + backward (recorded once into a
// CUDA graph and replayed, unless disabled) and reads back the mean loss: the only host
// synchronisation of a step. grad_norm_sq (one read-back) and adamw_step are separate, as in
// the CPU trainer.
//
//   weft::cuda::GptCuda g(model_preset("gpt2-124m"), Precision::kBf16, /*seed=*/1337);
//   g.reserve(B, T);
//   g.zero_grads();
//   float loss = g.forward_backward(in, tg, B, T, 1.0f / (B * T));
//   double n2 = g.grad_norm_sq();
//   g.adamw_step(lr, step, clip_coefficient(std::sqrt(n2), 1.0), 0.9f, 0.95f, 1e-8f, 0.1f);
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_buffer.h"
#include "core/precision.h"
#include "model/config.h"
#include "model/params.h"

namespace weft::cuda {

class GptCuda {
 public:
  // Parameters initialised as init_params(layout, seed) on the host, then uploaded: the CPU
  // GPT's exact initial weights. precision: kFp32 or kBf16 (kFp16 is refused: fp16 storage
  // has no kernels). device < 0: by local rank.
  GptCuda(const ModelConfig& cfg, Precision precision, uint64_t seed, int device = -1);
  ~GptCuda();
  GptCuda(const GptCuda&) = delete;
  GptCuda& operator=(const GptCuda&) = delete;

  const ModelConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  Precision precision() const { return prec_; }
  int64_t num_params() const { return layout_.total(); }
  CudaBackend& backend() { return *be_; }

  // Sizes the activation and scratch buffers for micro-batches of up to (B, T). Called by
  // forward_backward when needed; call it first to allocate before timing.
  void reserve(int64_t B, int64_t T);

  // fp32 master parameters (layout().total() values, host memory) in / out. load refreshes
  // the bf16 copy and keeps the AdamW moments.
  void load_params(const float* host);
  void download_params(float* host);
  void download_grads(float* host);

  // Forward and backward of one micro-batch: inputs, targets (B,T) on the host. Returns the
  // mean loss over the B*T tokens and accumulates d(loss_scale * sum of token losses)/dparams
  // into the fp32 gradients (model/gpt.h's contract: the trainer passes 1/(tokens of the
  // step) times its loss scale).
  float forward_backward(const int32_t* host_inputs, const int32_t* host_targets, int64_t B, int64_t T,
                         float loss_scale);
  // Mean loss only (no gradients; does not disturb the gradients).
  float forward_loss(const int32_t* host_inputs, const int32_t* host_targets, int64_t B, int64_t T);
  void zero_grads();  // asynchronous
  // Sum of squares of all gradients (double, deterministic); waits for the result.
  double grad_norm_sq();
  // AdamW over the flat buffer, decoupled weight decay on the tensors with weight_decay set
  // (matrices and embeddings: ParamTensor::weight_decay, as src/optim does); the gradients are
  // read times grad_scale (clipping / loss-scale undo). t: 1-based step. Asynchronous; in bf16
  // the same pass writes the bf16 copy.
  void adamw_step(float lr, int64_t t, float grad_scale, float beta1, float beta2, float eps, float weight_decay);

  // CUDA graphs for forward + backward (default on): the first call of a shape runs eagerly
  // (it sizes the scratch and picks the cuBLASLt algorithms), the second records a graph,
  // later calls replay it. A capture that fails is logged once and the model runs eagerly.
  // Graphs are keyed by (B, T, loss_scale, backward): a loss scale that changes every step
  // (fp16 dynamic scaling; not supported here) would never replay. Default: on in bf16, off
  // in fp32 (the check path uses plain cuBLAS, whose capture needs a user workspace).
  void set_use_graphs(bool on);
  bool graph_active() const;  // a graph is recorded and in use
  void synchronize() { be_->synchronize(); }

  // Device bytes by buffer kind (also counted in core/memory.h's tracker).
  int64_t param_bytes() const;
  int64_t grad_bytes() const;
  int64_t optimizer_bytes() const;
  int64_t activation_bytes() const;

 private:
  struct Impl;
  void forward_bf16(int64_t B, int64_t T);
  void backward_bf16(int64_t B, int64_t T, float dloss);
  void forward_fp32(int64_t B, int64_t T);
  void backward_fp32(int64_t B, int64_t T, float dloss);
  void head_loss(int64_t B, int64_t T, float dloss);  // logits, losses, (dloss != 0) head backward
  void run_step(int64_t B, int64_t T, float dloss, bool backward);
  void upload_tokens(const int32_t* in, const int32_t* tg, int64_t n);
  float read_mean_loss(int64_t n);

  ParamLayout layout_;
  Precision prec_;
  std::unique_ptr<CudaBackend> be_;
  std::unique_ptr<Impl> im_;
};

// The card's bf16 matrix-product rate through cuBLASLt (bf16 in and out, fp32 accumulation):
// the best of `reps` timed n x n x n products (CUDA events) after a warm-up. FLOP/s.
double measure_bf16_gemm_flops(CudaBackend& be, int64_t n = 8192, int reps = 20);

}  // namespace weft::cuda
