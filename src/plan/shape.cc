#include "plan/shape.h"

#include <fmt/format.h>

#include "core/error.h"

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

void check_layout(const ModelShape& m, const Layout& l, int64_t global_batch, int64_t gpus) {
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.micro_batch < 1 || l.virtual_stages < 1) {
    throw_input("layout sizes must be >= 1: tp {}, pp {}, dp {}, micro-batch {}, virtual stages {}", l.tp, l.pp, l.dp,
                l.micro_batch, l.virtual_stages);
  }
  if (gpus > 0 && static_cast<int64_t>(l.tp) * l.pp * l.dp != gpus) {
    throw_input("tp {} x pp {} x dp {} = {} ranks, but --gpus is {}", l.tp, l.pp, l.dp,
                static_cast<int64_t>(l.tp) * l.pp * l.dp, gpus);
  }
  if (m.heads % l.tp != 0) throw_input("tp {} does not divide the {} attention heads of {}", l.tp, m.heads, m.name);
  if (m.ffn % l.tp != 0) throw_input("tp {} does not divide the MLP size {} of {}", l.tp, m.ffn, m.name);
  if (m.layers % (static_cast<int64_t>(l.pp) * l.virtual_stages) != 0) {
    throw_input("pp {} x virtual stages {} does not divide the {} layers of {}", l.pp, l.virtual_stages, m.layers,
                m.name);
  }
  if (global_batch <= 0) throw_input("global batch must be positive, got {}", global_batch);
  if (global_batch % (static_cast<int64_t>(l.dp) * l.micro_batch) != 0) {
    throw_input("global batch {} is not divisible by dp {} x micro-batch {}", global_batch, l.dp, l.micro_batch);
  }
  if (l.zero < 0 || l.zero > 3) throw_input("ZeRO stage must be 0..3, got {}", l.zero);
  if (l.recompute_layers < -1) throw_input("recompute layers must be >= 0 (or -1: all), got {}", l.recompute_layers);
  if (l.sequence_parallel && l.tp == 1) throw_input("sequence parallelism needs tp > 1 (tp is 1)");
  const int64_t mb = micro_batches(global_batch, l);
  if (l.schedule == PipeSchedule::kInterleaved) {
    if (l.virtual_stages < 2) throw_input("the interleaved schedule needs --virtual-stages >= 2, got {}", l.virtual_stages);
    if (l.pp < 2) throw_input("the interleaved schedule needs pp >= 2, got pp {}", l.pp);
    if (mb % l.pp != 0) {
      throw_input("the interleaved schedule needs micro-batches {} (global batch {} / (dp {} x micro-batch {})) divisible by pp {}",
                  mb, global_batch, l.dp, l.micro_batch, l.pp);
    }
  } else if (l.virtual_stages != 1) {
    throw_input("virtual stages {} need the interleaved schedule (got {})", l.virtual_stages, schedule_name(l.schedule));
  }
}

int64_t stage_layers(const ModelShape& m, const Layout& l, int stage) {
  const int64_t K = static_cast<int64_t>(l.pp) * l.virtual_stages;
  int64_t n = 0;
  for (int c = 0; c < l.virtual_stages; ++c) {
    const int64_t chunk = static_cast<int64_t>(c) * l.pp + stage;
    n += m.layers / K + (chunk < m.layers % K ? 1 : 0);
  }
  return n;
}

}  // namespace weft::plan
