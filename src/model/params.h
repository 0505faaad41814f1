// The model side of the parameter layout (params/param_layout.h holds the family-neutral
// layout): a family's ParamTable resolved against its config (the standard deviations of its
// normal initialisations, its own initial values), the shared transformer block's tensors, and
// the pointers the block and the GPT's front and back read.
//
// The block's kParamsPerLayer tensors, in this order:
// [ln_1.w, ln_1.b, c_attn.w, c_attn.b, attn.c_proj.w, attn.c_proj.b, ln_2.w, ln_2.b,
//  c_fc.w, c_fc.b, mlp.c_proj.w, mlp.c_proj.b]. Matrices use Hugging Face's GPT-2 Conv1D layout
// (in, out): y = x @ W + b. The block's variants (model/config.h's BlockOptions) leave places
// empty (no biases; RMSNorm has no bias) and widen c_attn to C + 2 KV columns [q | k | v]
// (grouped-query attention: KV = n_kv_head head_dim) and c_fc to 2F [gate | up] (SwiGLU); each
// tensor's tag is its place + 1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "params/param_layout.h"

namespace weft {

constexpr int kParamsPerLayer = 12;

// One layer's tensors in a flat buffer: P = float* for the gradients (fp32), CView for the
// parameters (the store's storage dtype: fp32, or 16-bit in a bf16/fp16 run).
template <class P>
struct LayerSet {
  P ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};
using LayerPtrs = LayerSet<float*>;    // gradients
using LayerWeights = LayerSet<CView>;  // parameters

// The transformer block's kParamsPerLayer tensors (model/block.h) named prefix + names[i], in the
// order of LayerPtrs; residual_scaled: its two output projections are drawn by kNormalResidual
// (GPT-2) rather than kNormal (timm's ViT).
std::vector<ParamSpec> block_param_specs(const ModelConfig& cfg, const std::string& prefix,
                                         const char* const names[kParamsPerLayer], bool residual_scaled);

// InputError naming the values unless tp divides the heads (whole heads per rank), the MLP size
// and the padded vocabulary (the column-, row- and vocabulary-parallel splits).
void check_tp_split(const ModelConfig& cfg, int tp_size);
// Training over tp ranks with fewer kv heads than ranks: the elements of the all-reduce each
// layer's backward makes of the replicated kv columns' gradients (c_attn's C rows and its bias
// row, 2 head_dim columns, a slot per kv head: TensorParallel::replica_sum_elems); 0 otherwise.
int64_t kv_replica_sum_elems(const ModelConfig& cfg, int tp_size);

// The family's table (Family::param_table) with the standard deviations of its normal tensors
// (init_std; kNormalResidual: init_std / sqrt(2 n_layer), GPT-2's residual projections) and its
// own initial values (Family::init_value) filled in.
ParamTable model_param_table(const ModelConfig& cfg);
// The layout of a model: the config validated, tp checked against it (check_tp_split), every
// layer a block of kParamsPerLayer tensors.
ParamLayout param_layout(const ModelConfig& cfg, int tp_size = 1, int tp_rank = 0, const StageSpec& stage = {});
// resolve_stage against the config's layers.
inline StageSpec resolve_stage(const ModelConfig& cfg, StageSpec stage) { return resolve_stage(cfg.n_layer, stage); }

// The block's tensors of layer l for a group whose first element is at `base`.
LayerPtrs layer_ptrs(const ParamLayout& layout, int l, float* base);
LayerWeights layer_weights(const ParamLayout& layout, int l, CView base);
// The back group's tensors: the final norm's weight and bias (null without one: RMSNorm) and,
// when `head` is given, the untied output head (null when the head is tied to the embedding).
void final_ptrs(const ParamLayout& layout, float* base, float** lnfw, float** lnfb, float** head = nullptr);
void final_ptrs(const ParamLayout& layout, CView base, CView* lnfw, CView* lnfb, CView* head = nullptr);

}  // namespace weft
