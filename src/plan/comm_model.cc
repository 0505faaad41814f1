#include "plan/comm_model.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "model/family.h"
#include "model/params.h"
#include "parallel/dp/grad_buckets.h"
#include "parallel/dp/param_slots.h"
#include "parallel/dp/zeropp.h"
#include "core/block_quant.h"
#include "parallel/grid.h"
#include "parallel/pp/partition.h"

namespace weft {

namespace {

constexpr int64_t kF32 = 4, kF64 = 8, kI32 = 4;  // CommDType sizes weft uses on the wire

// Calls accumulated by (op, axis, bytes, ranks).
class CallSet {
 public:
  void add(const char* op, const std::string& axis, int64_t bytes, const std::vector<int>& ranks, int64_t n) {
    if (n <= 0) return;
    calls_[{op, axis, bytes, ranks}] += n;
  }
  std::vector<CommCall> list() const {
    std::vector<CommCall> out;
    for (const auto& [k, n] : calls_) {
      out.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), n});
    }
    return out;
  }

 private:
  std::map<std::tuple<std::string, std::string, int64_t, std::vector<int>>, int64_t> calls_;
};

// One model chunk of one pipeline stage (the engine's build_chunks).
struct ChunkInfo {
  int stage = 0, global = 0;
  StageSpec spec;
};

// The layout as the engine builds it.
struct Job {
  const EngineConfig& ec;
  GridLayout grid;
  int tp, pp, dp, v, K;
  int ds, dr;          // HSDP: dp = dp_shard x dp_replicate (dr 1: plain dp)
  int64_t m;           // micro-batches per step on one dp rank (the engine's accumulation)
  int64_t N, C;        // tokens of a micro-batch (B*T), channels
  bool sp;             // sequence parallelism in effect (tp > 1)
  int64_t res_bytes;   // an element of the residual stream (a pipeline message) as stored
  int64_t act_bytes;   // an element of the blocks' 16-bit activations (the LayerNorm rows) as stored
  std::vector<ChunkInfo> chunks;

  explicit Job(const EngineConfig& e)
      : ec(e), grid(e.layout.grid()), tp(e.layout.tp), pp(e.layout.pp), dp(e.layout.dp), v(e.layout.chunks()),
        ds(e.layout.dp_shard()), dr(e.layout.dp_replicate) {
    K = pp * v;
    m = e.global_batch / dp / e.layout.micro_batch;
    N = e.layout.micro_batch * e.seq;
    C = e.model.n_embd;
    sp = e.layout.sp();
    res_bytes = static_cast<int64_t>(dtype_bytes(residual_stream_dtype(e.model.capabilities(), e.precision), 1));
    act_bytes = static_cast<int64_t>(dtype_bytes(dtype_of(e.precision), 1));
    const double head_cost = pipeline_head_cost(e.model);
    const std::vector<StageRange> parts = partition_layers(e.model.n_layer, pp, v, {}, head_cost);
    for (int s = 0; s < pp; ++s) {
      for (int c = 0; c < v; ++c) {
        const int g = global_chunk(s, c, pp);
        chunks.push_back({s, g, {parts[g].first_layer, parts[g].num_layers, g == 0, g == K - 1}});
      }
    }
  }
  int rank(int t, int s, int d) const {
    GridCoords c{};
    c[static_cast<int>(Axis::kTp)] = t;
    c[static_cast<int>(Axis::kPp)] = s;
    c[static_cast<int>(Axis::kDp)] = d;
    return grid.world_rank_of(c);
  }
  std::vector<int> group(Axis a, int t, int s, int d) const { return grid.group_of(a, rank(t, s, d)); }
  // HSDP (DataParallel splits its dp group): the dp_shard group of replica q and the
  // dp_replicate group of shard index i, at (t, s); their tracer axes.
  std::vector<int> shard_group(int t, int s, int q) const { return grid.dp_shard_group(rank(t, s, q * ds)); }
  std::vector<int> replicate_group(int t, int s, int i) const { return grid.dp_replicate_group(rank(t, s, i)); }
  std::string shard_axis() const { return dr > 1 ? "dp-shard" : "dp"; }
  // The family's description of chunk ch (model/description.h).
  std::unique_ptr<ModelDescription> describe(const ChunkInfo& ch) const {
    RunSpec spec;
    spec.model = ec.model;
    spec.B = ec.layout.micro_batch;
    spec.T = ec.seq;
    spec.tp = tp;
    spec.sequence_parallel = sp;
    spec.recompute = ec.layout.recompute;
    spec.recompute_layers = ec.layout.recompute_layers;
    spec.precision = ec.precision;
    spec.param_dtype = dtype_of(ec.precision);
    spec.head_chunk = ec.head_chunk;
    spec.stage = ch.spec;
    return ec.model.family->describe(spec);
  }
};

}  // namespace

// --- tensor parallel ---

// Per layer and micro-batch, read from parallel/tp/layers.cc and GPT::layer_forward/backward.
// Megatron-LM (Shoeybi et al. 2019 sec. 3, fig. 4): 2 all-reduces of B s h in the forward
// (after the attention and the MLP row-parallel products) and 2 in the backward (the input
// gradients of the two column-parallel products): weft does the same. Sequence parallelism
// (Korthikanti et al. 2022 sec. 4.2.2): each all-reduce becomes an all-gather + a
// reduce-scatter of the same buffer, so twice the calls and the same bytes (tracer
// convention: the whole N x C buffer). Departures:
// - sp: the LayerNorms' weight gradients are computed from this rank's rows only and summed
//   over tp right away (SequenceParallelLayerNorm::backward): 2 all-reduces of 2C per layer
//   backward that the paper does not list (Megatron-LM defers them to the gradient
//   reduction of "sequence parallel" parameters).
// - full recompute: Korthikanti et al. (sec. 5) count the recomputed forward's 2 all-reduces
//   (6 per layer instead of 4). weft's recompute (GPT::layer_backward, to_gelu = true) stops
//   at the GELU: the MLP's row-parallel product is not redone (its output is not needed
//   for the backward), so it adds 1 all-reduce (sp: 2 all-gathers + 1 reduce-scatter).
TpLayerComm tp_layer_comm(bool sequence_parallel) {
  TpLayerComm c;
  if (!sequence_parallel) {
    c.forward.all_reduce = 2;
    c.backward.all_reduce = 2;
    c.recompute.all_reduce = 1;
  } else {
    c.forward = {0, 2, 2, 0};
    c.backward = {0, 2, 2, 2};
    c.recompute = {0, 2, 1, 0};
  }
  return c;
}

TpLayerComm megatron_tp_layer_comm(bool sequence_parallel) {
  TpLayerComm c;
  if (!sequence_parallel) {
    c.forward.all_reduce = c.backward.all_reduce = c.recompute.all_reduce = 2;
  } else {
    c.forward = {0, 2, 2, 0};
    c.backward = {0, 4, 2, 2};
    c.recompute = {0, 2, 2, 0};
  }
  return c;
}

namespace {

// gather_bytes: an element of the phase's all-gathers as moved (the LayerNorm rows forward and
// recomputed, the residual stream's gradient backward: as stored); sum_bytes: of its sums (the
// tp group's sum dtype, that of the residual stream: parallel/tp/mappings.h).
// norm_weights: a norm's weights and bias (2C; RMSNorm's weight alone: C), whose gradient the
// group sums under sequence parallelism.
void add_layer_calls(CallSet& cs, const TpLayerCalls& k, int64_t NC, int64_t norm_weights, const std::vector<int>& g,
                     int64_t n, int64_t gather_bytes, int64_t sum_bytes) {
  cs.add("all_reduce", "tp", NC * sum_bytes, g, n * k.all_reduce);
  cs.add("all_gather", "tp", NC * gather_bytes, g, n * k.all_gather);
  cs.add("reduce_scatter", "tp", NC * sum_bytes, g, n * k.reduce_scatter);
  cs.add("all_reduce", "tp", norm_weights * kF32, g, n * k.small_all_reduce);
}

// Tensor parallelism of one micro-batch (tp > 1): each chunk's blocks (the shared block's
// calls above), then its family's front and back (ModelDescription::tp_calls: ClimaX's
// variable aggregation; the GPT's embedding and head, as follows). Vocabulary-parallel embedding
// (Shoeybi et al. 2019 sec. 3): the partial lookups are summed like a row-parallel output,
// all-reduce (sp: reduce-scatter) forward, nothing (sp: all-gather) backward. The head is a
// column-parallel product over the vocabulary: its input region's all-reduce of the input
// gradient (sp: the final LayerNorm's all-gather forward, reduce-scatter backward, and its
// weights' all-reduce of 2C). The vocabulary-parallel cross-entropy (Megatron-LM
// cross_entropy.py) reduces per row a max, then the sum of exponentials and the target logit:
// weft sends the last two in one all-reduce (2 floats per row) where Megatron-LM makes two.
// weft computes the head in chunks of `head_chunk` rows (the family's head_chunk), so
// each chunk makes its own calls (the published formulas assume one call for all N rows).
void add_tensor_parallel(CallSet& cs, const Job& j) {
  if (j.tp <= 1) return;
  const TpLayerComm lc = tp_layer_comm(j.sp);
  for (const ChunkInfo& ch : j.chunks) {
    const std::unique_ptr<ModelDescription> d = j.describe(ch);
    const int64_t nl = d->part_layers(), rf = d->recomputed_layers(), NC = d->tokens() * j.C;
    for (int dd = 0; dd < j.dp; ++dd) {
      const std::vector<int> g = j.group(Axis::kTp, 0, ch.stage, dd);
      const BlockOptions& b = j.ec.model.block;  // the norms' weights, and their biases (RMSNorm and MPT's have none)
      const int64_t nw = (b.norm == NormKind::kLayerNorm && b.bias ? 2 : 1) * j.C;
      add_layer_calls(cs, lc.forward, NC, nw, g, j.m * nl, j.act_bytes, j.res_bytes);
      add_layer_calls(cs, lc.backward, NC, nw, g, j.m * nl, j.res_bytes, j.res_bytes);
      add_layer_calls(cs, lc.recompute, NC, nw, g, j.m * rf, j.act_bytes, j.res_bytes);
      for (const TpCall& c : d->tp_calls()) cs.add(c.op, "tp", c.elems * c.elem_bytes, g, j.m);  // front and back
      // Fewer kv heads than ranks: each layer's backward sums the replicated kv columns'
      // gradients (TensorParallel::end_replica_grads), one exact fp32 all-reduce.
      const int64_t kv_sum = kv_replica_sum_elems(j.ec.model, j.tp);
      if (kv_sum > 0) cs.add("all_reduce", "tp", kv_sum * kF32, g, j.m * nl);
    }
  }
}

// --- pipeline ---

// PipelineRuntime::run_step: per micro-batch, the forward of global chunk g < K-1 sends its
// output to the next stage and the backward of g > 0 sends its input gradient back, each
// received by the neighbour: 2 (K - 1) transfers per micro-batch and pipeline (Narayanan et
// al. 2021 sec. 2.2: 2 (p - 1) without interleaving, v times as many chunk boundaries with
// it). A message is the micro-batch's N x C activation (sp: this rank's N/tp rows), in the
// residual stream's storage (16-bit in a GPT 16-bit run). Without
// sp and tp > 1 the scatter-gather optimisation (Narayanan et al. 2021 sec. 4.1) sends 1/tp
// of it and the receiving stage all-gathers it over tp: one all-gather per transfer and tp group.
void add_pipeline(CallSet& cs, const Job& j) {
  if (j.pp <= 1) return;
  const bool scatter = j.tp > 1 && !j.sp;
  const int64_t message = (j.sp ? j.N / j.tp : j.N) * j.C;
  const int64_t part = scatter ? message / j.tp : message;
  for (int d = 0; d < j.dp; ++d) {
    for (int g = 0; g < j.K; ++g) {
      const int s = chunk_stage(g, j.pp);
      for (int dir : {+1, -1}) {  // forward: g -> g + 1; backward: g -> g - 1
        const int to = g + dir;
        if (to < 0 || to >= j.K) continue;
        const int r = chunk_stage(to, j.pp);
        for (int t = 0; t < j.tp; ++t) {
          cs.add("send", "pp", part * j.res_bytes, {j.rank(t, s, d), j.rank(t, r, d)}, j.m);
          cs.add("recv", "pp", part * j.res_bytes, {j.rank(t, r, d), j.rank(t, s, d)}, j.m);
        }
        if (scatter) cs.add("all_gather", "tp", message * j.res_bytes, j.group(Axis::kTp, 0, r, d), j.m);
      }
    }
  }
}

// --- data parallel ---

// The gradient buckets of ZeRO 0/1 are DataParallel's own (parallel/dp/grad_buckets.h).

// ZeRO-3's parameter buffers (Zero3Gather::acquire/release/gather/prefetch_after; the slot
// choice itself is the shared parallel/dp/param_slots.h),
// replayed: slot 0 holds the embedding group, slots 1.. the others, least recently used
// first; a gathered group stays valid until the optimizer step; a prefetch posts the next
// group's gather (forward: g + 1; backward: g - 1) unless it is valid or no slot is free.
class Zero3Replay {
 public:
  Zero3Replay(int L, int prefetch, const std::function<bool(int)>& has_group)
      : L_(L), prefetch_(prefetch), has_(has_group), slots_(static_cast<size_t>(zero3_param_slots(prefetch))),
        gathers_(static_cast<size_t>(L + 2), 0) {}

  const std::vector<int64_t>& gathers() const { return gathers_; }
  void begin_micro_batch() { backward_ = false; }
  void grads() { backward_ = true; }
  void set_backward(bool b) { backward_ = b; }
  void invalidate() {
    for (Slot& s : slots_) s.valid = false;
  }
  void acquire(int g) {
    int s = find(g);
    if (s < 0) s = gather(g);
    WEFT_CHECK(s >= 0, "ZeRO-3 replay: no free parameter buffer for group {}", g);
    Slot& p = slots_[static_cast<size_t>(s)];
    p.pending = false;
    ++p.refs;
    p.last_use = ++clock_;
    prefetch_after(g);
  }
  void release(int g) {
    const int s = find(g);
    WEFT_CHECK(s >= 0 && slots_[static_cast<size_t>(s)].refs > 0, "ZeRO-3 replay: release of group {}", g);
    --slots_[static_cast<size_t>(s)].refs;
  }

 private:
  struct Slot {
    int group = -1, refs = 0;
    bool valid = false, pending = false;
    uint64_t last_use = 0;
  };
  int find(int g) const { return find_gathered_slot(slots_, g); }
  int gather(int g) {
    const int slot = choose_gather_slot(slots_, g);
    if (slot < 0) return -1;
    Slot& p = slots_[static_cast<size_t>(slot)];
    p.group = g;
    p.valid = true;
    p.pending = true;
    p.last_use = ++clock_;
    ++gathers_[static_cast<size_t>(g)];
    return slot;
  }
  void prefetch_after(int g) {
    if (prefetch_ <= 0) return;
    int next = -1;
    if (!backward_) {
      next = g <= L_ ? g + 1 : -1;
    } else if (g >= 2 && g <= L_) {
      next = g - 1;
    } else if (g == L_ + 1) {
      next = L_;
    }
    if (next < 1 || next > L_ + 1 || !has_(next) || find(next) >= 0) return;
    gather(next);
  }

  int L_, prefetch_;
  std::function<bool(int)> has_;
  std::vector<Slot> slots_;
  std::vector<int64_t> gathers_;
  bool backward_ = false;
  uint64_t clock_ = 0;
};

// The parameter accesses of a whole-model chunk (ZeRO-3 does not combine with pipelining:
// layout rules), in the two orders the models make them. tied_head (ModelCapabilities: a head
// tied to the embedding, GPT::forward_blocks + the loss's extra hold of the embedding in
// GPT::forward_loss when `eval`, GPT::backward_part): the head's backward takes group 0 first.
// Otherwise (the head in the back group: ClimaX::forward + loss_sum's releases when `eval`,
// ClimaX::backward) the backward takes the back group before its first gradient and the front
// last.
void replay_forward(Zero3Replay& z, int L, bool eval, bool tied_head) {
  z.acquire(0);
  for (int l = 0; l < L; ++l) {
    z.acquire(l + 1);
    z.release(l + 1);
  }
  z.acquire(L + 1);
  if (!eval) return;
  if (!tied_head) {
    z.release(L + 1);
    z.release(0);
    return;
  }
  z.acquire(0);
  z.release(0);
  z.release(L + 1);
  z.release(0);
}

void replay_backward(Zero3Replay& z, int L, bool tied_head) {
  if (!tied_head) {
    z.acquire(L + 1);
    z.release(L + 1);
    z.grads();
    for (int l = L - 1; l >= 0; --l) {
      z.acquire(l + 1);
      z.release(l + 1);
    }
    z.acquire(0);
    z.release(0);
    z.release(L + 1);
    z.release(0);
    return;
  }
  z.acquire(0);
  z.release(0);
  z.grads();
  z.acquire(L + 1);
  z.release(L + 1);
  for (int l = L - 1; l >= 0; --l) {
    z.acquire(l + 1);
    z.release(l + 1);
  }
  z.release(L + 1);
  z.release(0);
}

// Gathers per group of the evaluation forwards that precede a step (since the last optimizer
// step: hpZ's secondary copies made there serve the step).
std::vector<int64_t> zero3_eval_gathers(int L, int prefetch, const CommStepContext& ctx, bool tied_head) {
  Zero3Replay z(L, prefetch, [](int) { return true; });
  z.set_backward(ctx.after_training);
  for (int64_t p = 0; p < ctx.eval_passes_before; ++p) replay_forward(z, L, true, tied_head);
  return z.gathers();
}

// Gathers per group in one step: `eval_passes` evaluation forwards first (with the prefetch
// direction the last training micro-batch left), then the step's micro-batches.
std::vector<int64_t> zero3_step_gathers(int L, int prefetch, int64_t micro_batches, const CommStepContext& ctx,
                                        bool tied_head) {
  Zero3Replay z(L, prefetch, [](int) { return true; });
  z.set_backward(ctx.after_training);
  for (int64_t p = 0; p < ctx.eval_passes_before; ++p) replay_forward(z, L, true, tied_head);
  std::vector<int64_t> before = z.gathers();
  for (int64_t mb = 0; mb < micro_batches; ++mb) {
    z.begin_micro_batch();
    replay_forward(z, L, false, tied_head);
    replay_backward(z, L, tied_head);
  }
  std::vector<int64_t> out = z.gathers();
  for (size_t g = 0; g < out.size(); ++g) out[g] -= before[g];
  return out;
}

// qgZ (parallel/dp/qgz.h): per group and micro-batch, one all-to-all per hop and hop group,
// of the bytes of every member's quantized blocks (the members of a hop group hold the same
// chunks, so each sends every peer the same number of bytes).
void add_qgz(CallSet& cs, const ZeroPPConfig& z, const ParamLayout& layout, const std::vector<int>& g, int64_t m,
             const std::string& group_axis) {
  const int P = static_cast<int>(g.size());
  const int64_t n = layout.total(), shard = (n + P - 1) / P;
  const size_t H = grad_hops(0, P, z.levels).size();
  for (int gr = 0; gr < layout.num_groups(); ++gr) {
    if (!layout.has_group(gr)) continue;
    const auto range = layout.group_range(gr);
    const int64_t b = range.first, e = range.second;  // captured below (clang < 16 captures no structured binding)
    auto len = [&](int q) {
      return std::max<int64_t>(0, std::clamp(std::min(n, (q + 1) * shard), b, e) - std::clamp(std::min(n, q * shard), b, e));
    };
    for (size_t k = 0; k < H; ++k) {
      const std::string axis = H == 1 ? group_axis : k < z.level_names.size() ? "dp-" + z.level_names[k] : "dp-net";
      std::map<int, std::vector<int>> members;  // colour -> dp ranks, in index order
      for (int r = 0; r < P; ++r) members[grad_hops(r, P, z.levels)[k].color].push_back(r);
      for (const auto& [color, dps] : members) {
        const int hn = static_cast<int>(dps.size());
        int64_t per_sender = 0;
        for (int mm = 0; mm < hn; ++mm) {
          int64_t E = 0;
          for (int q : chunks_to_member(dps[0], P, z.levels, static_cast<int>(k), mm)) E += len(q);
          per_sender += quant_wire_bytes(E, z.gradients);
        }
        std::vector<int> ranks;
        for (int r : dps) ranks.push_back(g[static_cast<size_t>(r)]);
        cs.add("all_to_all", axis, hn * per_sender, ranks, m);
      }
    }
  }
}

// One chunk's store over one dp group (DataParallel; under HSDP one dp_shard group, axis
// "dp-shard"; the replicas' all-reduces and the embedding's row exchange are add_replicate's
// and add_data_parallel's). ZeRO (Rajbhandari et al. 2020 sec. 5,
// 7): stage 0 all-reduces the gradients (2 Psi on the wire), 1 and 2 reduce-scatter them and
// all-gather the updated parameters (the same 2 Psi), 3 gathers the parameters for the
// forward and again for the backward and reduce-scatters the gradients (3 Psi, 1.5x).
// Departures: weft reduces ZeRO 0/1 gradients once per step (the last micro-batch; earlier
// ones accumulate locally), ZeRO 2/3 every micro-batch (their gradients live in transient
// buffers); ZeRO-3 gathers fewer than 2 per micro-batch (see zero3_gathers_per_micro_batch);
// with dp > 1 and no pipeline, the embedding's lookup gradient is exchanged as (token,
// gradient row) pairs, two all-gathers of dp x N int32 and dp x N x C floats, instead of
// reducing that part of the Vp x C table (DataParallel::embedding_backward).
void add_store(CallSet& cs, const Job& j, const ChunkInfo& ch, int t, const std::vector<int>& g,
               const CommStepContext& ctx) {
  const int zero = j.ec.layout.zero;
  const ParamLayout layout = param_layout(j.ec.model, j.tp, t, ch.spec);
  const int64_t n = layout.total();
  const std::string ax = j.shard_axis();
  if (zero <= 1) {
    for (const GradBucket& b : gradient_buckets(layout, j.ec.data_parallel.bucket_bytes)) {
      cs.add(zero == 0 ? "all_reduce" : "reduce_scatter", ax, (b.end - b.begin) * kF32, g, 1);
    }
  } else if (j.ec.data_parallel.zeropp.quantized_gradients) {
    add_qgz(cs, j.ec.data_parallel.zeropp, layout, g, j.m, ax);
  } else {
    for (int gr = 0; gr < layout.num_groups(); ++gr) {
      if (!layout.has_group(gr)) continue;
      auto [b, e] = layout.group_range(gr);
      cs.add("reduce_scatter", ax, (e - b) * kF32, g, j.m);
    }
  }
  // The working parameters are gathered in their storage dtype (16-bit in a bf16/fp16 run).
  const int64_t kP = static_cast<int64_t>(dtype_bytes(dtype_of(j.ec.precision), 1));
  if (zero == 3) {
    const bool tied = j.ec.model.tied_head();
    const std::vector<int64_t> gathers =
        zero3_step_gathers(j.ec.model.n_layer, j.ec.data_parallel.prefetch, j.m, ctx, tied);
    const std::vector<int64_t> eval_gathers =
        zero3_eval_gathers(j.ec.model.n_layer, j.ec.data_parallel.prefetch, ctx, tied);
    const ZeroPPConfig& z = j.ec.data_parallel.zeropp;
    const int64_t shard = (n + j.ds - 1) / j.ds;
    for (int gr = 0; gr < layout.num_groups(); ++gr) {
      auto [b, e] = layout.group_range(gr);
      int64_t primary = gathers[static_cast<size_t>(gr)], secondary = 0;
      if (z.hpz > 1 && primary > 0) {
        // hpZ: the first gather since the parameters changed reads the primary shards (an
        // evaluation before the step made it already), every later one the alpha group.
        const int64_t first = eval_gathers[static_cast<size_t>(gr)] > 0 ? 0 : 1;
        secondary = primary - first;
        primary = first;
        for (size_t a = 0; a < g.size(); a += static_cast<size_t>(z.hpz)) {
          const std::vector<int> ranks(g.begin() + static_cast<std::ptrdiff_t>(a),
                                       g.begin() + static_cast<std::ptrdiff_t>(a) + z.hpz);
          cs.add("all_gather", "dp-hpz", (e - b) * kP, ranks, secondary);
        }
      }
      if (!z.quantized_weights) {
        cs.add("all_gather", ax, (e - b) * kP, g, primary);
        continue;
      }
      // qwZ: every rank's piece of the group as quantized blocks (bytes).
      int64_t wire = 0;
      for (int q = 0; q < j.ds; ++q) {
        const int64_t cb = std::clamp(std::min(n, q * shard), b, e), ce = std::clamp(std::min(n, (q + 1) * shard), b, e);
        wire += quant_wire_bytes(ce - cb, z.weights);
      }
      cs.add("all_gather", ax, wire, g, primary);
    }
  }
  if (zero == 1 || zero == 2) cs.add("all_gather", ax, n * kP, g, 1);  // after_optimizer_step
  if (zero >= 1) cs.add("all_reduce", ax, kF64, g, 1);                    // gradient norm of the shard
}

// HSDP: the all-reduces over each dp_replicate group (DataParallel::post_replicate), in the
// step's last micro-batch, of what the dp_shard group reduced: zero 0 each bucket; zero 1 the
// shard index's part of each bucket; zero 2/3 (qgZ too) its part of each group. A part of no
// elements is not reduced. The ranks of one replicate group share the shard index, so each
// group has its own sizes.
void add_replicate(CallSet& cs, const Job& j, const ChunkInfo& ch, int t) {
  if (j.dr <= 1) return;
  const int zero = j.ec.layout.zero;
  const ParamLayout layout = param_layout(j.ec.model, j.tp, t, ch.spec);
  const int64_t n = layout.total(), shard = (n + j.ds - 1) / j.ds;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (zero <= 1) {
    for (const GradBucket& b : gradient_buckets(layout, j.ec.data_parallel.bucket_bytes)) {
      ranges.emplace_back(b.begin, b.end);
    }
  } else {
    for (int gr = 0; gr < layout.num_groups(); ++gr) {
      if (layout.has_group(gr)) ranges.push_back(layout.group_range(gr));
    }
  }
  for (int i = 0; i < j.ds; ++i) {
    const std::vector<int> g = j.replicate_group(t, ch.stage, i);
    const int64_t ob = std::min(n, i * shard), oe = std::min(n, (i + 1) * shard);
    for (const auto& [b, e] : ranges) {
      const int64_t count = zero == 0 ? e - b : std::max<int64_t>(0, std::min(e, oe) - std::max(b, ob));
      if (count > 0) cs.add("all_reduce", "dp-replicate", count * kF32, g, 1);
    }
  }
}

void add_data_parallel(CallSet& cs, const Job& j, const CommStepContext& ctx) {
  for (const ChunkInfo& ch : j.chunks) {
    const bool tied = j.pp > 1 && (ch.spec.embedding || ch.spec.head);
    for (int t = 0; t < j.tp; ++t) {
      for (int q = 0; q < j.dr; ++q) add_store(cs, j, ch, t, j.shard_group(t, ch.stage, q), ctx);
      add_replicate(cs, j, ch, t);
      // The embedding's (token, row) exchange, zero 0/1: every dp rank's rows, over the whole
      // dp group (HSDP too).
      // A family whose embedding gradients are not sparse rows (ClimaX) reduces them whole.
      if (j.ec.layout.zero <= 1 && j.dp > 1 && !tied && ch.spec.embedding &&
          j.ec.model.capabilities().sparse_embedding_grads) {
        const std::vector<int> g = j.group(Axis::kDp, t, ch.stage, 0);
        cs.add("all_gather", "dp", j.dp * j.N * kI32, g, 1);
        // The rows as stored, or widened to fp32 for a [compression] dp codec.
        const int64_t rb = j.ec.layout.compression.dp.off() ? j.res_bytes : kF32;
        cs.add("all_gather", "dp", j.dp * j.N * j.C * rb, g, 1);
      }
    }
  }
}

// The tied embedding (Press & Wolf 2017; Megatron-LM's embedding group): with pp > 1 the first
// and the last stage both hold wte, and its gradient is summed between them once per step
// (DataParallel::finish_step_gradients), the whole embedding group (Vp/tp x C + n_ctx x C:
// weft ties wpe along, Megatron-LM reduces wte only), before its dp reduction.
void add_tied_embedding(CallSet& cs, const Job& j) {
  if (j.pp <= 1 || !j.ec.model.tied_head()) return;  // an untied head shares nothing between stages
  const ParamLayout first = param_layout(j.ec.model, j.tp, 0, j.chunks.front().spec);
  auto [b, e] = first.group_range(0);
  for (int t = 0; t < j.tp; ++t) {
    for (int d = 0; d < j.dp; ++d) {
      cs.add("all_reduce", "pp-embedding", (e - b) * kF32, {j.rank(t, 0, d), j.rank(t, j.pp - 1, d)}, 1);
    }
  }
}

// The step's scalars (Engine::step, Engine::grad_norm_sq): the squared gradient norm summed
// over tp (tp > 1) and pp (pp > 1), the loss over pp and dp (each > 1), one f64 each (over dp
// with each dp rank's busy time: 1 + dp f64, StepResult::imbalance), and for samples of varying
// weight the loss terms' counts over dp. fp16's
// overflow check needs no call of its own: the norm is non-finite when a gradient is.
void add_scalars(CallSet& cs, const Job& j) {
  // A family whose samples differ in weight (data/batch.h: no fixed_weight) has the step's
  // per-term counts summed over dp first (Engine::global_weight): one f64 a loss term.
  const std::unique_ptr<HostBatch> kind = j.ec.model.family->make_batch(j.ec.model, 1, j.ec.seq);
  const int64_t terms = kind->fixed_weight() > 0 ? 0 : static_cast<int64_t>(kind->term_weights().size());
  for (int s = 0; s < j.pp; ++s) {
    for (int d = 0; d < j.dp; ++d) {
      if (j.tp > 1) cs.add("all_reduce", "tp", kF64, j.group(Axis::kTp, 0, s, d), 1);
    }
  }
  for (int t = 0; t < j.tp; ++t) {
    for (int d = 0; d < j.dp; ++d) {
      if (j.pp > 1) cs.add("all_reduce", "pp", kF64, j.group(Axis::kPp, t, 0, d), 2);
    }
    for (int s = 0; s < j.pp; ++s) {
      if (j.dp > 1 && terms > 0) cs.add("all_reduce", "dp", kF64 * terms, j.group(Axis::kDp, t, s, 0), 1);
      if (j.dp > 1) cs.add("all_reduce", "dp", kF64 * (1 + j.dp), j.group(Axis::kDp, t, s, 0), 1);
    }
  }
}

}  // namespace

std::vector<CommCall> model_step_comm(const EngineConfig& ec, const CommStepContext& ctx) {
  const Job j(ec);
  CallSet cs;
  add_tensor_parallel(cs, j);
  add_pipeline(cs, j);
  add_data_parallel(cs, j, ctx);
  add_tied_embedding(cs, j);
  add_scalars(cs, j);
  return cs.list();
}

DpStepComm dp_step_comm(int zero, int groups, int prefetch, bool tied_head) {
  DpStepComm c;
  switch (zero) {
    case 0: c.all_reduce = 1; break;
    case 1: c.reduce_scatter = 1, c.all_gather = 1; break;
    case 2:
      c.reduce_scatter = 1, c.all_gather = 1;
      c.reduce_scatter_per_micro_batch = true;
      break;
    default:
      c.reduce_scatter_per_micro_batch = c.all_gather_per_micro_batch = true;
      c.reduce_scatter = 1;
      c.all_gather = zero3_gathers_per_micro_batch(groups - 2, prefetch, tied_head);
  }
  return c;
}

ZeroPPStepComm zeropp_step_comm(int groups, int prefetch, int64_t micro_batches, int64_t dp, const ZeroPPKnobs& k,
                                bool tied_head) {
  if (k.hpz < 1 || dp % k.hpz != 0) throw_input("hpz {} does not divide dp {}", k.hpz, dp);
  ZeroPPStepComm c;
  // Per micro-batch weft gathers each group (slightly under) twice: the forward, and the
  // backward what its buffers no longer hold (zero3_gathers_per_micro_batch).
  const double per_mb = zero3_gathers_per_micro_batch(groups - 2, prefetch, tied_head);
  const double all = static_cast<double>(micro_batches) * per_mb;
  c.quantized = k.qwz;
  c.hpz = k.hpz;
  if (k.hpz > 1) {
    // hpZ (Wang et al. 2023 sec. 3.2; DeepSpeed's _partition_param_sec): the forward gather
    // leaves each rank 1/alpha of the weights; every later gather of the step (backward,
    // recompute, the next micro-batches, until the optimizer step drops the copy) reads that
    // secondary copy inside the alpha group.
    c.primary_gathers = 1;
    c.secondary_gathers = all - 1;
  } else {
    c.primary_gathers = all;
  }
  if (!k.qgz) {
    c.reduce_scatter = 1;
    return c;
  }
  // qgZ (ibid. sec. 3.3; DeepSpeed's all_to_all_quant_reduce): one all-to-all per level,
  // innermost first; after hop i each rank holds 1/(peers of hops 1..i) of the gradient,
  // summed over the ranks of those hops, and sends that on.
  int64_t inner = 1;
  double left = 1.0;
  std::vector<int64_t> sizes(k.hierarchy.begin(), k.hierarchy.end());
  sizes.push_back(dp);
  for (int64_t size : sizes) {
    if (size <= inner || size % inner != 0 || dp % size != 0) {
      throw_input("qgz hierarchy [{}] over dp {}: each level must be larger than the one inside it, a multiple of it "
                  "and divide dp (at {})", fmt::join(k.hierarchy, ","), dp, size);
    }
    GradientHop h;
    h.peers = size / inner;
    h.stride = inner;
    h.elements = left;
    c.gradient_hops.push_back(h);
    left /= static_cast<double>(h.peers);
    inner = size;
  }
  return c;
}

double zero3_gathers_per_micro_batch(int n_layer, int prefetch, bool tied_head) {
  const std::vector<int64_t> one = zero3_step_gathers(n_layer, prefetch, 1, {}, tied_head);
  const std::vector<int64_t> two = zero3_step_gathers(n_layer, prefetch, 2, {}, tied_head);
  int64_t layers = 0;  // the second micro-batch's layer gathers
  for (int g = 1; g <= n_layer; ++g) layers += two[static_cast<size_t>(g)] - one[static_cast<size_t>(g)];
  return static_cast<double>(layers) / static_cast<double>(n_layer);
}

CommTotals comm_totals(const std::vector<CommCall>& calls) {
  CommTotals t;
  for (const CommCall& c : calls) {
    auto& [count, bytes] = t[{c.op, c.axis, c.bytes}];
    count += c.count;
    bytes += c.count * c.bytes;
  }
  return t;
}

}  // namespace weft
