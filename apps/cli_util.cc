#include "cli_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "backend/registry.h"
#include "comm/device_comm_registry.h"
#include "ckpt/checkpoint.h"
#include "core/buffer.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "data/text_util.h"
#include "train/config.h"
#include "train/engine_config.h"
#include "train/run_layout.h"
#include "train/trainer.h"

namespace weft {

void add_checkpoint_option(CLI::App& app, std::string& checkpoint) {
  app.add_option("--checkpoint", checkpoint, "checkpoint folder (or run folder: its newest checkpoint)")->required();
}

void add_threads_option(CLI::App& app, int64_t& threads) { app.add_option("--threads", threads, "threads (0: all cores)"); }

void check_threads_option(int64_t threads) { check_thread_count(threads, "--threads"); }

void add_format_option(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "text or json")->check(CLI::IsMember({"text", "json"}));
}

void add_backend_option(CLI::App& app, std::string& backend) {
  std::string names;
  for (const std::string& n : backend_names()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--backend", backend,
                 fmt::format("backend by name: {} (cuda needs a weft built with -DWEFT_CUDA=ON); default cpu", names));
}

void add_comm_option(CLI::App& app, std::string& comm) {
  std::string names;
  for (const std::string& n : device_comm_names()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--comm", comm,
                 fmt::format("how device buffers move between ranks: {} (nccl: cuda only, one GPU per rank; mpi: "
                             "host-staged, ranks may share a GPU); default nccl for cuda, mpi otherwise",
                             names));
}


void check_output_file(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw_input("{} must name a file", option);
  if (fs::is_directory(path, ec)) throw_input("{} {} is a folder; give a file name (e.g. {}/local.toml)", option, path, path);
  probe_writable(path, option, false);
}

void write_output_file(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw_runtime("cannot create the folder {}: {}", p.parent_path().string(), ec.message());
  write_file_atomic(path, text);
}

std::string checkpoint_dir_arg(const std::string& path) {
  if (std::filesystem::exists(std::filesystem::path(path) / kCheckpointConfigFile)) return path;
  std::string latest = find_latest_checkpoint(path);
  if (!latest.empty()) return latest;
  return resolve_checkpoint_dir(path);
}

RunConfig layout_defaults() {
  RunConfig c;
  c.micro_batch = 0;  // one micro-batch per data-parallel replica
  return c;
}

void add_layout_options(CLI::App& app, RunConfig& layout) {
  for (const std::string& full : run_layout_keys()) {
    const size_t dot = full.find('.');
    const std::string section = full.substr(0, dot), name = full.substr(dot + 1);
    // [train] and [parallel] keys by their name, the others with their section (as
    // `weft train` resolves them): --micro-batch, --zero.block-size, --compression.tp.
    const std::string key = section == "train" || section == "parallel" ? name : full;
    std::string dashed = key;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    const std::string names = dashed == key ? "--" + key : "--" + dashed + ",--" + key;
    const std::string help = fmt::format("the layout key {} (docs/configuration.md)", full);
    if (run_config_key_is_bool(full)) {
      app.add_flag_function(names, [&layout, full](int64_t) { set_run_config_key(layout, full, "true"); }, help);
    } else {
      app.add_option_function<std::string>(
          names, [&layout, full](const std::string& v) { set_run_config_key(layout, full, v); }, help);
    }
  }
}

void check_layout_options(const RunConfig& o) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  const std::pair<const char*, std::pair<int64_t, int64_t>> sizes[] = {
      {"--tp", {o.tp, 1}}, {"--pp", {o.pp, 1}}, {"--dp", {o.dp, 0}}, {"--dp-shard", {o.dp_shard, 0}},
      {"--dp-replicate", {o.dp_replicate, 1}}, {"--zero", {o.zero, 0}},
      {"--virtual-stages", {o.virtual_stages, 1}}, {"--micro-batch", {o.micro_batch, 0}}};
  for (const auto& [name, value_min] : sizes) {
    const auto [v, lo] = value_min;
    if (v < lo || v > kIntMax) throw_input("{} {} must lie in [{}, {}]", name, v, lo, kIntMax);
  }
}

EngineConfig layout_engine_config(const RunConfig& o, const EngineRequest& r, int world_size) {
  check_layout_options(o);
  RunConfig cfg = o;  // the layout keys as the options set them, the rest the defaults
  cfg.precision = r.precision;
  cfg.matmul = r.matmul;
  cfg.fp32_kernel = r.fp32_kernel;
  cfg.head_chunk = r.head_chunk;
  cfg.seq_len = r.seq;
  const int64_t tp_pp = std::max<int64_t>(1, o.tp * o.pp);
  const int64_t dp = o.dp > 0 ? o.dp
                     : o.dp_shard > 0 ? o.dp_shard * o.dp_replicate
                                      : std::max<int64_t>(1, world_size / tp_pp);
  cfg.global_batch = r.per_replica ? r.batch * dp : r.batch;
  cfg.micro_batch = o.micro_batch > 0 ? o.micro_batch : std::max<int64_t>(1, cfg.global_batch / dp);
  // A micro-batch that does not divide the batch is refused by the layout rules (engine_config).
  EngineConfig ec = engine_config(cfg, r.model, world_size);
  ec.training = r.training;
  return ec;
}

namespace {
// The engine's configuration with the communicator, once backend and communicator are known
// to fit together (nothing created yet).
EngineConfig with_comm(EngineConfig cfg, const std::string& backend_name, const std::string& comm) {
  check_backend_name(backend_name);
  if (!comm.empty()) check_device_comm(comm, backend_name);
  cfg.comm = comm;
  return cfg;
}
}  // namespace

EngineRun::EngineRun(const EngineConfig& cfg, Communicator& world, const std::string& backend_name,
                     const std::string& comm)
    : config(with_comm(cfg, backend_name, comm)),
      backend(make_backend(backend_name)),
      engine(std::make_unique<Engine>(config, world, *backend)) {}

void load_checkpoint_into(Engine& engine, const std::string& dir) {
  const ParamLayout& whole = engine.whole_layout();
  Buffer<float> params(static_cast<size_t>(whole.total()));
  load_checkpoint_params(dir, whole, params.data());
  check_finite_params(whole, params.data(), dir);
  engine.load_state(params.data(), nullptr, nullptr);
}

std::pair<std::string, std::string> parse_override(const std::vector<std::string>& args, size_t& i) {
  std::string key = args[i].substr(2), value;
  auto eq = key.find('=');
  if (eq != std::string::npos) {
    value = key.substr(eq + 1);
    key = key.substr(0, eq);
  }
  std::replace(key.begin(), key.end(), '-', '_');  // --sequence-parallel = --sequence_parallel
  if (eq == std::string::npos) {
    if (run_config_key_is_bool(key) && (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)) {
      value = "true";  // a bare flag
    } else {
      if (i + 1 >= args.size()) throw_input("option --{} needs a value", key);
      value = args[++i];
    }
  }
  return {key, value};
}

std::pair<std::string, std::string> parse_set(const std::string& kv) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) throw_input("--set {}: expected KEY=VALUE (e.g. --set seq_len=64)", kv);
  std::string key = kv.substr(0, eq);
  std::replace(key.begin(), key.end(), '-', '_');
  return {key, kv.substr(eq + 1)};
}

}  // namespace weft
