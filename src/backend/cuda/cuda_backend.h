// The CUDA backend: the op interface of backend/backend.h over DEVICE pointers with the CPU
// backend's fp32 semantics, the optional fused ops with its own kernels, and bf16 kernels for
// the hot paths of mixed precision, reached only through the typed ops (bf16 views).
//
// Optional fused ops (backend.h): offers() is true for every one. What the overrides do
// differently from the default sequences:
//   residual_layernorm_forward, matmul_residual_layernorm_forward: one LayerNorm kernel that
//     also writes the residual (layernorm.cu); the product variant first computes
//     inp @ w + bias into scratch (cuBLAS, strict fp32), so its residual sums
//     res + (inp @ w + bias) where the default sums (res + bias) + inp @ w.
//   matmul_gelu_forward, matmul_gelu_backward: cuBLASLt in strict fp32 (CUBLAS_COMPUTE_32F)
//     with the GELU_AUX_BIAS / DGELU epilogue (cuBLASLt's tanh GELU), where cuBLASLt has an
//     algorithm and the aux leading dimension is a multiple of 8 floats; the default
//     sequence otherwise.
//   attention_forward_lse / attention_backward_lse: the bf16 flash kernels
//     (flash_attention.cu) behind fp32 pointers: q, k, v (and dout, out) are converted to
//     bf16 in scratch, the results back to fp32. So these compute with bf16 inputs and
//     fp32 accumulation: they agree with attention_forward/backward to bf16 precision
//     (~1e-2 normalised), not fp32. Head sizes 64 and 128 only (attention_lse_supports).
//   adamw_copy: one pass that updates p, m, v and writes the rounded copy.
// The epilogues and the fused residual skip the rounding between the fused steps, so with a
// 16-bit storage precision (p != kFp32) the first four run the default sequence instead: the
// 16-bit storage then rounds exactly where the model's does. The typed ops (cuda_typed.cc)
// send the bf16 policy's dtype patterns below to the bf16 kernels (the private *_bf16
// members); GPT's storage policy (model/block.h: fp32 LayerNorm weights and working
// parameters, an fp32 residual stream) mostly meets other patterns yet, which the default
// stages through fp32 (issue 32 continues).
//
// Every op is enqueued on the backend's one compute stream (stream()) and returns at once;
// only sum_squares (which returns a value) and synchronize() wait. Buffers are the project's
// one buffer class, weft::DeviceBuffer (backend/device_buffer.h, through device_alloc).
// Scratch space (the cuBLASLt workspace, reduction partials, sort buffers, the attention
// datt/D rows, the fused ops' temporaries) is owned by the backend, allocated through its
// own device_alloc, grows on demand and is counted under `workspace`.
//
// bf16 policy of the bf16 kernels (the operand dtypes the typed ops send to them):
// parameters live as fp32 master weights (optimizer state fp32 too) and a bf16 compute copy
// written by adamw_copy onto a bf16 view; activations and activation gradients are bf16;
// weight gradients accumulate in fp32 (cuBLASLt writes an fp32 C from bf16 A, B; dbias,
// LayerNorm dw/db and embedding gradients are fp32); every reduction and softmax statistic
// is fp32. Matrix products: cuBLASLt, bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F),
// with the bias and GELU epilogues fused where they apply.
//
// Determinism: no op uses atomics; two runs with the same inputs give the same bits on the
// same GPU and library versions (cuBLASLt's algorithm choice is fixed per shape).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/dtype.h"
#include "backend/cuda/gpu_runtime.h"

namespace weft::cuda {

class CudaBackend final : public Backend {
 public:
  // Selects `device` (negative: by local rank, gpu::select_device) and creates the compute
  // stream, the cuBLAS/cuBLASLt handles and the cuBLASLt workspace (32 MiB).
  explicit CudaBackend(int device = -1);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  int device() const;
  gpu::Stream stream() const;
  void synchronize() override;  // waits for everything enqueued so far

  // --- the device contract (backend.h) ---
  // Device memory from cudaMalloc; copies on the compute stream (to_device and to_host wait
  // for completion, copy_device does not); fill stages through copy_to_device (the default);
  // the host never gets direct access (begin_host_access is false: host-staged
  // communication copies).
  void copy_to_device(void* dst, size_t dst_offset, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t src_offset, size_t bytes) override;
  void copy_device(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) override;
  void copy_device_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                      size_t rows) override;
  bool is_device_memory(const void* p) const override;
  int64_t device_memory_free() const override;  // cudaMemGetInfo's free bytes on this device
  bool begin_host_access(void* p, size_t bytes) override { return false; }

  // --- the typed ops (backend.h; cuda_typed.cc) ---
  // The dtype patterns of the bf16 policy (header comment) go to the bf16 kernels (the private
  // *_bf16 members below); every other pattern to Backend's default (fp32 kernels on staged
  // fp32 copies). These ops are the only way to the bf16 kernels.
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
            int64_t ldb, float beta, View C, int64_t ldc) override;
  void matmul_forward(View out, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                      bool accumulate) override;
  void matmul_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, int64_t N, int64_t IN,
                       int64_t OUT) override;
  void embedding_forward(View out, const int32_t* tokens, CView wte, CView wpe, int64_t B, int64_t T, int64_t C,
                         int64_t v0 = 0, int64_t vrows = INT64_MAX) override;
  void embedding_backward(View dwte, View dwpe, CView dout, const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                          int64_t v0 = 0, int64_t vrows = INT64_MAX) override;
  void layernorm_forward(View out, View mean, View rstd, CView inp, CView w, CView b, int64_t N, int64_t C,
                         float eps) override;
  void layernorm_backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean, CView rstd,
                          int64_t N, int64_t C) override;
  void add(View out, CView a, CView b, int64_t n) override;
  void gelu_forward(View out, CView inp, int64_t n) override;
  void gelu_backward(View dinp, CView inp, CView dout, int64_t n) override;
  void softmax_cross_entropy(View logits, View losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                             float dloss) override;
  void ce_row_max(CView logits, int64_t N, int64_t ld, int64_t cols, View max) override;
  void ce_row_sumexp(CView logits, int64_t N, int64_t ld, int64_t cols, CView max, View sum) override;
  void ce_target_logit(CView logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                       View tl) override;
  void ce_grad(View logits, int64_t N, int64_t ld, int64_t cols, CView max, CView sum, const int32_t* targets,
               int64_t v0, float dloss) override;
  void residual_layernorm_forward(View residual, View out, View mean, View rstd, CView a, CView b, CView w,
                                  CView bias, int64_t N, int64_t C, float eps, Precision p) override;
  void matmul_gelu_forward(View out, View pre, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                           Precision p) override;
  void matmul_gelu_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, CView pre, int64_t N,
                            int64_t IN, int64_t OUT, Precision p) override;
  void attention_forward_lse(View out, View lse, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) override;
  void attention_backward_lse(View dqkv, CView dout, CView qkv, CView out, CView lse, int64_t B, int64_t T, int64_t C,
                              int64_t NH) override;
  void adamw_copy(float* p, View copy, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                  Precision copy_precision) override;

  // --- the fp32 kernels (backend.h), device pointers ---
  // fp32 products use cuBLAS SGEMM in strict fp32 (no TF32) so that they match the CPU
  // reference; set_tf32(true) allows TF32 tensor cores.
  void set_tf32(bool on);
  // The model's products (backend.h set_products): exact = the strict-fp32 SGEMM above; fast on
  // bf16 storage = cuBLASLt bf16 with fp32 accumulation and output, on copies of the operands
  // rounded to bf16 in scratch (the storage is still fp32 buffers: two conversion kernels per
  // product until buffers carry dtypes, issue 32). fp16 storage stays exact. One fp32 product:
  // a named fp32 kernel other than "cublas" is refused. NOT RUN on a GPU yet (compiled only).
  void set_products(const ProductSettings& s) override;
  std::string product_kernel() const override;
  void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc) override;
  void matmul_forward_f32(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IN,
                      int64_t OUT, bool accumulate) override;
  void matmul_backward_f32(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int64_t N, int64_t IN, int64_t OUT) override;
  void embedding_forward_f32(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                             int64_t T,
                         int64_t C, int64_t v0 = 0, int64_t vrows = INT64_MAX) override;
  void embedding_backward_f32(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                          int64_t C, int64_t v0 = 0, int64_t vrows = INT64_MAX) override;
  void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override;
  void layernorm_backward_f32(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) override;
  void gather_rows_f32(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C) override;
  void segment_reduce_f32(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets,
                          int64_t S, int64_t C, SegmentOp op, bool accumulate) override;
  void segment_broadcast_f32(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S,
                             int64_t C, bool mean, bool accumulate) override;
  void segment_arg_backward_f32(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C) override;
  void segment_std_f32(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets,
                       int64_t S, int64_t C, float var_floor) override;
  void segment_std_backward_f32(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                                const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C) override;
  void batchnorm_inference_f32(float* out, const float* x, const float* mean, const float* var, const float* w,
                               const float* b, int64_t N, int64_t C, float eps) override;
  void batchnorm_forward_f32(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                             int64_t N, int64_t C, float eps) override;
  void batchnorm_backward_f32(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                              const float* mean, const float* rstd, int64_t N, int64_t C) override;
  void activation_forward_f32(float* out, const float* inp, int64_t n, Activation a) override;
  void activation_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n, Activation a,
                               bool accumulate) override;
  void mul_f32(float* out, const float* a, const float* b, int64_t n, bool accumulate) override;
  void scale_rows_f32(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate) override;
  void rmsnorm_forward_f32(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                           float eps) override;
  void rmsnorm_backward_f32(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, int64_t N, int64_t C) override;
  void attention_forward_alibi_f32(float* out, float* att, const float* qkv, const float* slopes, int64_t B, int64_t T,
                                   int64_t C, int64_t NH) override;
  void gelu_erf_forward_f32(float* out, const float* inp, int64_t n) override;
  void gelu_erf_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override;
  void rope_f32(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads,
                int64_t hd, int64_t rot, bool inverse) override;
  void swiglu_forward_f32(float* out, const float* pre, int64_t N, int64_t F) override;
  void swiglu_backward_f32(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F) override;
  void expand_kv_f32(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override;
  void reduce_kv_f32(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override;
  void add_bias_f32(float* out, const float* inp, const float* bias, int64_t N, int64_t C) override;
  void add_f32(float* out, const float* a, const float* b, int64_t n) override;
  void gelu_forward_f32(float* out, const float* inp, int64_t n) override;
  void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override;
  // The reference path: scores through cuBLAS into att (B,NH,T,T), as the interface asks.
  void attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) override;
  void attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                          int64_t C, int64_t NH) override;
  // The same products with full softmax rows (attention_ref.cu's row kernels without the mask).
  void bidir_attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                               int64_t NH) override;
  void bidir_attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                                int64_t T, int64_t C, int64_t NH) override;
  // One block per (position, head) (attention_ref.cu); dq sums the positions' partials in order
  // (deterministic, no atomics).
  void query_attention_forward_f32(float* out, float* att, const float* q, const float* kv, int64_t N, int64_t S,
                               int64_t C, int64_t NH) override;
  void query_attention_backward_f32(float* dq, float* dkv, const float* dout, const float* q, const float* kv,
                                const float* att, int64_t N, int64_t S, int64_t C, int64_t NH) override;
  // One block per row, the row's loss summed in double (elementwise.cu).
  void weighted_mse_f32(float* row_loss, float* grad, const float* pred, const float* target, const float* w, int64_t R,
                    int64_t K, float dloss) override;
  void softmax_cross_entropy_f32(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                             float dloss) override;
  void ce_row_max_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, float* max) override;
  void ce_row_sumexp_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const float* max,
                     float* sum) override;
  void ce_target_logit_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                       float* tl) override;
  void ce_loss_f32(float* losses, const float* max, const float* sum, const float* tl, int64_t n) override;
  void ce_grad_f32(float* logits, int64_t N, int64_t ld, int64_t cols, const float* max, const float* sum,
               const int32_t* targets, int64_t v0, float dloss) override;
  void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
             float weight_decay, int64_t t, float grad_scale) override;
  double sum_squares(const float* x, int64_t n) override;
  void scale(float* x, float s, int64_t n) override;
  // x rounded in place to bf16 / fp16 values (round to nearest even; fp16 overflow -> inf).
  void round_to(float* x, int64_t n, Precision p) override;

  // --- optional fused ops (backend.h; what differs from the defaults: the header comment) ---
  bool offers(FusedOp op) const override { return true; }
  void residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd, const float* a,
                                  const float* b, const float* w, const float* bias, int64_t N, int64_t C, float eps,
                                  Precision p) override;
  void matmul_residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd, const float* res,
                                         const float* inp, const float* w, const float* bias, const float* ln_w,
                                         const float* ln_b, int64_t N, int64_t IN, int64_t C, float eps,
                                         Precision p) override;
  void matmul_gelu_forward_f32(float* out, float* pre, const float* inp, const float* w, const float* bias, int64_t N,
                           int64_t IN, int64_t OUT, Precision p) override;
  void matmul_gelu_backward_f32(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                                const float* w,
                            const float* pre, int64_t N, int64_t IN, int64_t OUT, Precision p) override;
  void attention_forward_lse_f32(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH) override;
  void attention_backward_lse_f32(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              int64_t B, int64_t T, int64_t C, int64_t NH) override;
  // The flash kernels compute in bf16: fp32 storage keeps the exact probabilities path.
  bool attention_lse_supports(int64_t C, int64_t NH, Precision p) const override {
    return p != Precision::kFp32 && flash_attention_supports(C, NH);
  }
  void adamw_copy_f32(float* p, float* copy, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                  Precision copy_precision) override;

  // --- block quantization (backend.h; quant.cu): the bytes of core/block_quant.h's reference ---
  // Kernels on the compute stream, no host copies; wire must be 4-byte aligned (its scales are
  // fp32 and the kernels write whole 32-bit words).
  void quantize_blocks(void* wire, const float* x, int64_t n, const QuantSpec& q, float* residual) override;
  void dequantize_blocks(float* out, const void* wire, int64_t n, const QuantSpec& q, bool accumulate) override;
  // --- 16-bit wire casts (backend.h; wire_cast.cu) ---
  void encode_16(void* wire, const float* x, int64_t n, DType dt) override;
  void decode_16(float* out, const void* wire, int64_t n, DType dt, bool accumulate) override;

 protected:
  void* device_alloc_impl(size_t bytes, MemCategory c) override;
  void device_free_impl(void* p, size_t bytes) noexcept override;

 private:
  // C (M,N) = alpha op(A) op(B) + beta C, row-major fp32 buffers, as the products are set.
  void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
  bool fast_bf16_ = false;

  // attention_forward/backward and their bidirectional forms: cuBLAS strided-batched products
  // around the row kernels, causal or full rows; `what` names the op in messages.
  void attention_forward_probs(const char* what, bool causal, float* out, float* att, const float* qkv, int64_t B,
                               int64_t T, int64_t C, int64_t NH, const float* alibi_slopes = nullptr);
  void attention_backward_probs(const char* what, bool causal, float* dqkv, const float* dout, const float* qkv,
                                const float* att, int64_t B, int64_t T, int64_t C, int64_t NH);

  // --- the bf16 kernels (mixed precision): reached only through the typed ops above ---
  // (cuda_typed.cc sends each bf16 dtype pattern to one of these; cuda_backend.cc.)

  // What the matrix-product epilogue adds to out = inp @ w.
  enum class Epilogue {
    kNone,      // out = inp @ w
    kBias,      // out = inp @ w + bias
    kGeluBias,  // pre_gelu = inp @ w + bias (kept for backward); out = gelu(pre_gelu)
  };

  // Row-major product C (M,N) = alpha op(A) op(B) + beta C in cuBLASLt, bf16 A and B, fp32
  // accumulation; C is bf16 or fp32 (weight gradients accumulate into fp32 with beta = 1).
  // gemm on (bf16, bf16, bf16) and (bf16, bf16, f32) views; product() in the fast mode.
  void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda,
                 const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc);
  void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda,
                 const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);
  // out (N,OUT) = inp (N,IN) @ w (IN,OUT) with the epilogue; bias (OUT) for kBias and
  // kGeluBias; pre_gelu (N,OUT) written for kGeluBias. accumulate: out += (kNone, kBias only).
  // matmul_forward (kNone / kBias) and matmul_gelu_forward (kGeluBias).
  void matmul_forward_bf16(bf16* out, bf16* pre_gelu, const bf16* inp, const bf16* w, const bf16* bias, int64_t N,
                           int64_t IN, int64_t OUT, Epilogue ep, bool accumulate);
  // dinp (N,IN) = dout @ w^T (writes; skipped if null), multiplied by gelu'(pre_gelu) when
  // pre_gelu (N,IN) is given (the fused GELU backward of the layer that produced inp);
  // dw (IN,OUT) += inp^T @ dout (fp32); dbias (OUT) += column sums of dout (fp32, if not null).
  // matmul_backward (no pre_gelu) and matmul_gelu_backward.
  void matmul_backward_bf16(bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w,
                            int64_t N, int64_t IN, int64_t OUT, const bf16* pre_gelu);

  // LayerNorm, fp32 statistics: out (N,C), mean, rstd (N) fp32. writes.
  void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b,
                              int64_t N, int64_t C, float eps);
  // Fused residual add + LayerNorm: residual = a + b (writes; may alias a or b), out = LN(residual).
  void residual_layernorm_forward_bf16(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                                       const bf16* b, const bf16* w, const bf16* bias, int64_t N, int64_t C,
                                       float eps);
  // dinp (N,C) bf16 accumulates (the residual gradient stream); dw, db (C) fp32 accumulate.
  void layernorm_backward_bf16(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                               const float* mean, const float* rstd, int64_t N, int64_t C);

  void add_bf16(bf16* out, const bf16* a, const bf16* b, int64_t n);  // out may alias a or b
  void gelu_forward_bf16(bf16* out, const bf16* inp, int64_t n);
  void gelu_backward_bf16(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n);

  // Embedding: out (B,T,C) bf16 from bf16 tables; gradients into fp32 tables (accumulate,
  // deterministic). Same vocabulary-parallel arguments as the fp32 ops.
  void embedding_forward_bf16(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t B,
                              int64_t T, int64_t C, int64_t v0, int64_t vrows);
  void embedding_backward_bf16(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int64_t B,
                               int64_t T, int64_t C, int64_t v0, int64_t vrows);

  // Flash attention (flash_attention.cu): qkv (B,T,3C), out (B,T,C), lse (B,NH,T) fp32
  // instead of the (B,NH,T,T) probabilities. Head size C/NH of 64 or 128.
  static bool flash_attention_supports(int64_t C, int64_t NH);
  void attention_forward_bf16(bf16* out, float* lse, const bf16* qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
  // dqkv (B,T,3C) writes; needs the forward's out and lse.
  void attention_backward_bf16(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                               int64_t B, int64_t T, int64_t C, int64_t NH);

  // Cross-entropy on bf16 logits (the gradient written back in bf16), fp32 losses/statistics.
  void softmax_cross_entropy_bf16(bf16* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                                  int64_t Vp, float dloss);
  void ce_row_max_bf16(const bf16* logits, int64_t N, int64_t ld, int64_t cols, float* max);
  void ce_row_sumexp_bf16(const bf16* logits, int64_t N, int64_t ld, int64_t cols, const float* max, float* sum);
  void ce_target_logit_bf16(const bf16* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets,
                            int64_t v0, float* tl);
  void ce_grad_bf16(bf16* logits, int64_t N, int64_t ld, int64_t cols, const float* max, const float* sum,
                    const int32_t* targets, int64_t v0, float dloss);

  // AdamW over the flat fp32 master buffer (semantics of adamw); p16 (n), when not null,
  // receives the updated parameters rounded to bf16: the compute copy. adamw_copy on a bf16
  // view, and adamw (p16 null).
  void adamw_bf16(float* p, bf16* p16, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t, float grad_scale);

  struct State;
  std::unique_ptr<State> st_;
};

std::unique_ptr<CudaBackend> make_cuda_backend(int device = -1);

// The card's bf16 matrix-product rate through cuBLASLt (bf16 in and out, fp32 accumulation):
// the best of `reps` timed n x n x n products (CUDA events) after a warm-up. FLOP/s. The
// products are the typed gemm on bf16 views of weft::DeviceBuffers (counted as workspace).
// `weft bench --matmul-only` and the MFU denominator of `weft bench --backend cuda`.
double measure_bf16_gemm_flops(CudaBackend& be, int64_t n = 8192, int reps = 20);
// The best of `reps` timed (m x k) @ (k x n) bf16 products after a warm-up, in seconds: one
// point of `weft bench --gemm-sweep` (plan/gemm_fit.h).
double time_bf16_gemm(CudaBackend& be, int64_t m, int64_t n, int64_t k, int reps = 10);

}  // namespace weft::cuda
