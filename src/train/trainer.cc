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
#include <map>
#include <regex>
#include <thread>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "comm/self_comm.h"
#include "comm/tracer.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/log.h"
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

  // The layout, validated in one place.
  GridSpec spec;
  spec.tp = static_cast<int>(cfg.tp);
  spec.pp = static_cast<int>(cfg.pp);
  if (cfg.dp == 0 && world.size() % (spec.tp * spec.pp) != 0) {
    throw_input("world size {} is not divisible by tp {} x pp {} = {} (dp is derived as world / (tp x pp))", world.size(),
                spec.tp, spec.pp, spec.tp * spec.pp);
  }
  spec.dp = cfg.dp > 0 ? static_cast<int>(cfg.dp) : std::max(1, world.size() / (spec.tp * spec.pp));
  spec.order = cfg.order;
  validate_layout(spec, world.size(), LayoutChecks{mc.n_head, mc.n_layer, G, B});
  const PipeSchedule schedule = parse_schedule(cfg.schedule);
  if (spec.pp > 1 && (schedule == PipeSchedule::kInterleaved || cfg.virtual_stages != 1)) {
    throw_input("schedule '{}' with {} virtual stages: this version runs the gpipe and 1f1b schedules (the interleaved "
                "schedule is planned, not yet executed); use --schedule 1f1b", cfg.schedule, cfg.virtual_stages);
  }
  if (spec.pp > 1 && cfg.zero > 1) {
    throw_input("zero {} with pp {}: ZeRO-2/3 reduce gradients every micro-batch and gather parameters per use, which "
                "pipelining would multiply; use zero 0 or 1 with pipeline parallelism", cfg.zero, spec.pp);
  }
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
  StageSpec stage_spec;  // this rank's pipeline stage
  {
    // Balanced by cost: the output head (2*C*Vp FLOPs per token against a layer's 24*C^2)
    // counts as Vp / (12 C) layers on the last stage.
    const double head_cost = static_cast<double>(mc.padded_vocab) / (12.0 * mc.n_embd);
    const std::vector<StageRange> parts = partition_layers(mc.n_layer, pp, 1, {}, head_cost);
    stage_spec = {parts[stage].first_layer, parts[stage].num_layers, stage == 0, stage == pp - 1};
  }
  // The first and the last stage share the tied embedding: one group per (tp, dp) position.
  const bool holds_embedding = pp > 1 && (stage == 0 || stage == pp - 1);
  std::unique_ptr<Communicator> tied =
      world.split(holds_embedding ? 1 + tp_rank + tp * dp_rank : 0, stage, "pp-embedding");
  const int64_t per_rank = G / dp, accum = per_rank / B;

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
  GPT model(mc, *backend, /*local_store=*/false, tp, tp_rank, stage_spec);
  model.set_tp(&tp_ops, cfg.sequence_parallel);
  if (cfg.sequence_parallel && tp == 1) log_warn("sequence_parallel has no effect with tp 1");
  const ParamLayout full_layout(mc);  // the whole model (tp = 1): checkpoints
  DataParallelConfig dcfg;
  dcfg.zero = static_cast<int>(cfg.zero);
  dcfg.bucket_bytes = static_cast<int64_t>(cfg.bucket_mb * 1048576.0);
  dcfg.prefetch = static_cast<int>(cfg.prefetch);
  DataParallel store(model.layout(), dpc, dcfg, *backend);
  model.set_store(&store);
  if (holds_embedding) store.set_tied_embedding(tied.get());
  // Pipeline: this stage's schedule of one step and the micro-batches it keeps in flight.
  const std::vector<PipeAction> actions = pp > 1 ? stage_schedule(schedule, pp, stage, static_cast<int>(accum))
                                                 : std::vector<PipeAction>{};
  const int slots = pp > 1 ? std::max(1, max_in_flight(actions)) : 1;
  double pipe_busy = 0.0, pipe_wait = 0.0;
  model.reserve(B, T, true, cfg.head_chunk, slots);
  AdamWConfig acfg;
  acfg.lr = static_cast<float>(cfg.lr);
  acfg.beta1 = static_cast<float>(cfg.beta1);
  acfg.beta2 = static_cast<float>(cfg.beta2);
  acfg.eps = static_cast<float>(cfg.eps);
  acfg.weight_decay = static_cast<float>(cfg.weight_decay);
  AdamW optim(model.layout(), acfg, store.opt_begin(), store.opt_end());
  const int64_t n = model.num_params();  // this tensor-parallel rank's part
  const int64_t n_full = full_layout.total();
  {
    // Replicated tensors have identical gradients on every tp rank, and the tied embedding
    // is on the first and the last stage: count each once in the gradient norm.
    std::vector<std::pair<int64_t, int64_t>> skip;
    for (const ParamTensor& t : model.layout().tensors()) {
      if (tp > 1 && tp_rank != 0 && t.split == TpSplit::kReplicated) skip.emplace_back(t.offset, t.offset + t.numel);
      else if (pp > 1 && stage != 0 && (t.kind == ParamKind::kWte || t.kind == ParamKind::kWpe)) {
        skip.emplace_back(t.offset, t.offset + t.numel);
      }
    }
    store.set_norm_skip(std::move(skip));
  }
  // Whole-model buffer (tp = 1 layout) <-> this rank's part, through the tp group.
  auto to_local = [&](const float* whole, float* local) {
    if (tp == 1 && pp == 1) {
      std::memcpy(local, whole, static_cast<size_t>(n) * sizeof(float));
    } else {
      extract_tp_part(model.layout(), full_layout, whole, local);
    }
  };
  auto to_whole = [&](const float* local, float* whole) {
    if (tp == 1) {
      if (pp == 1) {
        std::memcpy(whole, local, static_cast<size_t>(n) * sizeof(float));
      } else {
        insert_tp_part(model.layout(), full_layout, local, whole);
      }
      return;
    }
    Buffer<float> parts(static_cast<size_t>(n * tp));
    tpc.all_gather(local, parts.data(), n, CommDType::kF32);
    for (int r = 0; r < tp; ++r) {
      insert_tp_part(ParamLayout(mc, tp, r, stage_spec), full_layout, parts.data() + r * n, whole);
    }
  };
  // The whole model from every stage: each contributes its tensors (the tied embedding from the
  // first stage only) and the pipeline group sums them.
  auto to_whole_model = [&](const float* local, float* whole) {
    if (pp == 1) {
      to_whole(local, whole);
      return;
    }
    std::fill(whole, whole + n_full, 0.0f);
    if (tp == 1) {
      insert_tp_part(model.layout(), full_layout, local, whole);
    } else {
      to_whole(local, whole);
    }
    if (stage != 0) {
      for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight"}) {
        const ParamTensor* t = full_layout.find(name);
        std::fill(whole + t->offset, whole + t->offset + t->numel, 0.0f);
      }
    }
    ppc.all_reduce_sum(whole, n_full);
  };

  int64_t start_step = 0;
  if (!resume_dir.empty()) {
    Buffer<float> whole(static_cast<size_t>(n_full)), local(static_cast<size_t>(n));
    load_checkpoint_params(resume_dir, full_layout, whole.data());
    to_local(whole.data(), local.data());
    store.load_full_params(local.data());
    Buffer<float> m(static_cast<size_t>(n_full)), v(static_cast<size_t>(n_full));
    if (!load_checkpoint_optimizer(resume_dir, full_layout, m.data(), v.data())) {
      throw_input("{}: the checkpoint has no optimizer state ({}), so the run cannot continue exactly", resume_dir,
                  kCheckpointOptimizerFile);
    }
    const size_t len = static_cast<size_t>(optim.end() - optim.begin());
    to_local(m.data(), local.data());
    std::memcpy(optim.exp_avg(), local.data() + optim.begin(), len * sizeof(float));
    to_local(v.data(), local.data());
    std::memcpy(optim.exp_avg_sq(), local.data() + optim.begin(), len * sizeof(float));
    start_step = resume_state["step"].get<int64_t>();
    if (rank0) truncate_metrics((fs::path(cfg.out) / "metrics.jsonl").string(), start_step);
    log_info("resuming from {} at step {}", resume_dir, start_step);
  } else if (dcfg.zero == 3) {
    init_params_range(model.layout(), seed, store.shard_begin(), store.shard_end(), store.opt_params());
  } else {
    Buffer<float> full(static_cast<size_t>(n));
    init_params(model.layout(), seed, full.data());
    store.load_full_params(full.data());
  }
  if (rank0) write_file_atomic((fs::path(cfg.out) / "config.toml").string(), cfg.to_toml());

  // Memory of this rank, by category (bytes).
  const DataParallelMemory dm = store.memory();
  nlohmann::json memory = {{"params", dm.params}, {"grads", dm.grads}, {"optimizer", optim.state_bytes()},
                           {"activations", model.activation_bytes()}, {"comm", dm.comm},
                           {"params_transient", dm.params_transient}, {"grads_transient", dm.grads_transient}};
  log_info("weft train: model {} ({} layers, {} heads, hidden {}, context {}), {:.2f}M parameters ({:.2f}M without padding)",
           mc.name, mc.n_layer, mc.n_head, mc.n_embd, mc.n_ctx, n / 1e6, model.layout().count_unpadded() / 1e6);
  log_info("layout: {}, zero {}; {} threads per rank", grid.layout().describe(), dcfg.zero, threads);
  log_info("data: {} train tokens ({} windows of {}); global batch {} = dp {} x {} micro-batches of {}",
           train_data.size(), train_data.num_windows(T), T, G, dp, accum, B);
  log_info("memory per rank: params {:.1f} MiB, grads {:.1f} MiB, optimizer {:.1f} MiB, activations {:.1f} MiB, comm {:.1f} MiB",
           dm.params / 1048576.0, dm.grads / 1048576.0, optim.state_bytes() / 1048576.0,
           model.activation_bytes() / 1048576.0, dm.comm / 1048576.0);

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
  Buffer<float> xbuf(static_cast<size_t>(pp > 1 ? act_count : 1)), dybuf(static_cast<size_t>(pp > 1 ? act_count : 1));
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
        l = model.forward_loss(inputs.data(), targets.data(), rows, T) * static_cast<double>(rows * T);
      } else {
        // Forward through the pipeline; the last stage has the loss.
        const int64_t count = (cfg.sequence_parallel && tp > 1 ? rows * T / tp : rows * T) * mc.n_embd;
        if (stage > 0) ppc.recv(xbuf.data(), count, CommDType::kF32, stage - 1, 0);
        model.stage_forward(0, inputs.data(), xbuf.data(), rows, T, false);
        if (stage < pp - 1) ppc.send(model.stage_output(0), count, CommDType::kF32, stage + 1, 0);
        if (stage == pp - 1) l = model.stage_loss(0, targets.data(), rows, T);
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
  const float loss_scale = 1.0f / static_cast<float>(G * T);
  double time_sum = 0.0;
  int64_t timed_steps = 0;
  const double flops_per_token = GPT::train_flops_per_token(mc, T);

  auto save = [&](int64_t step_done) {
    const std::string dir = (fs::path(cfg.out) / step_dir_name(step_done)).string();
    // Gathered: every rank contributes its shards (dp, then tp); rank 0 writes one
    // layout-free checkpoint of the whole model.
    Buffer<float> local(static_cast<size_t>(n));
    Buffer<float> full(static_cast<size_t>(n_full)), m(static_cast<size_t>(n_full)), v(static_cast<size_t>(n_full));
    store.gather_full_params(local.data());
    to_whole_model(local.data(), full.data());
    store.gather_opt_range(optim.exp_avg(), local.data());
    to_whole_model(local.data(), m.data());
    store.gather_opt_range(optim.exp_avg_sq(), local.data());
    to_whole_model(local.data(), v.data());
    if (rank0) {
      CheckpointData d;
      d.layout = &full_layout;
      d.params = full.data();
      d.exp_avg = m.data();
      d.exp_avg_sq = v.data();
      d.trainer = {{"step", step_done}, {"seed", cfg.seed}, {"global_batch", G}, {"seq_len", T},
                   {"tokens", step_done * G * T}, {"data", cfg.data}, {"model", mc.name},
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
    store.take_exposed_seconds();
    store.begin_step();
    double loss_sum = 0.0;  // this rank's token-loss sum
    const double pipe_t0 = Tracer::now();
    double pipe_span = 0.0;
    if (pp > 1) {
      // Walk this stage's schedule: forwards receive the previous stage's activations and
      // send theirs on, backwards receive the next stage's gradient and send theirs back.
      // Sends are asynchronous; a slot's sends are waited for before the slot is reused.
      std::vector<CommHandle> fwd_send(slots), bwd_send(slots);
      pipe_busy = pipe_wait = 0.0;
      int last_backward = -1;
      for (size_t i = 0; i < actions.size(); ++i) {
        if (actions[i].kind == PipeAction::kBackward) last_backward = static_cast<int>(i);
      }
      for (size_t i = 0; i < actions.size(); ++i) {
        const PipeAction& a = actions[i];
        const int mb = a.micro_batch, slot = mb % slots;
        train_data.sample_batch(seed, step, G, dp_rank * per_rank + mb * B, B, static_cast<int>(T), inputs.data(),
                                targets.data());
        if (a.kind == PipeAction::kForward) {
          if (fwd_send[slot]) fwd_send[slot]->wait(), fwd_send[slot].reset();
          if (bwd_send[slot]) bwd_send[slot]->wait(), bwd_send[slot].reset();
          double w0 = Tracer::now();
          if (stage > 0) ppc.recv(xbuf.data(), act_count, CommDType::kF32, stage - 1, 2 * mb);
          const double c0 = Tracer::now();
          pipe_wait += c0 - w0;
          model.stage_forward(slot, inputs.data(), xbuf.data(), B, T, true);
          pipe_busy += Tracer::now() - c0;
          if (stage < pp - 1) {
            fwd_send[slot] = ppc.isend(model.stage_output(slot), act_count, CommDType::kF32, stage + 1, 2 * mb);
          }
        } else {
          store.begin_micro_batch(static_cast<int>(i) == last_backward);
          const double w0 = Tracer::now();
          if (stage < pp - 1) ppc.recv(dybuf.data(), act_count, CommDType::kF32, stage + 1, 2 * mb + 1);
          const double c0 = Tracer::now();
          pipe_wait += c0 - w0;
          loss_sum += model.stage_backward(slot, inputs.data(), targets.data(), dybuf.data(), B, T, loss_scale);
          pipe_busy += Tracer::now() - c0;
          if (stage > 0) {
            bwd_send[slot] = ppc.isend(model.stage_input_grad(slot), act_count, CommDType::kF32, stage - 1, 2 * mb + 1);
          }
        }
        ppc.progress();
      }
      for (auto& h : fwd_send) if (h) h->wait();
      for (auto& h : bwd_send) if (h) h->wait();
      pipe_span = Tracer::now() - pipe_t0;
    }
    for (int64_t m = 0; m < (pp > 1 ? 0 : accum); ++m) {
      store.begin_micro_batch(m == accum - 1);
      train_data.sample_batch(seed, step, G, dp_rank * per_rank + m * B, B, static_cast<int>(T), inputs.data(),
                              targets.data());
      loss_sum += static_cast<double>(model.forward_backward(inputs.data(), targets.data(), B, T, loss_scale)) * B * T;
    }
    store.finish_step_gradients();
    double norm_sq = store.grad_norm_sq();
    if (tp > 1) tpc.all_reduce_sum(&norm_sq, 1);
    if (pp > 1) {
      ppc.all_reduce_sum(&norm_sq, 1);
      ppc.all_reduce_sum(&loss_sum, 1);  // the loss lives on the last stage
    }
    const double norm = std::sqrt(norm_sq);
    if (dp > 1) dpc.all_reduce_sum(&loss_sum, 1);
    const double loss = loss_sum / static_cast<double>(G * T);
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      throw_runtime("step {}: loss {} / gradient norm {} is not finite; stopping (last checkpoint: {})", step + 1, loss,
                    norm, res.last_checkpoint.empty() ? "none" : res.last_checkpoint);
    }
    const float lr = lr_at(step, static_cast<float>(cfg.lr), cfg.warmup_steps, decay_steps,
                           static_cast<float>(cfg.min_lr_ratio));
    optim.step(*backend, store.opt_params(), store.opt_grads(), lr, step + 1, clip_coefficient(norm, cfg.grad_clip));
    store.after_optimizer_step();
    const double exposed = store.take_exposed_seconds();
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    const int64_t done = step + 1;
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
                           {"model_flops_per_s", flops_per_token * tps}, {"memory", memory},
                           {"dp_exposed_ms", exposed * 1e3}};
    if (pp > 1) {
      // Per stage: compute time, time blocked receiving from a neighbour, and the idle rest of
      // the schedule's span (the bubble), gathered from every stage.
      double mine[3] = {pipe_busy, pipe_wait, pipe_span};
      std::vector<double> all(3 * pp);
      ppc.all_gather(mine, all.data(), 3, CommDType::kF64);
      nlohmann::json busy = nlohmann::json::array(), wait = nlohmann::json::array(), idle = nlohmann::json::array();
      for (int s2 = 0; s2 < pp; ++s2) {
        busy.push_back(all[3 * s2] * 1e3);
        wait.push_back(all[3 * s2 + 1] * 1e3);
        idle.push_back((all[3 * s2 + 2] - all[3 * s2]) * 1e3);
      }
      double max_span = 0.0, sum_busy = 0.0;
      for (int s2 = 0; s2 < pp; ++s2) max_span = std::max(max_span, all[3 * s2 + 2]), sum_busy += all[3 * s2];
      line["pipeline"] = {{"schedule", cfg.schedule}, {"stages", pp}, {"micro_batches", accum},
                          {"busy_ms", busy}, {"p2p_wait_ms", wait}, {"idle_ms", idle},
                          {"bubble_fraction", max_span > 0 ? 1.0 - sum_busy / (pp * max_span) : 0.0},
                          {"bubble_predicted", static_cast<double>(pp - 1) / static_cast<double>(accum)},
                          {"activation_slots", slots}};
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
    if ((cfg.ckpt_every > 0 && done % cfg.ckpt_every == 0) || last) save(done);
  }
  res.tokens_per_s = timed_steps > 0 ? static_cast<double>(G * T) * timed_steps / time_sum : 0.0;
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
    model.set_tp(&tp_ops, false);
    auto out = sample_tokens(model, prompt, so);
    res.sample = tok.decode(std::vector<int32_t>(out.begin() + 1, out.end()));
    log_info("sample:\n{}", res.sample);
  }
  return res;
}

}  // namespace weft
