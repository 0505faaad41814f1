#include "plan/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "parallel/pp/partition.h"

namespace weft::plan {

ModelShape ModelShape::from_config(const ModelConfig& c, int64_t seq) {
  ModelShape m;
  m.name = c.name;
  m.family = c.family;
  m.base = c;
  m.layers = c.n_layer;
  m.hidden = c.n_embd;
  m.heads = c.n_head;
  m.context = c.n_ctx;
  const int64_t fixed = fixed_positions(c);
  m.seq = fixed > 0 ? fixed : seq > 0 ? seq : c.n_ctx;
  if (fixed > 0) m.context = fixed;
  m.vocab = c.padded_vocab;
  m.ffn = c.ffn;
  return m;
}

void ModelShape::validate() const {
  const ModelConfig c = config();
  const int64_t fixed = fixed_positions(c);
  if (!c.capabilities().transformer_blocks) {  // sizes of its own (graph networks): its rules
    c.validate();
    return;
  }
  if (fixed > 0) {
    c.validate();  // the family's rules
    if (seq != fixed) {
      throw_input("model '{}': a {} model's sequence is its {} positions (fixed by the model), not {}", name,
                  c.capabilities().family, fixed, seq);
    }
    return;
  }
  if (layers <= 0 || hidden <= 0 || heads <= 0 || seq <= 0 || vocab <= 0 || ffn <= 0) {
    throw_input("model '{}': every size must be positive (layers {}, hidden {}, heads {}, seq {}, vocab {}, ffn {})",
                name, layers, hidden, heads, seq, vocab, ffn);
  }
  if (hidden % heads != 0) throw_input("model '{}': hidden size {} is not divisible by {} heads", name, hidden, heads);
  if (context < seq) throw_input("model '{}': sequence length {} is longer than the context {}", name, seq, context);
}

ModelConfig ModelShape::config() const {
  ModelConfig c = base;
  c.name = name;
  c.family = family;
  c.n_layer = static_cast<int>(layers);
  c.n_head = static_cast<int>(heads);
  c.n_embd = static_cast<int>(hidden);
  c.n_ctx = static_cast<int>(context);
  c.vocab_size = c.padded_vocab = static_cast<int>(vocab);
  c.ffn = static_cast<int>(ffn);
  return c;
}

namespace {
// The whole model on one rank (tp 1), one sample a micro-batch: its counts are the family's
// description's (model/description.h).
std::unique_ptr<ModelDescription> whole_model(const ModelShape& m) {
  return m.family->describe({.model = m.config(), .T = m.seq});
}
}  // namespace

double ModelShape::layer_params() const { return static_cast<double>(whole_model(*this)->layer_params()); }

double ModelShape::embedding_params() const { return static_cast<double>(whole_model(*this)->front_params()); }

double ModelShape::total_params() const { return static_cast<double>(whole_model(*this)->total_params()); }

double ModelShape::model_flops_per_token() const { return family->train_flops_per_position(config(), seq); }

RunSpec part_spec(const ModelConfig& mc, int64_t seq, const Layout& l, const StageSpec& part, int64_t head_chunk,
                  Precision precision) {
  // attention_lse stays false: the planner plans CPU runs and has no backend to ask whether
  // it offers flash attention, so it counts the (B,NH/tp,T,T) probabilities.
  return {.model = mc, .B = l.micro_batch, .T = seq, .tp = l.tp, .sequence_parallel = l.sequence_parallel,
          .recompute = l.recompute, .recompute_layers = l.recompute_layers, .precision = precision, .head_chunk = head_chunk,
          .stage = part, .attention_lse = false, .param_dtype = dtype_of(precision)};
}


int elem_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

int64_t micro_batches(int64_t global_batch, const Layout& l) {
  return global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
}

LayoutCandidate layout_candidate(const ModelShape& m, const Layout& l, int64_t global_batch, Precision p, int64_t gpus) {
  LayoutCandidate c(l);
  c.world = gpus > 0 ? gpus : static_cast<int64_t>(l.tp) * l.pp * l.dp;
  c.global_batch = global_batch;
  c.precision = p;
  c.model = {m.layers, m.heads, m.hidden, m.ffn, m.vocab, m.seq, m.family->capabilities()};
  c.model.kv_heads = m.base.block.n_kv_head;
  return c;
}

std::vector<int64_t> stage_layer_counts(const ModelShape& m, const Layout& l) {
  const int v = l.pp > 1 ? l.virtual_stages : 1;
  // The family's output head as a cost in layers (as Engine::build_chunks).
  const double head_cost = pipeline_head_cost(m.config());
  const std::vector<StageRange> parts = partition_layers(static_cast<int>(m.layers), l.pp, v, {}, head_cost);
  std::vector<int64_t> n(static_cast<size_t>(l.pp), 0);
  for (size_t c = 0; c < parts.size(); ++c) n[static_cast<size_t>(chunk_stage(static_cast<int>(c), l.pp))] += parts[c].num_layers;
  return n;
}

int64_t stage_layers(const ModelShape& m, const Layout& l, int stage) {
  return stage_layer_counts(m, l).at(static_cast<size_t>(stage));
}

}  // namespace weft::plan
