#include "plan/weft_memory.h"

#include <algorithm>
#include <vector>

#include "parallel/dp/data_parallel.h"
#include "parallel/pp/partition.h"
#include "parallel/pp/schedule.h"

namespace weft::plan {

int64_t weft_chunk_params(const ModelConfig& m, int tp, int64_t n_layers, bool embedding, bool head) {
  const int64_t C = m.n_embd, F = m.ffn, t = tp;
  // Per layer: ln_1, ln_2 (2C each), c_proj biases (C each) replicated; c_attn (C x 3C + 3C),
  // attn.c_proj (C x C), c_fc (C x F + F), mlp.c_proj (F x C) split over tp (Shoeybi et al.
  // 2019, sec. 3).
  const int64_t layer = 6 * C + (3 * C * C + 3 * C + C * C + C * F + F + F * C) / t;
  int64_t n = n_layers * layer;
  if (embedding || head) n += m.padded_vocab / t * C + static_cast<int64_t>(m.n_ctx) * C;  // wte rows / t, wpe
  if (head) n += 2 * C;                                                                   // ln_f
  return n;
}

MemoryBreakdown weft_rank_memory(const WeftRunShape& r, int stage, int dp_rank) {
  const ModelConfig& mc = r.model;
  const Layout& l = r.layout;
  const int p = l.pp, v = p > 1 ? l.virtual_stages : 1, K = p * v, t = l.tp, dp = l.dp;
  const int64_t B = l.micro_batch, T = r.seq, N = B * T, C = mc.n_embd, Cl = C / t, F = mc.ffn / t;
  const int64_t NH = mc.n_head / t, Vl = mc.padded_vocab / t;
  const bool sp = l.sequence_parallel && t > 1;
  const int64_t Nl = sp ? N / t : N;
  const int64_t att = B * NH * T * T;
  // One layer's stash without recompute (elements; see the header): LayerNorm outputs (2 N C),
  // row statistics (4 Nl), Q K V (3 N Cl), probabilities, projection input (N Cl), residual
  // after attention (Nl C), GELU input and output (2 N F), the layer's output (Nl C).
  const int64_t layer_none = N * C + 2 * Nl + 3 * N * Cl + att + N * Cl + Nl * C + N * C + 2 * Nl + 2 * N * F + Nl * C;
  int64_t head_chunk = r.head_chunk;
  if (head_chunk <= 0) head_chunk = std::max<int64_t>(256, (int64_t{1} << 25) / Vl / 256 * 256);
  head_chunk = std::min(head_chunk, N);

  const std::vector<StageRange> parts =
      partition_layers(mc.n_layer, p, v, {}, gpt_head_cost_in_layers(mc.padded_vocab, mc.n_embd));
  const std::vector<PipeAction> actions =
      p > 1 ? stage_schedule(l.schedule, p, stage, static_cast<int>(r.micro_batches), v) : std::vector<PipeAction>{};

  double params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, comm = 0;  // elements
  for (int c = 0; c < v; ++c) {
    const int g = p > 1 ? global_chunk(stage, c, p) : 0;
    const StageRange part = p > 1 ? parts[static_cast<size_t>(g)] : StageRange{0, mc.n_layer, true, true};
    const bool emb = g == 0, head = g == K - 1;
    const int64_t nl = part.num_layers;
    const int64_t n = weft_chunk_params(mc, t, nl, emb, head);
    // ZeRO: contiguous shards of ceil(n / dp) elements (Rajbhandari et al. 2020, sec. 5.1).
    const int64_t shard = (n + dp - 1) / dp;
    const int64_t own = std::min(n, (dp_rank + 1) * shard) - std::min(n, dp_rank * shard);
    const int64_t g0 = (emb || head) ? Vl * C + static_cast<int64_t>(mc.n_ctx) * C : 1;
    const int64_t layer_group = weft_chunk_params(mc, t, 1, false, false);
    const int64_t max_other = std::max<int64_t>({1, nl > 0 ? layer_group : 0, head ? 2 * C : 0});
    const int64_t grad_slots = g0 + DataParallel::kGradSlots * max_other;
    const int64_t recv_slots =
        std::max<int64_t>(1, std::min(g0, shard)) + DataParallel::kGradSlots * std::max<int64_t>(1, std::min(max_other, shard));
    switch (l.zero) {
      case 0:
        params += n, grads += n, optimizer += 2 * n;
        break;
      case 1:
        params += n, grads += n, comm += own, optimizer += 2 * own;
        break;
      case 2:
        params += n, grads += own + grad_slots, comm += recv_slots, optimizer += 2 * own;
        break;
      default:
        params += own + g0 + (DataParallel::param_slots(r.prefetch) - 1) * max_other;
        grads += own + grad_slots, comm += recv_slots, optimizer += 2 * own;
        break;
    }
    if (r.master_weights) optimizer += l.zero == 0 ? n : own;
    // The embedding gradient's (token, row) exchange: every rank's rows, gathered (transient).
    if (dp > 1 && l.zero <= 1 && emb) comm += static_cast<double>(N) * C * dp;

    // Stashed activations: one set per micro-batch in flight on this chunk.
    bool any_full = false, any_recompute = false;
    int64_t slot = Nl * C + (head ? N * C + 2 * Nl : 0);  // the chunk's input; ln_f output and statistics
    for (int64_t i = 0; i < nl; ++i) {
      const bool full = l.recompute == Recompute::kFull && (l.recompute_layers < 0 || i < l.recompute_layers);
      any_full = any_full || full;
      any_recompute = any_recompute || full || l.recompute == Recompute::kSelective;
      slot += full ? Nl * C : l.recompute == Recompute::kSelective ? layer_none - att : layer_none;
    }
    const int in_flight = p > 1 ? std::max(1, max_in_flight(actions, c)) : 1;
    activations += static_cast<double>(in_flight) * slot;

    // Workspace of the chunk: LayerNorm-gradient scratch (2C), the head's losses, logits
    // chunk and statistics, the row-parallel partial sums, the sequence-parallel rows, the
    // activation gradients, and the recompute buffers.
    double ws = 2 * C;
    if (head) ws += N + head_chunk * Vl + 3 * head_chunk;
    if (t > 1) ws += N * C;
    if (sp) ws += Nl * C;
    ws += Nl * C + N * C + N * 3 * Cl + N * F;
    if (any_recompute) ws += att;
    if (any_full) ws += layer_none - att - Nl * C;
    workspace += ws;
  }
  // Pipeline: the receive buffers (kPipeRecvAhead posted ahead + the one in use), and (at
  // least) one send buffer (1/t of the activations with the scatter-gather of tp > 1 without sp).
  if (p > 1) comm += (kPipeRecvAhead + 1.0) * Nl * C + (t > 1 && !sp ? Nl * C / t : Nl * C);

  MemoryBreakdown m;
  m.stage = stage;
  m.params = 4 * params;
  m.grads = 4 * grads;
  m.optimizer = 4 * optimizer;
  m.activations = 4 * activations;
  m.workspace = 4 * workspace;
  m.comm = 4 * comm;
  m.sum();
  return m;
}

}  // namespace weft::plan
