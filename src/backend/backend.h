// The backend interface: the device contract (memory, copies, fills, synchronisation) and
// the ops. The model (src/model) is written once against it; each backend implements every
// required op and may implement the optional fused ops (whose defaults are sequences of the
// required ones). cpu/ is the reference every other backend is checked against; cpu_guarded/ is the CPU
// backend with its device memory fenced from the host, which proves that nothing above the
// backend touches device memory; cuda/ runs on a GPU.
//
// Device memory. Every pointer an op, copy or fill takes as "device" is device memory of
// this backend: a pointer returned by device_alloc, or an interior pointer into such an
// allocation (an offset that stays inside it). Only the backend reads or writes it; the host
// moves data in and out with copy_to_device / copy_to_host. The CPU backend's device memory
// is plain host memory, so host buffers passed to its ops work there (tests of host-side toy
// code rely on it); the model, the parameter stores, the optimizer, the pipeline runtime and
// the engine hand ops only device memory, which cpu-guarded checks (tests/golden, cpu-guarded).
// DeviceBuffer (backend/device_buffer.h) owns one allocation; prefer it to the raw calls.
//
// Interface methods say, ggml style (ggml-backend-impl.h), whether a backend must implement
// them (REQUIRED) or may (OPTIONAL), and what the default does. The memory group's defaults
// are host memory: right for backends whose ops run on the host (cpu); a backend with its
// own memory must override the whole group (device_alloc_impl, device_free_impl, the three
// copies, begin_host_access) and should override is_device_memory and synchronize.
//
// Ordering: copies, fills and ops run in the order they are called (a GPU backend puts them
// on one stream). copy_to_host returns once the host data is valid, copy_to_device once the
// source may be reused; copy_device, fill and ops may return before they finish: call
// synchronize() before timing them or before another process or device reads the memory.
//
// Threads: one thread calls a backend at a time (a backend parallelises inside its calls).
//
// Ops: tensors are row-major typed views (core/view.h: f32, bf16, f16; see "ops" below); a
// tensor a model keeps in fp32 for a 16-bit run is rounded with round_to (core/precision.h).
// Shapes use fixed letters: B batch, T sequence, C channels, NH heads, hs = C/NH,
// F = MLP hidden, V real vocabulary, Vp padded vocabulary, N = B*T rows (query attention:
// N positions of S tokens each; weighted_mse: R rows of K columns).
// "accumulates" means the op adds into its output; "writes" means it overwrites it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/block_quant.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/precision.h"
#include "core/view.h"
#include "backend/staging.h"

namespace weft {

// The optional fused ops of Backend (section "optional fused ops" below), for
// Backend::offers and messages.
// The reductions of Backend::segment_reduce_f32.
enum class SegmentOp { kSum, kMean, kMax, kMin };
// The graph networks' activations (activation_forward_f32).
enum class Activation { kRelu, kSilu, kShiftedSoftplus };
inline constexpr Activation kActivationsAll[] = {Activation::kRelu, Activation::kSilu, Activation::kShiftedSoftplus};
// Its name in configs and system files ("relu", "silu", "ssp").
inline const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kSilu: return "silu";
    case Activation::kShiftedSoftplus: return "ssp";
  }
  return "?";
}
// The name of its backward's rate in a system file ("silu_backward").
inline std::string activation_backward_name(Activation a) { return std::string(activation_name(a)) + "_backward"; }
// Rows per chunk of batch normalisation's column sums (a fixed order, whatever the threads).
inline constexpr int64_t kBatchNormChunk = 64;

enum class FusedOp {
  kResidualLayerNorm,        // residual_layernorm_forward
  kMatmulResidualLayerNorm,  // matmul_residual_layernorm_forward
  kMatmulGelu,               // matmul_gelu_forward
  kMatmulGeluBackward,       // matmul_gelu_backward
  kAttentionLse,             // attention_forward_lse + attention_backward_lse (default throws)
  kAdamwCopy,                // adamw_copy
};
inline constexpr FusedOp kFusedOps[] = {FusedOp::kResidualLayerNorm, FusedOp::kMatmulResidualLayerNorm,
                                        FusedOp::kMatmulGelu,        FusedOp::kMatmulGeluBackward,
                                        FusedOp::kAttentionLse,      FusedOp::kAdamwCopy};
// "residual_layernorm_forward", ...: the op's method name (the pair's first for kAttentionLse).
const char* fused_op_name(FusedOp op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ===== the device contract =====
  // --- memory ---
  // count elements of dtype dt (dtype_bytes(dt, count) bytes, at least 64-byte aligned),
  // counted in the process's MemoryTracker under c exactly as core/buffer.h's Buffer counts
  // (the element bytes, not the rounding). Contents are undefined. count 0 gives nullptr.
  // Throws RuntimeError naming the size when the memory is not there. Not virtual: it
  // counts, then calls device_alloc_impl.
  void* device_alloc(DType dt, int64_t count, MemCategory c);
  // Frees what device_alloc returned, given the same dt, count and c (the backend need not
  // remember sizes). nullptr is a no-op. Not virtual: it counts, then calls device_free_impl.
  void device_free(void* p, DType dt, int64_t count, MemCategory c) noexcept;

  // --- copies (byte counts; offsets in bytes from the device pointer) ---
  // REQUIRED for a backend with its own memory. Default: memcpy (host memory).
  // Host -> device: dst + dst_offset receives bytes from host src. Returns once src may be reused.
  virtual void copy_to_device(void* dst, size_t dst_offset, const void* src, size_t bytes);
  // Device -> host: host dst receives bytes from src + src_offset. Returns once dst is valid.
  virtual void copy_to_host(void* dst, const void* src, size_t src_offset, size_t bytes);
  // Device -> device, both of this backend; the ranges must not overlap.
  virtual void copy_device(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes);
  // OPTIONAL. Device -> device, `rows` rows of `width` bytes: row i from src + i * src_pitch to
  // dst + i * dst_pitch (columns of a row-major matrix). Default: copy_device row by row.
  virtual void copy_device_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                              size_t rows);

  // --- fill ---
  // OPTIONAL. Elements [first, first + count) of dst (dtype dt) = value (encode_element in
  // core/dtype.h: floats round to nearest even, integer dtypes need an integral value in range;
  // int4 needs first and count even). Default: in place when begin_host_access grants the
  // host access (cpu), otherwise through copy_to_device from a host staging buffer.
  virtual void fill(void* dst, DType dt, int64_t first, int64_t count, float value);

  // --- synchronisation ---
  // OPTIONAL. Waits until every copy, fill and op called so far has finished. Default: no-op
  // (the CPU backend's calls finish before they return).
  virtual void synchronize() {}

  // --- checks ---
  // OPTIONAL. True when p lies in device memory of this backend (for checks, never for
  // dispatch). Default: true for every pointer (a host backend cannot tell its device memory
  // from other host memory); cpu-guarded knows each allocation; cuda asks the driver.
  virtual bool is_device_memory(const void* p) const { return true; }
  // OPTIONAL. Bytes of device memory free now on this backend's device, for the memory check
  // before a run allocates (train/memory_fit.h). Default: -1, the device's memory is host
  // memory (cpu, cpu-guarded), which is checked as such; cuda asks the driver.
  virtual int64_t device_memory_free() const { return -1; }

  // --- host access, for host-staged communication only ---
  // OPTIONAL. A communicator that moves device buffers through host memory (MPI on a
  // backend without device-aware transport; see HostAccess below) asks for direct host
  // access to [p, p + bytes) of one allocation. true: the host may read and write the range
  // until end_host_access(p, bytes), after synchronize(); false: it must stage through
  // copy_to_host / copy_to_device. Nothing else above the backend may touch device memory.
  // Default: true (host memory) and a no-op end. cpu-guarded unfences the allocation for
  // the scope; cuda returns false.
  virtual bool begin_host_access(void* p, size_t bytes) { return true; }
  virtual void end_host_access(void* p, size_t bytes) {}

  // --- how the matrix products compute ---
  // OPTIONAL. Set once before the first op (the engine sets the run's): gemm, matmul_forward,
  // matmul_backward and the fused ops built on them (the model's products) read operands stored
  // at s.storage; with MatmulMode::kExact they are fp32 products of the stored values, bitwise
  // the cpu reference's; with kFast a backend may use its native 16-bit product for 16-bit
  // storage (core/precision.h). s.fp32_kernel names the library of fp32 products where the
  // backend has a choice ("": its default); a name it does not know is an InputError listing the
  // ones it does. The products inside other ops (attention's) are not affected.
  // Default: remembers s and computes exactly.
  virtual void set_products(const ProductSettings& s);
  const ProductSettings& products() const { return products_; }
  // What computes the model's products under the current settings, for logs and `weft bench`
  // (e.g. "openblas sgemm (Cooperlake kernels)", "onednn bf16 matmul (avx512_core_bf16)"), with
  // the reason when kFast falls back to the exact product. Default: "".
  virtual std::string product_kernel() const { return {}; }
  // Whether the typed products (gemm, matmul_forward, matmul_backward) read 16-bit operands in
  // place, staging only bf16 copies of their f32 inputs (two to an arena element), instead of
  // widening every 16-bit operand: what a description predicts the staging arena by
  // (RunSpec::native_products). OPTIONAL. Default: false.
  virtual bool native_16bit_products() const { return false; }

  // ===== ops =====
  // Every tensor operand is a typed view of device memory of this backend (core/view.h: a
  // pointer and a dtype, f32, bf16 or f16; a float* is an f32 view). An op computes in fp32: a
  // 16-bit operand widens exactly on read, and what the op writes to a 16-bit operand is its
  // fp32 result rounded to nearest even (fp16 overflow: inf; NaN stays NaN), once, at the end
  // of the op. So an op over 16-bit views gives bitwise the fp32 op over the widened values with
  // its 16-bit outputs rounded afterwards (tests/backend/typed_ops_test.cc); an output that is
  // also read (an accumulating or in-place operand) widens, takes the fp32 update, and rounds.
  // Semantics, shapes and aliasing of each op: its fp32 kernel's comment below (the same name
  // with _f32). Token ids stay int32 host-free device pointers.
  // VIRTUAL, with a DEFAULT (backend/typed_defaults.cc): all operands f32 (or null) -> the fp32
  // kernel directly; otherwise every 16-bit operand is staged through fp32 scratch of this
  // backend (decode_16 in, the fp32 kernel, encode_16 out; the scratch is the staging arena,
  // counted as `workspace` and kept for the next call: release_staging() frees it). So every
  // backend takes every dtype on day one; one with native 16-bit kernels (cuda's bf16 ones)
  // overrides the typed op and calls Backend::op for the combinations it does not cover. An
  // operand dtype other than f32/bf16/f16 is an InputError naming the op.
  // embedding_forward / embedding_backward with a 16-bit table need vrows (its row count).
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda,
                    CView B, int64_t ldb, float beta, View C, int64_t ldc);
  virtual void matmul_forward(View out, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                              bool accumulate);
  virtual void matmul_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, int64_t N, int64_t IN,
                               int64_t OUT);
  virtual void embedding_forward(View out, const int32_t* tokens, CView wte, CView wpe, int64_t B, int64_t T, int64_t C,
                                 int64_t v0 = 0, int64_t vrows = INT64_MAX);
  virtual void embedding_backward(View dwte, View dwpe, CView dout, const int32_t* tokens, int64_t B, int64_t T,
                                  int64_t C, int64_t v0 = 0, int64_t vrows = INT64_MAX);
  virtual void layernorm_forward(View out, View mean, View rstd, CView inp, CView w, CView b, int64_t N, int64_t C,
                                 float eps);
  virtual void layernorm_backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean, CView rstd,
                                  int64_t N, int64_t C);
  virtual void add_bias(View out, CView inp, CView bias, int64_t N, int64_t C);
  virtual void add(View out, CView a, CView b, int64_t n);
  virtual void gelu_forward(View out, CView inp, int64_t n);
  virtual void gelu_backward(View dinp, CView inp, CView dout, int64_t n);
  virtual void attention_forward(View out, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
  virtual void attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                                  int64_t NH);
  virtual void bidir_attention_forward(View out, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
  virtual void bidir_attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                                        int64_t NH);
  virtual void query_attention_forward(View out, View att, CView q, CView kv, int64_t N, int64_t S, int64_t C,
                                       int64_t NH);
  virtual void query_attention_backward(View dq, View dkv, CView dout, CView q, CView kv, CView att, int64_t N,
                                        int64_t S, int64_t C, int64_t NH);
  virtual void weighted_mse(View row_loss, View grad, CView pred, CView target, CView w, int64_t R, int64_t K,
                            float dloss);
  virtual void softmax_cross_entropy(View logits, View losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                     float dloss);
  virtual void ce_row_max(CView logits, int64_t N, int64_t ld, int64_t cols, View max);
  virtual void ce_row_sumexp(CView logits, int64_t N, int64_t ld, int64_t cols, CView max, View sum);
  virtual void ce_target_logit(CView logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                               View tl);
  virtual void ce_loss(View losses, CView max, CView sum, CView tl, int64_t n);
  virtual void ce_grad(View logits, int64_t N, int64_t ld, int64_t cols, CView max, CView sum, const int32_t* targets,
                       int64_t v0, float dloss);
  // The optional fused ops (section below), typed the same way: the default runs the fused op's
  // fp32 form (xxx_f32: the backend's override, or the sequence of required ops) on f32 or staged
  // operands, so a 16-bit output is rounded once after the whole fused op, where the sequence
  // rounds it too (p, the storage precision, still rounds the sequence's fp32 intermediates).
  virtual void residual_layernorm_forward(View residual, View out, View mean, View rstd, CView a, CView b, CView w,
                                          CView bias, int64_t N, int64_t C, float eps, Precision p);
  virtual void matmul_residual_layernorm_forward(View residual, View out, View mean, View rstd, CView res, CView inp,
                                                 CView w, CView bias, CView ln_w, CView ln_b, int64_t N, int64_t IN,
                                                 int64_t C, float eps, Precision p);
  virtual void matmul_gelu_forward(View out, View pre, CView inp, CView w, CView bias, int64_t N, int64_t IN,
                                   int64_t OUT, Precision p);
  virtual void matmul_gelu_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, CView pre,
                                    int64_t N, int64_t IN, int64_t OUT, Precision p);
  virtual void attention_forward_lse(View out, View lse, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
  virtual void attention_backward_lse(View dqkv, CView dout, CView qkv, CView out, CView lse, int64_t B, int64_t T,
                                      int64_t C, int64_t NH);
  // adamw_copy (below) with a typed copy: a 16-bit copy receives the updated p rounded to its
  // dtype (copy_precision is then ignored); an f32 copy is adamw_copy_f32's rounded copy.
  virtual void adamw_copy(float* p, View copy, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                          Precision copy_precision);
  // dst (n) = src (n) converted to dst's dtype (f32 <-> bf16 / f16: widen exactly, round to
  // nearest even; the same dtype: a copy). dst and src do not overlap. DEFAULT: copy_device,
  // encode_16 or decode_16; 16-bit to 16-bit through staged fp32.
  virtual void convert(View dst, CView src, int64_t n);
  // Frees the staging arena of the typed defaults (its bytes leave `workspace`).
  void release_staging() noexcept;
  // Bytes the staging arena holds now.
  int64_t staging_bytes() const;
  // The most fp32 elements one typed op has staged since the backend was made: what the arena
  // needs (a model's description predicts it; tests/model/gpt_staging_test.cc).
  int64_t staging_high_water() const { return staging_high_water_; }
  // The fp32 elements a row-chunked typed default stages of its row operands at a time
  // (staging_chunk_rows; default kStagingChunk). A description predicting the arena takes the
  // same number (RunSpec::staging_chunk); tests set a small one to make the chunks many.
  int64_t staging_chunk() const { return staging_chunk_; }
  void set_staging_chunk(int64_t elems);

  // ===== the fp32 kernels =====
  // REQUIRED, every one. What the typed ops above run on f32 operands: every pointer is fp32
  // device memory of this backend (see above). Callers use the typed ops.

  // --- matrix products (required) ---
  // General product, row-major: C (M,N) = alpha * op(A) op(B) + beta * C, where op(X) is X
  // or X^T; lda/ldb/ldc are row strides as stored.
  virtual void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    float* C, int64_t ldc) = 0;
  // out (N,OUT) = inp (N,IN) @ w (IN,OUT) [+ bias (OUT)] [+ out if accumulate]. writes.
  virtual void matmul_forward_f32(float* out, const float* inp, const float* w, const float* bias,
                              int64_t N, int64_t IN, int64_t OUT, bool accumulate) = 0;
  // dinp (N,IN) = dout @ w^T (writes, skipped if null); dw (IN,OUT) += inp^T @ dout;
  // dbias (OUT) += column sums of dout (skipped if null). accumulates into dw, dbias.
  virtual void matmul_backward_f32(float* dinp, float* dw, float* dbias, const float* dout,
                               const float* inp, const float* w, int64_t N, int64_t IN,
                               int64_t OUT) = 0;

  // --- embeddings ---
  // out (B,T,C) = wte[tokens - v0] + wpe[t]. writes. Vocabulary-parallel: wte holds rows
  // [v0, v0 + vrows) only and a token outside them contributes zero; wpe may be null.
  virtual void embedding_forward_f32(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int64_t B, int64_t T, int64_t C,
                                 int64_t v0 = 0, int64_t vrows = INT64_MAX) = 0;
  // dwte[tokens - v0] += dout (tokens in range), dwpe[t] += sum over b of dout (if not
  // null). accumulates.
  virtual void embedding_backward_f32(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                  int64_t v0 = 0, int64_t vrows = INT64_MAX) = 0;

  // --- LayerNorm over the last dim ---
  // out (N,C), mean (N), rstd (N). writes.
  virtual void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* inp,
                                 const float* w, const float* b, int64_t N, int64_t C,
                                 float eps) = 0;
  // dinp (N,C), dw (C), db (C) accumulate.
  virtual void layernorm_backward_f32(float* dinp, float* dw, float* db, const float* dout,
                                  const float* inp, const float* w, const float* mean,
                                  const float* rstd, int64_t N, int64_t C) = 0;

  // --- elementwise ---
  // out = inp + bias broadcast over rows of (N,C) (bias may be null: plain copy). writes.
  virtual void add_bias_f32(float* out, const float* inp, const float* bias, int64_t N, int64_t C) = 0;
  // out = a + b elementwise (n). writes; out may alias a or b.
  virtual void add_f32(float* out, const float* a, const float* b, int64_t n) = 0;
  // GELU, tanh approximation (Hugging Face "gelu_new"). writes out (n).
  virtual void gelu_forward_f32(float* out, const float* inp, int64_t n) = 0;
  // dinp = gelu'(inp) * dout. writes; dinp may alias dout.
  virtual void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) = 0;

  // --- causal self-attention ---
  // qkv (B,T,3C) holds q, k, v side by side; out (B,T,C); att (B,NH,T,T) keeps the
  // softmax probabilities for backward (entries above the diagonal are zero). writes.
  virtual void attention_forward_f32(float* out, float* att, const float* qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH) = 0;
  // dqkv (B,T,3C) writes.
  virtual void attention_backward_f32(float* dqkv, const float* dout, const float* qkv,
                                  const float* att, int64_t B, int64_t T, int64_t C,
                                  int64_t NH) = 0;

  // --- bidirectional self-attention (no mask: the Vision Transformer's) ---
  // As attention_forward / attention_backward without the causal mask: every query attends to
  // all T keys; att (B,NH,T,T) holds full rows of probabilities. writes.
  virtual void bidir_attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                                       int64_t NH) = 0;
  // dqkv (B,T,3C) writes.
  virtual void bidir_attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att,
                                            int64_t B,
                                        int64_t T, int64_t C, int64_t NH) = 0;

  // --- query attention (ClimaX's variable aggregation) ---
  // One learned query per head attends over S key/value tokens at each of N positions.
  // q (C): NH heads of C/NH, the same query at every position; kv (S,N,2C): token s of position
  // n holds its key (C) then its value (C); out (N,C); att (N,NH,S) the softmax probabilities of
  // scores q_h . k_h / sqrt(C/NH) (each row of S sums to one). writes out and att.
  virtual void query_attention_forward_f32(float* out, float* att, const float* q, const float* kv, int64_t N,
                                           int64_t S,
                                       int64_t C, int64_t NH) = 0;
  // dq (C) ACCUMULATES (sum over the N positions); dkv (S,N,2C) writes; dout (N,C); att is the
  // forward's.
  virtual void query_attention_backward_f32(float* dq, float* dkv, const float* dout, const float* q, const float* kv,
                                        const float* att, int64_t N, int64_t S, int64_t C, int64_t NH) = 0;

  // --- indexed rows (graph networks, issue 33) ---
  // Rows of C floats; idx, perm, offsets and arg are DEVICE int32. Every reduction takes a
  // segment's rows one after another in their order: bitwise the same on every backend and
  // thread count (no atomics).
  // out (M,C) = the rows idx[m] of x (each in [0, rows of x)). writes.
  virtual void gather_rows_f32(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C) = 0;
  // Segment s (of S) is the rows perm[k] of x for k in [offsets[s], offsets[s+1]) (perm null:
  // the rows k themselves; offsets non-decreasing). out (S,C) = per segment and column the sum,
  // mean, max or min of those rows; an empty segment gives 0. arg (S,C), with kMax and kMin
  // (null allowed): the row of x chosen, the first of equal values, -1 for an empty segment.
  // writes out, or with accumulate (kSum and kMean only) adds to it. A gather's backward is the
  // kSum of dout over the segments of its sources (perm: the gathered positions ordered by
  // source), accumulated.
  virtual void segment_reduce_f32(float* out, int32_t* arg, const float* x, const int32_t* perm,
                                  const int32_t* offsets, int64_t S, int64_t C, SegmentOp op, bool accumulate) = 0;
  // The backward of kSum and kMean: rows perm[k] (k in segment s) of dx = dout[s] (divided by the
  // segment's row count with mean); accumulate: +=. Rows outside every segment are untouched.
  virtual void segment_broadcast_f32(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets,
                                     int64_t S, int64_t C, bool mean, bool accumulate) = 0;
  // The backward of kMax and kMin: dx[arg[s,c], c] += dout[s,c] (arg -1: nothing). A row belongs
  // to one segment, so no element receives twice.
  virtual void segment_arg_backward_f32(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C) = 0;
  // out (S,C) = per segment and column the standard deviation of its rows (biased, the mean
  // given: mean (S,C) is segment_reduce kMean's), set to 0 where the variance is not above
  // var_floor (PNA's std aggregator, PyG's StdAggregation: sqrt(clamp(var, 1e-5)), then 0 where
  // that is sqrt(1e-5); its gradient 0 there). An empty segment gives 0. writes.
  virtual void segment_std_f32(float* out, const float* x, const float* mean, const int32_t* perm,
                               const int32_t* offsets, int64_t S, int64_t C, float var_floor) = 0;
  // The backward: rows perm[k] (k in segment s) of dx += dout[s] (x[row] - mean[s]) / (n_s std[s])
  // where std[s] > 0 (the forward's mean and std). Rows outside every segment are untouched.
  virtual void segment_std_backward_f32(float* dx, const float* dout, const float* x, const float* mean,
                                        const float* std, const int32_t* perm, const int32_t* offsets, int64_t S,
                                        int64_t C) = 0;
  // Batch normalisation over the N rows of x, per column, with the batch's statistics (biased
  // variance, as BatchNorm in training): out = (x - mean) rstd w + b, mean and rstd (C) written.
  // The column sums run over chunks of kBatchNormChunk rows, the chunks' sums added in order.
  virtual void batchnorm_forward_f32(float* out, float* mean, float* rstd, const float* x, const float* w,
                                     const float* b, int64_t N, int64_t C, float eps) = 0;
  // dx (N,C), dw, db (C) accumulate; dout (N,C); mean, rstd the forward's.
  virtual void batchnorm_backward_f32(float* dx, float* dw, float* db, const float* dout, const float* x,
                                      const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) = 0;
  // Batch normalisation with given statistics (evaluation, BatchNorm's running mean and variance):
  // out (N,C) = (x - mean) / sqrt(var + eps) w + b per column. writes; out may alias x.
  virtual void batchnorm_inference_f32(float* out, const float* x, const float* mean, const float* var,
                                       const float* w, const float* b, int64_t N, int64_t C, float eps) = 0;

  // --- pointwise ops of the graph networks (issue 33) ---
  // out (n) = act(inp): ReLU, SiLU x sigmoid(x), or shifted softplus log(1 + e^x) - log 2
  // (SchNet's). writes; out may alias inp.
  virtual void activation_forward_f32(float* out, const float* inp, int64_t n, Activation a) = 0;
  // dinp (n) = act'(inp) dout, writes (dinp may alias dout); accumulate: +=.
  virtual void activation_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n, Activation a,
                                       bool accumulate) = 0;
  // out (n) = a * b elementwise, writes (may alias a or b); accumulate: +=.
  virtual void mul_f32(float* out, const float* a, const float* b, int64_t n, bool accumulate) = 0;
  // out (N,C) = x (N,C) with row r times s[r], writes (may alias x); accumulate: +=.
  virtual void scale_rows_f32(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate) = 0;

  // --- the decoder variants' ops (Llama / GPT-NeoX blocks: model/block.h's BlockOptions) ---
  // RMSNorm over the last dim (Zhang & Sennrich 2019, as Llama's): rstd[i] = 1/sqrt(mean_c x[i,c]^2
  // + eps), out (N,C) = x rstd w. writes out and rstd (N).
  virtual void rmsnorm_forward_f32(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                                   float eps) = 0;
  // Its backward from the forward's rstd: dinp (N,C) and dw (C) accumulate.
  virtual void rmsnorm_backward_f32(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                                    const float* rstd, int64_t N, int64_t C) = 0;
  // Rotary position embedding in place (Su et al. 2021; the "rotate half" layout of GPT-NeoX and
  // Hugging Face's Llama): row r of x (N rows, row stride ld) is position t = r % T; in each of
  // `heads` heads of hd columns (from column 0) the first rot (even, <= hd) columns turn pairwise,
  // (a, b) = (v[i], v[i + rot/2]) -> (a cos - b sin, b cos + a sin) with cos, sin (T, rot/2) at
  // [t, i]; inverse: the opposite turn (sin negated), the backward of the forward.
  virtual void rope_f32(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads,
                        int64_t hd, int64_t rot, bool inverse) = 0;
  // Causal self-attention with ALiBi (Press et al. 2022; MPT's positions): attention_forward with
  // slopes[h] * (j - i) added to the scaled score of query i and key j <= i of head h before the
  // softmax. slopes (NH) fp32, DEVICE. att keeps the probabilities: the backward is
  // attention_backward's (the bias is a constant). writes out and att.
  virtual void attention_forward_alibi_f32(float* out, float* att, const float* qkv, const float* slopes, int64_t B,
                                           int64_t T, int64_t C, int64_t NH) = 0;
  // The exact GELU, x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (MPT's and Pythia's MLP; GPT-2's is
  // gelu_forward's tanh form): out (n) from inp (n), writes.
  virtual void gelu_erf_forward_f32(float* out, const float* inp, int64_t n) = 0;
  // dinp (n) = dout * (Phi(x) + x phi(x)); writes (may alias dout).
  virtual void gelu_erf_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) = 0;
  // SwiGLU (Shazeer 2020, Llama's MLP): pre (N,2F) holds the gate then the up projection per row;
  // out (N,F) = silu(gate) * up. writes.
  virtual void swiglu_forward_f32(float* out, const float* pre, int64_t N, int64_t F) = 0;
  // dpre (N,2F) from dout (N,F) and the forward's pre. writes.
  virtual void swiglu_backward_f32(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F) = 0;
  // Grouped-query attention's key/value heads (Ainslie et al. 2023): qkvc (N, (heads + 2 kv_heads) hd)
  // holds q, k, v with kv_heads heads of k and v; qkv (N, 3 heads hd) receives q and every k and v head
  // repeated for its heads / kv_heads query heads (query head h reads kv head h / (heads / kv_heads),
  // Hugging Face's repeat_kv). writes.
  virtual void expand_kv_f32(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) = 0;
  // Its backward: dqkvc (N, (heads + 2 kv_heads) hd) = dq and each kv head's copies summed in order. writes.
  virtual void reduce_kv_f32(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) = 0;

  // --- weighted squared error (the latitude-weighted MSE) ---
  // pred, target (R,K), w (K): row_loss[r] = sum_k w[k] (pred[r,k] - target[r,k])^2 (writes R values,
  // accumulated in double, stored as float); if grad != nullptr, grad (R,K) = 2 dloss w[k] (pred - target)
  // (writes; grad may alias pred).
  virtual void weighted_mse_f32(float* row_loss, float* grad, const float* pred, const float* target, const float* w,
                            int64_t R, int64_t K, float dloss) = 0;

  // --- softmax cross-entropy over the vocabulary ---
  // logits (N,Vp) in place: on return holds dlogits = (softmax - onehot) * dloss for
  // columns < V and 0 for the padding columns (if dloss != 0; otherwise untouched).
  // losses (N) writes -log p[target]. Targets must lie in [0, V).
  virtual void softmax_cross_entropy_f32(float* logits, float* losses, const int32_t* targets,
                                     int64_t N, int64_t V, int64_t Vp, float dloss) = 0;

  // --- vocabulary-parallel softmax cross-entropy, in phases around the reductions ---
  // Each rank holds logits (N, ld) for its vocabulary columns, of which the first `cols`
  // are real (the rest padding). Phase 1: row maxima (writes max, N). Phase 2: sums of
  // exp(logit - max) with the global max (writes sum, N). Target logits: tl[i] = logit of
  // targets[i] - v0 if it lies in [0, cols), else 0 (writes). Phase 3 (gradient, in place):
  // logits -> (exp(logit - max) / sum - [col == target - v0]) * dloss, 0 on padding.
  virtual void ce_row_max_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, float* max) = 0;
  virtual void ce_row_sumexp_f32(const float* logits, int64_t N, int64_t ld, int64_t cols,
                             const float* max, float* sum) = 0;
  virtual void ce_target_logit_f32(const float* logits, int64_t N, int64_t ld, int64_t cols,
                               const int32_t* targets, int64_t v0, float* tl) = 0;
  // The token losses from the reduced statistics: losses[i] = log(sum[i]) + max[i] - tl[i]
  // (n rows). writes.
  virtual void ce_loss_f32(float* losses, const float* max, const float* sum, const float* tl, int64_t n) = 0;
  virtual void ce_grad_f32(float* logits, int64_t N, int64_t ld, int64_t cols, const float* max,
                       const float* sum, const int32_t* targets, int64_t v0, float dloss) = 0;

  // --- optimizer ---
  // AdamW over n elements (decoupled weight decay as in Loshchilov & Hutter / torch.optim.AdamW):
  // p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). t counts from 1. The gradient is
  // read as g * grad_scale (gradient clipping without a separate pass over g).
  virtual void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int64_t t,
                     float grad_scale) = 0;
  // sum of squares of x (n), in double.
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // x *= s.
  virtual void scale(float* x, float s, int64_t n) = 0;

  // --- mixed precision ---
  // x (n) rounded in place to the nearest value of precision p (round to nearest even;
  // fp16 overflow gives inf): 16-bit storage emulated in an fp32 buffer (what a 16-bit run
  // keeps in fp32: the residual stream, the working parameters). No-op for kFp32.
  virtual void round_to(float* x, int64_t n, Precision p) = 0;

  // ===== optional fused ops =====
  // OPTIONAL, every one. A fused op does in one call what the model otherwise does with a
  // short sequence of the required ops above; a backend overrides it where it has a kernel
  // that makes fewer passes over memory (a cuBLASLt epilogue, a fused residual + LayerNorm)
  // or needs less memory (flash attention). Each DEFAULT (src/backend/fused_defaults.cc) is
  // that sequence, in exactly the order the model calls it today (src/model/gpt.cc,
  // src/parallel/tp/layers.cc, src/optim/optim.cc), including the rounding to the storage
  // precision `p` the model does between the steps (round_to; kFp32: none). So on the cpu
  // backend (and on cpu-guarded, whose checked ops the default calls) a fused op gives
  // BITWISE the plain sequence's results (tests/backend/fused_ops_test.cc), and a caller may
  // use it whether or not the backend offers it. An override computes the same quantities
  // to the backend's usual float tolerance (another summation order, an epilogue that skips
  // an intermediate rounding); the backend's header says what it does differently.
  // An op with no plain equivalent that has the same memory (kAttentionLse) throws
  // RuntimeError by default: ask offers() first.
  // Every pointer is device memory of this backend; shapes as above (N = B*T rows).
  //
  // Not here on purpose: cross-entropy without a probability buffer is already what the
  // required softmax_cross_entropy and ce_* do (in place on the logits; CudaBackend runs the
  // same one-pass kernel for fp32 as for bf16); bias epilogues are matmul_forward's bias.
  // What the CUDA backend's bf16 variants add beyond these ops is real 16-bit storage,
  // which needs buffers that carry dtypes (issue 13).

  // Whether this backend implements `op` itself (true) or leaves it to the default (false).
  // OPTIONAL. Default: false for every op.
  virtual bool offers(FusedOp op) const { return false; }

  // --- residual add + LayerNorm ---
  // residual (N,C) = a + b, rounded to p; out (N,C) = LayerNorm(residual; w, bias (C), eps),
  // rounded to p; mean, rstd (N) those of the rounded residual. writes. residual may alias a
  // or b; out aliases nothing.
  // DEFAULT: add(residual, a, b, N*C); round_to(residual, N*C, p);
  //          layernorm_forward(out, mean, rstd, residual, w, bias, N, C, eps); round_to(out, N*C, p).
  virtual void residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd, const float* a,
                                          const float* b, const float* w, const float* bias, int64_t N, int64_t C,
                                          float eps, Precision p);

  // --- product + bias + residual add + LayerNorm (a row-parallel layer at tp = 1 and the LayerNorm after it) ---
  // residual (N,C) = res + inp (N,IN) @ w (IN,C) + bias (C) (bias may be null), rounded to p;
  // out (N,C) = LayerNorm(residual; ln_w, ln_b (C), eps), rounded to p; mean, rstd (N).
  // writes. residual may alias res (not inp); out aliases nothing.
  // DEFAULT: add_bias(residual, res, bias, N, C); matmul_forward(residual, inp, w, nullptr, N, IN, C, true);
  //          round_to(residual, N*C, p);
  //          layernorm_forward(out, mean, rstd, residual, ln_w, ln_b, N, C, eps); round_to(out, N*C, p).
  virtual void matmul_residual_layernorm_forward_f32(float* residual, float* out, float* mean, float* rstd,
                                                 const float* res, const float* inp, const float* w,
                                                 const float* bias, const float* ln_w, const float* ln_b, int64_t N,
                                                 int64_t IN, int64_t C, float eps, Precision p);

  // --- product + bias + GELU (the MLP's first product) ---
  // pre (N,OUT) = inp (N,IN) @ w (IN,OUT) + bias (OUT) (bias may be null), rounded to p (kept
  // for the backward); out (N,OUT) = gelu(pre), rounded to p. writes both.
  // DEFAULT: matmul_forward(pre, inp, w, bias, N, IN, OUT, false); round_to(pre, N*OUT, p);
  //          gelu_forward(out, pre, N*OUT); round_to(out, N*OUT, p).
  virtual void matmul_gelu_forward_f32(float* out, float* pre, const float* inp, const float* w, const float* bias,
                                   int64_t N, int64_t IN, int64_t OUT, Precision p);
  // The backward of a product whose input was gelu(pre) (the MLP's second product):
  // dinp (N,IN) = (dout (N,OUT) @ w^T, rounded to p) * gelu'(pre (N,IN)), rounded to p
  // (writes; not null); dw (IN,OUT) += inp^T @ dout; dbias (OUT) += column sums of dout
  // (skipped if null). inp is gelu(pre) as stored.
  // DEFAULT: matmul_backward(dinp, dw, dbias, dout, inp, w, N, IN, OUT); round_to(dinp, N*IN, p);
  //          gelu_backward(dinp, pre, dinp, N*IN); round_to(dinp, N*IN, p).
  virtual void matmul_gelu_backward_f32(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                                    const float* w, const float* pre, int64_t N, int64_t IN, int64_t OUT,
                                    Precision p);

  // --- causal self-attention keeping log-sum-exp (flash attention) ---
  // As attention_forward, but instead of the (B,NH,T,T) probabilities it keeps
  // lse (B,NH,T) = log sum_{j<=t} exp(q_t . k_j / sqrt(hs)) (natural log): qkv (B,T,3C),
  // out (B,T,C). writes. Nothing is rounded to a storage precision (the caller rounds out
  // as after attention_forward).
  // DEFAULT: throws RuntimeError: no sequence of the required ops keeps only lse
  // (attention_forward needs the probabilities' memory). Call it only where
  // offers(FusedOp::kAttentionLse) and attention_lse_supports(C, NH, p) are true.
  virtual void attention_forward_lse_f32(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                                     int64_t NH);
  // dqkv (B,T,3C) writes, from dout (B,T,C) and the forward's qkv, out and lse.
  // DEFAULT: throws RuntimeError, as attention_forward_lse.
  virtual void attention_backward_lse_f32(float* dqkv, const float* dout, const float* qkv, const float* out,
                                      const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH);
  // Whether attention_*_lse takes this shape at the accuracy storage precision p asks for (a
  // backend may support some head sizes C/NH only, or compute in 16 bits inside and so decline
  // fp32 storage, whose runs keep the exact path). OPTIONAL. Default: offers(FusedOp::kAttentionLse).
  virtual bool attention_lse_supports(int64_t C, int64_t NH, Precision p) const {
    return offers(FusedOp::kAttentionLse);
  }

  // --- AdamW writing the copy the model computes with ---
  // adamw over p (the fp32 master weights; all arguments as adamw), then
  // copy (n) = the updated p rounded to copy_precision. writes copy; copy aliases nothing.
  // DEFAULT: adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
  //          copy_device(copy, 0, p, 0, 4*n); round_to(copy, n, copy_precision).
  virtual void adamw_copy_f32(float* p, float* copy, const float* g, float* m, float* v, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                          Precision copy_precision);

  // ===== optional quantization ops (ZeRO++ qwZ / qgZ wires) =====
  // OPTIONAL. Block quantization in the one wire format of core/block_quant.h (int8 or int4
  // values, then one fp32 scale per block of q.block elements): every backend writes the
  // BYTES quantize_blocks_ref writes and reads a wire as dequantize_blocks_ref does, so a wire
  // from one backend dequantizes to the same floats on any other. n elements; q checked by
  // check_quant_spec (InputError). Neither op synchronises.
  // DEFAULT (src/backend/quant_defaults.cc): copies the device data to host buffers with
  // copy_to_host, runs the reference there, copies the results back with copy_to_device:
  // correct on every backend (the cpu-guarded backend runs it, fenced), slow on a GPU.
  // cpu calls the reference on its memory directly; cuda runs kernels (quant.cu).
  // wire: DEVICE bytes, quant_wire_bytes(n, q) of them (4-byte aligned on cuda); x (n) and
  // residual (n, optional: error feedback, quantizes x + residual and writes residual =
  // (x + residual) - dequantized): DEVICE floats. writes wire (and residual).
  virtual void quantize_blocks(void* wire, const float* x, int64_t n, const QuantSpec& q, float* residual);
  // out (n): DEVICE floats = the dequantized wire (writes), or += it when accumulate.
  virtual void dequantize_blocks(float* out, const void* wire, int64_t n, const QuantSpec& q, bool accumulate);
  // 16-bit floats on the wire (comm/codec.h's bf16 and fp16 codecs). OPTIONAL. dt: DType::kBF16
  // or DType::kF16 (InputError otherwise); round to nearest even (core/precision.h's
  // f32_to_bf16 / f32_to_f16: fp16 overflows to inf, NaN stays NaN). wire: DEVICE, 2n bytes
  // (4-byte aligned on cuda); x, out: DEVICE floats (n). Neither op synchronises.
  // DEFAULT (src/backend/quant_defaults.cc): the host conversions on staged copies. cpu
  // converts in place; cuda runs kernels (cast16.cu; a NaN's payload may differ from the host's).
  virtual void encode_16(void* wire, const float* x, int64_t n, DType dt);
  // out (n) = the widened wire (writes), or += it when accumulate (one fp32 sum per element).
  virtual void decode_16(float* out, const void* wire, int64_t n, DType dt, bool accumulate);

 protected:
  ProductSettings products_;

  // --- the memory group's implementation ---
  // REQUIRED for a backend with its own memory. bytes > 0; returns at least 64-byte aligned
  // memory or throws RuntimeError naming the size. c is for diagnostics (the tracker is
  // already counted). Default: std::aligned_alloc (64 bytes, size rounded up to 64).
  virtual void* device_alloc_impl(size_t bytes, MemCategory c);
  // REQUIRED for a backend with its own memory; must not throw. Default: std::free.
  virtual void device_free_impl(void* p, size_t bytes) noexcept;

 public:
  // --- the staging arena of the typed defaults (typed_defaults.cc) ---
  // fp32 scratch of at least n elements (device memory of this backend, counted under
  // `workspace`), grown on demand (freed and allocated again) and kept for the next call: a
  // typed default stages all its 16-bit operands side by side in it, so that it holds the
  // largest sum of one call's staged operands. A backend with its own memory calls
  // release_staging() in its destructor.
  float* staging(int64_t n);
  // staging(n) for one typed op's operands (counted in staging_high_water()).
  float* staging_for_op(int64_t n) {
    staging_high_water_ = std::max(staging_high_water_, n);
    return staging(n);
  }

 private:
  // typed_defaults.cc: embedding_forward with a 16-bit table; an f32 output rounded to p.
  void embedding_forward_16(View out, const int32_t* tokens, CView wte, CView wpe, int64_t B, int64_t T, int64_t C,
                            int64_t v0, int64_t vrows);
  void round_f32(View v, int64_t n, Precision p);

  float* staging_ = nullptr;
  int64_t staging_n_ = 0, staging_high_water_ = 0;
  int64_t staging_chunk_ = kStagingChunk;
};

// RAII scope of direct host access to a range of device memory (Backend::begin_host_access).
// Used ONLY by host-staged communication (comm/device_comm.h) and the default fill: when
// direct() the range may be handed to MPI (or filled) in place; otherwise the caller stages
// through copies. Nothing else above the backend may use it.
class HostAccess {
 public:
  HostAccess(Backend& be, void* p, size_t bytes) : be_(be), p_(p), bytes_(bytes) {
    be_.synchronize();
    direct_ = bytes_ == 0 || be_.begin_host_access(p_, bytes_);
  }
  ~HostAccess() {
    if (direct_ && bytes_ > 0) be_.end_host_access(p_, bytes_);
  }
  HostAccess(const HostAccess&) = delete;
  HostAccess& operator=(const HostAccess&) = delete;
  bool direct() const { return direct_; }

 private:
  Backend& be_;
  void* p_;
  size_t bytes_;
  bool direct_ = false;
};

// The CPU backend (BLAS + OpenMP).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace weft
