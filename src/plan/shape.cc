#include "plan/shape.h"

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/pp/partition.h"

namespace weft::plan {

ModelShape ModelShape::from_config(const ModelConfig& c, int64_t seq) {
  ModelShape m;
  m.name = c.name;
  m.layers = c.n_layer;
  m.hidden = c.n_embd;
  m.heads = c.n_head;
  m.context = c.n_ctx;
  m.seq = seq > 0 ? seq : c.n_ctx;
  m.vocab = c.padded_vocab;
  m.ffn = c.ffn;
  return m;
}

void ModelShape::validate() const {
  if (layers <= 0 || hidden <= 0 || heads <= 0 || seq <= 0 || vocab <= 0 || ffn <= 0) {
    throw_input("model '{}': every size must be positive (layers {}, hidden {}, heads {}, seq {}, vocab {}, ffn {})",
                name, layers, hidden, heads, seq, vocab, ffn);
  }
  if (hidden % heads != 0) throw_input("model '{}': hidden size {} is not divisible by {} heads", name, hidden, heads);
  if (context < seq) throw_input("model '{}': sequence length {} is longer than the context {}", name, seq, context);
}

double ModelShape::layer_params() const {
  const double h = static_cast<double>(hidden), f = static_cast<double>(ffn);
  // c_attn (h, 3h) + 3h, attn c_proj (h, h) + h, c_fc (h, f) + f, mlp c_proj (f, h) + h,
  // two LayerNorms 2 * 2h.
  return 4 * h * h + 2 * h * f + f + 9 * h;
}

double ModelShape::embedding_params() const {
  return static_cast<double>(vocab) * hidden + static_cast<double>(context) * hidden;
}

double ModelShape::total_params() const {
  return static_cast<double>(layers) * layer_params() + embedding_params() + 2.0 * hidden;
}

double ModelShape::model_flops_per_token() const {
  const double h = static_cast<double>(hidden), f = static_cast<double>(ffn), L = static_cast<double>(layers);
  const double matmul_params = L * (4 * h * h + 2 * h * f) + static_cast<double>(vocab) * h;
  return 6.0 * matmul_params + 12.0 * L * h * static_cast<double>(seq);
}

int elem_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

std::string Layout::describe() const {
  std::string s = fmt::format("tp {} pp {} dp {} mb {} zero {} {}", tp, pp, dp, micro_batch, zero, recompute_name(recompute));
  if (recompute == Recompute::kFull && recompute_layers >= 0) s += fmt::format("({})", recompute_layers);
  if (sequence_parallel) s += " sp";
  s += fmt::format(" {}", schedule_name(schedule));
  if (schedule == PipeSchedule::kInterleaved) s += fmt::format(" v{}", virtual_stages);
  return s;
}

int64_t micro_batches(int64_t global_batch, const Layout& l) {
  return global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
}

LayoutCandidate layout_candidate(const ModelShape& m, const Layout& l, int64_t global_batch, Precision p, int64_t gpus) {
  return {.world = gpus > 0 ? gpus : static_cast<int64_t>(l.tp) * l.pp * l.dp,
          .tp = l.tp, .pp = l.pp, .dp = l.dp, .virtual_stages = l.virtual_stages,
          .micro_batch = l.micro_batch, .global_batch = global_batch, .zero = l.zero,
          .sequence_parallel = l.sequence_parallel, .schedule = l.schedule, .recompute = l.recompute,
          .recompute_layers = l.recompute_layers, .precision = p,
          .model = {m.layers, m.heads, m.hidden, m.ffn, m.vocab, m.seq}};
}

std::vector<int64_t> stage_layer_counts(const ModelShape& m, const Layout& l) {
  const int v = l.pp > 1 ? l.virtual_stages : 1;
  const std::vector<StageRange> parts = partition_layers(static_cast<int>(m.layers), l.pp, v, {},
                                                         gpt_head_cost_in_layers(m.vocab, m.hidden));
  std::vector<int64_t> n(static_cast<size_t>(l.pp), 0);
  for (size_t c = 0; c < parts.size(); ++c) n[static_cast<size_t>(chunk_stage(static_cast<int>(c), l.pp))] += parts[c].num_layers;
  return n;
}

int64_t stage_layers(const ModelShape& m, const Layout& l, int stage) {
  return stage_layer_counts(m, l).at(static_cast<size_t>(stage));
}

}  // namespace weft::plan
