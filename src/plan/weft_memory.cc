#include "plan/weft_memory.h"

#include <algorithm>
#include <vector>

#include "comm/codec_spec.h"
#include "model/family.h"
#include "model/params.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/pp/partition.h"
#include "parallel/pp/schedule.h"

namespace weft::plan {

namespace {

// Elements one rank holds, by category (4 bytes each: weft's CPU buffers are fp32).
struct Elems {
  double params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, comm = 0;
  // The largest comm buffers one call holds while it runs (calls that never overlap: the
  // embedding's row exchange, a compressed tensor-parallel collective); added to comm once.
  double transient = 0;
};

// The family's description (model/description.h) of local chunk c of pipeline stage `stage`:
// the chunk's layers from the trainer's partition, the embedding on global chunk 0, the head on
// the last.
StageSpec chunk_part(const WeftRunShape& r, const std::vector<StageRange>& parts, int stage, int c) {
  const Layout& l = r.layout;
  const int p = l.pp, K = p * (p > 1 ? l.virtual_stages : 1);
  const int g = p > 1 ? global_chunk(stage, c, p) : 0;
  const StageRange part = p > 1 ? parts[static_cast<size_t>(g)] : StageRange{0, r.model.n_layer, true, true};
  return StageSpec{part.first_layer, part.num_layers, g == 0, g == K - 1};
}

// A compressed communicator's wire of n floats under codec c, in fp32 elements (bytes / 4).
double wire_elems(const CodecSpec& c, int64_t n) { return static_cast<double>(codec_wire_bytes(c, n)) / 4.0; }

// A chunk's parameters, gradients and optimizer states under ZeRO (Rajbhandari et al. 2020,
// sec. 5.1): contiguous shards of ceil(n / dp_shard) elements (HSDP: the dp_shard group; all
// of dp without replicas), this rank's by its index in the group (dp rank % dp_shard);
// ZeRO-2/3's gradient group slots and receive buffers, ZeRO-3's gathered groups
// (parallel/dp/data_parallel.h).
void add_states(Elems& e, const WeftRunShape& r, const StoreGroups& sp, const StageSpec& part, int dp_rank) {
  const Layout& l = r.layout;
  const int64_t dp = l.dp;  // the embedding's row exchange gathers every dp rank's rows
  const int64_t ds = l.dp_shard(), shard_rank = dp_rank % ds;
  const int64_t n = sp.n;
  const int64_t shard = (n + ds - 1) / ds;
  const int64_t own = std::min(n, (shard_rank + 1) * shard) - std::min(n, shard_rank * shard);
  const int64_t g0 = sp.g0;
  const int64_t max_other = sp.max_other;
  const int64_t grad_slots = g0 + DataParallel::kGradSlots * max_other;
  const int64_t recv_slots =
      std::max<int64_t>(1, std::min(g0, shard)) + DataParallel::kGradSlots * std::max<int64_t>(1, std::min(max_other, shard));
  // The working parameters (whole, shard, gather slots, hpZ's copies) in their storage dtype:
  // 16-bit in a bf16/fp16 run (fp32 elements: half as many).
  const DType pdt = dtype_of(r.precision);
  const double pw = static_cast<double>(dtype_bytes(pdt, 1)) / 4.0;
  switch (l.zero) {
    case 0:
      e.params += pw * n, e.grads += n, e.optimizer += 2 * n;
      break;
    case 1:
      e.params += pw * n, e.grads += n, e.comm += own, e.optimizer += 2 * own;
      break;
    case 2:
      e.params += pw * n, e.grads += own + grad_slots, e.comm += recv_slots, e.optimizer += 2 * own;
      break;
    default:
      e.params += pw * static_cast<double>(own + g0 + (DataParallel::param_slots(r.prefetch) - 1) * max_other);
      e.grads += own + grad_slots, e.comm += recv_slots, e.optimizer += 2 * own;
      break;
  }
  if (r.master_weights) e.optimizer += l.zero == 0 ? n : own;
  // Coded parameter all-gathers ([compression] params of an fp32 run; 16-bit parameters are
  // gathered as stored): the compressed communicator's send and receive wires while a gather is
  // in flight: ZeRO-1/2's gather of the chunk after the step, ZeRO-3's of a group (group 0 and
  // the prefetched others).
  if (l.zero >= 1 && dp > 1 && !l.compression.params.off()) {
    const auto gather = [&](int64_t g) {
      return wire_elems(l.compression.params, (g + ds - 1) / ds) + wire_elems(l.compression.params, g);
    };
    e.comm += l.zero <= 2 ? gather(n) : gather(g0) + (DataParallel::param_slots(r.prefetch) - 1) * gather(max_other);
  }
  if (l.zero == 3 && r.zeropp.active()) {  // the store's exact ZeRO++ buffers
    const ParamLayout layout = param_layout(r.model, l.tp, 0, part);
    std::vector<std::pair<int64_t, int64_t>> groups;
    for (int g = 0; g < layout.num_groups(); ++g) {
      if (layout.has_group(g)) groups.push_back(layout.group_range(g));
    }
    const ZeroPPBuffers zb =
        zeropp_buffers(r.zeropp, groups, layout.total(), static_cast<int>(shard_rank), static_cast<int>(ds),
                       DataParallel::param_slots(r.prefetch), true, pdt);
    e.params += pw * static_cast<double>(zb.hpz_elems);
    e.comm += static_cast<double>(zb.comm_bytes()) / 4.0;
    e.grads += static_cast<double>(zb.residual_elems);
  }
  // [compression]'s error feedback: one fp32 residual per element of the chunk's flat buffer
  // (DataParallel::set_traffic).
  if (dp > 1 && l.compression.error_feedback && !l.compression.dp.off()) e.grads += n;
  // The embedding gradient's (token, row) exchange: every rank's rows and their int32 tokens,
  // gathered (transient; 4 bytes per token like a float).
  // The rows are in the residual stream's storage (16-bit in a GPT 16-bit run), widened to fp32
  // first (one more rank's rows) for a [compression] dp codec (DataParallel::embedding_backward).
  if (dp > 1 && l.zero <= 1 && sp.exchange_tokens > 0) {
    const DType rd = residual_stream_dtype(r.model.capabilities(), r.precision);
    const bool widen = rd != DType::kF32 && !l.compression.dp.off();
    const double row = widen ? 1.0 : static_cast<double>(dtype_bytes(rd, 1)) / 4.0;  // fp32 elements a value
    const double C = static_cast<double>(r.model.n_embd), n = static_cast<double>(sp.exchange_tokens);
    e.transient = std::max(e.transient, n * (C * row + 1) * dp + (widen ? n * C : 0.0));
  }
}

// The comm buffers (fp32 elements) of the largest compressed tensor-parallel collective of one
// micro-batch (CompressedComm's, comm/compressed_comm.cc), all held until the call returns. Its
// sums and gathers all move N C values (tokens x hidden), `e` bytes an element as stored (a
// 16-bit payload adds its fp32 copies): an all-reduce is a reduce-scatter into this rank's
// chunk (its wires out and in, its own block) and an all-gather of the chunks (its wires);
// sequence parallelism's reduce-scatter and all-gather move N C / tp a rank. Exact for the
// fixed-size codecs; zstd's receive wires are counted at their most (an upper bound).
double tp_codec_elems(const CodecSpec& c, int64_t NC, int P, bool sp, int64_t e) {
  const auto wire = [&c](int64_t n) { return static_cast<double>(codec_wire_bytes(c, std::max<int64_t>(n, 0))); };
  const auto at_least_1 = [](double bytes) { return std::max(bytes, 1.0); };  // DeviceBuffer(max(n, 1))
  const double wide = e < 4 ? 4.0 : 0.0;  // bytes an element of a 16-bit payload's fp32 copy
  double bytes = 0;
  if (!sp) {
    const int64_t mine = (NC + P - 1) / P;  // rank 0's chunk (the first NC % P one element more)
    const double rs = at_least_1((P - 1) * wire(mine)) + 4.0 * std::max<int64_t>(mine, 1) +
                      at_least_1((P - 1) * wire(mine));                      // wires out, own block, wires in
    const double ag = at_least_1(wire(mine)) + at_least_1(P * wire(mine));  // the chunks' wires out and in
    bytes = wide * static_cast<double>(NC) + 4.0 * static_cast<double>(mine) + rs + ag;
  } else {
    const int64_t n = NC / P;
    const double rs = wide * static_cast<double>(NC + n) + 2 * at_least_1((P - 1) * wire(n)) + 4.0 * static_cast<double>(n);
    const double ag = wide * static_cast<double>(n + NC) + at_least_1(wire(n)) + at_least_1(P * wire(n));
    bytes = std::max(rs, ag);
  }
  return bytes / 4.0;
}

// One rank of any family: each local chunk's store over its groups, its stash once per
// micro-batch in flight (one without pipeline stages), its workspace; the pipeline's buffers.
Elems rank_elems(const WeftRunShape& r, int stage, int dp_rank) {
  const ModelConfig& mc = r.model;
  const Layout& l = r.layout;
  const int p = l.pp, v = p > 1 ? l.virtual_stages : 1, t = l.tp;
  const std::vector<StageRange> parts = partition_layers(mc.n_layer, p, v, {}, pipeline_head_cost(mc));
  const std::vector<PipeAction> actions =
      p > 1 ? stage_schedule(l.schedule, p, stage, static_cast<int>(r.micro_batches), v) : std::vector<PipeAction>{};

  Elems e;  // fp32 elements (bytes / 4)
  int64_t message = 0;  // one micro-batch's residual stream rows on this rank (Nl C)
  DType message_dtype = DType::kF32;  // their storage (sent as stored)
  int64_t staging = 0;  // bytes
  for (int c = 0; c < v; ++c) {
    const StageSpec part = chunk_part(r, parts, stage, c);
    RunSpec spec = part_spec(mc, r.seq, l, part, r.head_chunk, r.precision);
    spec.native_products = r.native_products;
    const std::unique_ptr<ModelDescription> d = mc.family->describe(spec);
    add_states(e, r, d->store_groups(), part, dp_rank);
    if (t > 1 && !l.compression.tp.off()) {
      const DType sum = residual_stream_dtype(mc.capabilities(), r.precision);
      e.transient = std::max(e.transient, tp_codec_elems(l.compression.tp, d->tokens() * mc.n_embd, t,
                                                         l.sequence_parallel, static_cast<int64_t>(dtype_bytes(sum, 1))));
    }
    // Stashed activations: one set per micro-batch in flight on this chunk (the schedule's
    // own count); the workspace of each chunk's model.
    const int in_flight = p > 1 ? std::max(1, max_in_flight(actions, c)) : 1;
    e.activations += static_cast<double>(in_flight) * static_cast<double>(d->stash_bytes()) / 4;
    e.workspace += static_cast<double>(d->workspace_bytes()) / 4;
    staging = std::max(staging, d->staging_bytes());
    message = d->residual_elems();
    message_dtype = d->residual_dtype();
  }
  e.workspace += static_cast<double>(staging) / 4;  // the backend's one staging arena
  // Pipeline: the receive buffers (kPipeRecvAhead posted ahead + the one in use), and (at
  // least) one send buffer (1/t of the activations with the scatter-gather of tp > 1 without sp).
  const bool sp = l.sequence_parallel && t > 1;
  if (p > 1) {
    const int64_t send = t > 1 && !sp ? message / t : message;
    const double eb = static_cast<double>(dtype_bytes(message_dtype, 1)) / 4.0;  // fp32 elements an element
    e.comm += eb * ((kPipeRecvAhead + 1.0) * static_cast<double>(message) + static_cast<double>(send));
    // A coded pipeline ([compression] pp, or a 16-bit run's storage wires): the compressed
    // communicator holds each transfer's wire beside its buffer (comm/compressed_comm.cc).
    if (!l.compression.pp.off()) {
      e.comm += (kPipeRecvAhead + 1.0) * wire_elems(l.compression.pp, message) + wire_elems(l.compression.pp, send);
      // 16-bit messages: the codec reads and writes fp32, so each transfer holds an fp32 copy too.
      if (message_dtype != DType::kF32) e.comm += (kPipeRecvAhead + 1.0) * static_cast<double>(message) + send;
    }
  }
  e.comm += e.transient;
  return e;
}

}  // namespace

MemoryBreakdown weft_rank_memory(const WeftRunShape& r, int stage, int dp_rank) {
  const Elems e = rank_elems(r, stage, dp_rank);
  MemoryBreakdown m;
  m.stage = stage;
  m.params = 4 * e.params;
  m.grads = 4 * e.grads;
  m.optimizer = 4 * e.optimizer;
  m.activations = 4 * e.activations;
  m.workspace = 4 * e.workspace;
  m.comm = 4 * e.comm;
  m.sum();
  return m;
}

}  // namespace weft::plan
