// The pre-LayerNorm transformer block, written once for one device and shared by every model
// family (GPT-2's causal blocks, ClimaX's bidirectional ones):
//   x (Nl,C) -> LayerNorm -> qkv (column-parallel: this rank's heads) -> attention -> proj
//   (row-parallel) + x = res2 -> LayerNorm -> fc (column-parallel) -> GELU -> fc_proj
//   (row-parallel) + res2 = res3.
// Its variants (model/config.h's BlockOptions; docs/model-decoders.md): RMSNorm for LayerNorm,
// no biases, grouped-query attention (the product's kv heads expanded into the layer's q, k, v
// by expand_kv), rotary positions (q and k turned in place after the product), SwiGLU for GELU
// (fc's output is gate and up).
// Tensor parallelism comes in through the layers of parallel/tp (the block never sees a rank
// or a collective); the family decides only whether attention is causal. Letters: N = B*T rows,
// Nl = N/tp under sequence parallelism (else N), C hidden, Cl = C/tp, F = ffn/tp, NH = heads/tp.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "core/error.h"
#include "core/view.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/tp/layers.h"

namespace weft {

// Elements of a set of buffers by storage: `act` in the run's activation dtype (f32, bf16 or
// f16: the storage precision), `f32` always fp32.
struct TypedElems {
  int64_t act = 0, f32 = 0;
  TypedElems& operator+=(const TypedElems& o) {
    act += o.act;
    f32 += o.f32;
    return *this;
  }
  TypedElems operator*(int64_t k) const { return {act * k, f32 * k}; }
  int64_t total() const { return act + f32; }
  int64_t bytes(DType act_dtype) const { return static_cast<int64_t>(dtype_bytes(act_dtype, act)) + 4 * f32; }
};

// The storage dtype of each kind of tensor a layer keeps (issue 32's storage policy). A tensor
// an op writes once, in one call, and no collective carries is stored in the run's precision
// (`act`): 16-bit storage that the op rounds as it writes (backend.h's typed ops). The residual
// stream (`res`: a layer's output, the stage's input, a pipeline message, and their gradient
// dres) is in the run's precision too where the family keeps it so (GPT; a row-parallel layer's
// typed ops write it rounded once, the tp group all-gathers its gradient as stored); ClimaX's
// stays f32. The LayerNorm outputs are 16-bit under sequence parallelism too (the tp group
// all-gathers them as stored). What stays fp32: the statistics (LayerNorm mean/rstd,
// attention's log-sum-exp) and, where the residual stream is fp32, the tp group's partial sums
// (they are of the residual stream's dtype: parallel/tp/mappings.h); the f32 tensors of a 16-bit run are
// rounded where they are written (TensorParallel::round), as the emulated 16-bit storage did,
// so a run is bitwise the same whichever tensors are 16-bit.
struct LayerDtypes {
  DType act = DType::kF32;  // qkv, the attention probabilities, atty, res2, fch, fch_gelu
  DType ln = DType::kF32;   // ln1, ln2: act (gathered as stored under sequence parallelism)
  DType att = DType::kF32;  // the probabilities: act; the log-sum-exp (flash attention): f32
  DType res = DType::kF32;  // res3 (the residual stream) and its gradient: act, or f32
  static LayerDtypes of(Precision p, bool attention_lse, bool residual_16) {
    const DType a = dtype_of(p);
    return {a, a, attention_lse ? DType::kF32 : a, residual_16 ? a : DType::kF32};
  }
};

// One layer's activations for its backward pass. The views lead into the micro-batch's
// stash or, for what the layer recomputes, into the shared workspace (dtypes: LayerDtypes).
struct LayerActs {
  View ln1;                            // (N,C) normalised input (gathered under SP)
  float *ln1_mean, *ln1_rstd;          // (Nl), (Nl); RMSNorm keeps no mean (null)
  View qkv;                            // (N,3Cl)
  View att;                            // (B,NH,T,T) softmax probabilities, or with flash
                                       // attention the log-sum-exp (B,NH,T)
  View atty;                           // (N,Cl) attention output before the projection
  View res2;                           // (Nl,C) residual after attention
  View ln2;                            // (N,C)
  float *ln2_mean, *ln2_rstd;          // (Nl), (Nl)
  View fch;                            // (N,FC) fc output (pre-GELU; SwiGLU: gate and up, FC = 2F)
  View fch_gelu;                       // (N,F) the activation's output (GELU, or silu(gate) up)
  View res3;                           // (Nl,C) residual after the MLP = next layer's input (res)
};

// Points a layer's tensors at consecutive pieces taken by `take(n, dtype)` (a View; the
// probabilities at `att`; the output res3 only if `output`). ln1 and ln2 hold all N rows
// (gathered under sequence parallelism); the residuals and statistics the rank's Nl rows. FC: the
// fc output's columns (F, or SwiGLU's 2F; < 0: F); rms: RMSNorm, whose statistics are rstd alone.
template <class Take>
void carve_layer(LayerActs& a, Take& take, int64_t N, int64_t Nl, int64_t C, int64_t Cl, int64_t F, View att,
                 bool output, const LayerDtypes& dt, int64_t FC = -1, bool rms = false) {
  const auto f32 = [&take](int64_t n) { return static_cast<float*>(take(n, DType::kF32).data); };
  if (FC < 0) FC = F;
  a.ln1 = take(N * C, dt.ln);
  a.ln1_mean = rms ? nullptr : f32(Nl);
  a.ln1_rstd = f32(Nl);
  a.qkv = take(N * 3 * Cl, dt.act);
  a.att = att;
  a.atty = take(N * Cl, dt.act);
  a.res2 = take(Nl * C, dt.act);
  a.ln2 = take(N * C, dt.ln);
  a.ln2_mean = rms ? nullptr : f32(Nl);
  a.ln2_rstd = f32(Nl);
  a.fch = take(N * FC, dt.act);
  a.fch_gelu = take(N * F, dt.act);
  a.res3 = output ? take(Nl * C, dt.res) : View();
}

// Elements carve_layer takes, by storage (the probabilities att_elems only if `with_att`; the
// output only if `output`).
TypedElems layer_elems(int64_t N, int64_t Nl, int64_t C, int64_t Cl, int64_t F, int64_t att_elems, bool with_att,
                       bool output, const LayerDtypes& dt, int64_t FC = -1, bool rms = false);

// What the block's typed calls stage (backend.h's typed ops widen every 16-bit operand into the
// backend's fp32 staging arena): the shape of one rank's layer and the dtypes of its tensors.
struct BlockStaging {
  int64_t N = 0, Nl = 0, C = 0, Cl = 0, F = 0;  // rows (all, held here), hidden, this rank's parts
  int tp = 1;
  bool sequence_parallel = false, attention_lse = false, training = false;
  LayerDtypes dt;          // the stash's
  DType dC = DType::kF32, d3C = DType::kF32, dF = DType::kF32;  // the gradient scratch's (BlockScratch)
  // dres's dtype is dt.res (the layer's input x and output res3 have it too)
  DType sum = DType::kF32;  // the tp group's partial sums (tp > 1; parallel/tp/mappings.h)
  DType w = DType::kF32;   // the parameters' (the store's working parameters)
  int64_t chunk = kStagingChunk;  // the backend's staging_chunk (row-chunked ops)
  bool native_products = false;   // the backend's products read 16-bit operands in place (RunSpec)
};
// The elements a typed op stages of an operand of n elements of dtype dt: n for a 16-bit one.
inline int64_t staged_elems(DType dt, int64_t n) { return dt == DType::kF32 ? 0 : n; }
// The largest sum of one call's 16-bit operands over a layer's forward (again for a fully
// recomputed layer) and, training, its backward (fp32 elements), the 16-bit weights and biases
// each call reads included. The layer's input and output, dres, the tp group's scratch and the
// statistics are f32.
int64_t block_staging_elems(const BlockStaging& k);

// Carves typed views out of a stash or workspace: pieces of the activation dtype from `act`,
// f32 pieces from `f32`; when the activation dtype is f32 every piece comes from `act`, in
// order (the layout of an fp32 run, one buffer).
class TypedCarver {
 public:
  TypedCarver(void* act, DType act_dtype, float* f32) : act_(static_cast<char*>(act)), dt_(act_dtype), f32_(f32) {}
  View operator()(int64_t n, DType dt) {
    if (dt == dt_ || dt_ == DType::kF32) {
      WEFT_CHECK(dt == dt_ || dt == DType::kF32, "a {} piece in a {} stash", dtype_name(dt), dtype_name(dt_));
      const View v(act_, dt_ == DType::kF32 ? DType::kF32 : dt);
      act_ += dtype_bytes(dt_, n);
      taken_.act += n;
      return v;
    }
    WEFT_CHECK(dt == DType::kF32, "a {} piece in a {} stash", dtype_name(dt), dtype_name(dt_));
    const View v(f32_, DType::kF32);
    f32_ += n;
    taken_.f32 += n;
    return v;
  }
  // What it has taken, by storage (an fp32 run counts everything as act).
  const TypedElems& taken() const { return taken_; }

 private:
  char* act_;
  DType dt_;
  float* f32_;
  TypedElems taken_;
};

// Allocates a stash or workspace of `want` elements by storage under category c: a buffer of the
// activation dtype and an f32 one, or in an fp32 run one f32 buffer (today's order); then
// fill(carver) takes the pieces, which must add up to `want` (RuntimeError naming `what`).
template <class Fill>
void carve_typed(Backend& be, DeviceBuffer& act, DeviceBuffer& f32, DType act_dtype, const TypedElems& want,
                 MemCategory c, const char* what, Fill&& fill) {
  const bool one = act_dtype == DType::kF32;
  act = DeviceBuffer();
  f32 = DeviceBuffer();
  act = DeviceBuffer(be, act_dtype, one ? want.total() : want.act, c);
  if (!one) f32 = DeviceBuffer(be, DType::kF32, want.f32, c);
  TypedCarver take(act.raw(), act_dtype, one ? nullptr : f32.data<float>());
  fill(take);
  const TypedElems& got = take.taken();
  WEFT_CHECK(one ? got.act == want.total() : got.act == want.act && got.f32 == want.f32,
             "{} layout: {} {} + {} f32 elements, the description says {} + {}", what, got.act, dtype_name(act_dtype),
             got.f32, want.act, want.f32);
}

// The gradient scratch of one micro-batch that the block's backward works in.
struct BlockScratch {
  View dres;  // (Nl,C) gradient of the residual stream: d(res3) in, d(x) out (LayerDtypes::res)
  View dC;    // (N,C): act at tp 1; the tp group's sum dtype at tp > 1 (a partial sum it all-reduces)
  View d3C;   // (N,3Cl)
  View dF;    // (N,F)
  View att;   // selective recompute: the recomputed probabilities (B,NH,T,T)
  View dFC;   // SwiGLU: the gradient of the fc output, gate and up (N,2F); else unused
  View dpar;  // parallel residual: d(res3) kept for the attention branch (Nl,C, dres's dtype); else unused
};

// The workspace of the block's variants (model/config.h's BlockOptions), set by the model with
// its workspace: grouped-query attention's compact q, k, v (N, (C + 2 KV)/tp: the product's
// output, expanded into the layer's qkv; in the backward their gradient), and the rotary
// positions' cos and sin tables (T, rot/2), fp32, positions 0..T-1 of the reserved T.
struct VariantWorkspace {
  View qkvc;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  // Training with fewer kv heads than tp ranks: the scratch in which their replicated gradient
  // columns are summed (TensorParallel::replica_scratch_elems; null otherwise).
  float* kv_sum = nullptr;
  // ALiBi positions: the slopes of this rank's heads (NH/tp), fp32 (null otherwise).
  const float* alibi = nullptr;
};

class TransformerBlock {
 public:
  // The layers (and their group) belong to the model; causal: GPT's masked attention, else
  // every position attends to all T (the Vision Transformer's).
  TransformerBlock(const ModelConfig& cfg, Backend& backend, TensorParallel& tp, SequenceParallelLayerNorm& ln,
                   ColumnParallelLinear& column, RowParallelLinear& row, bool causal);
  bool causal() const { return causal_; }
  // Flash attention (the log-sum-exp instead of the probabilities; causal blocks only).
  void set_attention_lse(bool on);
  bool attention_lse() const { return lse_; }
  // The variants' workspace (before the first forward of a reserved shape).
  void set_variant_workspace(const VariantWorkspace& w) { vw_ = w; }

  // Forward from x (Nl,C) into a; with `to_gelu` stop after the MLP's GELU (what the backward
  // needs: the full-recompute rematerialisation).
  void forward(const LayerWeights& lw, CView x, LayerActs& a, int64_t B, int64_t T, bool to_gelu);
  // Backward: s.dres holds d(res3) (this rank's rows) on entry and d(x) on return; the weight
  // gradients accumulate into lg. full: rematerialise the layer into `a` first (full
  // recompute); a.att == s.att: recompute the probabilities (selective recompute).
  void backward(const LayerWeights& lw, const LayerPtrs& lg, CView x, LayerActs& a, int64_t B, int64_t T, bool full,
                const BlockScratch& s);

 private:
  void attention_forward(View out, View att, CView qkv, int64_t B, int64_t T);
  // q, k, v of the layer into a.qkv (N,3Cl): the product, the kv heads expanded (grouped-query
  // attention), the rotary positions applied to q and k.
  void qkv_forward(const LayerWeights& lw, LayerActs& a, int64_t N, int64_t T);
  // The MLP's first product and its activation: a.fch, a.fch_gelu.
  void mlp_forward(const LayerWeights& lw, LayerActs& a, int64_t N);
  // From d(qkv) in s.d3C (N,3Cl) to the gradient of ln1 (the returned view) and the qkv weights'.
  View qkv_backward(const LayerWeights& lw, const LayerPtrs& lg, LayerActs& a, int64_t N, int64_t T,
                    const BlockScratch& s);
  int64_t C_, F_, NH_, Cl_;  // F_, NH_, Cl_: this rank's parts
  // The variant: this rank's fused q, k, v and fc columns, its kv heads, the head size and the
  // rotary dimensions of a head (0: learned positions).
  int64_t QKVl_, FCl_, KVHl_, hd_, rot_;
  int kv_rep_;  // ranks holding each kv head (ModelConfig::kv_replicas)
  bool alibi_;  // ALiBi positions (the attention's bias)
  bool gelu_exact_;  // the MLP's GELU is the exact (erf) one
  bool swiglu_, gqa_, fused_norm_, parallel_;  // fused_norm_: LayerNorm with biases (the fused residual + norm ops apply)
  VariantWorkspace vw_;
  Backend& be_;
  TensorParallel& tp_;
  SequenceParallelLayerNorm& ln_;
  ColumnParallelLinear& column_;
  RowParallelLinear& row_;
  bool causal_;
  bool lse_ = false;
};

}  // namespace weft
