// Launchers of the CUDA kernels (implemented in the .cu files of this folder), called by
// cuda_backend.cc. All pointers are device pointers; every launcher enqueues on `s` and
// returns at once. T is float or gpu::bf16_t (explicit instantiations in the .cu files);
// arithmetic is fp32 whatever T is. Shapes as in backend/backend.h.
#pragma once
#include <cstdint>

#include "backend/cuda/gpu_runtime.h"

namespace weft::cuda::kern {

using gpu::bf16_t;
using gpu::Stream;

// --- elementwise (elementwise.cu) ---
template <typename T> void add_bias(T* out, const T* inp, const T* bias, int64_t N, int64_t C, Stream s);
template <typename T> void add(T* out, const T* a, const T* b, int64_t n, Stream s);
template <typename T> void gelu_forward(T* out, const T* inp, int64_t n, Stream s);
template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, Stream s);
template <typename T> void scale(T* x, float a, int64_t n, Stream s);
void convert(bf16_t* dst, const float* src, int64_t n, Stream s);
void convert(float* dst, const bf16_t* src, int64_t n, Stream s);
// x rounded in place through 16-bit storage: kind 1 = bf16, 2 = fp16 (IEEE half).
void round_through(float* x, int64_t n, int kind, Stream s);
// dbias (OUT) += column sums of dout (N,OUT), fp32 accumulation, deterministic: partials
// over row chunks go to `scratch` (at least column_sum_scratch(N, OUT) floats).
template <typename T>
void column_sum_accumulate(float* dbias, const T* dout, int64_t N, int64_t OUT, float* scratch, Stream s);
int64_t column_sum_scratch(int64_t N, int64_t OUT);
// AdamW (backend.h); p16, when not null, receives the updated parameters rounded to bf16;
// pcopy, when not null, receives them in fp32 rounded through 16-bit storage of copy_kind
// (0: none, an exact copy; 1: bf16; 2: fp16, as round_through).
void adamw(float* p, bf16_t* p16, float* pcopy, int copy_kind, const float* g, float* m, float* v, int64_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, float step, float rbc2,
           float grad_scale, Stream s);
// sum of squares in double, deterministic; result written to *out (device). scratch: at least
// sum_squares_scratch() doubles.
template <typename T> void sum_squares(const T* x, int64_t n, double* out, double* scratch, Stream s);
int64_t sum_squares_scratch();

// --- embeddings (embedding.cu) ---
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_, int64_t C,
                       int64_t v0, int64_t vrows, Stream s);
// Deterministic: positions are sorted by token (stable radix sort), each distinct row sums
// its positions in order. scratch: embedding_backward_scratch(N, vrows) bytes.
template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_,
                        int64_t C, int64_t v0, int64_t vrows, void* scratch, Stream s);
int64_t embedding_backward_scratch(int64_t N, int64_t vrows);

// --- LayerNorm (layernorm.cu) ---
// residual, when not null, receives a + b and is normalised (fused residual add); else the
// input is a. out, residual of type T; statistics fp32.
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b, const T* w,
                       const T* bias, int64_t N, int64_t C, float eps, Stream s);
// dinp += ...; dw, db += ... (deterministic through `scratch`, layernorm_backward_scratch floats).
template <typename T>
void layernorm_backward(T* dinp, float* dw, float* db, const T* dout, const T* inp, const T* w, const float* mean,
                        const float* rstd, int64_t N, int64_t C, float* scratch, Stream s);
int64_t layernorm_backward_scratch(int64_t N, int64_t C);

// --- softmax cross-entropy (softmax_ce.cu) ---
template <typename T>
void softmax_cross_entropy(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           float dloss, Stream s);
template <typename T> void ce_row_max(const T* logits, int64_t N, int64_t ld, int64_t cols, float* max, Stream s);
template <typename T>
void ce_row_sumexp(const T* logits, int64_t N, int64_t ld, int64_t cols, const float* max, float* sum, Stream s);
template <typename T>
void ce_target_logit(const T* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                     float* tl, Stream s);
template <typename T>
void ce_grad(T* logits, int64_t N, int64_t ld, int64_t cols, const float* max, const float* sum,
             const int32_t* targets, int64_t v0, float dloss, Stream s);
// losses[i] = log(sum[i]) + max[i] - tl[i] (n rows).
void ce_loss(float* losses, const float* max, const float* sum, const float* tl, int64_t n, Stream s);

// The weighted squared error (backend.h weighted_mse): row_loss (R) = sum_k w[k] (pred - target)^2
// summed in double; grad (R,K), when not null, = 2 dloss w[k] (pred - target) (may alias pred).
void weighted_mse(float* row_loss, float* grad, const float* pred, const float* target, const float* w, int64_t R,
                  int64_t K, float dloss, Stream s);

// --- attention, fp32 reference path (attention_ref.cu): softmax of the stored scores ---
// att (BH, T, T) rows: softmax of scale * scores in place; causal: over columns [0, i] of
// query row i, zeros above the diagonal; otherwise over all T columns (bidirectional).
void softmax_rows(float* att, int64_t BH, int64_t T, float scale, bool causal, Stream s);
// The causal form with ALiBi: slopes[h] * (j - i) added to score (i, j) of head h = (row / T) % NH
// first (slopes: NH floats, device).
void softmax_rows_alibi(float* att, int64_t BH, int64_t T, int64_t NH, const float* slopes, Stream s);
// datt -> scale * att * (datt - sum_j att*datt) (causal: zeros above the diagonal).
void softmax_backward_rows(float* datt, const float* att, int64_t BH, int64_t T, float scale, bool causal, Stream s);
// Query attention (backend.h query_attention_forward/backward): q (C), kv (S,N,2C), out (N,C),
// att (N,NH,S). Backward: dkv writes, dq (C) accumulates the sum over positions (deterministic:
// per-position partials, then the ordered column sum); scratch: query_attention_backward_scratch floats.
void query_attention_forward(float* out, float* att, const float* q, const float* kv, int64_t N, int64_t S, int64_t C,
                             int64_t NH, Stream s);
void query_attention_backward(float* dq, float* dkv, const float* dout, const float* q, const float* kv,
                              const float* att, int64_t N, int64_t S, int64_t C, int64_t NH, float* scratch,
                              Stream s);
int64_t query_attention_backward_scratch(int64_t N, int64_t S, int64_t C, int64_t NH);

// --- indexed rows (indexed.cu): backend.h's gather, segment and batch-norm ops, fp32 ---
void gather_rows(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C, Stream s);
// op: 0 sum, 1 mean, 2 max, 3 min (backend.h SegmentOp's order).
void segment_reduce(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets, int64_t S,
                    int64_t C, int op, bool accumulate, Stream s);
void segment_broadcast(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C,
                       bool mean, bool accumulate, Stream s);
void segment_arg_backward(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C, Stream s);
void segment_std(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets, int64_t S,
                 int64_t C, float var_floor, Stream s);
void segment_std_backward(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                          const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C, Stream s);
void batchnorm_inference(float* out, const float* x, const float* mean, const float* var, const float* w,
                         const float* b, int64_t N, int64_t C, float eps, Stream s);
// scratch: batchnorm_scratch(N, C) doubles.
void batchnorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int64_t C, float eps, double* scratch, Stream s);
void batchnorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C, double* scratch, Stream s);
int64_t batchnorm_scratch(int64_t N, int64_t C);

// --- pointwise ops of the graph networks (pointwise.cu), fp32 ---
// act: 0 ReLU, 1 SiLU, 2 shifted softplus (backend.h Activation's order).
void activation_forward(float* out, const float* inp, int64_t n, int act, Stream s);
void activation_backward(float* dinp, const float* inp, const float* dout, int64_t n, int act, bool accumulate,
                         Stream s);
void mul(float* out, const float* a, const float* b, int64_t n, bool accumulate, Stream s);
void scale_rows(float* out, const float* x, const float* sc, int64_t N, int64_t C, bool accumulate, Stream s);

// --- the decoder variants' ops (decoder_ops.cu), fp32 ---
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps,
                     Stream s);
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int64_t C, Stream s);
void rope(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads, int64_t hd,
          int64_t rot, bool inverse, Stream s);
void swiglu_forward(float* out, const float* pre, int64_t N, int64_t F, Stream s);
// The exact (erf) GELU and its backward (dinp may alias dout).
void gelu_erf_forward(float* out, const float* inp, int64_t n, Stream s);
void gelu_erf_backward(float* dinp, const float* inp, const float* dout, int64_t n, Stream s);
void swiglu_backward(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F, Stream s);
void expand_kv(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd, Stream s);
void reduce_kv(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd, Stream s);

// The .cu files use no fmt (nvcc rejects its consteval format checks): argument checks
// that need a message live in cuda_backend.cc.

// --- flash attention, bf16 (flash_attention.cu) ---
// out (B,T,C), lse (B,NH,T) = log sum_j exp(scale * q.k_j) (natural log). hs = C/NH in {64, 128}.
void flash_attention_forward(bf16_t* out, float* lse, const bf16_t* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, Stream s);
// dqkv (B,T,3C) writes. scratch: flash_attention_backward_scratch floats (D = rowsum(dO*O)).
void flash_attention_backward(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv, const bf16_t* out,
                              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, float* scratch,
                              Stream s);
int64_t flash_attention_backward_scratch(int64_t B, int64_t T, int64_t NH);
bool flash_attention_supports(int64_t C, int64_t NH);

// --- block quantization (quant.cu): the wire format of core/block_quant.h ---
// wire (4-byte aligned): data_bytes (quant_data_bytes, a multiple of 4) of int8/int4 values,
// then ceil(n / block) fp32 scales. bits 8 or 4, block >= 1 (checked by the caller).
// residual (n, may be null): quantizes x + residual, writes residual = v - dequantized.
void quantize_blocks(uint8_t* wire, const float* x, float* residual, int64_t n, int bits, int64_t block,
                     int64_t data_bytes, Stream s);
// out (n) = q * s, or out += q * s when accumulate.
void dequantize_blocks(float* out, const uint8_t* wire, int64_t n, int bits, int64_t block, int64_t data_bytes,
                       bool accumulate, Stream s);

// --- 16-bit floats on the wire (wire_cast.cu): kind 1 = bf16, 2 = fp16, round to nearest even ---
void encode_16(uint16_t* wire, const float* x, int64_t n, int kind, Stream s);
// out (n) = widened wire, or out += it when accumulate.
void decode_16(float* out, const uint16_t* wire, int64_t n, int kind, bool accumulate, Stream s);

}  // namespace weft::cuda::kern
