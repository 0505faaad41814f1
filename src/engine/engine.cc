#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "comm/compressed_comm.h"
#include "comm/device_comm_registry.h"
#include "core/error.h"
#include "engine/engine_chunk.h"
#include "model/family.h"
#include "parallel/pp/partition.h"
#include "parallel/tp/tp_comm.h"

namespace weft {

// A chunk as the pipeline runtime drives it: reads the micro-batch's rows before each action
// and opens the store's gradient reduction before each backward.
class Engine::PipeAdapter final : public PipeChunk {
 public:
  PipeAdapter(Engine& e, Chunk& ch, const BatchFn& batch, float loss_scale)
      : e_(e), ch_(ch), batch_(batch), loss_scale_(loss_scale) {}
  void prepare(const PipeAction& a, bool last) override {
    const int64_t B = e_.cfg_.layout.micro_batch;
    e_.fill_batch(batch_, e_.dp_rank_ * e_.per_rank_ + a.micro_batch * B, B);
    if (a.kind == PipeAction::kBackward) ch_.store->begin_micro_batch(last);
  }
  void forward(int slot, int, CView x) override {
    ch_.model->stage_forward(slot, *e_.batch_, x, true);
  }
  double backward(int slot, int, CView dy, bool) override {
    return ch_.model->stage_backward(slot, *e_.batch_, dy, loss_scale_);
  }
  CView output(int slot) override { return ch_.model->stage_output(slot); }
  CView input_grad() override { return ch_.model->stage_input_grad(); }

 private:
  Engine& e_;
  Chunk& ch_;
  const BatchFn& batch_;
  float loss_scale_;
};

Engine::Engine(const EngineConfig& cfg, Communicator& world, Backend& backend)
    : cfg_(cfg), world_(world), backend_(backend), scaler_(cfg.precision, cfg.loss_scale) {
  backend_.set_products({cfg.precision, cfg.matmul, cfg.fp32_kernel});
  const GridSpec spec = cfg.layout.grid();
  grid_ = std::make_unique<ProcessGrid>(world, spec);
  // Every rank creates its device communicators in the same order (tp, pp, dp, tied): with
  // NCCL each creation is collective over its group.
  tp_device_ = make_device_comm(cfg.comm, grid_->comm(Axis::kTp), backend);
  pp_device_ = make_device_comm(cfg.comm, grid_->comm(Axis::kPp), backend);
  dp_device_ = make_device_comm(cfg.comm, grid_->comm(Axis::kDp), backend);
  build_compression();
  tp_ops_ = tp_traffic_ ? std::make_unique<CommTensorParallel>(*tp_traffic_, *tp_device_)
                        : std::make_unique<CommTensorParallel>(*tp_device_);
  stage_ = grid_->coord(Axis::kPp);
  tp_rank_ = grid_->coord(Axis::kTp);
  dp_rank_ = grid_->coord(Axis::kDp);
  per_rank_ = cfg.global_batch / spec.dp;
  accum_ = per_rank_ / cfg.layout.micro_batch;
  // The first and the last stage share a tied embedding: one group per (tp, dp) position (an
  // untied head lives in the last stage's back group: nothing shared).
  const bool holds_embedding = cfg.model.tied_head() && spec.pp > 1 && (stage_ == 0 || stage_ == spec.pp - 1);
  tied_ = world.split(holds_embedding ? 1 + tp_rank_ + spec.tp * dp_rank_ : 0, stage_, "pp-embedding");
  // The other ranks' group (color 0) never carries device buffers: no communicator for it.
  if (holds_embedding) tied_device_ = make_device_comm(cfg.comm, *tied_, backend);
  whole_ = std::make_unique<ParamLayout>(param_layout(cfg.model));
  if (spec.pp > 1) {
    PipeRuntimeConfig rc;
    rc.schedule = cfg.layout.schedule;
    rc.stages = spec.pp;
    rc.stage = stage_;
    rc.virtual_stages = cfg.layout.virtual_stages;
    rc.micro_batches = static_cast<int>(accum_);
    rc.message = pipe_message(cfg.layout.micro_batch);
    // With sequence parallelism a rank's rows are its slice already.
    rc.scatter_gather = spec.tp > 1 && !cfg.layout.sp();
    // NCCL matches point-to-point in posting order: the interleaved schedule then exchanges
    // once per (forward, backward) pair (parallel/pp/runtime.h), else it would deadlock.
    rc.posting_order_p2p = device_comm_info(cfg.comm, backend.name()).posting_order_p2p;
    // The messages are the residual stream as stored: 16-bit in a 16-bit run of a family that
    // keeps it so (ModelCapabilities::residual_stream_16), else fp32.
    rc.message_dtype = residual_stream_dtype(cfg.model.capabilities(), cfg.precision);
    runtime_ = std::make_unique<PipelineRuntime>(pp_traffic_ ? *pp_traffic_ : static_cast<Communicator&>(*pp_device_),
                                                 tp_traffic_ ? *tp_traffic_ : static_cast<Communicator&>(*tp_device_),
                                                 backend_, rc);
  }
  // One micro-batch of host payload, of the family's kind.
  batch_ = cfg.model.family->make_batch(cfg.model, cfg.layout.micro_batch, cfg.seq);
  build_chunks();
}

Engine::~Engine() = default;

int64_t Engine::pipe_message(int64_t rows) const {
  const Layout& l = cfg_.layout;
  const int64_t positions = rows * cfg_.seq;
  return (l.sp() ? positions / l.tp : positions) * cfg_.model.n_embd;
}

void Engine::build_compression() {
  const CompressionPolicy& c = cfg_.layout.compression;
  auto wrap = [&](const CodecSpec& spec, DeviceComm& inner, const char* key) -> std::unique_ptr<CompressedComm> {
    if (spec.off() || inner.size() == 1) return nullptr;
    return std::make_unique<CompressedComm>(inner, make_codec(spec, backend_, key));
  };
  tp_traffic_ = wrap(c.tp, *tp_device_, "compression.tp");
  pp_traffic_ = wrap(c.pp, *pp_device_, "compression.pp");
  dp_grad_traffic_ = wrap(c.dp, *dp_device_, "compression.dp");
  dp_param_traffic_ = wrap(c.params, *dp_device_, "compression.params");
}

void Engine::build_chunks() {
  const Layout& l = cfg_.layout;
  const int vchunks = l.chunks();
  // Balanced by cost: the output head counts as Vp / (12 C) layers on the last chunk.
  const double head_cost = pipeline_head_cost(cfg_.model);
  const std::vector<StageRange> parts = partition_layers(cfg_.model.n_layer, l.pp, vchunks, {}, head_cost);
  const int K = l.pp * vchunks;
  for (int c = 0; c < vchunks; ++c) {
    auto ch = std::make_unique<Chunk>();
    const int g = global_chunk(stage_, c, l.pp);
    ch->global = g;
    ch->spec = {parts[g].first_layer, parts[g].num_layers, g == 0, g == K - 1};
    ch->model = make_model(cfg_.model, backend_, /*local_store=*/false, l.tp, tp_rank_, ch->spec);
    ch->model->set_tp(tp_ops_.get(), cfg_.layout.sequence_parallel);
    // Inference: no gradient buffers; HSDP: the store splits dp into dp_shard x dp_replicate.
    ch->store = std::make_unique<DataParallel>(ch->model->layout(), *dp_device_, cfg_.store_config(), backend_);
    ch->store->set_traffic(dp_grad_traffic_.get(), dp_param_traffic_.get(), cfg_.layout.compression.error_feedback);
    ch->model->set_store(ch->store.get());
    if (l.pp > 1 && cfg_.model.tied_head() && (ch->spec.embedding || ch->spec.head)) {
      ch->store->set_tied_embedding(tied_device_.get());
    }
    ch->model->set_recompute(cfg_.layout.recompute, cfg_.layout.recompute_layers);
    ch->model->set_precision(cfg_.precision);
    reserve_training(*ch, c);
    if (cfg_.training) {
      ch->optim = std::make_unique<AdamW>(ch->model->layout(), cfg_.adamw, backend_, ch->store->opt_begin(),
                                          ch->store->opt_end());
    }
    set_norm_skip(*ch);
    chunks_.push_back(std::move(ch));
  }
}

// Replicated tensors have identical gradients on every tp rank, and the tied embedding is on
// the first and the last chunk: count each once in the gradient norm. Running statistics'
// slots hold no gradient: not counted.
void Engine::set_norm_skip(Chunk& ch) {
  std::vector<std::pair<int64_t, int64_t>> skip;
  for (const ParamTensor& t : ch.model->layout().tensors()) {
    if (t.statistic_momentum > 0.0f) {  // running statistics: not gradients
      skip.emplace_back(t.offset, t.offset + t.numel);
    } else if (cfg_.layout.tp > 1 && tp_rank_ != 0 && t.split == TpSplit::kReplicated) {
      skip.emplace_back(t.offset, t.offset + t.numel);
    } else if (ch.global != 0 && t.group == 0) {  // the front group held again with a tied head
      skip.emplace_back(t.offset, t.offset + t.numel);
    }
  }
  // Columns replicated over tp ranks (grouped-query attention's kv heads with fewer heads than
  // ranks) hold the same summed gradient on each replica: counted on the first.
  for (const auto& r : ch.model->layout().replica_copies()) skip.push_back(r);
  ch.store->set_norm_skip(std::move(skip));
}

std::string Engine::describe_chunks() const {
  std::string parts;
  for (const auto& ch : chunks_) {
    parts += fmt::format("{}layers {}-{}{}{}", parts.empty() ? "" : ", ", ch->spec.first_layer,
                         ch->spec.first_layer + ch->spec.num_layers - 1, ch->spec.embedding ? " + embedding" : "",
                         ch->spec.head ? " + head" : "");
  }
  return parts;
}

int64_t Engine::num_params() const {
  int64_t n = 0;
  for (const auto& ch : chunks_) n += ch->n();
  return n;
}

int64_t Engine::num_unpadded() const {
  int64_t n = 0;
  for (const auto& ch : chunks_) n += ch->model->layout().count_unpadded();
  return n;
}

DataParallelMemory Engine::store_memory() const {
  DataParallelMemory dm;
  for (const auto& ch : chunks_) {
    const DataParallelMemory d = ch->store->memory();
    dm.params += d.params;
    dm.grads += d.grads;
    dm.comm += d.comm;
    dm.params_transient += d.params_transient;
    dm.grads_transient += d.grads_transient;
    dm.hpz += d.hpz;
    dm.residual += d.residual;
  }
  return dm;
}

void Engine::restore_counters(int64_t optimizer_steps, double loss_scale, int64_t good_steps) {
  opt_steps_ = optimizer_steps;
  scaler_.restore(loss_scale, good_steps);
}

// This rank's micro-batches of the step, through the pipeline or one after another; returns
// this rank's position-loss sum.
double Engine::run_micro_batches(const BatchFn& batch, float loss_scale, PipeStepStats& pipe) {
  if (runtime_) {
    std::vector<std::unique_ptr<PipeAdapter>> adapters;
    std::vector<PipeChunk*> view;
    for (auto& ch : chunks_) {
      adapters.push_back(std::make_unique<PipeAdapter>(*this, *ch, batch, loss_scale));
      view.push_back(adapters.back().get());
    }
    pipe = runtime_->run_step(view);
    return pipe.loss_sum;
  }
  double loss_sum = 0.0;
  const int64_t B = cfg_.layout.micro_batch;
  Model& model = *chunks_[0]->model;
  DataParallel& store = *chunks_[0]->store;
  for (int64_t m = 0; m < accum_; ++m) {
    store.begin_micro_batch(m == accum_ - 1);
    fill_batch(batch, dp_rank_ * per_rank_ + m * B, B);
    loss_sum += model.train_micro_batch(*batch_, loss_scale);
  }
  return loss_sum;
}

// Squared norm of the (scaled) gradients of the whole model, on every rank.
double Engine::grad_norm_sq() {
  double norm_sq = 0.0;
  for (auto& ch : chunks_) {
    ch->store->finish_step_gradients();
    norm_sq += ch->store->grad_norm_sq();
  }
  if (cfg_.layout.tp > 1) comm(Axis::kTp).all_reduce_sum(&norm_sq, 1);
  if (cfg_.layout.pp > 1) comm(Axis::kPp).all_reduce_sum(&norm_sq, 1);
  return norm_sq;
}

void Engine::fill_batch(const BatchFn& batch, int64_t first, int64_t count) {
  batch_->clear();
  batch(first, count, *batch_);
  WEFT_CHECK(batch_->samples() == count || batch_->variable_samples(), "the data source gave {} samples for rows [{}, {})",
             batch_->samples(), first, first + count);
}

int64_t Engine::global_weight(const BatchFn& batch) {
  const int64_t fixed = batch_->fixed_weight();
  if (fixed > 0) return cfg_.global_batch * fixed;
  // Samples of varying weight: this rank's micro-batches are read once more before the step
  // (every stage reads them alike), and the integer sums add exactly over dp. A loss of several
  // terms: each term's count likewise, the totals to the models.
  std::vector<double> w;
  for (int64_t m = 0; m < accum_; ++m) {
    fill_batch(batch, dp_rank_ * per_rank_ + m * cfg_.layout.micro_batch, cfg_.layout.micro_batch);
    const std::vector<int64_t> t = batch_->term_weights();
    w.resize(std::max(w.size(), t.size()), 0.0);
    for (size_t i = 0; i < t.size(); ++i) w[i] += static_cast<double>(t[i]);
  }
  if (w.empty()) w.push_back(0.0);
  if (cfg_.layout.dp > 1) comm(Axis::kDp).all_reduce_sum(w.data(), static_cast<int64_t>(w.size()));
  if (w[0] <= 0.0) throw_input("the global batch of {} samples holds no positions to average the loss over", cfg_.global_batch);
  const int64_t W = static_cast<int64_t>(w[0]);
  give_term_totals(std::move(w), "the global batch");
  return W;
}

void Engine::give_term_totals(std::vector<double> totals, const char* what) {
  if (totals.size() <= 1) return;
  std::vector<int64_t> t;
  for (size_t i = 0; i < totals.size(); ++i) {
    if (totals[i] <= 0.0) {
      throw_input("{} holds no positions for its loss term {} (of {}): the term cannot be averaged", what, i,
                  totals.size());
    }
    t.push_back(static_cast<int64_t>(totals[i]));
  }
  for (auto& ch : chunks_) ch->model->set_term_totals(t);
}

Model& Engine::model(int c) { return *chunks_.at(static_cast<size_t>(c))->model; }

Model& Engine::generator(int c) {
  if (!cfg_.model.capabilities().generation) {
    throw_input("model '{}' is a {} model: it does not generate tokens", cfg_.model.name,
                cfg_.model.capabilities().family);
  }
  return model(c);
}

StepResult Engine::step(float lr, const BatchFn& batch) {
  WEFT_CHECK(cfg_.training, "Engine::step on an inference-only engine");
  const Layout& l = cfg_.layout;
  for (auto& ch : chunks_) {
    ch->store->take_exposed_seconds();
    ch->store->begin_step();
  }
  const int64_t W = global_weight(batch);
  const float token_scale = 1.0f / static_cast<float>(W);  // the loss is the mean over the batch's positions
  const double step_scale = scaler_.scale();
  const float loss_scale = static_cast<float>(step_scale) * token_scale;  // scale: a power of two (or the user's)
  StepResult r;
  r.positions = W;
  const auto t0 = std::chrono::steady_clock::now();
  double loss_sum = run_micro_batches(batch, loss_scale, r.pipeline);
  for (auto& ch : chunks_) r.dp_exposed_s += ch->store->take_exposed_seconds();
  r.busy_s = std::max(0.0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - r.dp_exposed_s);
  const double norm_sq = grad_norm_sq();
  if (l.pp > 1) comm(Axis::kPp).all_reduce_sum(&loss_sum, 1);  // the loss lives on the last stage
  r.grad_norm = std::sqrt(norm_sq) / step_scale;  // of the unscaled gradients
  r.busy_max_s = r.busy_mean_s = r.busy_s;
  if (l.dp > 1) {  // the loss sum and each dp rank's busy time, in one call
    std::vector<double> v(static_cast<size_t>(1 + l.dp), 0.0);
    v[0] = loss_sum;
    v[static_cast<size_t>(1 + dp_rank_)] = r.busy_s;
    comm(Axis::kDp).all_reduce_sum(v.data(), static_cast<int64_t>(v.size()));
    loss_sum = v[0];
    r.busy_max_s = *std::max_element(v.begin() + 1, v.end());
    r.busy_mean_s = std::accumulate(v.begin() + 1, v.end(), 0.0) / static_cast<double>(l.dp);
  }
  r.imbalance = r.busy_mean_s > 0.0 ? r.busy_max_s / r.busy_mean_s : 1.0;
  r.loss = loss_sum / static_cast<double>(W);
  r.loss_scale = step_scale;
  const LossScaler::Verdict verdict = scaler_.check(r.loss, r.grad_norm);
  r.skipped = verdict == LossScaler::Verdict::kSkip;
  r.non_finite = verdict == LossScaler::Verdict::kNonFinite;
  r.vetoed = verdict == LossScaler::Verdict::kApply && veto_ && veto_(r.loss, r.grad_norm);
  if (verdict == LossScaler::Verdict::kApply && !r.vetoed) {
    ++opt_steps_;
    // Clipping and unscaling in one factor on the fly.
    const float grad_scale = static_cast<float>(clip_coefficient(r.grad_norm, cfg_.grad_clip) / step_scale);
    for (auto& ch : chunks_) {
      ch->optim->step(ch->store->opt_params(), ch->store->opt_grads(), lr, opt_steps_, grad_scale,
                      static_cast<float>(1.0 / step_scale));
      ch->store->after_optimizer_step();
    }
    scaler_.updated();
  }
  carry_feedback(verdict == LossScaler::Verdict::kApply && !r.vetoed, step_scale);
  for (auto& ch : chunks_) r.dp_exposed_s += ch->store->take_exposed_seconds();
  return r;
}

std::vector<DeviceBuffer*> Engine::feedback_residuals() {
  std::vector<DeviceBuffer*> out;
  for (auto& ch : chunks_) {
    DeviceBuffer* r = ch->store->compression_residual();
    if (r == nullptr) r = ch->store->qgz_residual();
    if (r != nullptr) out.push_back(r);
  }
  return out;
}

std::string Engine::feedback_source() const {
  if (chunks_.empty() || !cfg_.training || cfg_.layout.dp == 1) return "";
  if (cfg_.layout.compression.error_feedback && !cfg_.layout.compression.dp.off()) {
    return "compression.dp " + cfg_.layout.compression.dp.name();
  }
  const ZeroPPConfig& z = cfg_.data_parallel.zeropp;
  if (z.quantized_gradients && z.error_feedback) return fmt::format("zero.quantized_gradients int{}", z.gradients.bits);
  return "";
}

// The residuals are in the units of the step's scaled gradients. A step that is not applied
// (fp16 overflow: they are not finite; a vetoed spike) leaves nothing worth carrying: they
// restart from zero, on every rank alike (the verdict is the same everywhere). A changed
// dynamic loss scale (a power of two) rescales them exactly.
void Engine::carry_feedback(bool applied, double step_scale) {
  const double ratio = scaler_.scale() / step_scale;
  for (DeviceBuffer* r : feedback_residuals()) {
    if (!applied) {
      r->zero();
    } else if (ratio != 1.0) {
      backend_.scale(r->data<float>(), static_cast<float>(ratio), r->count());
    }
  }
}

// The loss sum of the micro-batch `mb` (a forward through every chunk), on every stage.
double Engine::forward_loss(const HostBatch& mb) {
  if (!runtime_) return chunks_[0]->model->loss_sum(mb);
  const int64_t count = pipe_message(mb.samples());
  double l = 0.0;
  runtime_->forward_only(count, [&](int c, CView x) -> CView {
    Chunk& ch = *chunks_[static_cast<size_t>(c)];
    ch.model->stage_forward(0, mb, x, false);
    if (ch.spec.head) l = ch.model->stage_loss(0, mb);
    return ch.model->stage_output(0);
  });
  return l;
}

void Engine::fill_rows(const BatchFn& batch, const std::vector<int64_t>& mine, int64_t i0, int64_t nb) {
  batch_->clear();
  for (int64_t i = 0; i < std::max<int64_t>(nb, 1); ++i) batch(nb > 0 ? mine[static_cast<size_t>(i0 + i)] : 0, 1, *batch_);
  WEFT_CHECK(batch_->samples() == std::max<int64_t>(nb, 1), "the data source gave {} samples for {} rows",
             batch_->samples(), std::max<int64_t>(nb, 1));
}

void Engine::outputs_rows(const BatchFn& batch, int64_t count, float* out) {
  if (runtime_) {
    throw_input("the model's outputs are computed without pipeline stages (pp {}); score them with pp 1",
                cfg_.layout.pp);
  }
  Model& m = *chunks_[0]->model;
  const int64_t E = m.output_elems();
  const int64_t B = cfg_.layout.micro_batch;
  const int dp = cfg_.layout.dp;
  // As evaluate_rows: rows dealt round-robin over the dp ranks, every rank running the same
  // number of forward passes; pass p covers the rows [p B dp, (p + 1) B dp) of all ranks.
  std::vector<int64_t> mine;
  for (int64_t r = dp_rank_; r < count; r += dp) mine.push_back(r);
  const int64_t passes = ((count + dp - 1) / dp + B - 1) / B;
  std::vector<float> one(static_cast<size_t>(B * E)), all(static_cast<size_t>(B * dp * E));
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t i0 = p * B;
    const int64_t nb = std::clamp<int64_t>(static_cast<int64_t>(mine.size()) - i0, 0, B);
    fill_rows(batch, mine, i0, nb);
    m.forward_outputs(*batch_, one.data());
    // Each rank's rows at their place, zeros elsewhere: the sum over dp is exact.
    std::fill(all.begin(), all.end(), 0.0f);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t slot = mine[static_cast<size_t>(i0 + i)] - p * B * dp;
      std::copy_n(one.data() + i * E, E, all.data() + slot * E);
    }
    comm(Axis::kDp).all_reduce_sum(all.data(), static_cast<int64_t>(all.size()));
    const int64_t first = p * B * dp, n = std::min(B * dp, count - first);
    std::copy_n(all.data(), n * E, out + first * E);
  }
}

double Engine::evaluate_rows(const BatchFn& batch, int64_t count) {
  const int64_t B = cfg_.layout.micro_batch;
  const int dp = cfg_.layout.dp;
  // Every rank runs the same number of forward passes (ZeRO-3 gathers parameters inside them);
  // a rank without rows left runs one on row 0 and ignores it.
  std::vector<int64_t> mine;
  for (int64_t r = dp_rank_; r < count; r += dp) mine.push_back(r);
  const int64_t most = (count + dp - 1) / dp;
  const int64_t passes = (most + B - 1) / B;
  double sums[2] = {0.0, 0.0};  // loss sum, positions
  // Samples of varying weight: a loss of several terms needs each term's count over all the rows
  // before the first forward pass (a pass over the rows to count them; the kind's first batch
  // says how many terms it has, and a one-term loss skips the pass).
  const auto several_terms = [&] {
    fill_rows(batch, mine, 0, std::min<int64_t>(static_cast<int64_t>(mine.size()), B));
    return batch_->term_weights().size() > 1;
  };
  if (batch_->fixed_weight() == 0 && several_terms()) {
    std::vector<double> terms;
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t nb = std::clamp<int64_t>(static_cast<int64_t>(mine.size()) - p * B, 0, B);
      fill_rows(batch, mine, p * B, nb);
      const std::vector<int64_t> t = batch_->term_weights();
      terms.resize(std::max(terms.size(), t.size()), 0.0);
      for (size_t i = 0; i < t.size() && nb > 0; ++i) terms[i] += static_cast<double>(t[i]);
    }
    comm(Axis::kDp).all_reduce_sum(terms.data(), static_cast<int64_t>(terms.size()));
    give_term_totals(std::move(terms), "the evaluation rows");
  }
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t i0 = p * B;
    const int64_t nb = std::clamp<int64_t>(static_cast<int64_t>(mine.size()) - i0, 0, B);
    const int64_t rows = std::max<int64_t>(nb, 1);
    fill_rows(batch, mine, i0, nb);
    const double l = forward_loss(*batch_);
    if (nb > 0) {
      sums[0] += l * (static_cast<double>(nb) / static_cast<double>(rows));
      sums[1] += static_cast<double>(batch_->weight());
    }
  }
  if (cfg_.layout.pp > 1) comm(Axis::kPp).all_reduce_sum(sums, 1);  // the loss lives on the last stage
  comm(Axis::kDp).all_reduce_sum(sums, 2);
  return sums[0] / sums[1];
}

void Engine::begin_generation() {
  // One sequence of any length: without sequence parallelism, one activation slot.
  for (int c = 0; c < num_chunks(); ++c) {
    Model& g = generator(c);
    g.set_tp(tp_ops_.get(), false);
    g.reserve_generation(cfg_.model.n_ctx);
  }
}

void Engine::end_generation() {
  for (int c = 0; c < num_chunks(); ++c) {
    Chunk& ch = *chunks_[static_cast<size_t>(c)];
    ch.model->set_tp(tp_ops_.get(), cfg_.layout.sequence_parallel);
    reserve_training(ch, c);
  }
}

void Engine::reserve_training(Chunk& ch, int c) {
  ch.model->reserve(*batch_, cfg_.training, cfg_.head_chunk, runtime_ ? runtime_->slots(c) : 1);
}

void Engine::last_logits(const int32_t* tokens, int64_t T, float* logits_out) {
  logits(tokens, T, T - 1, logits_out);
}

void Engine::logits(const int32_t* tokens, int64_t T, int64_t from, float* logits_out) {
  if (from < 0 || from >= T) throw_input("logits of positions [{}, {}): the range is empty", from, T);
  if (!runtime_) {
    generator(0).forward_logits(tokens, T, from, logits_out);
    return;
  }
  // Through the pipeline; the last stage has the logits and shares them (the other stages
  // add zeros, which leaves every value's bits as they are).
  const int64_t n = (T - from) * cfg_.model.vocab_size;
  std::fill(logits_out, logits_out + n, 0.0f);
  runtime_->forward_only(T * cfg_.model.n_embd, [&](int c, CView x) -> CView {
    Chunk& ch = *chunks_[static_cast<size_t>(c)];
    Model& g = generator(c);
    g.stage_forward_tokens(0, tokens, x, T);
    if (ch.spec.head) g.stage_logits(0, T, from, logits_out);
    return g.stage_output(0);
  });
  comm(Axis::kPp).all_reduce_sum(logits_out, n);
}

}  // namespace weft
