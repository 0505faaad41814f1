#include "parallel/layout_rules.h"

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/grid.h"

namespace weft {

namespace {

// Heads, MLP size and padded vocabulary split over tp; at least one layer per stage.
std::string model_axes_error(const LayoutCandidate& c) {
  const LayoutModel& m = c.model;
  if (c.tp > 1 && !m.caps.tensor_parallel) return {};  // not split at all: the family rule says so
  if (m.heads % c.tp != 0) return fmt::format("{} attention heads are not divisible by tp {}", m.heads, c.tp);
  if (m.kv_heads > 0 && m.kv_heads % c.tp != 0 && c.tp % m.kv_heads != 0) {
    return fmt::format("{} key/value heads (n_kv_head) neither divide among tp {} ranks nor divide tp: each rank holds "
                       "whole key/value heads, split or (fewer heads than ranks) replicated on tp / n_kv_head ranks "
                       "each (Megatron-LM's rule for grouped-query attention)", m.kv_heads, c.tp);
  }
  if (m.ffn % c.tp != 0) return fmt::format("MLP size {} is not divisible by tp {}", m.ffn, c.tp);
  if (m.vocab % c.tp != 0) return fmt::format("padded vocabulary {} is not divisible by tp {}", m.vocab, c.tp);
  return {};
}

// pp x v model chunks need at least pp x v layers (partition_layers' own condition).
std::string chunks_error(const LayoutCandidate& c, int v) {
  const int64_t chunks = int64_t{c.pp} * v;
  if (c.pp == 1 || c.model.layers >= chunks) return {};
  return fmt::format("pp {} x virtual_stages {} = {} model chunks need at least that many layers; the model has {}", c.pp,
                     v, chunks, c.model.layers);
}

std::string derived_dp_error(const LayoutCandidate& c) {
  const int64_t tp_pp = int64_t{c.tp} * c.pp;
  if (c.dp != 0 || c.world % tp_pp == 0) return {};
  return fmt::format("world size {} is not divisible by tp {} x pp {} = {} (dp is derived as world / (tp x pp))",
                     c.world, c.tp, c.pp, tp_pp);
}

// The dp split (HSDP): dp_replicate divides dp; a given dp_shard agrees with dp.
std::string dp_split_rule_error(const LayoutCandidate& c) {
  const int dp = c.resolved_dp();
  const std::string dp_text =
      c.dp != 0 ? fmt::format("dp {}", dp) : fmt::format("dp {} (world {} / (tp {} x pp {}))", dp, c.world, c.tp, c.pp);
  if (c.dp_replicate < 1) return fmt::format("dp_replicate {} must be at least 1", c.dp_replicate);
  if (c.dp_shard_request < 0) return fmt::format("dp_shard {} must be at least 1 (0: dp / dp_replicate)", c.dp_shard_request);
  if (c.dp_shard_request > 0 && int64_t{c.dp_shard_request} * c.dp_replicate != dp) {
    return fmt::format("{} does not equal dp_shard {} x dp_replicate {} = {}", dp_text, c.dp_shard_request, c.dp_replicate,
                       int64_t{c.dp_shard_request} * c.dp_replicate);
  }
  if (dp % c.dp_replicate != 0) {
    return fmt::format("dp_replicate {} does not divide {} (dp = dp_shard x dp_replicate)", c.dp_replicate, dp_text);
  }
  return {};
}

std::string tensor_error(const LayoutCandidate& c) {
  if (!c.sequence_parallel) return {};
  if (c.tp == 1) return "sequence parallelism needs tp > 1 (tp is 1)";
  const int64_t tokens = c.micro_batch * c.model.seq;
  if (tokens % c.tp == 0) return {};
  return fmt::format("sequence parallelism: micro-batch {} x sequence {} = {} tokens are not divisible by tp {}",
                     c.micro_batch, c.model.seq, tokens, c.tp);
}

// The schedule and the virtual stages against pp (see the header for why each rule).
std::string schedule_error(const LayoutCandidate& c) {
  const int v = c.virtual_stages;
  const bool interleaved = c.schedule == PipeSchedule::kInterleaved;
  if (c.pp == 1 && c.schedule != PipeSchedule::k1F1B) {
    return fmt::format("schedule '{}' needs pp > 1 (pp is 1: one stage runs each micro-batch's forward and backward "
                       "in turn; leave the default 1f1b)", schedule_name(c.schedule));
  }
  if (v < 1) return fmt::format("virtual_stages must be >= 1, got {}", v);
  if (v > 1 && (c.pp == 1 || !interleaved)) {
    return fmt::format("virtual_stages {} needs the interleaved schedule and pp > 1 (got schedule '{}', pp {})", v,
                       schedule_name(c.schedule), c.pp);
  }
  if (interleaved && v < 2) return fmt::format("the interleaved schedule needs virtual_stages >= 2, got {}", v);
  return {};
}

std::string pipeline_error(const LayoutCandidate& c) {
  if (std::string e = schedule_error(c); !e.empty()) return e;
  if (std::string e = chunks_error(c, c.virtual_stages); !e.empty()) return e;
  const int64_t m = c.micro_batches();
  if (c.schedule == PipeSchedule::kInterleaved && m % c.pp != 0) {
    return fmt::format("the interleaved schedule needs micro-batches {} (global batch {} / (dp {} x micro-batch {})) "
                       "divisible by pp {}", m, c.global_batch, c.resolved_dp(), c.micro_batch, c.pp);
  }
  return {};
}

std::string zero_error(const LayoutCandidate& c) {
  if (c.zero < 0 || c.zero > 3) return fmt::format("zero must be 0, 1, 2 or 3, got {}", c.zero);
  if (c.pp > 1 && c.zero > 1) {
    return fmt::format("zero {} with pp {}: ZeRO-2/3 reduce gradients every micro-batch and gather parameters per use, "
                       "which pipelining would multiply; use zero 0 or 1 with pipeline parallelism", c.zero, c.pp);
  }
  return {};
}

std::string recompute_error(const LayoutCandidate& c) {
  if (c.recompute_layers < -1 || c.recompute_layers == 0) {
    return fmt::format("recompute_layers must be >= 1 (or -1: every layer of a stage), got {}", c.recompute_layers);
  }
  if (c.recompute_layers != -1 && c.recompute != Recompute::kFull) {
    return fmt::format("recompute_layers {} applies to recompute 'full', not '{}'", c.recompute_layers,
                       recompute_name(c.recompute));
  }
  return {};
}

std::string family_error(const LayoutCandidate& c) {
  const ModelCapabilities& caps = c.model.caps;
  if (c.tp != 1 && !caps.tensor_parallel) {
    return fmt::format("{} models run without tensor parallelism: tp must be 1, got {}", caps.family, c.tp);
  }
  if (c.pp != 1 && !caps.pipeline_stages) {
    return fmt::format("{} models run without pipeline stages: pp must be 1, got {}", caps.family, c.pp);
  }
  if (c.sequence_parallel && !caps.sequence_parallel) {
    return fmt::format("sequence parallelism is not available for {} models", caps.family);
  }
  if (c.recompute != Recompute::kNone && !caps.full_recompute) {
    return fmt::format("{} models have no activation recompute: recompute must be 'none', got '{}'", caps.family,
                       recompute_name(c.recompute));
  }
  if (c.recompute == Recompute::kSelective && !caps.selective_recompute) {
    return fmt::format("selective recompute is not available for {} models (use 'full' or 'none')", caps.family);
  }
  if (c.precision != Precision::kFp32 && !caps.mixed_precision) {
    return fmt::format("{} models train in fp32: precision '{}' is not available for them", caps.family,
                       precision_name(c.precision));
  }
  return {};
}

}  // namespace

int LayoutCandidate::resolved_dp() const {
  return dp != 0 ? dp : static_cast<int>(world / (int64_t{tp} * pp));
}

int LayoutCandidate::resolved_dp_shard() const {
  return dp_shard_request != 0 ? dp_shard_request : resolved_dp() / (dp_replicate > 0 ? dp_replicate : 1);
}

Layout LayoutCandidate::resolved() const {
  Layout l = *this;
  l.dp = resolved_dp();
  return l;
}

int64_t LayoutCandidate::micro_batches() const { return global_batch / (micro_batch * resolved_dp()); }

std::string axes_error(const LayoutCandidate& c) {
  // dp 0 (derived) passes the size check; the derivation is checked below.
  if (std::string e = axis_size_error(GridSpec{c.tp, c.pp, c.dp == 0 ? 1 : c.dp}); !e.empty()) return e;
  if (std::string e = model_axes_error(c); !e.empty()) return e;
  if (std::string e = chunks_error(c, 1); !e.empty()) return e;
  if (std::string e = derived_dp_error(c); !e.empty()) return e;
  if (std::string e = world_size_error(GridSpec{c.tp, c.pp, c.resolved_dp()}, c.world); !e.empty()) return e;
  return dp_split_rule_error(c);
}

std::string batch_error(const LayoutCandidate& c) {
  if (c.global_batch <= 0 || c.micro_batch <= 0) {
    return fmt::format("global_batch {} and micro_batch {} must be positive", c.global_batch, c.micro_batch);
  }
  const int64_t per_step = c.micro_batch * c.resolved_dp();
  if (c.global_batch % per_step == 0) return {};
  return fmt::format("global batch {} is not divisible by micro batch {} x dp {} = {}", c.global_batch, c.micro_batch,
                     c.resolved_dp(), per_step);
}

std::string layout_error(const LayoutCandidate& c) {
  for (auto rule : {axes_error, batch_error, family_error, tensor_error, pipeline_error, zero_error, recompute_error}) {
    if (std::string e = rule(c); !e.empty()) return e;
  }
  return {};
}

void check_layout(const LayoutCandidate& c) {
  if (std::string e = layout_error(c); !e.empty()) throw InputError(e);
}

}  // namespace weft
