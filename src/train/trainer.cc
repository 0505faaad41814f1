#include "train/trainer.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "backend/cpu/blas_kernels.h"
#include "backend/registry.h"
#include "ckpt/checkpoint.h"
#include "comm/self_comm.h"
#include "comm/world.h"
#include "comm/tracer.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "data/loader.h"
#include "data/text_util.h"
#include "data/tokenizer.h"
#include "engine/engine.h"
#include "train/run_data.h"
#include "train/comm_report.h"
#include "train/divergence.h"
#include "train/engine_config.h"
#include "train/feedback_state.h"
#include "train/memory_fit.h"
#include "train/kill_timeout.h"
#include "train/preemption.h"
#include "train/run_files.h"
#include "train/run_lock.h"
#include "train/run_report.h"
#include "train/sample.h"
#include "train/train_tasks.h"

namespace fs = std::filesystem;

namespace weft {

int set_threads(int64_t threads) {
  if (threads <= 0 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // Several ranks on one machine without OMP_NUM_THREADS: share the cores instead of
    // starting every core's worth of threads in every rank.
    const char* local = nullptr;
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
      if ((local = std::getenv(v)) != nullptr) break;
    }
    const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
    if (ranks_here > 1) threads = std::max(1, omp_get_num_procs() / ranks_here);
  }
  if (threads > 0) {
    omp_set_num_threads(static_cast<int>(threads));
    openblas_set_num_threads(static_cast<int>(threads));
  }
  return omp_get_max_threads();
}

namespace {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// init_from: the parameters of a checkpoint (weft's or Hugging Face's, verified against its
// manifest when it has one) start the run; the optimizer starts fresh at step 0.
void init_from_checkpoint(Engine& engine, const RunConfig& cfg) {
  const ParamLayout& whole = engine.whole_layout();
  Buffer<float> params(static_cast<size_t>(whole.total()));
  load_checkpoint_params(cfg.init_from, whole, params.data());
  check_finite_params(whole, params.data(), cfg.init_from);
  engine.load_state(params.data(), nullptr, nullptr);
  const ModelConfig& mc = engine.config().model;
  log_info("initialised from {} (model '{}': {} layers, {} heads, {} channels, context {}, vocabulary {}); the "
           "optimizer starts at step 0",
           cfg.init_from, mc.name, mc.n_layer, mc.n_head, mc.n_embd, mc.n_ctx, mc.vocab_size);
}

// Loads the checkpoint a resume continues from (parameters, moments, counters) or initialises
// the model; returns the first step to run.
int64_t restore_or_init(Engine& engine, const RunConfig& cfg, const RunFolder& folder, bool rank0) {
  if (folder.resume_dir.empty() && !cfg.init_from.empty()) {
    init_from_checkpoint(engine, cfg);
    return 0;
  }
  if (folder.resume_dir.empty()) {
    engine.init_params(static_cast<uint64_t>(cfg.seed));
    return 0;
  }
  const std::string& dir = folder.resume_dir;
  const ParamLayout& whole = engine.whole_layout();
  const size_t n = static_cast<size_t>(whole.total());
  Buffer<float> params(n), m(n), v(n);
  // inspect_run_folder verified every file this loads against the manifest, and that the
  // optimizer state is there (verify_resume_checkpoint): each byte is hashed once.
  load_checkpoint_params(dir, whole, params.data(), CheckpointVerify::kAlreadyVerified);
  const bool has_optimizer = load_checkpoint_optimizer(dir, whole, m.data(), v.data(), CheckpointVerify::kAlreadyVerified);
  WEFT_CHECK(has_optimizer, "{}: no {} after verify_resume_checkpoint accepted it", dir, kCheckpointOptimizerFile);
  engine.load_state(params.data(), m.data(), v.data());
  const ResumeState& st = folder.resume_state;  // range-checked by inspect_run_folder
  const int64_t start = st.step;
  double scale = engine.loss_scaler().scale();  // dynamic loss scaling: the saved state
  int64_t good_steps = engine.loss_scaler().good_steps();
  if (st.has_loss_scale) {
    scale = st.loss_scale;
    good_steps = st.loss_scale_good_steps;
  }
  engine.restore_counters(st.optimizer_steps, scale, good_steps);
  const std::string feedback = restore_feedback(engine, dir);
  if (!feedback.empty()) log_info("{}", feedback);
  // History is rewritten only now, after the checkpoint verified and loaded completely: a
  // refused resume leaves metrics.jsonl as it was.
  if (rank0) truncate_metrics((fs::path(cfg.out) / "metrics.jsonl").string(), start);
  log_info("resuming from {} at step {}", dir, start);
  return start;
}

// One run of the training loop: the engine, the run folder's files and the cadences.
class TrainLoop {
 public:
  TrainLoop(const RunConfig& cfg, Engine& engine, Communicator& world, Tracer& tracer, RunData& data, TrainTasks& tasks,
            NodeMap nodes)
      : cfg_(cfg), engine_(engine), world_(world), tracer_(tracer), data_(data), tasks_(tasks),
        rank0_(world.rank() == 0), nodes_(std::move(nodes)) {}

  TrainResult run(int64_t start_step, const RunPrediction& pred, const TrainOptions& opt);
  SpikeDetector& spikes() { return spikes_; }
  // The checkpoint a resumed run started from: the newest there is until the run writes one
  // (what a stop's message names).
  void resumed_from(const std::string& dir) { res_.last_checkpoint = dir; }
  // The positions trained up to the checkpoint resumed from (its trainer.json "tokens").
  void resumed_positions(int64_t n) { positions_done_ = n; }

 private:
  double validate(int64_t step);
  void score_tasks(int64_t step);
  void save(int64_t step);
  bool stop_on_signal(int64_t done, bool saved);
  nlohmann::json step_line(int64_t done, float lr, const StepResult& r, double dt);
  void log_step(int64_t done, float lr, const StepResult& r, double dt);
  void sample();
  int64_t eval_passes() const;
  void write_comm_report(int64_t start_step);

  const RunConfig& cfg_;
  Engine& engine_;
  Communicator& world_;
  Tracer& tracer_;
  RunData& data_;
  TrainTasks& tasks_;
  bool rank0_;
  std::string trace_path_;
  TrainResult res_;
  DivergenceWatch diverging_;  // a climb the spike detector does not flag (train/divergence.h)
  RunFiles files_{cfg_.out, res_.steps_done};  // every write to the run folder, checked
  double time_sum_ = 0.0, positions_sum_ = 0.0;  // over the timed steps
  int64_t timed_steps_ = 0;
  int64_t positions_done_ = -1;  // positions trained so far (-1 until run(): the start step's fixed count)
  // With trace: the node map and what preceded each step (for the communication model).
  NodeMap nodes_;
  CommStepContext next_ctx_;
  std::vector<CommStepContext> contexts_;
  SpikeDetector spikes_{cfg_};
};

// The forward passes Engine::evaluate makes on every rank: ceil(ceil(windows / dp) / B).
int64_t TrainLoop::eval_passes() const {
  const EngineConfig& ec = engine_.config();
  const int64_t windows = data_.val_rows(cfg_.val_batches * ec.global_batch);
  const int64_t most = (windows + ec.layout.dp - 1) / ec.layout.dp;
  return (most + ec.layout.micro_batch - 1) / ec.layout.micro_batch;
}

// The communication report's link levels: the node map's, plus the ZeRO++ levels inside a
// node (e.g. GCD pairs), in world ranks (a level of h data-parallel ranks spans h x the world
// ranks between consecutive data-parallel ranks).
LinkLevels report_link_levels(const EngineConfig& ec, const NodeMap& nodes) {
  LinkLevels l = LinkLevels::from_nodes(nodes);
  const ZeroPPConfig& z = ec.data_parallel.zeropp;
  const GridLayout grid(ec.layout.grid());
  GridCoords one{};
  one[static_cast<size_t>(Axis::kDp)] = 1;
  const int stride = ec.layout.dp > 1 ? grid.world_rank_of(one) : 1;
  const int per_node = nodes.ranks_per_node();
  for (size_t i = z.levels.size(); i-- > 0;) {
    const int size = z.levels[i] * stride;
    if (per_node > 0 && size < per_node && per_node % size == 0) l.add_inner_level(z.level_names[i], size);
  }
  return l;
}

// Rank 0, after every rank has written its last events: comm_report.json and .txt (see
// train/comm_report.h for why rank 0 reads the per-rank files instead of gathering).
void TrainLoop::write_comm_report(int64_t start_step) {
  tracer_.set_phase("report");
  files_.append_with(trace_path_, [&] { tracer_.write_jsonl(trace_path_); });
  tracer_.clear();
  world_.barrier();
  if (!rank0_ || res_.steps_done <= start_step) return;
  CommReportInputs in{engine_.config(), nodes_, start_step, res_.steps_done, contexts_,
                      report_link_levels(engine_.config(), nodes_)};
  nlohmann::json rep;
  files_.write_with(cfg_.out + "/comm_report.json", [&] { rep = weft::write_comm_report(cfg_.out, in); });
  log_info("communication report: {}/comm_report.txt ({} rows, {} differing from the model)", cfg_.out,
           rep["rows"].size(), rep["mismatches"].get<int64_t>());
}

double TrainLoop::validate(int64_t step) {
  tracer_.set_phase("eval");
  next_ctx_.eval_passes_before += eval_passes();
  const double vl = data_.evaluate(engine_, cfg_.val_batches * cfg_.global_batch);
  if (res_.first_val_loss < 0) res_.first_val_loss = vl;
  res_.last_val_loss = vl;
  if (rank0_) files_.append_metrics({{"step", step}, {"val_loss", vl}});
  log_info("step {:>5} | val loss {:.4f}", step, vl);
  return vl;
}

// [eval] tasks (train/train_tasks.h): scored on the training engine; their forward passes precede
// the next step's gathers (the communication model replays them), and their generation-size
// buffers are not a step's (the peaks restart after them, as after a checkpoint).
void TrainLoop::score_tasks(int64_t step) {
  tracer_.set_phase("tasks");
  const nlohmann::json line = tasks_.evaluate(engine_, step, positions_done_);
  next_ctx_.eval_passes_before += tasks_.last_forward_passes();
  memory_tracker().reset_peaks();
  if (rank0_) files_.append_metrics(line);
}

// Gathered: every rank contributes its shards (dp, then tp); rank 0 writes one layout-free
// checkpoint of the whole model.
void TrainLoop::save(int64_t step) {
  CheckpointSignalScope signal_scope;  // a signal now: this write finishes first
  tracer_.set_phase("checkpoint");
  const std::string dir = (fs::path(cfg_.out) / step_dir_name(step)).string();
  const ParamLayout& whole = engine_.whole_layout();
  const size_t n = static_cast<size_t>(whole.total());
  Buffer<float> params(n), m(n), v(n);
  engine_.gather_state(params.data(), m.data(), v.data());
  FeedbackTensors feedback = gather_feedback(engine_, world_);
  if (rank0_) {
    const EngineConfig& ec = engine_.config();
    const int64_t G = ec.global_batch, T = ec.seq;
    const LossScaler& ls = engine_.loss_scaler();
    CheckpointData d;
    d.model = &ec.model;
    d.layout = &whole;
    d.params = params.data();
    d.exp_avg = m.data();
    d.exp_avg_sq = v.data();
    d.feedback = std::move(feedback.refs);
    d.feedback_meta = std::move(feedback.meta);
    d.trainer = {{"step", step}, {"seed", cfg_.seed}, {"global_batch", G}, {"seq_len", T},
                 {"tokens", positions_done_}, {"data", cfg_.data}, {"model", ec.model.name},
                 {"optimizer_steps", engine_.optimizer_steps()}, {"precision", precision_name(ec.precision)},
                 {"loss_scale", ls.scale()}, {"loss_scale_good_steps", ls.good_steps()},
                 {"layout",
                  {{"tp", ec.layout.tp}, {"pp", ec.layout.pp}, {"dp", ec.layout.dp}, {"dp_shard", ec.layout.dp_shard()},
                   {"dp_replicate", ec.layout.dp_replicate}, {"zero", ec.layout.zero}}},
                 {"spike_window", spikes_.state()}};
    files_.write_with(dir, [&] { save_checkpoint(dir, d); });
    prune_checkpoints(cfg_.out, cfg_.keep_last);
    log_info("checkpoint {}", dir);
  }
  res_.last_checkpoint = dir;
  world_.barrier();
}

// The metrics line of a step (the pipeline's and the trace's parts are collective).
nlohmann::json TrainLoop::step_line(int64_t done, float lr, const StepResult& r, double dt) {
  const EngineConfig& ec = engine_.config();
  // Positions (tokens, patches, atoms) of the step: a family whose samples differ in size has
  // its own count each step.
  const int64_t tokens = r.positions;
  const double tps = static_cast<double>(tokens) / dt;
  positions_done_ += tokens;
  nlohmann::json line = {{"step", done}, {"loss", r.loss}, {"lr", lr}, {"grad_norm", r.grad_norm},
                         {"tokens_per_s", tps}, {"ms", dt * 1e3}, {"tokens", positions_done_},
                         {"model_flops_per_s", train_flops_per_position(ec.model, ec.seq) * tps},
                         {"memory", memory_json(engine_.store_memory())}, {"dp_exposed_ms", r.dp_exposed_s * 1e3}};
  if (ec.layout.dp > 1) {  // the data-parallel ranks' busy times (Engine::step)
    line["imbalance"] = r.imbalance;
    line["busy_ms"] = {{"max", r.busy_max_s * 1e3}, {"mean", r.busy_mean_s * 1e3}};
  }
  if (ec.precision != Precision::kFp32 || cfg_.loss_scale > 0) {
    line["precision"] = precision_name(ec.precision);
    if (engine_.loss_scaler().active()) line["loss_scale"] = r.loss_scale;
    if (r.skipped) line["skipped"] = true;
  }
  if (engine_.pipeline()) line["pipeline"] = pipeline_json(engine_, r.pipeline, cfg_.schedule);
  if (cfg_.trace) {
    line["comm"] = comm_json(tracer_.summary());
    files_.append_with(trace_path_, [&] { tracer_.write_jsonl(trace_path_); });
    tracer_.clear();
  }
  return line;
}

void TrainLoop::log_step(int64_t done, float lr, const StepResult& r, double dt) {
  if (done % cfg_.log_every != 0 && done != cfg_.steps) return;
  const double tps = static_cast<double>(r.positions) / dt;
  const double mean_dt = timed_steps_ > 0 ? time_sum_ / timed_steps_ : dt;
  log_info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | {:.1f} ms{} | ETA {}", done,
           cfg_.steps, r.loss, lr, r.grad_norm, tps, dt * 1e3,
           engine_.config().layout.dp > 1 ? fmt::format(" (dp comm exposed {:.1f} ms)", r.dp_exposed_s * 1e3) : std::string(),
           format_duration(mean_dt * (cfg_.steps - done)));
}

// Every rank samples (the pipeline and ZeRO-3 gathers need all of them); rank 0 prints.
void TrainLoop::sample() {
  if (cfg_.sample_tokens <= 0) return;
  Tokenizer tok = Tokenizer::load_gpt2("");
  std::vector<int32_t> prompt = {tok.eot_token()};
  if (!cfg_.sample_prompt.empty()) tok.encode_append(cfg_.sample_prompt, prompt);
  SampleOptions so;
  so.max_tokens = cfg_.sample_tokens;
  so.temperature = cfg_.temperature;
  so.top_k = cfg_.top_k;
  so.seed = static_cast<uint64_t>(cfg_.seed);
  auto out = sample_tokens(engine_, prompt, so);
  res_.sample = tok.decode(std::vector<int32_t>(out.begin() + 1, out.end()));
  log_info("sample:\n{}", res_.sample);
}

// At the boundary after step `done` (before the first step: the first step - 1): whether
// SIGTERM/SIGINT stops every rank here, with the checkpoint of `done` (train/preemption.h).
bool TrainLoop::stop_on_signal(int64_t done, bool saved) {
  const StopContext ctx{res_.first_step, cfg_.steps, cfg_.on_signal, rank0_, cfg_.out, res_.last_checkpoint, [&] {
                          save(done);
                          return res_.last_checkpoint;
                        }};
  res_.stop_signal = stop_at_boundary(world_, done, saved, ctx);
  return res_.stop_signal != 0;
}

TrainResult TrainLoop::run(int64_t start_step, const RunPrediction& pred, const TrainOptions& opt) {
  using clock = std::chrono::steady_clock;
  if (rank0_) files_.open_metrics();
  trace_path_ = (fs::path(cfg_.out) / fmt::format("trace-rank{}.jsonl", world_.rank())).string();
  if (cfg_.trace && start_step == 0) fs::remove(trace_path_);
  res_.first_step = res_.steps_done = start_step;
  if (positions_done_ < 0) positions_done_ = start_step * engine_.config().global_batch * engine_.config().seq;
  const EngineConfig& ec = engine_.config();
  const int64_t decay_steps = cfg_.lr_decay_steps > 0 ? cfg_.lr_decay_steps : cfg_.steps;
  MemorySnapshot step_snapshot;  // after the last step, before its checkpoint
  if (stop_on_signal(start_step, true)) return res_;  // a signal during setup: no step ran
  if (data_.has_val() && start_step == 0 && cfg_.steps > 0) validate(0);
  if (start_step == 0 && tasks_.due(0, false)) score_tasks(0);
  engine_.set_update_veto([this](double loss, double grad_norm) { return spikes_.judge(loss, grad_norm); });
  for (int64_t step = start_step; step < cfg_.steps; ++step) {
    if (opt.before_step) opt.before_step(step);
    const auto t0 = clock::now();
    tracer_.set_step(step + 1);
    tracer_.set_phase("train");
    next_ctx_.after_training = step > start_step;
    contexts_.push_back(std::exchange(next_ctx_, CommStepContext{}));
    const float lr = lr_at(step, static_cast<float>(cfg_.lr), cfg_.warmup_steps, decay_steps,
                           static_cast<float>(cfg_.min_lr_ratio));
    const StepResult r = engine_.step(lr, [&](int64_t first, int64_t count, HostBatch& out) {
      data_.fill(step, ec.global_batch, first, count, out);
    });
    if (r.skipped) {
      log_warn("step {}: fp16 gradient overflow at loss scale {}; update skipped, scale now {}", step + 1, r.loss_scale,
               engine_.loss_scaler().scale());
    } else if (r.non_finite) {
      throw_runtime("step {}: loss {} / gradient norm {} is not finite; stopping (last checkpoint: {})", step + 1, r.loss,
                    r.grad_norm, res_.last_checkpoint.empty() ? "none" : res_.last_checkpoint);
    }
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    const int64_t done = step + 1;
    tracer_.set_phase("metrics");
    const std::optional<Spike> spike = spikes_.take();
    nlohmann::json line = step_line(done, lr, r, dt);
    if (spike) line["spike"] = spike_json(*spike, spikes_.policy());
    step_snapshot = memory_tracker().snapshot();
    // The first step of a process includes one-time costs (page faults, BLAS buffers).
    if (done > start_step + 1 || cfg_.steps - start_step == 1) {
      time_sum_ += dt, ++timed_steps_;
      positions_sum_ += static_cast<double>(r.positions);
    }
    res_.last_loss = r.loss;
    res_.steps_done = done;
    if (rank0_) files_.append_metrics(line);
    log_step(done, lr, r, dt);
    if (spike) act_on_spike(*spike, spikes_, done, res_.last_checkpoint);  // stop: throws
    if (const std::optional<std::string> w = diverging_.observe(done, r.loss); w && rank0_) log_warn("{}", *w);
    const bool last = done == cfg_.steps;
    if (data_.has_val() && ((cfg_.val_every > 0 && done % cfg_.val_every == 0) || last)) validate(done);
    if (tasks_.due(done, last)) score_tasks(done);
    const bool saved = (cfg_.ckpt_every > 0 && done % cfg_.ckpt_every == 0) || last;
    if (saved) {
      save(done);
      memory_tracker().reset_peaks();  // the checkpoint's staging buffers are gone
    }
    if (stop_on_signal(done, saved)) return res_;  // skips the final report and sample
  }
  res_.tokens_per_s = timed_steps_ > 0 ? positions_sum_ / time_sum_ : 0.0;
  tracer_.set_phase("report");
  if (res_.steps_done > start_step) {
    const nlohmann::json line = final_report(engine_, world_, step_snapshot, pred, time_sum_, timed_steps_, res_.steps_done);
    if (rank0_) files_.append_metrics(line);
  }
  if (rank0_) files_.close_metrics();
  if (timed_steps_ > 0) {
    log_info("done: {} steps, {:.0f} tokens/s, {:.3f} GFLOP/s (model FLOPs)", res_.steps_done - start_step,
             res_.tokens_per_s, res_.tokens_per_s * train_flops_per_position(ec.model, ec.seq) / 1e9);
  }
  if (cfg_.trace) write_comm_report(start_step);
  tracer_.set_phase("sample");
  sample();
  return res_;
}


// Under Open MPI's mpirun: whether the launcher's kill timeout leaves a SIGTERM time for the
// step and the checkpoint that follow it (train/kill_timeout.h); a warning when it does not.
void check_kill_timeout(const RunConfig& cfg, const Engine& engine, const RunPrediction& pred) {
  const std::optional<KillTimeout> timeout = openmpi_kill_timeout();
  if (!timeout) return;
  StopNeed need;
  // Rank 0 writes the whole model's fp32 parameters and both Adam moments (train/trainer.cc save).
  need.checkpoint_bytes = 3 * static_cast<int64_t>(sizeof(float)) * engine.whole_layout().total();
  need.rate = synced_write_rate(cfg.out, need.checkpoint_bytes);
  if (need.rate <= 0) return;  // the folder refused the probe: the checkpoint will say why
  need.checkpoint_s = static_cast<double>(need.checkpoint_bytes) / need.rate;
  need.step_s = pred.step ? pred.step->step_time_s : 0.0;
  if (const std::string w = kill_timeout_warning(need, *timeout); !w.empty()) log_warn("{}", w);
}

}  // namespace

TrainResult train(const RunConfig& cfg, const TrainOptions& opt) {
  auto self = make_self_communicator("world");
  return train(cfg, opt, *self);
}

TrainResult train(const RunConfig& cfg, const TrainOptions& opt, Communicator& world) {
  SignalStopGuard signals(world.rank(), cfg.on_signal);  // SIGTERM/SIGINT stop at a step boundary
  cfg.validate();
  const int threads = set_threads(cfg.threads);
  set_log_rank(world.rank());
  if (world.rank() == 0 && cfg.backend.rfind("cpu", 0) == 0) {
    if (const std::string note = blas_kernel_note(); !note.empty()) log_info("note: {}", note);
  }
  EngineConfig ec = engine_config(cfg, world.size());
  Tracer tracer(cfg.trace);
  // The run's tracer lives in this call: `world` outlives it (weft tune's and weft ensemble's
  // runs), so it is detached again however the run ends.
  struct TracerScope {
    Communicator& c;
    Tracer* previous;
    ~TracerScope() { c.set_tracer(previous); }
  } tracer_scope{world, world.tracer()};
  world.set_tracer(&tracer);
  world.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(cfg.comm_timeout * 1000.0)));
  // Data and the run folder first: a missing corpus or a bad resume fails before anything is
  // written.
  const std::unique_ptr<RunData> data_ptr = open_run_data(cfg, ec.model, ec.seq);
  RunData& data = *data_ptr;
  ec.model = ec.model.family->with_settings(ec.model, data.model_settings());
  TrainTasks tasks(cfg, ec.model);  // the task files and their tokenizer, read now
  // The link levels of the communication report (collective over world for the real map).
  // ZeRO++ reads its levels from the same map.
  NodeMap nodes;
  const bool zeropp = ec.data_parallel.zeropp.active();
  if (world.rank() == 0 && cfg.ranks_per_node > 0) {
    // No silent substitution (issue 34 class 8): a setting that changes nothing, or a node
    // larger than the world, is said with the numbers (a world that is not a whole number of
    // smaller nodes is refused by emulated_node_map).
    if (!cfg.trace && !zeropp) {
      log_warn("ranks_per_node {} changes nothing in this run: it emulates nodes for the trace (--trace true) and "
               "ZeRO++ only", cfg.ranks_per_node);
    } else if (cfg.ranks_per_node > world.size()) {
      log_warn("ranks_per_node {} is more than the world's {} rank(s): the emulated map puts them all on one node",
               cfg.ranks_per_node, world.size());
    }
  }
  if (cfg.trace || zeropp) {
    nodes = cfg.ranks_per_node > 0 ? emulated_node_map(world.size(), static_cast<int>(cfg.ranks_per_node))
                                   : make_node_map(world);
  }
  if (zeropp) {
    ec.set_zeropp(run_zeropp(cfg, ec.layout.grid(), &nodes));
    log_info("ZeRO++: {} (nodes: {})", ec.data_parallel.zeropp.describe(ec.layout.dp_shard()), nodes.source);
    for (const std::string& n : ec.data_parallel.zeropp.notes) log_info("ZeRO++: {}", n);
  }
  {  // the codecs in effect, and what the settings do not do (a note even where no codec is on)
    std::vector<std::string> notes;
    ec.layout.compression = run_compression(cfg, ec.layout.grid(), ec.data_parallel.zeropp, &notes);
    if (ec.layout.compression.any()) log_info("compression: {}", ec.layout.compression.describe());
    for (const std::string& n : notes) log_warn("compression: {}", n);
  }
  // One run per folder: held from before the folder is read for a resume or cleared for
  // --overwrite until the run ends (every rank learns a refusal).
  const RunLock lock = lock_run_folder(cfg.out, world);
  const RunFolder folder = inspect_run_folder(cfg, opt, ec.model);
  // The system file and the memory fit are checked before the engine allocates anything.
  const auto [stage, dp_rank] = stage_and_dp_rank(ec, world.rank());
  RunPrediction pred = predict_run(cfg, ec);
  // The fp32 product `weft calibrate` measured fastest on this machine, unless the config names
  // one (the system file describes the CPU: its choice is not applied to another backend).
  if (ec.fp32_kernel.empty() && cfg.backend.rfind("cpu", 0) == 0) ec.fp32_kernel = pred.fp32_kernel;
  auto backend = make_backend(cfg.backend);
  backend->set_products({ec.precision, ec.matmul, ec.fp32_kernel});  // the engine's products, before it exists
  // The closed-form prediction of this rank's memory (src/plan/weft_memory.h).
  pred.memory = plan::weft_rank_memory(run_memory_shape(ec, backend->native_16bit_products()), stage, dp_rank);
  check_memory_fit(cfg, ec, world, *backend);  // train/memory_fit.h
  Engine engine(ec, world, *backend);
  if (const std::string k = backend->product_kernel(); !k.empty()) {
    log_info("products: {} (precision {}, matmul {})", k, precision_name(ec.precision), matmul_mode_name(ec.matmul));
  }
  world.barrier();  // every rank has validated its inputs before rank 0 touches the folder
  if (world.rank() == 0) open_run_folder(cfg, opt, folder);
  if (world.rank() == 0 && cfg.on_signal) check_kill_timeout(cfg, engine, pred);
  const int64_t start_step = restore_or_init(engine, cfg, folder, world.rank() == 0);
  if (world.rank() == 0) RunFiles(cfg.out, start_step).replace("config.toml", cfg.to_toml());
  // Peaks from here on: the training steps (set-up's and checkpoints' staging buffers are not
  // part of a step).
  memory_tracker().reset_peaks();
  data.configure(engine);
  log_run_setup({&cfg, &engine, data.describe(ec.seq), threads}, pred);
  TrainLoop loop(cfg, engine, world, tracer, data, tasks, std::move(nodes));
  if (!folder.resume_dir.empty()) {
    loop.spikes().restore(folder.resume_state.raw, folder.resume_dir + "/trainer.json");
    loop.resumed_from(folder.resume_dir);
    const nlohmann::json& tj = folder.resume_state.raw;
    if (tj.is_object() && tj.contains("tokens") && tj.at("tokens").is_number_integer()) {
      loop.resumed_positions(tj.at("tokens").get<int64_t>());
    }
  }
  return loop.run(start_step, pred, opt);
}

}  // namespace weft
