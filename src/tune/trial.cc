#include "tune/trial.h"

#include "train/run_layout.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <vector>

#include "backend/registry.h"
#include "core/memory.h"
#include "engine/engine.h"
#include "train/engine_config.h"
#include "train/memory_fit.h"

namespace weft::tune {

namespace {

using clock = std::chrono::steady_clock;

// The first failing rank's message on every rank ("" when no rank failed). Collective.
std::string agree_on_failure(Communicator& world, const std::string& mine) {
  double first = mine.empty() ? static_cast<double>(world.size()) : static_cast<double>(world.rank());
  world.all_reduce(&first, 1, CommDType::kF64, ReduceOp::kMin);
  const int root = static_cast<int>(first);
  if (root >= world.size()) return "";
  int64_t len = world.rank() == root ? static_cast<int64_t>(mine.size()) : 0;
  world.broadcast(&len, 1, CommDType::kI64, root);
  std::string text(static_cast<size_t>(len), '\0');
  if (world.rank() == root) text = mine;
  if (len > 0) world.broadcast(text.data(), len, CommDType::kU8, root);
  return root == world.rank() ? text : fmt::format("rank {}: {}", root, text);
}

// Runs `f` on every rank and agrees on whether it threw anywhere: "" or the first failing
// rank's message, on every rank.
template <typename F>
std::string collectively(Communicator& world, F&& f) {
  std::string error;
  try {
    f();
  } catch (const std::exception& e) {
    error = e.what();
  }
  return agree_on_failure(world, error);
}

double max_over_ranks(Communicator& world, double v) {
  world.all_reduce(&v, 1, CommDType::kF64, ReduceOp::kMax);
  return v;
}

}  // namespace

RunConfig trial_config(const RunConfig& base, const plan::Layout& l) {
  RunConfig c = base;
  set_run_layout(c, l);  // the TOML binding (train/run_layout.h): every field of the layout
  return c;
}

TrialResult run_trial(const RunConfig& base, const plan::Layout& l, const RunData& data, Communicator& world,
                      const TrialSettings& s) {
  TrialResult r;
  const RunConfig cfg = trial_config(base, l);
  const auto t_setup = clock::now();
  std::unique_ptr<Backend> backend;
  EngineConfig ec;
  std::unique_ptr<Engine> engine;
  r.reason = collectively(world, [&] {
    ec = engine_config(cfg, world.size());
    backend = make_backend(cfg.backend);
    backend->set_products({ec.precision, ec.matmul, ec.fp32_kernel});  // as the engine will
    check_memory_fit(cfg, ec, world, *backend);  // collective (the node map), then each node decides
  });
  if (r.reason.empty()) {
    r.reason = collectively(world, [&] {
      engine = std::make_unique<Engine>(ec, world, *backend);
      engine->init_params(static_cast<uint64_t>(cfg.seed));
      data.configure(*engine);  // what the model takes from the data (ClimaX: the latitudes)
    });
  }
  if (!r.reason.empty()) {
    r.failed = true;
    return r;
  }
  r.setup_s = max_over_ranks(world, std::chrono::duration<double>(clock::now() - t_setup).count());
  const int64_t G = ec.global_batch, T = ec.seq;
  std::vector<double> times;
  for (int64_t step = 0; step < s.warmup + s.steps; ++step) {
    if (step == s.warmup) memory_tracker().reset_peaks();
    world.barrier();
    const auto t0 = clock::now();
    const StepResult sr = engine->step(static_cast<float>(cfg.lr), [&](int64_t first, int64_t count, HostBatch& out) {
      data.fill(step, G, first, count, out);
    });
    const double dt = max_over_ranks(world, std::chrono::duration<double>(clock::now() - t0).count());
    if (step >= s.warmup) times.push_back(dt);
    r.loss = sr.loss;
    if (sr.non_finite) {
      r.failed = true;
      r.reason = fmt::format("step {}: loss {} / gradient norm {} not finite", step + 1, sr.loss, sr.grad_norm);
      return r;
    }
  }
  r.step_s = median_seconds(std::move(times));
  r.tokens_per_s = r.step_s > 0 ? static_cast<double>(G * T) / r.step_s : 0.0;
  r.peak_bytes = static_cast<int64_t>(max_over_ranks(world, static_cast<double>(memory_tracker().snapshot().total_peak)));
  return r;
}

double median_seconds(std::vector<double> seconds) {
  if (seconds.empty()) return 0.0;
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace weft::tune
