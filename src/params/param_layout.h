// Parameter layout, family-neutral: every parameter lives in one flat fp32 buffer (and every
// gradient in another of the same layout), in the order a model family declares its tensors
// (a ParamTable: the front group, one list per transformer layer, the back group). A layer's
// parameters are contiguous, so a pipeline stage or a ZeRO-3 gather is a range. What a tensor
// is to the model (a GPT-2 Conv1D matrix, a ClimaX patch embedding) is the family's business
// (src/model/); this layer knows shapes, tensor-parallel splits, initialisation rules and the
// attributes the parallel layers act on (weight decay, sparse row gradients, the tied head).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/view.h"

namespace weft {

// How a tensor is split over the tensor-parallel ranks (Megatron-LM): column-parallel
// matrices split their output columns (c_attn: the columns of each of q, k, v, i.e. whole
// heads), row-parallel matrices their input rows, the embedding its vocabulary rows.
// kKvCols: the columns of each of k and v (ClimaX's variable aggregation).
// Both may name their blocks' widths (ParamSpec::col_blocks: grouped-query attention's q, k, v of
// C, KV, KV columns; SwiGLU's gate and up): each block's columns split by tp, or, for a block of
// fewer whole units (ParamSpec::col_units: heads) than ranks, replicated (ColBlockPart).
enum class TpSplit { kReplicated, kRows, kCols, kQkvCols, kKvCols };

// How a tensor's first values are drawn (init_params).
enum class ParamInit {
  kNormal,          // N(0, std), keyed by (seed, tensor id, element of the whole tensor)
  kNormalResidual,  // the same with the family's residual std (GPT-2: init_std / sqrt(2 L))
  kZeros,
  kOnes,
  kFamily,          // the family's own values (ParamTable::init_value: ClimaX's sine-cosine embeddings)
};

// One tensor as a family declares it (Family::param_table).
struct ParamSpec {
  ParamSpec(std::string n, int tg, std::vector<int64_t> f, TpSplit s, bool d, ParamInit i,
            std::vector<int64_t> hf = {}, int64_t lv = -1)
      : name(std::move(n)), tag(tg), full(std::move(f)), split(s), decay(d), init(i), hf_shape(std::move(hf)), live(lv) {}
  std::string name;
  int tag;                         // the family's own id of the tensor (its enum); 0: none
  std::vector<int64_t> full;       // shape of the whole tensor (tp = 1)
  TpSplit split;
  bool decay;                      // AdamW's weight decay applies
  ParamInit init;
  std::vector<int64_t> hf_shape;   // the checkpoint's shape when it differs ({}: full)
  int64_t live;                    // elements of the whole tensor drawn, from the start (-1: all); the rest stay 0
  float std = 0.0f;                // kNormal / kNormalResidual: the standard deviation (the family's factory sets it)
  // Its gradient may arrive as rows (an embedding lookup's: DataParallel exchanges the
  // (index, row) pairs instead of reducing the dense matrix), rows of full.back() elements.
  bool sparse_rows = false;
  bool tied_head = false;          // it is also the output head (weight tying: checkpoints may hold both names)
  // > 0: a running statistic (BatchNorm's running mean or variance), not trained. The model adds
  // the step's batch statistic to its gradient slot (scaled as the gradients are, so the slots
  // of all micro-batches and ranks sum to it), and the optimizer blends it in:
  // p = (1 - m) p + m g, g unscaled. No weight decay, outside the gradient norm and clipping.
  float statistic_momentum = 0.0f;
  // kQkvCols / kKvCols: the whole widths of its column blocks, each split by tp in order (empty:
  // 3 or 2 equal blocks).
  std::vector<int64_t> col_blocks;
  // With col_blocks: each block's indivisible unit in columns (a head's width; empty: none). A
  // block of U units over P ranks where P does not divide U but U divides P is replicated: every
  // rank holds one unit, the same on P / U consecutive ranks (Megatron-LM's grouped-query attention
  // with fewer kv heads than ranks). The model sums such a block's gradient over its replicas.
  std::vector<int64_t> col_units;
};

// One column block of a tensor with col_blocks on one tensor-parallel rank.
struct ColBlockPart {
  int64_t whole = 0;   // its columns in the whole tensor
  int64_t start = 0;   // the whole tensor's column where it starts
  int64_t local = 0;   // its columns on the rank
  int64_t first = 0;   // the whole tensor's column of the rank's first
  int replicas = 1;    // ranks holding the same columns (1: split over the ranks)
  int replica = 0;     // this rank's place among them (0: the first)
};
// The parts of blocks `blocks` (units `units`, may be empty) on rank r of P; InputError naming the
// tensor unless each block splits into whole units or its units divide P.
std::vector<ColBlockPart> col_block_parts(const std::string& name, const std::vector<int64_t>& blocks,
                                          const std::vector<int64_t>& units, int64_t P, int64_t r);

// How another program's files name a family's tensors (a Hugging Face export of the model), for
// the checkpoint loader (ckpt/checkpoint.cc), which knows no family: a prefix of the layout's
// names that such files may leave out, the name under which they hold the output head weft ties
// to the tied_head tensor (checked equal to it on load), and the per-layer buffers they carry
// besides the parameters (ignored on load). All empty: a family with no foreign files.
// One tensor of another program's file that holds (part of) a weft tensor (ForeignNames::pieces).
struct ForeignPiece {
  std::string name;            // its name in the file
  std::vector<int64_t> shape;  // its shape in the file
  bool transpose = false;      // the file holds it (out, in), weft's (in, out): its rows are weft's columns
  // A slice of that file tensor (count >= 0): rows [first, first + count) of a transposed 2-D one,
  // elements of a 1-D one. Several pieces may slice one file tensor (Hugging Face GPT-NeoX's
  // query_key_value: q, k and v interleaved per head); together they cover it. count -1: all.
  int64_t first = 0;
  int64_t count = -1;
};

struct ForeignNames {
  std::string optional_prefix;  // GPT-2: "transformer." (the Hub's GPT2Model files hold "h.0...")
  std::string tied_head;        // GPT-2: "lm_head.weight"; "": none
  // A buffer's name: [file prefix] layer_prefix <layer digits> one of layer_buffers.
  std::string layer_prefix;                // GPT-2: "h."
  std::vector<std::string> layer_buffers;  // GPT-2: ".attn.bias", ".attn.masked_bias" (causal masks)

  // Tensors the family's files hold under other names or in pieces (Hugging Face's Llama:
  // q_proj, k_proj, v_proj (out, in) for weft's fused c_attn (in, out)): weft name -> the pieces
  // whose columns (a transposed piece's rows) make its columns, in order; a 1-D tensor's pieces
  // are concatenated. When set, every tensor has an entry and checkpoints are written in these
  // names (ckpt/checkpoint.cc); a file in weft's own names still loads.
  std::map<std::string, std::vector<ForeignPiece>> pieces;
  // Names a file may hold besides the tensors and that are ignored (Hugging Face Llama's older
  // "rotary_emb.inv_freq" buffers): suffixes.
  std::vector<std::string> ignored_suffixes;

  // `name` without optional_prefix (unchanged when it does not start with it).
  std::string strip(const std::string& name) const;
  // Whether `name` is one of the per-layer buffers in a file whose names carry `prefix`.
  bool is_buffer(const std::string& name, const std::string& prefix) const;
};

// A family's parameters in layout order: the front group (0: embeddings, everything before the
// blocks), one list per transformer layer (groups 1..L), the back group (L+1: the final norm and
// what reads it).
struct ParamTable {
  std::vector<ParamSpec> front;
  std::vector<std::vector<ParamSpec>> layers;
  std::vector<ParamSpec> back;
  // The pipeline stage with the head also holds the front group (a head tied to the embedding).
  bool front_with_head = false;
  // kFamily tensors: element i of the whole tensor t (may be empty when none is declared).
  std::function<float(const struct ParamTensor& t, int64_t i)> init_value;
  ForeignNames foreign;  // how imported files name these tensors
};

struct ParamTensor {
  std::string name;              // the checkpoint name, e.g. "transformer.h.0.attn.c_attn.weight"
  int tag = 0;                   // ParamSpec::tag
  int layer = -1;                // -1 for non-layer tensors
  int group = 0;                 // 0 front, 1..L the layers, L+1 back
  std::vector<int64_t> shape;    // shape in the flat buffer (this tensor-parallel rank's part)
  std::vector<int64_t> full_shape;  // shape of the whole tensor (tp = 1)
  TpSplit split = TpSplit::kReplicated;
  std::vector<int64_t> hf_shape; // shape in a checkpoint (wte keeps only the V real rows)
  int64_t offset = 0;            // element offset in the flat buffer
  int64_t numel = 0;
  uint64_t id = 0;               // stable id: the RNG stream of its initialisation
  bool weight_decay = false;     // AdamW decay applies to matrices (and embeddings), not biases or norms
  ParamInit init = ParamInit::kNormal;
  float std = 0.0f;              // ParamSpec::std
  int64_t live = -1;             // elements of the whole tensor drawn (-1: all), the rest zero (padded rows)
  bool sparse_rows = false;      // ParamSpec::sparse_rows
  bool tied_head = false;        // ParamSpec::tied_head
  float statistic_momentum = 0.0f;  // ParamSpec::statistic_momentum (> 0: a running statistic)
  std::vector<int64_t> col_blocks;  // ParamSpec::col_blocks (whole widths; empty: equal blocks)
  std::vector<ColBlockPart> col_parts;  // with col_blocks: each block on this rank (col_block_parts)
  // Whether a column block is replicated over tensor-parallel ranks (ColBlockPart::replicas > 1).
  bool has_replicated_cols() const;
};

// The part of the model a pipeline stage holds: layers [first_layer, first_layer + num_layers)
// (num_layers < 0: all), the front group when `embedding` (or `head` with a tied head), the back
// group when `head`.
struct StageSpec {
  int first_layer = 0;
  int num_layers = -1;
  bool embedding = true;
  bool head = true;
};

// The stage with num_layers < 0 resolved (the layers from first_layer on); InputError when
// its layers lie outside the model's n_layer layers.
StageSpec resolve_stage(int n_layer, StageSpec stage);

class ParamLayout {
 public:
  // The layout of tensor-parallel rank tp_rank of tp_size (1: the whole model), restricted to
  // a pipeline stage's part (default: the whole model). Tensor ids (the RNG streams of the
  // initialisation) are those of the whole model, whatever the part.
  explicit ParamLayout(const ParamTable& table, int tp_size = 1, int tp_rank = 0, const StageSpec& stage = {});
  const StageSpec& stage() const { return stage_; }
  bool has_group(int g) const;
  int first_layer() const { return stage_.first_layer; }
  int num_layers() const { return stage_.num_layers; }
  int model_layers() const { return n_layer_; }  // the whole model's
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }
  // Index in the whole tensor (row-major, full_shape) of element `local` of this rank's part.
  int64_t global_index(const ParamTensor& t, int64_t local) const;
  // Element ranges [begin, end) of the flat buffer that this rank holds as a copy of another
  // rank's (replicated column blocks on a rank that is not their first replica): what the gradient
  // norm counts on one rank only.
  std::vector<std::pair<int64_t, int64_t>> replica_copies() const;
  // Elements of the whole model counted once (replicated tensors once, split ones whole).
  int64_t total_full() const;
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }
  // Parameters counted as in the literature: only the live elements (wte with V rows, not Vp).
  int64_t count_unpadded() const;
  // Element range [begin, end) of layer l's parameters.
  std::pair<int64_t, int64_t> layer_range(int l) const;
  // Parameter groups (see params/param_store.h): 0 the front, 1..L layers, L+1 the back.
  int num_groups() const { return n_layer_ + 2; }
  std::pair<int64_t, int64_t> group_range(int g) const;
  int64_t max_group_size() const;
  // The front group's first two tensors (a token embedding and its positions) for a group whose
  // first element is at `base`.
  void embedding_ptrs(float* base, float** wte, float** wpe) const;
  // The same for parameters of any storage dtype (views offset by their element size).
  void embedding_ptrs(CView base, CView* wte, CView* wpe) const;
  // The tensor whose gradient may arrive as rows (ParamSpec::sparse_rows); nullptr: none here.
  const ParamTensor* sparse_rows_tensor() const;
  const ParamTensor* find(const std::string& name) const;  // nullptr if absent
  // Pointers to every tensor of group g, in layout order, for a group whose first element is at
  // `base`.
  std::vector<float*> group_ptrs(int g, float* base) const;
  std::vector<CView> group_ptrs(int g, CView base) const;
  // The element offsets of group g's tensors from the group's first element, in layout order.
  std::vector<int64_t> group_offsets(int g) const;
  // The tensors of group g in layout order (the group must be held here).
  std::span<const ParamTensor> group_tensors(int g) const;
  // kFamily tensors' values (ParamTable::init_value).
  float family_value(const ParamTensor& t, int64_t i) const;
  // How imported files name the tensors (ParamTable::foreign).
  const ForeignNames& foreign() const { return foreign_; }

 private:
  void add(const ParamSpec& spec, int layer, int group);
  std::vector<ParamTensor> tensors_;
  int64_t total_ = 0;
  int n_layer_ = 0;
  int tp_size_ = 1, tp_rank_ = 0;
  StageSpec stage_;
  std::function<float(const ParamTensor&, int64_t)> init_value_;
  ForeignNames foreign_;
  // Tensor index range [first, end) of each group held, first = -1 if absent.
  std::vector<std::pair<int, int>> group_tensors_;
  uint64_t next_id_ = 0;          // add(): the next tensor id
  bool include_ = true;           // add(): whether the tensor is in this part
};

// Tensor parallelism and whole-model buffers: every tensor-parallel rank's flat buffer
// (layout `local`) <-> one flat buffer in the tp = 1 layout `full`.
// Copies this rank's part out of a whole-model buffer.
void extract_tp_part(const ParamLayout& local, const ParamLayout& full, const float* full_buf, float* local_buf);
// Writes one rank's part (layout `local`, any tp rank) into a whole-model buffer.
void insert_tp_part(const ParamLayout& local, const ParamLayout& full, const float* local_buf, float* full_buf);

// Fills `params` (size layout.total()) with each tensor's initialisation as its ParamInit says:
// kNormal draws N(0, std) with padded rows (beyond `live`) zero, kFamily asks the table's
// init_value. Element i of tensor t gets a value that depends only on (seed, t.id, i).
void init_params(const ParamLayout& layout, uint64_t seed, float* params);
// The same values for the element range [begin, end) only, written to out[0, end - begin):
// a ZeRO-3 shard initialises exactly its part of the single-process model.
void init_params_range(const ParamLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out);

}  // namespace weft
