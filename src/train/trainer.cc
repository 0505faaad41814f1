#include "train/trainer.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <deque>
#include <map>
#include <optional>
#include <regex>
#include <thread>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "comm/self_comm.h"
#include "comm/tracer.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "data/loader.h"
#include "data/text_util.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/pp/partition.h"
#include "parallel/pp/schedule.h"
#include "parallel/tp/tp_comm.h"
#include "plan/predict.h"
#include "plan/weft_memory.h"
#include "train/run_layout.h"
#include "train/sample.h"

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

std::string step_dir_name(int64_t step) { return fmt::format("step-{:06d}", step); }

// Checkpoints in a run folder, oldest first: (step, folder as resolved).
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  static const std::regex re(R"(step-(\d+)(\.old-\d+)?)");
  std::map<int64_t, std::string> seen;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !std::regex_match(name, m, re)) continue;
    const int64_t step = std::stoll(m[1].str());
    const std::string dir = (fs::path(run_dir) / fmt::format("step-{}", m[1].str())).string();
    try {
      seen[step] = resolve_checkpoint_dir(dir);
    } catch (const InputError&) {
    }
  }
  for (auto& [s, d] : seen) out.emplace_back(s, d);
  return out;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// Rewrites metrics.jsonl keeping only entries up to `step` (used when resuming, so that a
// crashed run's lines past its last checkpoint do not repeat). Atomic.
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.contains("step") && j["step"].get<int64_t>() > step) continue;
    } catch (const std::exception&) {
      continue;  // a torn last line from a crash
    }
    kept += line + "\n";
  }
  in.close();
  write_file_atomic(path, kept);
}

}  // namespace

std::string find_latest_checkpoint(const std::string& run_dir) {
  auto all = list_checkpoints(run_dir);
  return all.empty() ? std::string() : all.back().second;
}

TrainResult train(const RunConfig& cfg, const TrainOptions& opt) {
  auto self = make_self_communicator("world");
  return train(cfg, opt, *self);
}

TrainResult train(const RunConfig& cfg, const TrainOptions& opt, Communicator& world) {
  using clock = std::chrono::steady_clock;
  cfg.validate();
  const int threads = set_threads(cfg.threads);
  const ModelConfig mc = cfg.model_config();
  const int64_t T = cfg.seq(), B = cfg.micro_batch, G = cfg.global_batch;
  const uint64_t seed = static_cast<uint64_t>(cfg.seed);
  const bool rank0 = world.rank() == 0;
  set_log_rank(world.rank());

  // The layout, validated in one place (parallel/layout_rules.h, shared with the planner).
  const RunLayout run_layout = validate_run_layout(cfg, world.size());
  GridSpec spec = run_layout.grid;
  const PipeSchedule schedule = run_layout.layout.schedule;
  // Virtual stages: model chunks per pipeline stage (the interleaved schedule only).
  const int vs = run_layout.layout.virtual_stages;
  Tracer tracer(cfg.trace);
  world.set_tracer(&tracer);
  world.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(cfg.comm_timeout * 1000.0)));
  ProcessGrid grid(world, spec);
  Communicator& dpc = grid.comm(Axis::kDp);
  Communicator& tpc = grid.comm(Axis::kTp);
  CommTensorParallel tp_ops(tpc);
  const int dp = spec.dp, dp_rank = grid.coord(Axis::kDp);
  const int tp = spec.tp, tp_rank = grid.coord(Axis::kTp);
  Communicator& ppc = grid.comm(Axis::kPp);
  const int pp = spec.pp, stage = grid.coord(Axis::kPp);
  // This rank's model chunks: one (its pipeline stage's layers) or, interleaved, v of them
  // (global chunk c = local * pp + stage, see partition.h).
  const int vchunks = pp > 1 ? vs : 1, K = pp * vchunks;
  std::vector<StageSpec> chunk_specs(vchunks);
  std::vector<int> chunk_global(vchunks);
  {
    // Balanced by cost: the output head counts as Vp / (12 C) layers on the last chunk.
    const double head_cost = gpt_head_cost_in_layers(mc.padded_vocab, mc.n_embd);
    const std::vector<StageRange> parts = partition_layers(mc.n_layer, pp, vchunks, {}, head_cost);
    for (int c = 0; c < vchunks; ++c) {
      const int g = global_chunk(stage, c, pp);
      chunk_global[c] = g;
      chunk_specs[c] = {parts[g].first_layer, parts[g].num_layers, g == 0, g == K - 1};
    }
  }
  // The first and the last stage share the tied embedding: one group per (tp, dp) position.
  const bool holds_embedding = pp > 1 && (stage == 0 || stage == pp - 1);
  std::unique_ptr<Communicator> tied =
      world.split(holds_embedding ? 1 + tp_rank + tp * dp_rank : 0, stage, "pp-embedding");
  const int64_t per_rank = G / dp, accum = per_rank / B;
  // Pipeline: this stage's schedule of one step (validated before anything is written).
  const std::vector<PipeAction> actions =
      pp > 1 ? stage_schedule(schedule, pp, stage, static_cast<int>(accum), vchunks) : std::vector<PipeAction>{};

  // Data first: a missing corpus should fail before anything is written.
  TokenDataset train_data = TokenDataset::open_split(cfg.data, "train");
  const std::string val_src = cfg.val_data.empty() ? cfg.data : cfg.val_data;
  std::unique_ptr<TokenDataset> val_data;
  if (cfg.val_batches > 0) val_data = std::make_unique<TokenDataset>(TokenDataset::open_split(val_src, "val"));
  if (train_data.num_windows(T) <= 0) {
    throw_input("{}: the training split holds {} tokens, fewer than one sequence of {}+1", cfg.data, train_data.size(), T);
  }
  if (val_data && val_data->num_windows(T) <= 0) {
    throw_input("{}: the validation split holds {} tokens, fewer than one sequence of {}+1", val_src, val_data->size(), T);
  }

  // The run folder (rank 0 decides; every rank sees the same files).
  std::string resume_dir;
  const auto existing = list_checkpoints(cfg.out);
  if (opt.resume) {
    resume_dir = opt.resume_from.empty() ? (existing.empty() ? "" : existing.back().second)
                                         : resolve_checkpoint_dir(opt.resume_from);
    if (resume_dir.empty()) throw_input("--resume: no checkpoint (step-*) in run folder {}", cfg.out);
  } else {
    const bool has_metrics = fs::exists(fs::path(cfg.out) / "metrics.jsonl");
    if ((!existing.empty() || has_metrics) && !opt.overwrite) {
      throw_input("run folder {} already holds a run ({}); pass --resume to continue it, --overwrite to replace it, or --out to choose another folder",
                  cfg.out, existing.empty() ? std::string("metrics.jsonl") : fs::path(existing.back().second).filename().string());
    }
  }
  nlohmann::json resume_state;
  if (!resume_dir.empty()) {
    ModelConfig saved = load_checkpoint_config(resume_dir);
    if (saved.n_layer != mc.n_layer || saved.n_head != mc.n_head || saved.n_embd != mc.n_embd ||
        saved.n_ctx != mc.n_ctx || saved.vocab_size != mc.vocab_size) {
      throw_input("{}: checkpoint model (layers {}, heads {}, hidden {}, context {}, vocab {}) does not match the config (layers {}, heads {}, hidden {}, context {}, vocab {})",
                  resume_dir, saved.n_layer, saved.n_head, saved.n_embd, saved.n_ctx, saved.vocab_size,
                  mc.n_layer, mc.n_head, mc.n_embd, mc.n_ctx, mc.vocab_size);
    }
    resume_state = load_checkpoint_trainer(resume_dir);
    if (!resume_state.contains("step") || !resume_state["step"].is_number_integer()) {
      throw_input("{}/{}: missing integer 'step'", resume_dir, kCheckpointTrainerFile);
    }
    if (resume_state.contains("seed") && resume_state["seed"].get<int64_t>() != cfg.seed) {
      throw_input("{}: checkpoint was trained with seed {}, the config says {}; the data order would differ", resume_dir,
                  resume_state["seed"].get<int64_t>(), cfg.seed);
    }
    if (resume_state.contains("global_batch") && resume_state["global_batch"].get<int64_t>() != G) {
      throw_input("{}: checkpoint was trained with global_batch {}, the config says {}", resume_dir,
                  resume_state["global_batch"].get<int64_t>(), G);
    }
  }
  const Recompute recompute = parse_recompute(cfg.recompute);
  const Precision prec = parse_precision(cfg.precision);
  // The planner's step time for this layout on the calibrated system (weft calibrate).
  std::string system_path = cfg.system;
  if (system_path.empty() && fs::exists("systems/local.toml")) system_path = "systems/local.toml";
  // This run's layout as the planner describes it (its step time and memory models).
  plan::Layout pl;
  pl.tp = spec.tp;
  pl.pp = spec.pp;
  pl.dp = spec.dp;
  pl.micro_batch = B;
  pl.zero = static_cast<int>(cfg.zero);
  pl.recompute = recompute;
  pl.recompute_layers = static_cast<int>(cfg.recompute_layers);
  pl.sequence_parallel = cfg.sequence_parallel && spec.tp > 1;
  pl.schedule = schedule;
  pl.virtual_stages = spec.pp > 1 ? vs : 1;
  std::optional<plan::Prediction> step_prediction;
  if (!system_path.empty()) {
    const plan::System sys = plan::load_system(system_path);  // InputError naming the file and key
    plan::Options po = plan::Options::from_system(sys, prec, G);
    po.rank_order = cfg.order;
    try {
      step_prediction = plan::predict(plan::ModelShape::from_config(mc, T), sys, pl, po);
    } catch (const InputError& e) {
      log_warn("planner: cannot price this layout on {}: {}", system_path, e.what());
    }
  }
  world.barrier();  // every rank has validated its inputs before rank 0 touches the folder
  if (rank0) {
    if (!opt.resume && opt.overwrite) {
      for (const auto& [s, d] : existing) fs::remove_all(d);
      fs::remove(fs::path(cfg.out) / "metrics.jsonl");
    }
    std::error_code ec;
    fs::create_directories(cfg.out, ec);
    if (ec) throw_input("cannot create run folder {}: {}", cfg.out, ec.message());
  }

  auto backend = make_cpu_backend();
  if (cfg.sequence_parallel && tp == 1) log_warn("sequence_parallel has no effect with tp 1");
  const ParamLayout full_layout(mc);  // the whole model (tp = 1): checkpoints
  DataParallelConfig dcfg;
  dcfg.zero = static_cast<int>(cfg.zero);
  dcfg.bucket_bytes = static_cast<int64_t>(cfg.bucket_mb * 1048576.0);
  dcfg.prefetch = static_cast<int>(cfg.prefetch);
  AdamWConfig acfg;
  acfg.lr = static_cast<float>(cfg.lr);
  acfg.beta1 = static_cast<float>(cfg.beta1);
  acfg.beta2 = static_cast<float>(cfg.beta2);
  acfg.eps = static_cast<float>(cfg.eps);
  acfg.weight_decay = static_cast<float>(cfg.weight_decay);
  // Each model chunk is a GPT over its layers with its own parameter store (data parallel,
  // ZeRO) and optimizer shard; the step runs them all and sums their gradient norms.
  struct Chunk {
    int global = 0;  // global chunk index (0..K-1)
    StageSpec spec;
    std::unique_ptr<GPT> model;
    std::unique_ptr<DataParallel> store;
    std::unique_ptr<AdamW> optim;
    int slots = 1;                 // activation sets: its (micro-batch) forwards in flight at once
    std::vector<int> free_slots;   // pipeline: slots not holding a micro-batch
    std::map<int, int> slot_of;    // pipeline: micro-batch -> slot
    int last_backward = -1;        // index in `actions` of its last backward of the step
    int64_t n() const { return model->num_params(); }
  };
  std::vector<Chunk> chunks(static_cast<size_t>(vchunks));
  for (int c = 0; c < vchunks; ++c) {
    Chunk& ch = chunks[c];
    ch.global = chunk_global[c];
    ch.spec = chunk_specs[c];
    ch.model = std::make_unique<GPT>(mc, *backend, /*local_store=*/false, tp, tp_rank, ch.spec);
    ch.model->set_tp(&tp_ops, cfg.sequence_parallel);
    ch.store = std::make_unique<DataParallel>(ch.model->layout(), dpc, dcfg, *backend);
    ch.model->set_store(ch.store.get());
    // The first and the last chunk share the tied embedding: summed over `tied`.
    if (holds_embedding && (ch.spec.embedding || ch.spec.head)) ch.store->set_tied_embedding(tied.get());
    if (pp > 1) {
      for (size_t i = 0; i < actions.size(); ++i) {
        if (actions[i].chunk == c && actions[i].kind == PipeAction::kBackward) ch.last_backward = static_cast<int>(i);
      }
      ch.slots = std::max(1, max_in_flight(actions, c));
      for (int k = ch.slots - 1; k >= 0; --k) ch.free_slots.push_back(k);
    }
    ch.model->set_recompute(recompute, static_cast<int>(cfg.recompute_layers));
    ch.model->set_precision(prec);
    ch.model->reserve(B, T, true, cfg.head_chunk, ch.slots);
    ch.optim = std::make_unique<AdamW>(ch.model->layout(), acfg, ch.store->opt_begin(), ch.store->opt_end());
    // Replicated tensors have identical gradients on every tp rank, and the tied embedding
    // is on the first and the last chunk: count each once in the gradient norm.
    std::vector<std::pair<int64_t, int64_t>> skip;
    for (const ParamTensor& t : ch.model->layout().tensors()) {
      if (tp > 1 && tp_rank != 0 && t.split == TpSplit::kReplicated) skip.emplace_back(t.offset, t.offset + t.numel);
      else if (ch.global != 0 && (t.kind == ParamKind::kWte || t.kind == ParamKind::kWpe)) {
        skip.emplace_back(t.offset, t.offset + t.numel);
      }
    }
    ch.store->set_norm_skip(std::move(skip));
  }
  const int slots = pp > 1 ? std::max(1, max_in_flight(actions)) : 1;  // (micro-batch, chunk) pairs in flight
  double pipe_busy = 0.0, pipe_wait = 0.0;
  int pipe_in_flight_peak = 0;  // measured: most (micro-batch, chunk) activation sets held at once
  int64_t n = 0;  // this rank's parameters (its tensor-parallel part of its chunks)
  for (const Chunk& ch : chunks) n += ch.n();
  const int64_t n_full = full_layout.total();
  // Whole-model buffer (tp = 1 layout) <-> one chunk's part on this rank, through the tp group.
  auto to_local = [&](const Chunk& ch, const float* whole, float* local) {
    if (tp == 1 && pp == 1) {
      std::memcpy(local, whole, static_cast<size_t>(ch.n()) * sizeof(float));
    } else {
      extract_tp_part(ch.model->layout(), full_layout, whole, local);
    }
  };
  auto to_whole = [&](const Chunk& ch, const float* local, float* whole) {
    const int64_t nc = ch.n();
    if (tp == 1) {
      if (pp == 1) {
        std::memcpy(whole, local, static_cast<size_t>(nc) * sizeof(float));
      } else {
        insert_tp_part(ch.model->layout(), full_layout, local, whole);
      }
      return;
    }
    Buffer<float> parts(static_cast<size_t>(nc * tp));
    tpc.all_gather(local, parts.data(), nc, CommDType::kF32);
    for (int r = 0; r < tp; ++r) {
      insert_tp_part(ParamLayout(mc, tp, r, ch.spec), full_layout, parts.data() + r * nc, whole);
    }
  };
  // The whole model from every chunk of every stage: each contributes its tensors (the tied
  // embedding from chunk 0 only) and the pipeline group sums them. `local(ch, buf)` fills a
  // chunk's part.
  auto to_whole_model = [&](const std::function<void(Chunk&, float*)>& local, float* whole) {
    if (pp == 1) {
      Buffer<float> part(static_cast<size_t>(chunks[0].n()));
      local(chunks[0], part.data());
      to_whole(chunks[0], part.data(), whole);
      return;
    }
    std::fill(whole, whole + n_full, 0.0f);
    // Last chunk first: a later chunk's copy of the tied embedding is cleared before chunk 0
    // (if here) writes the one that counts.
    for (int c = vchunks - 1; c >= 0; --c) {
      Chunk& ch = chunks[c];
      Buffer<float> part(static_cast<size_t>(ch.n()));
      local(ch, part.data());
      to_whole(ch, part.data(), whole);
      if (ch.global != 0) {
        for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight"}) {
          const ParamTensor* t = full_layout.find(name);
          std::fill(whole + t->offset, whole + t->offset + t->numel, 0.0f);
        }
      }
    }
    ppc.all_reduce_sum(whole, n_full);
  };

  // A chunk's parameters from fp32 values (this rank's part, whole): with 16-bit storage the
  // optimizer keeps the fp32 values of its range as master weights, the model the rounded ones.
  auto load_params = [&](Chunk& ch, float* fp32) {
    ch.optim->use_master_weights(prec, fp32 + ch.optim->begin());
    backend->round_to(fp32, ch.n(), prec);
    ch.store->load_full_params(fp32);
  };
  int64_t start_step = 0;
  int64_t opt_steps = 0;  // optimizer updates done (fp16 overflow steps are skipped)
  // Loss scaling (Micikevicius et al. 2018): fp16 scales the loss so that small gradients stay
  // representable; dynamic (loss_scale 0) halves the scale and skips the step on overflow and
  // doubles it after loss_scale_window good steps (as DeepSpeed's DynamicLossScaler).
  const bool dynamic_scale = prec == Precision::kFp16 && cfg.loss_scale == 0.0;
  double scale = cfg.loss_scale > 0 ? cfg.loss_scale : dynamic_scale ? cfg.initial_loss_scale : 1.0;
  int64_t good_steps = 0;
  if (!resume_dir.empty()) {
    Buffer<float> whole(static_cast<size_t>(n_full));
    load_checkpoint_params(resume_dir, full_layout, whole.data());
    Buffer<float> m(static_cast<size_t>(n_full)), v(static_cast<size_t>(n_full));
    if (!load_checkpoint_optimizer(resume_dir, full_layout, m.data(), v.data())) {
      throw_input("{}: the checkpoint has no optimizer state ({}), so the run cannot continue exactly", resume_dir,
                  kCheckpointOptimizerFile);
    }
    for (Chunk& ch : chunks) {
      Buffer<float> local(static_cast<size_t>(ch.n()));
      to_local(ch, whole.data(), local.data());
      load_params(ch, local.data());
      AdamW& optim = *ch.optim;  // (its shard of the moments)
      const size_t len = static_cast<size_t>(optim.end() - optim.begin());
      to_local(ch, m.data(), local.data());
      std::memcpy(optim.exp_avg(), local.data() + optim.begin(), len * sizeof(float));
      to_local(ch, v.data(), local.data());
      std::memcpy(optim.exp_avg_sq(), local.data() + optim.begin(), len * sizeof(float));
    }
    start_step = resume_state["step"].get<int64_t>();
    opt_steps = resume_state.value("optimizer_steps", start_step);
    if (dynamic_scale && resume_state.contains("loss_scale")) {
      scale = resume_state["loss_scale"].get<double>();
      good_steps = resume_state.value("loss_scale_good_steps", int64_t{0});
    }
    if (rank0) truncate_metrics((fs::path(cfg.out) / "metrics.jsonl").string(), start_step);
    log_info("resuming from {} at step {}", resume_dir, start_step);
  } else {
    for (Chunk& ch : chunks) {
      if (dcfg.zero == 3) {
        init_params_range(ch.model->layout(), seed, ch.store->shard_begin(), ch.store->shard_end(),
                          ch.store->opt_params());
        ch.optim->use_master_weights(prec, ch.store->opt_params());
        backend->round_to(ch.store->opt_params(), ch.store->shard_end() - ch.store->shard_begin(), prec);
      } else {
        Buffer<float> full(static_cast<size_t>(ch.n()));
        init_params(ch.model->layout(), seed, full.data());
        load_params(ch, full.data());
      }
    }
  }
  if (rank0) write_file_atomic((fs::path(cfg.out) / "config.toml").string(), cfg.to_toml());

  // Memory of this rank, by category (bytes), summed over its chunks.
  DataParallelMemory dm;
  int64_t unpadded = 0;
  for (const Chunk& ch : chunks) {
    const DataParallelMemory d = ch.store->memory();
    dm.params_transient += d.params_transient;
    dm.grads_transient += d.grads_transient;
    unpadded += ch.model->layout().count_unpadded();
  }
  // The closed-form prediction of the same categories (src/plan/weft_memory.h).
  plan::WeftRunShape run_shape;
  run_shape.model = mc;
  run_shape.seq = T;
  run_shape.micro_batches = accum;
  run_shape.head_chunk = cfg.head_chunk;
  run_shape.prefetch = static_cast<int>(cfg.prefetch);
  run_shape.layout = pl;
  run_shape.master_weights = prec != Precision::kFp32;
  const plan::MemoryBreakdown predicted = plan::weft_rank_memory(run_shape, stage, dp_rank);
  if (step_prediction) {
    log_info("planner ({}): predicted step {:.1f} ms = compute {:.1f} + tp comm {:.1f} + pipeline bubble/p2p {:.1f} + dp exposed {:.1f} + optimizer {:.1f}",
             system_path, step_prediction->step_time_s * 1e3, step_prediction->time.compute * 1e3,
             step_prediction->time.tp_comm * 1e3, step_prediction->time.pp_bubble * 1e3,
             step_prediction->time.dp_exposed * 1e3, step_prediction->time.optimizer * 1e3);
  } else if (system_path.empty()) {
    log_info("planner: no system file (run `weft calibrate --out systems/local.toml` or pass --system) - step time not predicted");
  }

  // Peaks from here on: the training steps (set-up's and checkpoints' staging buffers are not
  // part of a step).
  memory_tracker().reset_peaks();
  auto memory_json = [&]() {
    const MemorySnapshot ms = memory_tracker().snapshot();
    return nlohmann::json{{"params", ms[MemCategory::kParams]},
                          {"grads", ms[MemCategory::kGrads]},
                          {"optimizer", ms[MemCategory::kOptimizer]},
                          {"activations", ms[MemCategory::kActivations]},
                          {"activations_peak", ms.peak_of(MemCategory::kActivations)},
                          {"workspace_peak", ms.peak_of(MemCategory::kWorkspace)},
                          {"comm_peak", ms.peak_of(MemCategory::kComm)},
                          {"other_peak", ms.peak_of(MemCategory::kOther)},
                          {"total_peak", ms.total_peak},
                          {"params_transient", dm.params_transient},
                          {"grads_transient", dm.grads_transient}};
  };
  log_info("weft train: model {} ({} layers, {} heads, hidden {}, context {}), {:.2f}M parameters on this rank ({:.2f}M without padding)",
           mc.name, mc.n_layer, mc.n_head, mc.n_embd, mc.n_ctx, n / 1e6, unpadded / 1e6);
  if (recompute != Recompute::kNone) {
    log_info("activation recompute: {}{}", recompute_name(recompute),
             cfg.recompute_layers > 0 ? fmt::format(" ({} layers per stage)", cfg.recompute_layers) : std::string());
  }
  log_info("layout: {}, zero {}; {} threads per rank", grid.layout().describe(), dcfg.zero, threads);
  if (pp > 1) {
    std::string parts;
    for (const Chunk& ch : chunks) {
      parts += fmt::format("{}layers {}-{}{}{}", parts.empty() ? "" : ", ", ch.spec.first_layer,
                           ch.spec.first_layer + ch.spec.num_layers - 1, ch.spec.embedding ? " + embedding" : "",
                           ch.spec.head ? " + head" : "");
    }
    log_info("pipeline: schedule {}, stage {} of {}, {} chunk(s): {}; {} (micro-batch, chunk) forwards in flight at most",
             schedule_name(schedule), stage, pp, vchunks, parts, slots);
  }
  log_info("data: {} train tokens ({} windows of {}); global batch {} = dp {} x {} micro-batches of {}",
           train_data.size(), train_data.num_windows(T), T, G, dp, accum, B);
  log_info("memory predicted for this rank: params {:.1f} MiB, grads {:.1f} MiB, optimizer {:.1f} MiB, activations {:.1f} MiB, workspace {:.1f} MiB, comm {:.1f} MiB",
           predicted.params / 1048576.0, predicted.grads / 1048576.0, predicted.optimizer / 1048576.0,
           predicted.activations / 1048576.0, predicted.workspace / 1048576.0, predicted.comm / 1048576.0);

  std::ofstream metrics;
  if (rank0) {
    metrics.open((fs::path(cfg.out) / "metrics.jsonl").string(), std::ios::app);
    if (!metrics) throw_runtime("cannot open {}/metrics.jsonl", cfg.out);
  }
  const std::string trace_path = (fs::path(cfg.out) / fmt::format("trace-rank{}.jsonl", world.rank())).string();
  if (cfg.trace && start_step == 0) fs::remove(trace_path);

  std::vector<int32_t> inputs(B * T), targets(B * T);
  // Validation: the first val_batches * micro_batch windows, dealt round-robin over dp ranks.
  // Every rank runs the same number of forward passes (ZeRO-3 gathers parameters inside
  // them); a rank without windows left runs one on window 0 and ignores it.
  // Pipeline receive buffers (one micro-batch of activations or of their gradients).
  const int64_t act_count = (cfg.sequence_parallel && tp > 1 ? B * T / tp : B * T) * mc.n_embd;
  // Scatter-gather (Narayanan et al. 2021 sec. 4.1): with tp > 1 and no sequence parallelism
  // every tp rank of a stage holds the same activations, so each sends only its 1/tp slice and
  // the receiving stage all-gathers the slices over tp. (With sequence parallelism a rank's
  // rows are its slice already.)
  const bool pp_scatter = pp > 1 && tp > 1 && !(cfg.sequence_parallel && tp > 1);
  // What a message of `count` activations carries: this rank's slice of them.
  auto part_of = [&](int64_t count) { return pp_scatter ? count / tp : count; };
  auto slice_of = [&](auto* buf, int64_t count) { return pp_scatter ? buf + tp_rank * part_of(count) : buf; };
  // After a receive into slice_of(buf, count): the whole of buf, from every tp rank's slice.
  auto gather_slices = [&](float* buf, int64_t count) {
    if (pp_scatter) tpc.all_gather(slice_of(buf, count), buf, part_of(count), CommDType::kF32);
  };
  const int64_t send_count = part_of(act_count);
  // Receive buffers: the step keeps kRecvAhead receives posted ahead of the action that needs
  // them (so the transfer runs while the stage computes) plus the one being consumed.
  constexpr int kRecvAhead = kPipeRecvAhead;
  std::vector<Buffer<float>> rbuf;
  for (int b = 0; b < (pp > 1 ? kRecvAhead + 1 : 0); ++b) rbuf.emplace_back(static_cast<size_t>(act_count), MemCategory::kComm);

  struct SendBuf {
    Buffer<float> data;
    CommHandle handle;
  };
  std::deque<SendBuf> send_pool;  // pipeline sends in flight (grows to the most outstanding)
  auto evaluate = [&]() -> double {
    const int64_t windows = std::min(val_data->num_windows(T), cfg.val_batches * G);
    std::vector<int64_t> mine;
    for (int64_t w = dp_rank; w < windows; w += dp) mine.push_back(w);
    const int64_t most = (windows + dp - 1) / dp;
    const int64_t passes = (most + B - 1) / B;
    double sums[2] = {0.0, 0.0};  // token-loss sum, tokens
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t i0 = p * B;
      const int64_t nb = std::clamp<int64_t>(static_cast<int64_t>(mine.size()) - i0, 0, B);
      for (int64_t i = 0; i < std::max<int64_t>(nb, 1); ++i) {
        val_data->window(nb > 0 ? mine[i0 + i] : 0, T, inputs.data() + i * T, targets.data() + i * T);
      }
      const int64_t rows = std::max<int64_t>(nb, 1);
      double l = 0.0;
      if (pp == 1) {
        l = chunks[0].model->forward_loss(inputs.data(), targets.data(), rows, T) * static_cast<double>(rows * T);
      } else {
        // Forward through the pipeline's chunks in model order; the last chunk has the loss.
        const int64_t count = (cfg.sequence_parallel && tp > 1 ? rows * T / tp : rows * T) * mc.n_embd;
        for (Chunk& ch : chunks) {
          float* x = rbuf[0].data();
          if (ch.global > 0) {
            ppc.recv(slice_of(x, count), part_of(count), CommDType::kF32, (stage + pp - 1) % pp, 0);
            gather_slices(x, count);
          }
          ch.model->stage_forward(0, inputs.data(), x, rows, T, false);
          if (ch.global < K - 1) {
            ppc.send(slice_of(ch.model->stage_output(0), count), part_of(count), CommDType::kF32,
                     (stage + 1) % pp, 0);
          }
          if (ch.spec.head) l = ch.model->stage_loss(0, targets.data(), rows, T);
        }
      }
      if (nb > 0) {
        sums[0] += l * (static_cast<double>(nb) / static_cast<double>(rows));
        sums[1] += static_cast<double>(nb * T);
      }
    }
    if (pp > 1) ppc.all_reduce_sum(sums, 1);  // the loss lives on the last stage
    dpc.all_reduce_sum(sums, 2);
    return sums[0] / sums[1];
  };

  TrainResult res;
  res.first_step = start_step;
  res.steps_done = start_step;
  const int64_t decay_steps = cfg.lr_decay_steps > 0 ? cfg.lr_decay_steps : cfg.steps;
  const float token_scale = 1.0f / static_cast<float>(G * T);  // the loss is the mean over the batch's tokens
  double time_sum = 0.0;
  int64_t timed_steps = 0;
  MemorySnapshot step_snapshot;  // after the last step, before its checkpoint
  const double flops_per_token = GPT::train_flops_per_token(mc, T);

  auto save = [&](int64_t step_done) {
    const std::string dir = (fs::path(cfg.out) / step_dir_name(step_done)).string();
    // Gathered: every rank contributes its shards (dp, then tp); rank 0 writes one
    // layout-free checkpoint of the whole model.
    Buffer<float> full(static_cast<size_t>(n_full)), m(static_cast<size_t>(n_full)), v(static_cast<size_t>(n_full));
    // The fp32 master weights when the model computes with 16-bit copies.
    to_whole_model(
        [](Chunk& ch, float* out) {
          if (ch.optim->master()) {
            ch.store->gather_opt_range(ch.optim->master(), out);
          } else {
            ch.store->gather_full_params(out);
          }
        },
        full.data());
    to_whole_model([](Chunk& ch, float* out) { ch.store->gather_opt_range(ch.optim->exp_avg(), out); }, m.data());
    to_whole_model([](Chunk& ch, float* out) { ch.store->gather_opt_range(ch.optim->exp_avg_sq(), out); }, v.data());
    if (rank0) {
      CheckpointData d;
      d.layout = &full_layout;
      d.params = full.data();
      d.exp_avg = m.data();
      d.exp_avg_sq = v.data();
      d.trainer = {{"step", step_done}, {"seed", cfg.seed}, {"global_batch", G}, {"seq_len", T},
                   {"tokens", step_done * G * T}, {"data", cfg.data}, {"model", mc.name},
                   {"optimizer_steps", opt_steps}, {"precision", precision_name(prec)}, {"loss_scale", scale},
                   {"loss_scale_good_steps", good_steps},
                   {"layout", {{"tp", spec.tp}, {"pp", spec.pp}, {"dp", dp}, {"zero", dcfg.zero}}}};
      save_checkpoint(dir, d);
      if (cfg.keep_last > 0) {
        auto all = list_checkpoints(cfg.out);
        for (size_t i = 0; i + cfg.keep_last < all.size(); ++i) fs::remove_all(all[i].second);
      }
      log_info("checkpoint {}", dir);
    }
    res.last_checkpoint = dir;
    world.barrier();
  };

  if (val_data && start_step == 0 && cfg.steps > 0) {
    const double vl = evaluate();
    res.first_val_loss = res.last_val_loss = vl;
    if (rank0) metrics << nlohmann::json{{"step", 0}, {"val_loss", vl}}.dump() << "\n" << std::flush;
    log_info("step {:>5} | val loss {:.4f}", 0, vl);
  }

  // Fault injection for the failure tests: WEFT_FAULT="stall:RANK:STEP" or "exit:RANK:STEP".
  std::string fault_kind;
  int fault_rank = -1;
  int64_t fault_step = -1;
  if (const char* f = std::getenv("WEFT_FAULT")) {
    char kind[16] = {0};
    long long st = -1;
    if (std::sscanf(f, "%15[a-z]:%d:%lld", kind, &fault_rank, &st) == 3) {
      fault_kind = kind;
      fault_step = st;
    }
  }
  for (int64_t step = start_step; step < cfg.steps; ++step) {
    if (world.rank() == fault_rank && step + 1 == fault_step) {
      if (fault_kind == "exit") std::_Exit(3);
      if (fault_kind == "stall") std::this_thread::sleep_for(std::chrono::hours(1));
    }
    const auto t0 = clock::now();
    tracer.set_step(step + 1);
    for (Chunk& ch : chunks) {
      ch.store->take_exposed_seconds();
      ch.store->begin_step();
    }
    double loss_sum = 0.0;  // this rank's token-loss sum
    const float loss_scale = static_cast<float>(scale) * token_scale;  // scale: a power of two (or the user's)
    const double pipe_t0 = Tracer::now();
    double pipe_span = 0.0;
    if (pp > 1) {
      // Walk this stage's schedule: a forward of global chunk g receives its input from the
      // stage holding chunk g-1 and sends its output on to the one holding g+1; a backward
      // receives the gradient of its output from there and sends its input's gradient back.
      // Sends copy into pooled buffers and are asynchronous, so computing never waits on a
      // send; the step waits for all of them at its end. Receives are posted kRecvAhead
      // actions ahead, so a message travels while the stage computes the actions before it.
      // Tags: 2 * (micro-batch * K + receiving chunk) + direction.
      pipe_busy = pipe_wait = 0.0;
      pipe_in_flight_peak = 0;
      int in_flight = 0;
      auto send = [&](const float* src, int peer, int tag) {
        SendBuf* sb = nullptr;
        for (SendBuf& b : send_pool) {
          if (!b.handle || b.handle->test()) {
            b.handle.reset();
            sb = &b;
            break;
          }
        }
        if (!sb) {
          send_pool.emplace_back();
          sb = &send_pool.back();
          sb->data.set_category(MemCategory::kComm);
          sb->data.resize(static_cast<size_t>(send_count));
        }
        std::memcpy(sb->data.data(), slice_of(src, act_count),
                    static_cast<size_t>(send_count) * sizeof(float));
        sb->handle = ppc.isend(sb->data.data(), send_count, CommDType::kF32, peer, tag);
      };
      const int prev = (stage + pp - 1) % pp, next = (stage + 1) % pp;
      // The step's receives in schedule order: (peer, tag) of each action that needs one.
      struct RecvSpec {
        int peer, tag;
      };
      std::vector<RecvSpec> rq;
      for (const PipeAction& a : actions) {
        const int mb = a.micro_batch, g = chunks[static_cast<size_t>(a.chunk)].global;
        if (a.kind == PipeAction::kForward && g > 0) rq.push_back({prev, 2 * (mb * K + g)});
        if (a.kind == PipeAction::kBackward && g < K - 1) rq.push_back({next, 2 * (mb * K + g) + 1});
      }
      // Posted ahead, each into a free buffer (its slice under the scatter-gather).
      struct Posted {
        int buf;
        CommHandle handle;
      };
      std::deque<Posted> posted;
      std::vector<int> free_bufs;
      for (int b = kRecvAhead; b >= 0; --b) free_bufs.push_back(b);
      size_t next_recv = 0;
      auto post_more = [&]() {
        while (next_recv < rq.size() && static_cast<int>(posted.size()) < kRecvAhead && !free_bufs.empty()) {
          const int b = free_bufs.back();
          free_bufs.pop_back();
          const RecvSpec& r = rq[next_recv++];
          float* dst = slice_of(rbuf[static_cast<size_t>(b)].data(), act_count);
          posted.push_back({b, ppc.irecv(dst, send_count, CommDType::kF32, r.peer, r.tag)});
        }
      };
      // The next posted receive, complete (and all-gathered over tp under the scatter-gather).
      auto take_recv = [&]() -> int {
        WEFT_CHECK(!posted.empty(), "pipeline: no receive posted for stage {}", stage);
        Posted pr = std::move(posted.front());
        posted.pop_front();
        pr.handle->wait();
        gather_slices(rbuf[static_cast<size_t>(pr.buf)].data(), act_count);
        post_more();  // keep the transfers ahead running while this one is used
        return pr.buf;
      };
      auto release_recv = [&](int b) {
        free_bufs.push_back(b);
        post_more();
      };
      post_more();
      for (size_t i = 0; i < actions.size(); ++i) {
        const PipeAction& a = actions[i];
        Chunk& ch = chunks[static_cast<size_t>(a.chunk)];
        const int mb = a.micro_batch, g = ch.global;
        train_data.sample_batch(seed, step, G, dp_rank * per_rank + mb * B, B, static_cast<int>(T), inputs.data(),
                                targets.data());
        if (a.kind == PipeAction::kForward) {
          WEFT_CHECK(!ch.free_slots.empty(), "pipeline chunk {}: no free activation slot", g);
          const int slot = ch.free_slots.back();
          ch.free_slots.pop_back();
          ch.slot_of[mb] = slot;
          pipe_in_flight_peak = std::max(pipe_in_flight_peak, ++in_flight);
          const double w0 = Tracer::now();
          const int rb = g > 0 ? take_recv() : -1;
          const double c0 = Tracer::now();
          pipe_wait += c0 - w0;
          ch.model->stage_forward(slot, inputs.data(), rb >= 0 ? rbuf[static_cast<size_t>(rb)].data() : nullptr, B, T,
                                  true);
          pipe_busy += Tracer::now() - c0;
          if (rb >= 0) release_recv(rb);
          if (g < K - 1) send(ch.model->stage_output(slot), next, 2 * (mb * K + g + 1));
        } else {
          const int slot = ch.slot_of.at(mb);
          ch.store->begin_micro_batch(static_cast<int>(i) == ch.last_backward);
          const double w0 = Tracer::now();
          const int rb = g < K - 1 ? take_recv() : -1;
          const double c0 = Tracer::now();
          pipe_wait += c0 - w0;
          loss_sum += ch.model->stage_backward(slot, inputs.data(), targets.data(),
                                               rb >= 0 ? rbuf[static_cast<size_t>(rb)].data() : nullptr, B, T,
                                               loss_scale);
          pipe_busy += Tracer::now() - c0;
          if (rb >= 0) release_recv(rb);
          if (g > 0) send(ch.model->stage_input_grad(), prev, 2 * (mb * K + g - 1) + 1);
          ch.slot_of.erase(mb);
          ch.free_slots.push_back(slot);
          --in_flight;
        }
        ppc.progress();
      }
      for (SendBuf& b : send_pool) {
        if (b.handle) b.handle->wait(), b.handle.reset();
      }
      pipe_span = Tracer::now() - pipe_t0;
    }
    GPT& model = *chunks[0].model;
    DataParallel& store = *chunks[0].store;
    for (int64_t m = 0; m < (pp > 1 ? 0 : accum); ++m) {
      store.begin_micro_batch(m == accum - 1);
      train_data.sample_batch(seed, step, G, dp_rank * per_rank + m * B, B, static_cast<int>(T), inputs.data(),
                              targets.data());
      loss_sum += static_cast<double>(model.forward_backward(inputs.data(), targets.data(), B, T, loss_scale)) * B * T;
    }
    double norm_sq = 0.0;
    for (Chunk& ch : chunks) {
      ch.store->finish_step_gradients();
      norm_sq += ch.store->grad_norm_sq();
    }
    if (tp > 1) tpc.all_reduce_sum(&norm_sq, 1);
    if (pp > 1) {
      ppc.all_reduce_sum(&norm_sq, 1);
      ppc.all_reduce_sum(&loss_sum, 1);  // the loss lives on the last stage
    }
    const double norm = std::sqrt(norm_sq) / scale;  // of the unscaled gradients
    if (dp > 1) dpc.all_reduce_sum(&loss_sum, 1);
    const double loss = loss_sum / static_cast<double>(G * T);
    const double step_scale = scale;
    bool skipped = false;
    if (dynamic_scale && std::isfinite(loss) && !std::isfinite(norm)) {
      // fp16 overflow: skip this update, halve the scale (every rank sees the same norm).
      skipped = true;
      scale = std::max(cfg.min_loss_scale, scale / 2);
      good_steps = 0;
      log_warn("step {}: fp16 gradient overflow at loss scale {}; update skipped, scale now {}", step + 1, step_scale,
               scale);
    } else if (!std::isfinite(loss) || !std::isfinite(norm)) {
      throw_runtime("step {}: loss {} / gradient norm {} is not finite; stopping (last checkpoint: {})", step + 1, loss,
                    norm, res.last_checkpoint.empty() ? "none" : res.last_checkpoint);
    }
    const float lr = lr_at(step, static_cast<float>(cfg.lr), cfg.warmup_steps, decay_steps,
                           static_cast<float>(cfg.min_lr_ratio));
    double exposed = 0.0;
    if (!skipped) {
      ++opt_steps;
      // Clipping and unscaling in one factor on the fly.
      const float grad_scale = static_cast<float>(clip_coefficient(norm, cfg.grad_clip) / step_scale);
      for (Chunk& ch : chunks) {
        ch.optim->step(*backend, ch.store->opt_params(), ch.store->opt_grads(), lr, opt_steps, grad_scale);
        ch.store->after_optimizer_step();
      }
      if (dynamic_scale && ++good_steps >= cfg.loss_scale_window) {
        scale *= 2;
        good_steps = 0;
      }
    }
    for (Chunk& ch : chunks) exposed += ch.store->take_exposed_seconds();
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    const int64_t done = step + 1;
    const nlohmann::json step_memory = memory_json();
    step_snapshot = memory_tracker().snapshot();
    // The first step of a process includes one-time costs (page faults, BLAS buffers).
    if (done > start_step + 1 || cfg.steps - start_step == 1) {
      time_sum += dt;
      ++timed_steps;
    }
    const double tps = static_cast<double>(G * T) / dt;
    const double mean_dt = timed_steps > 0 ? time_sum / timed_steps : dt;
    res.last_loss = loss;
    res.steps_done = done;
    nlohmann::json line = {{"step", done}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                           {"tokens_per_s", tps}, {"ms", dt * 1e3}, {"tokens", done * G * T},
                           {"model_flops_per_s", flops_per_token * tps}, {"memory", step_memory},
                           {"dp_exposed_ms", exposed * 1e3}};
    if (prec != Precision::kFp32 || cfg.loss_scale > 0) {
      line["precision"] = precision_name(prec);
      if (dynamic_scale || cfg.loss_scale > 0) line["loss_scale"] = step_scale;
      if (skipped) line["skipped"] = true;
    }
    if (pp > 1) {
      // Per stage: compute time, time blocked receiving from a neighbour, and the idle rest of
      // the schedule's span (the bubble), gathered from every stage.
      double mine[5] = {pipe_busy, pipe_wait, pipe_span, static_cast<double>(pipe_in_flight_peak),
                        static_cast<double>(slots)};
      std::vector<double> all(5 * pp);
      ppc.all_gather(mine, all.data(), 5, CommDType::kF64);
      nlohmann::json busy = nlohmann::json::array(), wait = nlohmann::json::array(), idle = nlohmann::json::array();
      nlohmann::json in_flight = nlohmann::json::array(), planned = nlohmann::json::array();
      for (int s2 = 0; s2 < pp; ++s2) {
        busy.push_back(all[5 * s2] * 1e3);
        wait.push_back(all[5 * s2 + 1] * 1e3);
        idle.push_back((all[5 * s2 + 2] - all[5 * s2]) * 1e3);
        in_flight.push_back(static_cast<int>(all[5 * s2 + 3]));
        planned.push_back(static_cast<int>(all[5 * s2 + 4]));
      }
      double max_span = 0.0, sum_busy = 0.0;
      for (int s2 = 0; s2 < pp; ++s2) max_span = std::max(max_span, all[5 * s2 + 2]), sum_busy += all[5 * s2];
      line["pipeline"] = {{"schedule", cfg.schedule}, {"stages", pp}, {"virtual_stages", vchunks}, {"micro_batches", accum},
                          {"busy_ms", busy}, {"p2p_wait_ms", wait}, {"idle_ms", idle},
                          {"bubble_fraction", sum_busy > 0 ? (pp * max_span - sum_busy) / sum_busy : 0.0},
                          {"bubble_predicted", static_cast<double>(pp - 1) / static_cast<double>(vchunks * accum)},
                          {"in_flight_peak", in_flight}, {"in_flight_planned", planned}};
    }
    if (cfg.trace) {
      const TraceSummary ts = tracer.summary();
      nlohmann::json comm = nlohmann::json::object();
      for (const auto& [axis, a] : ts.by_axis) {
        comm[axis] = {{"calls", a.total.calls}, {"bytes", a.total.bytes}, {"time_s", a.total.time_s}};
      }
      line["comm"] = comm;
      tracer.write_jsonl(trace_path);
      tracer.clear();
    }
    if (rank0) metrics << line.dump() << "\n" << std::flush;
    if (done % cfg.log_every == 0 || done == cfg.steps) {
      log_info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | {:.1f} ms{} | ETA {}", done,
               cfg.steps, loss, lr, norm, tps, dt * 1e3,
               dp > 1 ? fmt::format(" (dp comm exposed {:.1f} ms)", exposed * 1e3) : std::string(),
               format_duration(mean_dt * (cfg.steps - done)));
    }
    const bool last = done == cfg.steps;
    if (val_data && ((cfg.val_every > 0 && done % cfg.val_every == 0) || last)) {
      const double vl = evaluate();
      if (res.first_val_loss < 0) res.first_val_loss = vl;
      res.last_val_loss = vl;
      if (rank0) metrics << nlohmann::json{{"step", done}, {"val_loss", vl}}.dump() << "\n" << std::flush;
      log_info("step {:>5} | val loss {:.4f}", done, vl);
    }
    if ((cfg.ckpt_every > 0 && done % cfg.ckpt_every == 0) || last) {
      save(done);
      memory_tracker().reset_peaks();  // the checkpoint's staging buffers are gone
    }
  }
  res.tokens_per_s = timed_steps > 0 ? static_cast<double>(G * T) * timed_steps / time_sum : 0.0;
  if (res.steps_done > start_step) {
    // Memory per rank: measured (the training steps' peaks) beside the closed-form model.
    const MemorySnapshot& ms = step_snapshot;
    const double mine[17] = {static_cast<double>(stage), static_cast<double>(tp_rank), static_cast<double>(dp_rank),
                             static_cast<double>(ms[MemCategory::kParams]), static_cast<double>(ms[MemCategory::kGrads]),
                             static_cast<double>(ms[MemCategory::kOptimizer]),
                             static_cast<double>(ms.peak_of(MemCategory::kActivations)),
                             static_cast<double>(ms.peak_of(MemCategory::kWorkspace)),
                             static_cast<double>(ms.peak_of(MemCategory::kComm)), static_cast<double>(ms.total_peak),
                             predicted.params, predicted.grads, predicted.optimizer, predicted.activations,
                             predicted.workspace, predicted.comm, predicted.total};
    std::vector<double> all(static_cast<size_t>(17 * world.size()));
    world.all_gather(mine, all.data(), 17, CommDType::kF64);
    if (rank0) {
      static const char* names[7] = {"params", "grads", "optimizer", "activations", "workspace", "comm", "total"};
      nlohmann::json report = nlohmann::json::array();
      for (int r = 0; r < world.size(); ++r) {
        const double* a = all.data() + 17 * r;
        nlohmann::json meas, pred;
        for (int k = 0; k < 7; ++k) {
          meas[names[k]] = static_cast<int64_t>(a[3 + k]);
          pred[names[k]] = static_cast<int64_t>(a[10 + k]);
        }
        report.push_back({{"rank", r}, {"stage", static_cast<int>(a[0])}, {"tp_rank", static_cast<int>(a[1])},
                          {"dp_rank", static_cast<int>(a[2])}, {"measured", meas}, {"predicted", pred}});
        if (a[1] != 0 || a[2] != 0) continue;  // one table per pipeline stage
        std::string table = fmt::format("memory of rank {} (stage {}), MiB: category, predicted, measured (peak), error",
                                        r, static_cast<int>(a[0]));
        for (int k = 0; k < 7; ++k) {
          const double p = a[10 + k], m = a[3 + k];
          table += fmt::format("\n  {:<12} {:>10.2f} {:>10.2f} {:>8}", names[k], p / 1048576.0, m / 1048576.0,
                               m > 0 ? fmt::format("{:+.1f}%", 100.0 * (p - m) / m) : std::string("-"));
        }
        log_info("{}", table);
      }
      nlohmann::json final_line = {{"step", res.steps_done}, {"memory_report", report}};
      if (step_prediction && timed_steps > 0) {
        const double measured = time_sum / static_cast<double>(timed_steps);
        const plan::StepTime& t = step_prediction->time;
        final_line["step_time_report"] = {
            {"system", system_path}, {"measured_s", measured}, {"predicted_s", step_prediction->step_time_s},
            {"predicted", {{"compute", t.compute}, {"tp_comm", t.tp_comm}, {"pp_bubble", t.pp_bubble},
                           {"dp_exposed", t.dp_exposed}, {"optimizer", t.optimizer}}}};
        log_info("step time: predicted {:.1f} ms, measured {:.1f} ms (mean of {} steps), error {:+.1f}%",
                 step_prediction->step_time_s * 1e3, measured * 1e3, timed_steps,
                 100.0 * (step_prediction->step_time_s - measured) / measured);
      }
      metrics << final_line.dump() << "\n" << std::flush;
    }
  }
  if (timed_steps > 0) {
    log_info("done: {} steps, {:.0f} tokens/s, {:.3f} GFLOP/s (model FLOPs)", res.steps_done - start_step,
             res.tokens_per_s, res.tokens_per_s * flops_per_token / 1e9);
  }

  if (cfg.sample_tokens > 0 && pp > 1) {
    log_info("sample: skipped (sampling runs on a whole model; use weft generate on the checkpoint)");
  } else if (cfg.sample_tokens > 0) {
    Tokenizer tok = Tokenizer::load_gpt2("");
    std::vector<int32_t> prompt = {tok.eot_token()};
    if (!cfg.sample_prompt.empty()) tok.encode_append(cfg.sample_prompt, prompt);
    SampleOptions so;
    so.max_tokens = cfg.sample_tokens;
    so.temperature = cfg.temperature;
    so.top_k = cfg.top_k;
    so.seed = seed;
    // Every rank samples (ZeRO-3 gathers need all of them); rank 0 prints. One sequence of
    // any length: without sequence parallelism.
    GPT& model = *chunks[0].model;
    model.set_tp(&tp_ops, false);
    auto out = sample_tokens(model, prompt, so);
    res.sample = tok.decode(std::vector<int32_t>(out.begin() + 1, out.end()));
    log_info("sample:\n{}", res.sample);
  }
  return res;
}

}  // namespace weft
