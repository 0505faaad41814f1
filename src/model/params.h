// Parameter layout: every parameter lives in one flat fp32 buffer (and every gradient in
// another of the same layout), in the order the model's family declares them
// (Family::param_table): its front group (GPT: wte, wpe), then per layer the shared block's
// [ln_1.w, ln_1.b, c_attn.w, c_attn.b, attn.c_proj.w, attn.c_proj.b, ln_2.w, ln_2.b,
//  c_fc.w, c_fc.b, mlp.c_proj.w, mlp.c_proj.b], then its back group (GPT: ln_f.w, ln_f.b).
// A layer's parameters are contiguous, so a pipeline stage or a ZeRO-3 gather is a range.
// Matrices use Hugging Face's GPT-2 Conv1D layout (in, out): y = x @ W + b.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace weft {

enum class ParamKind {
  kWte,        // (Vp, C) token embedding, tied with the output head
  kWpe,        // (n_ctx, C) learned positions
  kLn1W, kLn1B,
  kQkvW, kQkvB,          // (C, 3C), (3C)
  kAttnProjW, kAttnProjB,  // (C, C), (C)
  kLn2W, kLn2B,
  kFcW, kFcB,            // (C, F), (F)
  kFcProjW, kFcProjB,    // (F, C), (C)
  kLnfW, kLnfB,
  // ClimaX (model/climax.h; the layers use the kinds above): the front group, then the back.
  kPatchW, kPatchB,      // (V, p*p, C), (V, C): one patch embedding per variable
  kVarEmbed,             // (V, C) sine-cosine initialised
  kVarQuery,             // (C) the variable aggregation's learned query (zero-initialised)
  kAggQW, kAggQB,        // (C, C), (C)
  kAggKvW, kAggKvB,      // (C, 2C), (2C): columns k | v
  kAggOutW, kAggOutB,    // (C, C), (C)
  kPosEmbed,             // (L, C) 2-D sine-cosine initialised
  kLeadW, kLeadB,        // (1, C), (C): lead time (hours / 100) -> C
  kHeadW, kHeadB,        // decoder layers (C, C) and the last (C, V*p*p)
  kOther,                // a family's own tensor (what it is, its name says)
};
constexpr int kParamsPerLayer = 12;

// How a tensor is split over the tensor-parallel ranks (Megatron-LM): column-parallel
// matrices split their output columns (c_attn: the columns of each of q, k, v, i.e. whole
// heads), row-parallel matrices their input rows, the embedding its vocabulary rows.
// kKvCols: the columns of each of k and v (ClimaX's variable aggregation).
enum class TpSplit { kReplicated, kRows, kCols, kQkvCols, kKvCols };

// How a tensor's first values are drawn (init_params).
enum class ParamInit {
  kNormal,          // N(0, init_std), keyed by (seed, tensor id, element of the whole tensor)
  kNormalResidual,  // N(0, init_std / sqrt(2 L)): GPT-2's residual projections
  kZeros,
  kOnes,
  kFamily,          // the family's own values (Family::init_value: ClimaX's sine-cosine embeddings)
};

// One tensor as a family declares it (Family::param_table).
struct ParamSpec {
  ParamSpec(std::string n, ParamKind k, std::vector<int64_t> f, TpSplit s, bool d, ParamInit i,
            std::vector<int64_t> hf = {}, int64_t lv = -1)
      : name(std::move(n)), kind(k), full(std::move(f)), split(s), decay(d), init(i), hf_shape(std::move(hf)), live(lv) {}
  std::string name;
  ParamKind kind;
  std::vector<int64_t> full;       // shape of the whole tensor (tp = 1)
  TpSplit split;
  bool decay;                      // AdamW's weight decay applies
  ParamInit init;
  std::vector<int64_t> hf_shape;   // the checkpoint's shape when it differs ({}: full)
  int64_t live;                    // elements of the whole tensor drawn, from the start (-1: all); the rest stay 0
};

// A family's parameters in layout order: the front group (0: embeddings, everything before the
// blocks), one list per transformer layer (groups 1..L, the block's kParamsPerLayer tensors each),
// the back group (L+1: the final norm and what reads it).
struct ParamTable {
  std::vector<ParamSpec> front;
  std::vector<std::vector<ParamSpec>> layers;
  std::vector<ParamSpec> back;
  // The pipeline stage with the head also holds the front group (a head tied to the embedding).
  bool front_with_head = false;
};

struct ParamTensor {
  std::string name;              // Hugging Face GPT-2 name, e.g. "transformer.h.0.attn.c_attn.weight"
  ParamKind kind;
  int layer = -1;                // -1 for non-layer tensors
  std::vector<int64_t> shape;    // shape in the flat buffer (this tensor-parallel rank's part)
  std::vector<int64_t> full_shape;  // shape of the whole tensor (tp = 1)
  TpSplit split = TpSplit::kReplicated;
  std::vector<int64_t> hf_shape; // shape in a checkpoint (wte keeps only the V real rows)
  int64_t offset = 0;            // element offset in the flat buffer
  int64_t numel = 0;
  uint64_t id = 0;               // stable id: the RNG stream of its initialisation
  bool weight_decay = false;     // AdamW decay applies to matrices (and embeddings), not biases or norms
  ParamInit init = ParamInit::kNormal;
  int64_t live = -1;             // elements of the whole tensor drawn (-1: all), the rest zero (padded rows)
};

// Pointers into one flat buffer (parameters or gradients), per layer.
struct LayerPtrs {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

// The part of the model a pipeline stage holds: layers [first_layer, first_layer + num_layers)
// (num_layers < 0: all), the embedding group (wte, wpe) when `embedding` or `head` (the tied
// output head needs wte), the final LayerNorm when `head`.
struct StageSpec {
  int first_layer = 0;
  int num_layers = -1;
  bool embedding = true;
  bool head = true;
};

// The transformer block's kParamsPerLayer tensors (model/block.h) named prefix + names[i], in the
// order of LayerPtrs; residual_scaled: its two output projections are drawn by kNormalResidual
// (GPT-2) rather than kNormal (timm's ViT).
std::vector<ParamSpec> block_param_specs(const ModelConfig& cfg, const std::string& prefix,
                                         const char* const names[kParamsPerLayer], bool residual_scaled);

// The stage with num_layers < 0 resolved (the layers from first_layer on); InputError when
// its layers lie outside the model.
StageSpec resolve_stage(const ModelConfig& cfg, StageSpec stage);
// InputError naming the values unless tp divides the heads (whole heads per rank), the MLP size
// and the padded vocabulary (the column-, row- and vocabulary-parallel splits).
void check_tp_split(const ModelConfig& cfg, int tp_size);

class ParamLayout {
 public:
  // The layout of tensor-parallel rank tp_rank of tp_size (1: the whole model), restricted to
  // a pipeline stage's part (default: the whole model). Tensor ids (the RNG streams of the
  // initialisation) are those of the whole model, whatever the part.
  explicit ParamLayout(const ModelConfig& cfg, int tp_size = 1, int tp_rank = 0, const StageSpec& stage = {});
  const StageSpec& stage() const { return stage_; }
  bool has_group(int g) const;
  int first_layer() const { return stage_.first_layer; }
  int num_layers() const { return stage_.num_layers; }
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }
  // Index in the whole tensor (row-major, full_shape) of element `local` of this rank's part.
  int64_t global_index(const ParamTensor& t, int64_t local) const;
  // Elements of the whole model counted once (replicated tensors once, split ones whole).
  int64_t total_full() const;
  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }
  // Parameters counted as in the literature: wte with V rows (not Vp), wpe included.
  int64_t count_unpadded() const;
  // Element range [begin, end) of layer l's parameters.
  std::pair<int64_t, int64_t> layer_range(int l) const;
  // Parameter groups (see model/param_store.h): 0 embeddings (ClimaX: the front, everything
  // before the blocks), 1..L layers, L+1 final norm (ClimaX: the norm and the decoder head).
  int num_groups() const { return cfg_.n_layer + 2; }
  std::pair<int64_t, int64_t> group_range(int g) const;
  int64_t max_group_size() const;
  // Pointers to the tensors of a group whose first element is at `base`.
  void embedding_ptrs(float* base, float** wte, float** wpe) const;
  LayerPtrs layer_ptrs(int l, float* base) const;
  void final_ptrs(float* base, float** lnfw, float** lnfb) const;
  const ParamTensor* find(const std::string& name) const;  // nullptr if absent
  // Pointers to every tensor of group g, in layout order, for a group whose first element is at
  // `base` (ClimaX's front and back groups).
  std::vector<float*> group_ptrs(int g, float* base) const;

 private:
  void add(const ParamSpec& spec, int layer);
  ModelConfig cfg_;
  std::vector<ParamTensor> tensors_;
  int64_t total_ = 0;
  int tp_size_ = 1, tp_rank_ = 0;
  StageSpec stage_;
  int emb_ = -1, final_ = -1;     // tensor index of the first tensor of group 0 / L+1, -1 if absent
  int emb_end_ = -1, final_end_ = -1;  // one past their last tensor
  std::vector<int> layer_first_;  // tensor index of each layer's first tensor, -1 if absent
  uint64_t next_id_ = 0;          // add(): the next tensor id
  bool include_ = true;           // add(): whether the tensor is in this part
};

// Tensor parallelism and whole-model buffers: every tensor-parallel rank's flat buffer
// (layout `local`) <-> one flat buffer in the tp = 1 layout `full`.
// Copies this rank's part out of a whole-model buffer.
void extract_tp_part(const ParamLayout& local, const ParamLayout& full, const float* full_buf, float* local_buf);
// Writes one rank's part (layout `local`, any tp rank) into a whole-model buffer.
void insert_tp_part(const ParamLayout& local, const ParamLayout& full, const float* local_buf, float* full_buf);

// Fills `params` (size layout.total()) with the GPT-2 initialisation: weights N(0, 0.02),
// residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1, padded vocab rows 0.
// Element i of tensor t gets a value that depends only on (seed, t.id, i).
// Each tensor as its ParamInit says (the family's declaration): ClimaX's weights normal(0,
// init_std) without the residual scaling (timm's truncated normal at +-2 is that at std 0.02), its
// query and biases 0, its var_embed and pos_embed sine-cosine (Family::init_value).
void init_params(const ParamLayout& layout, uint64_t seed, float* params);
// The same values for the element range [begin, end) only, written to out[0, end - begin):
// a ZeRO-3 shard initialises exactly its part of the single-process model.
void init_params_range(const ParamLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out);

}  // namespace weft
